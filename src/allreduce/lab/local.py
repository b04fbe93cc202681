"""A check of a function that runs in the lab's kernel, not on the engines
(:class:`LocalCheck`), and :func:`_plain`, the form its results travel in.  The checks
themselves: :mod:`allreduce.lab.exercises` and :mod:`allreduce.lab.sparse_exercises`."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np


def _plain(value):
    """``value`` as plain JSON-able Python (what a result can travel as), or a marker of
    its type when it cannot be one."""
    if isinstance(value, (bool, int, float, str)) or value is None:
        return value
    if isinstance(value, np.generic) or (isinstance(value, np.ndarray) and value.ndim == 0):
        return value.item()  # a 0-d array (np.where gives one) is the number it holds
    if isinstance(value, (list, tuple, np.ndarray)):
        return [_plain(v) for v in (value.tolist() if isinstance(value, np.ndarray) else value)]
    return {"unreadable": type(value).__name__}


@dataclass(frozen=True)
class LocalCheck:
    """A check of a function that runs in the kernel, in parts kept apart so that the grader
    can call the student's function in one process and judge in another: ``cases()`` (plain
    data), ``given()`` (plain data every call needs besides its case, made where the whole
    library is), ``call(function, case, given)`` (the student's result, made plain by
    :func:`_plain`) and ``verdict(cases, results)`` (raises ``AssertionError``, or returns
    the line a passing check prints).  ``secret(rng)`` draws more cases from the grader's
    secret seed (:meth:`graded_cases`): the lab shows its cases, so a table of their
    answers would pass them alone.  ``reference`` names what the verdict compares with
    (modules, packages or functions, dotted): the function may not call it, here (watched
    by :class:`~allreduce.lab.guard.Guard`) or in a graded run (where it is not there)."""

    cases: Callable[[], list]
    call: Callable[[Callable, Any, Any], Any]
    verdict: Callable[[list, list], str]
    reference: tuple[str, ...] = ()
    given: Callable[[], Any] = lambda: None
    secret: Callable[[np.random.Generator], list] = lambda rng: []

    def graded_cases(self, rng: np.random.Generator) -> list:
        """What a graded run checks: the cases the lab shows, then cases drawn from ``rng``
        (seeded by the grader's secret), which no one knows before the run."""
        return self.cases() + self.secret(rng)

    def __call__(self, function) -> None:
        from .guard import Guard

        cases, given = self.cases(), self.given()
        guard = Guard(getattr(function, "__name__", "function"), references=self.reference)
        try:
            with guard:
                results = [_plain(self.call(function, case, given)) for case in cases]
        except Exception:
            if guard.violation:  # what it called first explains what followed
                raise AssertionError(guard.violation) from None
            raise
        if guard.violation:
            raise AssertionError(guard.violation)
        print(self.verdict(cases, results))
