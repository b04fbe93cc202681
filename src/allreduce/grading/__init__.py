"""Grading an instructor can trust: student copies, and each exercise of each submission run
in a sandbox and judged outside it (chapter "The allreduce library"; the instructor's guide,
studyguide/instructor.md).

``allreduce-student`` (``make student``) writes student copies: solution regions become
stubs that raise ``NotImplementedError``, outputs stay, and each exercise's points are shown.

``allreduce-grade LAB SUBMISSIONS/`` (``make grade``) grades every notebook in the folder one
exercise at a time.  For exercise E, only E's solution cells from the submission, with the
lab's imports, go to rank processes (:mod:`~allreduce.grading.rank`): four, as the labs'
engines, then the other numbers of ranks the exercise's algorithm is for, each in a fresh
sandbox of its own (:mod:`~allreduce.grading.sandbox`) with only the files of the library its
run needs (:mod:`~allreduce.grading.confine`); the judge (:mod:`~allreduce.grading.judge`),
in the grader's process, routes and records every message between them and computes every
``allreduce.allreduce``; the check's verdict (:mod:`~allreduce.grading.run`) is made from what
it saw, after the student's code has answered: values against a sum of inputs no rank knows
in full (and, the ranks sharing no file system, network or user, can only learn through the
judge), and the communication pattern against the library's own algorithm.  The reports
(:mod:`~allreduce.grading.report`) are a CSV, a feedback file per student, Gradescope's
``results.json``, optionally a Canvas gradebook column, and a similarity report.

The modules: ``notebooks`` (markup, specs, student copies), ``wire``, ``confine``,
``seccomp``, ``cgroup`` and ``sandbox`` (what a run gets), ``rank`` and ``hub`` (inside), ``judge`` and ``matching``,
``run``, ``batch`` (many runs), ``names`` (the students'), ``report``, ``similarity``,
``cli``.  Nothing here is imported by :mod:`allreduce.lab`.
"""

from __future__ import annotations

import importlib

_NAMES = {
    "notebooks": ("BEGIN", "END", "Spec", "exercises", "role", "spec", "specs", "stub_solutions",
                  "student_copy", "write_student_copies"),
    "run": ("Result", "run_exercise"),
    "batch": ("Submission", "grade", "graded_code"),
    "cli": ("grade_main", "student_main"),
}
__all__ = [name for names in _NAMES.values() for name in names]


def __getattr__(name: str):  # lazy: the sandboxed ranks import this package, and need none of it
    for module, names in _NAMES.items():
        if name in names:
            return getattr(importlib.import_module(f".{module}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
