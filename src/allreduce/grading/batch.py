"""Grading many submissions: every exercise of every submission is one sandboxed run
(:func:`allreduce.grading.run.run_exercise`), up to ``jobs`` at a time.

The key (the instructor's lab) is read once, here, outside any sandbox, and never enters
one: a run gets the lab's imports and definitions for its side and the submission's own
solution cells of that one exercise.  The key, the submissions, the scores and the reports
live where no run can reach them; the key is still checked unchanged after every run.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from .judge import STOP, clean
from .names import student_names
from .notebooks import Spec, nbformat, role, setup_code, solution_sources, specs, wrong_lab
from .run import Code, Result, broke, run_exercise
from .sandbox import DEFAULT_LIMITS, Limits


@dataclass
class Submission:
    name: str
    results: dict[str, Result] = field(default_factory=dict)
    points: dict[str, float] = field(default_factory=dict)  # the most each exercise gives
    notebook: object = None  # as read_notebook keeps it (None when it was not a notebook)

    @property
    def earned(self) -> float:
        return sum(r.score * self.points.get(e, 1.0) for e, r in self.results.items())

    @property
    def possible(self) -> float:
        return sum(self.points.get(e, 1.0) for e in self.results)

    @property
    def total(self) -> float:
        """The fraction of the lab's points earned."""
        return self.earned / self.possible if self.possible else 0.0


def graded_code(lab, submission, spec: Spec) -> Code:
    """What the run of ``spec`` loads: the lab's imports and definitions before the exercise
    (from ``lab``: the key, or in ``--self`` mode the student's own notebook) and the
    submission's solution cells for that exercise."""
    wanted = (spec.exercise, "solution")
    if any(role(cell) == wanted and cell.cell_type != "code" for cell in submission.cells):
        # it earned full points, though JupyterLab never runs it
        raise LookupError(f"a solution cell of exercise {spec.exercise!r} is not a code cell "
                          "(JupyterLab does not run it either): change its type back to Code")
    theirs = solution_sources(submission, spec.exercise)
    encoded = len(json.dumps(theirs))  # as a run's frame carries them: "\\ud83d\\ude00"
    if encoded > MAX_SOLUTION_BYTES:  # is 12 bytes, where it was one character
        raise LookupError(f"the solution cells of exercise {spec.exercise!r} take {encoded:,} "
                          f"bytes to send to a run, more than the {MAX_SOLUTION_BYTES:,} it "
                          "takes (a lab's solution takes a few thousand)")
    if not theirs:  # more or fewer than the lab's are run as they are: a cell split in
        # JupyterLab keeps its exercise's mark in both halves, and two merged keep one
        raise LookupError(f"the submission has no solution cell for exercise "
                          f"{spec.exercise!r} (was it deleted?): only the cell of the student "
                          f"copy that said 'exercise {spec.exercise}: replace this line with "
                          "your solution' is graded, not code typed into a new cell; put the "
                          "code back into that cell (a fresh student copy has it)")
    cells = tuple(number for number, cell in enumerate(submission.cells, 1)
                  if role(cell) == wanted)
    setup, stubs = setup_code(lab, spec.exercise, spec.engines)
    return Code(setup, tuple(stubs), tuple(theirs), cells)


#: The most bytes an exercise's solution cells may take, JSON-encoded as a run's first frame
#: carries them (of at most :data:`allreduce.grading.wire.MAX_HEADER` bytes, with the lab's
#: own code): 90,000 emoji were 1 MB there, and the run ended without a word.
MAX_SOLUTION_BYTES = 512_000
#: The largest submission read (a lab's notebook with its outputs is well under 1 MB).
MAX_NOTEBOOK_BYTES = 16 << 20
#: The most JSON objects and lists a submission may hold (counted as its ``{`` and ``[``
#: outside strings, before it is parsed, :func:`_containers`): the labs have fewer than
#: 300, but 50 MB of ``{}`` took 8.7 GiB of the grader's memory to parse.
MAX_CONTAINERS = 200_000


def _containers(data: bytes) -> int:
    """The ``{`` and ``[`` of a JSON document outside its strings (an output that printed
    ``[[0], [1], …]`` is text, not lists), in linear time: escaped backslashes and quotes
    dropped, then every other run between quotes is outside a string."""
    outside = data.replace(b"\\\\", b"").replace(b'\\"', b"").split(b'"')[::2]
    return sum(part.count(b"{") + part.count(b"[") for part in outside)


def _utf8(text: str) -> str:
    """``text`` with what UTF-8 cannot hold (a lone surrogate, ``"\\ud800"`` in a notebook's
    JSON) replaced by ``?``: every report and the sandbox's frames write UTF-8."""
    return text.encode("utf-8", "replace").decode("utf-8")


def read_notebook(path: Path):
    """A notebook, as much of it as grading reads (:func:`_kept`), or the reason it is not
    one.  Only a regular file of at most :data:`MAX_NOTEBOOK_BYTES` and
    :data:`MAX_CONTAINERS` JSON objects and lists is read, never through a link: a
    submissions folder unpacked from students' archives may hold links (to another
    student's notebook, ``/dev/zero``) or pipes, which would be read as the student's work
    or never end."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as error:
        return Result(0.0, f"not a readable notebook: {error.strerror or error} (a link is "
                           "not graded: copy the notebook itself into the folder)")
    with os.fdopen(fd, "rb") as file:
        info = os.fstat(file.fileno())
        if not stat.S_ISREG(info.st_mode):
            return Result(0.0, "not a readable notebook: not a regular file")
        if info.st_size > MAX_NOTEBOOK_BYTES:
            return Result(0.0, f"not a readable notebook: {info.st_size >> 20} MiB, more than "
                               f"the {MAX_NOTEBOOK_BYTES >> 20} MiB read (outputs are most of "
                               "a large notebook: clear them, in JupyterLab Edit > Clear "
                               "Outputs of All Cells, save, and submit it again)")
        data = file.read(MAX_NOTEBOOK_BYTES + 1)
    if _containers(data) > MAX_CONTAINERS:
        return Result(0.0, f"not a readable notebook: more than {MAX_CONTAINERS:,} JSON objects "
                           "and lists (a lab's notebook has a few hundred)")
    try:
        nb = quiet_reads(data.decode())
    except Exception as error:  # noqa: BLE001 - not a notebook at all
        bom = (" (it starts with a byte-order mark, which Jupyter does not read either: save "
               "it as UTF-8 without one)" if data.startswith(b"\xef\xbb\xbf") else "")
        return Result(0.0, f"not a readable notebook: {type(error).__name__}{bom}")
    cells = nb.get("cells")
    if not isinstance(cells, list) or not all(
            isinstance(c, dict) and isinstance(c.get("source"), str)
            and isinstance(c.get("cell_type"), str) and isinstance(c.get("metadata", {}), dict)
            for c in cells):
        return Result(0.0, "not a readable notebook: a cell without a text source, a type "
                           "and metadata")
    return _kept(nb)


def _kept(nb):
    """Of a notebook read, what grading reads: each cell's type, source (as UTF-8) and the
    ``exercise``, ``role`` and ``points`` of its mark.  Every notebook is held until the
    batch ends, and a 16 MB list of floats in a cell's metadata kept 180 MB per student."""
    node = nbformat().NotebookNode
    cells = []
    for cell in nb.cells:
        mark = cell["metadata"].get("allreduce")
        kept = {} if not isinstance(mark, dict) else {
            name: mark[name] for name in ("exercise", "role", "points")
            if isinstance(mark.get(name), (str, int, float))}
        cells.append(node({"cell_type": cell["cell_type"], "source": _utf8(cell["source"]),
                           "metadata": node({"allreduce": node(kept)} if kept else {})}))
    return node({"nbformat": nb.get("nbformat"), "nbformat_minor": nb.get("nbformat_minor"),
                 "metadata": node({}), "cells": cells})


def quiet_reads(text: str):
    """A notebook from its JSON, without nbformat's warnings (a notebook whose every cell
    has the id ``"same"`` printed 1.7 million lines of them on the instructor's terminal)."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return nbformat().reads(text, as_version=4)


class Interrupted(KeyboardInterrupt):
    """A grading stopped by Ctrl-C, SIGTERM or SIGHUP, with what it had finished:
    ``graded``, the submissions whose every exercise was graded (the rest are left out)."""

    def __init__(self, graded: list[Submission]):
        super().__init__("grading was interrupted")
        self.graded = graded


def never_stops(progress):
    """``progress`` that cannot stop a grading: once its stream is gone (a closed pipe,
    ``allreduce-grade … | head``) it says nothing more, and the grading goes on."""
    gone = threading.Event()

    def say(*args, **kwargs) -> None:
        if not gone.is_set():
            try:
                progress(*args, **kwargs)
            except (OSError, ValueError):  # BrokenPipeError; a closed file
                gone.set()
    return say


def grade(lab: Path, submissions: list[Path], *, timeout: float = 60, jobs: int = 1,
          sandboxed: bool = True, limits: Limits = DEFAULT_LIMITS, key=None,
          progress=print) -> list[Submission]:
    """Grade each submission against the instructor ``lab`` (see the module docstring),
    running up to ``jobs`` exercises at a time.  ``key`` is the lab already read (the
    ``--self`` mode passes the student's own notebook).  Stopped (Ctrl-C), it raises
    :class:`Interrupted` with the submissions it finished."""
    STOP.clear()
    progress = never_stops(progress)
    key_bytes = lab.read_bytes()
    digest = hashlib.sha256(key_bytes).hexdigest()
    key = key if key is not None else nbformat().reads(key_bytes.decode(), as_version=4)
    checks = specs(key)
    points = {s.exercise: s.points for s in checks}
    students = {path: read_notebook(path) for path in submissions}  # read once, now
    for path, student in students.items():
        if isinstance(student, Result):
            continue
        if why := wrong_lab(key, student, lab, read_notebook, submissions):
            students[path] = Result(0.0, why)
    graded = [Submission(name, points=points,
                         notebook=None if isinstance(students[path], Result) else students[path])
              for path, name in zip(submissions, student_names(submissions))]
    lock = threading.Lock()
    warned = threading.Event()  # the key changed: said once

    def result_of(path: Path, spec: Spec) -> Result:
        student = students[path]
        if isinstance(student, Result):
            return student
        try:
            code = graded_code(key, student, spec)
        except LookupError as error:
            return Result(0.0, str(error))
        try:
            return run_exercise(spec, code, timeout=timeout, sandboxed=sandboxed, limits=limits)
        except Exception as error:  # noqa: BLE001 - this exercise scores 0; the others run
            return Result(0.0, broke(spec.function, error))

    def run(number: int, path: Path, spec: Spec) -> None:
        result = result_of(path, spec)
        with lock:
            graded[number - 1].results[spec.exercise] = result
            shown = "" if result.score == 1 else f": {result.message}"
            progress(f"[{number}/{len(submissions)}] {clean(path.name)}: {spec.exercise} "
                     f"{result.score * spec.points:g}/{spec.points:g} ({result.seconds:.1f} s)"
                     f"{shown}", flush=True)
            if not warned.is_set() and (
                    not lab.exists() or hashlib.sha256(lab.read_bytes()).hexdigest() != digest):
                warned.set()  # an edit of the instructor's, or (it cannot happen from a
                # sandbox) a submission's: said, never overwritten
                progress(f"warning: the key {lab} changed while grading {clean(path.name)}; "
                         "this grading goes on with the copy read at its start, and the file "
                         "is left as it is now", flush=True)

    pool = ThreadPoolExecutor(max_workers=max(1, jobs))
    runs = [pool.submit(run, number, path, spec)
            for number, path in enumerate(submissions, 1) for spec in checks]
    try:
        for finished in runs:
            finished.result()
    except BaseException as error:  # Ctrl-C: start nothing more, end the runs in flight
        with lock:  # what finished before the stop (a run it cuts short is not in it)
            done = [s for s in graded if len(s.results) == len(checks)]
        STOP.set()
        for future in runs:
            future.cancel()
        while True:  # the runs in flight end within about a second; a second Ctrl-C in
            try:  # that second must not lose what finished
                pool.shutdown(wait=True)
                break
            except KeyboardInterrupt:
                continue
        if isinstance(error, KeyboardInterrupt):  # keep what finished before it
            for submission in done:
                submission.results = {c.exercise: submission.results[c.exercise]
                                      for c in checks}
            raise Interrupted(done) from error
        raise
    pool.shutdown(wait=True)
    for submission in graded:  # the lab's order, whatever order the runs finished in
        submission.results = {s.exercise: submission.results[s.exercise] for s in checks}
    return graded
