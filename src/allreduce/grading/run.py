"""One exercise of one submission: start a sandbox for each of its ranks, load the student's
code there, put the check's cases to it through the judge, and judge what came back.

The verdict is made here, in the grader's own process, after the student's code has
answered: from the results and the messages the judge routed, never from anything the
notebook printed or the run wrote.  The ranks see one case at a time; their inputs carry
numbers chosen here at random, and each rank is in a sandbox of its own (its own ``/tmp``,
``/dev/shm``, network and, as root, user id; a syscall filter; the judge is the only way
between them), so no rank can produce a right result without receiving the others' data
through the judge.  And, whatever way might be left open, every message must hold exactly
what the taught algorithm sends at that step given the case's inputs (the judge compares
each one as it arrives): right values that did not cross the judge fail.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import re
import secrets
import socket
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..lab import LOCAL_CHECKS, checks
from ..lab.overlap import SubmitLog
from ..lab.patterns import ENTRY_POINTS, PATTERNS, pattern_problem, payloads
from . import confine, wire
from .judge import STOP, Failure, Judge, clean, seconds
from .notebooks import Spec
from .sandbox import DEFAULT_LIMITS, Limits, Sandbox

RANKS = 4  # as the labs' engines
OVERLAP_STEPS = 5


@dataclass
class Result:
    """One exercise of one submission: ``score`` in [0, 1], why points were lost (or the
    passing line), and where: the student's cell, when the failure is in it."""

    score: float
    message: str = ""
    seconds: float = 0.0
    warning: str = ""

    def __post_init__(self):  # what a submission can put in them is shown and stored
        self.message, self.warning = clean(self.message, 2000), clean(self.warning, 2000)


@dataclass(frozen=True)
class Code:
    """What a run loads: the lab's imports and definitions for the function's side, the
    names other cells assign, and the student's solution cells of this exercise only."""

    setup: str
    stubs: tuple[str, ...]
    solution: tuple[str, ...]
    cells: tuple[int, ...] = ()  # each solution cell's position in the notebook, from 1


def run_exercise(spec: Spec, code: Code, *, timeout: float = 60, sandboxed: bool = True,
                 limits: Limits = DEFAULT_LIMITS) -> Result:
    """Grade one exercise: on each of its numbers of ranks (:func:`rank_counts`) in turn,
    each on fresh sandboxes; the first failure is the result.  ``timeout`` is each case's;
    an algorithm's runs together get :func:`exercise_seconds`, what its cases on one run
    could take, so that a submission that stalls just short of ``timeout`` in every case
    holds the grader no longer than when one run was all."""
    started = time.monotonic()
    budget_ends = started + exercise_seconds(spec, timeout) if spec.kind == "ranks" else None
    first, warning = "", ""
    for size in rank_counts(spec):
        score, line, said = _graded_on(size, spec, code, timeout, sandboxed, limits,
                                       budget_ends)
        warning = warning or said  # the same solution cells: the first run's word is theirs
        if not score:
            return Result(0.0, line, time.monotonic() - started, warning)
        first = first or line
    if others := [str(size) for size in rank_counts(spec)[1:]]:  # "3", "3 and 5", "2, 3 and 8"
        listed = others[0] if len(others) == 1 else f"{', '.join(others[:-1])} and {others[-1]}"
        first += f"; and on {listed} ranks"
    return Result(1.0, first, time.monotonic() - started, warning)


def exercise_seconds(spec: Spec, timeout: float) -> float:
    """The most time an algorithm exercise's runs take together: ``timeout`` for each of its
    cases on the labs' four ranks (seven; six for the gradients' mean, which has no float32
    case)."""
    return timeout * len(checks.cases(spec.phase, RANKS))


def rank_counts(spec: Spec) -> tuple[int, ...]:
    """The numbers of ranks an exercise runs on: its pattern's
    (:attr:`allreduce.lab.patterns.Pattern.ranks`, the labs' four first) for an algorithm,
    one for a function checked in the kernel, four for the capstone's training."""
    if spec.kind == "local":
        return (1,)
    if spec.kind == "ranks":
        return PATTERNS[spec.pattern].ranks
    return (RANKS,)


def _graded_on(size: int, spec: Spec, code: Code, timeout: float, sandboxed: bool,
               limits: Limits, budget_ends: float | None = None) -> tuple[float, str, str]:
    """One exercise on ``size`` ranks: ``(score, the passing line or why not, warning)``.
    More than :data:`RANKS` ranks share what four would have of memory, so that a run on
    eight costs the machine no more than one on four (``--jobs`` runs side by side)."""
    if size > RANKS:
        limits = dataclasses.replace(limits, memory=limits.memory * RANKS // size,
                                     data=limits.data * RANKS // size)
    pairs = [socket.socketpair() for _ in range(size)]
    plan = confine.plan(spec.kind, spec.check, spec.pattern)
    sandboxes = []
    try:
        for rank, (_, theirs) in enumerate(pairs):
            sandboxes.append(Sandbox.start(theirs.fileno(), rank, plan, function=spec.function,
                                           enabled=sandboxed, limits=limits))
            theirs.close()
    except BaseException:
        for ours, theirs in pairs:
            ours.close()
            theirs.close()
        for sandbox in sandboxes:
            sandbox.stop()
        raise
    judge = Judge([ours for ours, _ in pairs])
    warning = ""
    try:
        loading = _time_left(timeout, budget_ends, spec, size)
        warning = judge.setup({"op": "setup", "function": spec.function, "kind": spec.kind,
                               "phase": spec.phase, "pattern": spec.pattern,
                               "check": spec.check, "setup": code.setup,
                               "stubs": list(code.stubs), "solution": list(code.solution),
                               "cells": list(code.cells)},
                              loading, _LEFT if loading < timeout else "") or ""
        line = _VERDICTS[spec.kind](judge, spec, timeout, _seed(spec, code), size, budget_ends)
        judge.bye()
        return 1.0, line, warning
    except Failure as failure:
        message = str(failure)
        ended = re.search(r"rank (\d+)'s process ended without answering", message)
        printed = sandboxes[int(ended[1])].output().strip() \
            if ended and int(ended[1]) < len(sandboxes) else ""
        if printed:  # that rank's own last line
            message += f" [it printed: {clean(printed.splitlines()[-1], 200)}]"
        return 0.0, message, warning
    except Exception as error:  # noqa: BLE001 - one exercise's problem, never the class's
        return 0.0, broke(spec.function, error), warning
    finally:
        judge.close()
        for sandbox in sandboxes:
            sandbox.stop()


def broke(function: str, error: BaseException) -> str:
    """The message of an exercise whose judging raised in the grader itself: what the
    submission's ranks sent (or the grader's own code) did something no check foresaw.  The
    traceback goes to the grader's stderr for the instructor; the exercise scores 0."""
    import sys
    import traceback

    print(f"allreduce-grade: judging {function} raised:", file=sys.stderr)
    traceback.print_exception(error, file=sys.stderr)
    return (f"the grader could not judge {function}: {type(error).__name__}: "
            f"{clean(error, 200)} (what the submission's code sent was not what a check can "
            "read; it scores 0 here, and the instructor has the details)")


# -- the checks, judged here --------------------------------------------------------------------

def _seed(spec: Spec, code: Code) -> int:
    """The seed of a run's inputs: a digest of this machine's grading secret (made once, in
    the instructor's ~/.cache/allreduce, never in a sandbox) and of all a run is given: the
    exercise, the lab's code, the submission's solution cells and their places.  A student
    cannot know the inputs beforehand, and grading the same submission again gives the same
    inputs, so the same messages in every report."""
    import hashlib

    folder = Path.home() / ".cache" / "allreduce"
    path = folder / "grading-secret"
    try:
        secret = path.read_bytes()
    except FileNotFoundError:
        secret = secrets.token_bytes(32)
        try:
            folder.mkdir(parents=True, exist_ok=True)
            with os.fdopen(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "wb") as f:
                f.write(secret)
        except FileExistsError:  # another grading made it meanwhile
            secret = path.read_bytes()
        except OSError:  # nowhere to keep it: this run's inputs are its own
            pass
    digest = hashlib.blake2b(secret, digest_size=8)
    # everything a run sees: the lab's code, the solution and where its cells are (a run can
    # read its cells' numbers, so cases that did not change with them leaked); each part
    # length-prefixed, so that no two submissions' parts run together alike
    for part in (spec.exercise, code.setup, *code.stubs, "\0", *code.solution,
                 *map(str, code.cells)):
        data = part.encode("utf-8", "surrogatepass")
        digest.update(len(data).to_bytes(8, "little") + data)
    return int.from_bytes(digest.digest(), "little")


def _ranks(judge: Judge, spec: Spec, case_limit: float, seed: int, size: int,
           budget_ends: float | None = None) -> str:
    rng = np.random.default_rng([seed, size])
    for n, dtype in checks.cases(spec.phase, size):
        timeout = _time_left(case_limit, budget_ends, spec, size, n)
        given, expected = checks.inputs(spec.phase, n, size, rng, dtype)
        headers = []
        for rank in range(size):
            blobs: list = []
            headers.append(({"op": "case", "n": n, "size": size,
                             "given": wire.encode(given[rank], blobs)}, blobs))
        deadline = time.monotonic() + timeout  # the case's, and its pattern check's
        buffer = given[0].get("buf", given[0].get("grads"))  # the messages' dtype
        label = f"{spec.function} for n = {n}" + (
            "" if dtype == checks.CHECK_DTYPE else f" in {dtype}") + f" on {size} ranks" + (
            _LEFT if timeout < case_limit else "")
        try:
            outcome = judge.case(headers, timeout, label, payloads(spec.pattern, given),
                                 None if buffer is None else buffer.dtype.name)
        except Failure as failure:
            raise Failure(checks.in_dtype(str(failure), spec.phase, dtype)) from None
        problems = []
        for rank, (header, blobs) in enumerate(outcome.results):
            if header.get("violation"):
                raise Failure(clean(header["violation"]))
            try:
                got = wire.decode(header.get("got"), blobs)
                got = got if isinstance(got, dict) else {}
                problems.append(checks.in_dtype(checks.judge(
                    spec.phase, spec.function, n, rank, size, got, expected), spec.phase, dtype))
            except Exception as error:  # noqa: BLE001 - a result made by hand, not by run()
                problems.append(f"{spec.function} left something the check cannot read on "
                                f"rank {rank} for n = {n} on {size} ranks "
                                f"({type(error).__name__}: {clean(error, 100)})")
        if problem := next((p for p in problems if p), None):
            raise Failure(problem)
        if problem := _pattern(spec, n, size, dtype, outcome, deadline, timeout):
            raise Failure(checks.in_dtype(problem, spec.phase, dtype))
        if spec.pattern == "one_allreduce" and (problem := _crossed(spec, n, given, outcome)):
            raise Failure(problem)
        if outcome.content:  # right values, right pattern, and the data not through comm
            carries = PATTERNS[spec.pattern].carries
            raise Failure(checks.in_dtype(f"{spec.function} for n = {n} on {size} ranks: "
                                          f"{outcome.content}" + (f"; {carries}" if carries
                                                                  else ""), spec.phase, dtype))
    return f"{spec.function}: correct on {size} ranks for {checks.described(spec.phase, size)}"


_LEFT = " (in what was left of the exercise's time)"  # a limit cut short by the budget


def _time_left(timeout: float, budget_ends: float | None, spec: Spec, size: int,
               n: int | None = None) -> float:
    """A case's (or the loading's) time limit: ``timeout``, or what is left of the
    exercise's until ``budget_ends`` when that is less; a :class:`Failure` when nothing is."""
    if budget_ends is None:
        return timeout
    left = min(timeout, budget_ends - time.monotonic())
    if left <= 0:
        before = "the loading of its code" if n is None else f"n = {n}"
        raise Failure(f"{spec.function} used up the exercise's "
                      f"{exercise_seconds(spec, timeout):.0f} s (its cases' time limits, "
                      f"{timeout:g} s each, on all its numbers of ranks together) before "
                      f"{before} on {size} ranks")
    return left


def _pattern(spec: Spec, n: int, size: int, dtype: str, outcome, deadline: float,
             timeout: float) -> str | None:
    if spec.pattern != "one_allreduce":
        if any(outcome.allreduces):
            yourself = "" if spec.pattern in ENTRY_POINTS else " the exercise is to write it " \
                                                                "yourself;"
            return (f"your {spec.function} called allreduce.allreduce for n = {n} on {size} "
                    f"ranks:{yourself} it must {PATTERNS[spec.pattern].does}")
        if any(outcome.collectives):
            return (f"your {spec.function} used a collective of comm (allgather) for n = {n} on "
                    f"{size} ranks; it must {PATTERNS[spec.pattern].does}")
    if spec.pattern == "one_allreduce":
        if any(outcome.collectives):
            return (f"your {spec.function} used comm's allgather; it must "
                    f"{PATTERNS[spec.pattern].does}")
        # here the allreduce is the judge's, so a message of the rank's own can only move
        # the data beside it (the judge adds up what the allreduce carries, and a decoy
        # allreduce of zeros would hide data that went rank to rank)
        if any(event.kind in ("send", "recv") for mine in outcome.events for event in mine):
            return (f"your {spec.function} sent messages of its own for n = {n} on {size} ranks; "
                    f"it must {PATTERNS[spec.pattern].does}")
    try:
        calls = [{"allreduce": len(a)} for a in outcome.allreduces] \
            if spec.pattern == "one_allreduce" else None  # zero2's phases: their messages
        return pattern_problem(spec.function, spec.pattern, n, size, outcome.events,
                               calls, outcome.allreduces,
                               give_up=lambda: STOP.is_set() or time.monotonic() > deadline,
                               dtype=dtype)
    except TimeoutError:
        if STOP.is_set():
            raise Failure("grading was interrupted") from None
        events = sum(len(e) for e in outcome.events)
        raise Failure(f"{spec.function} for n = {n} on {size} ranks did not finish within "
                      f"{seconds(timeout)} s "
                      f"(checking the pattern of its {events} sends, receives and waits took "
                      "the rest of the case's time)") from None


def _crossed(spec: Spec, n: int, given: list[dict], outcome) -> str | None:
    """Where the one allreduce is the judge's, whether the ranks' data crossed it: each rank
    gave it its own gradients, flattened in any order, as they are or each divided by the
    number of ranks (alike on every rank), and what came back is their sum or mean.  Right
    results with an allreduce of zeros (the data taken another way: a kernel counter two
    sandboxes both read) score 0."""
    size = len(given)
    flat = [np.concatenate([np.ravel(mine[name]) for name in sorted(mine)]) for mine in given]
    scales = {1.0, 1.0 / size}
    for rank, (own, gave) in enumerate(zip(flat, outcome.contributions)):
        scales = {scale for scale in scales if _alike(gave, np.sort(own) * scale)}
        if not scales:
            return (f"your {spec.function} gave the allreduce on rank {rank} for n = {n} "
                    "something other than that rank's gradients (each divided by the number "
                    "of ranks, or not, alike on every rank): the gradients must reach the "
                    "other ranks through it")
    total = np.sort(sum(flat))  # the same order on every rank: the sums pair up
    if outcome.sums and not any(_alike(outcome.sums[0], total * scale)
                                for scale in (1.0, 1.0 / size)):
        return (f"your {spec.function}'s allreduce for n = {n} did not add up the ranks' "
                "gradients element by element: every rank must flatten them in the same order")
    return None


def _alike(values, wanted: np.ndarray) -> bool:
    """Whether ``values`` (in any order, of any dtype) are ``wanted`` (sorted float64), to
    the rounding of their dtype: the cases' gradients are small integers, exact in any of
    the dtypes the grader reduces, and divided by the number of ranks (a power of two: the
    pattern's :attr:`~allreduce.lab.patterns.Pattern.ranks`) still are."""
    values = np.asarray(values)
    if values.shape != wanted.shape:
        return False
    tolerance = 4 * np.finfo(values.dtype).eps if values.dtype.kind == "f" else 0.0
    return bool(np.allclose(np.sort(values.astype(np.float64)), wanted, rtol=tolerance,
                            atol=0.0))


def _local(judge: Judge, spec: Spec, timeout: float, seed: int, size: int,
           budget_ends: float | None = None) -> str:
    check = LOCAL_CHECKS[spec.check]
    cases = check.graded_cases(np.random.default_rng(seed))
    outcome = judge.case([({"op": "case", "cases": cases, "given": check.given()}, [])],
                         timeout, spec.function)
    header, blobs = outcome.results[0]
    try:
        results = wire.decode(header.get("results"), blobs)
    except wire.WireError as error:
        raise Failure(f"{spec.function} returned something the check cannot read "
                      f"({clean(error, 100)})") from None
    if not isinstance(results, list) or len(results) != len(cases):
        raise Failure(f"{spec.function}: the check got {clean(type(results).__name__, 40)} "
                      "instead of one result per case")
    try:
        return check.verdict(cases, results)
    except AssertionError as error:
        raise Failure(str(error)) from None
    except Exception as error:  # noqa: BLE001 - a result of an unexpected kind
        raise Failure(f"{spec.function} returned something the check cannot use: "
                      f"{type(error).__name__}: {clean(error, 200)}") from None


@functools.lru_cache(maxsize=1)
def _reference_training(steps: int) -> tuple[np.ndarray, list[int]]:
    """Single-process training's weights (what the ranks' must equal, to float32 rounding),
    and the element counts of the allreduces one overlapped step makes, in order: each
    gradient in the order backward produces them (the parameters' reverse), then the loss."""
    from ..training import make_model, train

    sizes = [p.numel() for p in reversed(list(make_model().parameters()))]
    return train(None, steps=steps).weights, sizes + [1]


def _replayed_training(sums: list[np.ndarray], per_step: list[int]) -> np.ndarray:
    """The weights that SGD reaches from the summed gradients the judge handed back, step by
    step (each step's sums in backward's order, then the loss): what the ranks trained on,
    judged from what crossed, whatever a rank says it holds."""
    import inspect

    import torch

    from ..training import flat_weights, make_model, train

    model = make_model()
    lr = inspect.signature(train).parameters["lr"].default  # what _reference_training uses
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    parameters = list(reversed(list(model.parameters())))
    for step in range(len(sums) // len(per_step)):
        mine = sums[step * len(per_step):(step + 1) * len(per_step)]
        for parameter, total in zip(parameters, mine):
            parameter.grad = torch.from_numpy(np.array(total, dtype=np.float32)).reshape(
                parameter.shape)
        optimizer.step()
    return flat_weights(model)


def _overlap(judge: Judge, spec: Spec, timeout: float, seed: int, size: int,
             budget_ends: float | None = None) -> str:
    weights, per_step = _reference_training(OVERLAP_STEPS)
    outcome = judge.case([({"op": "case", "steps": OVERLAP_STEPS, "size": RANKS}, [])] * RANKS,
                         timeout, f"training with your {spec.function}")
    for rank, calls in enumerate(outcome.allreduces):
        for step in range(OVERLAP_STEPS):
            mine = calls[step * len(per_step):(step + 1) * len(per_step)]
            if mine != per_step:
                raise Failure(
                    f"training with your {spec.function} made the allreduces {mine} (elements "
                    f"each) on rank {rank} in step {step + 1}; the overlap reduces each of the "
                    f"{len(per_step) - 1} gradients once per step, in the order backward "
                    f"produces them, {per_step[:-1]}, then the loss")
    crossed = _replayed_training(outcome.sums, per_step)
    if not np.allclose(crossed, weights, rtol=0, atol=1e-5):
        raise Failure(f"training with your {spec.function}: SGD on the sums the allreduces "
                      f"returned does not reach single-process training's weights after "
                      f"{OVERLAP_STEPS} steps (did each allreduce carry the gradient backward "
                      "had accumulated?)")
    for rank, (header, blobs) in enumerate(outcome.results):
        try:
            got = wire.decode(header.get("got"), blobs)
            mine, late = np.asarray(got["weights"], dtype=np.float64), int(got["late"])
        except (wire.WireError, KeyError, TypeError, ValueError):
            raise Failure(f"rank {rank} returned no weights the check can read") from None
        if mine.shape != weights.shape or not np.allclose(mine, weights, rtol=0, atol=1e-5):
            worst = int(np.argmax(np.abs(mine - weights))) if mine.shape == weights.shape else 0
            raise Failure(f"rank {rank}: after {OVERLAP_STEPS} steps weight {worst} differs from "
                          f"single-process training by more than 1e-5 (is every gradient "
                          "submitted exactly once, after backward has accumulated it?)")
        log = SubmitLog(None)
        log.late = late
        if problem := log.problem(spec.function):
            raise Failure(problem)
    return (f"{spec.function}: the same weights as without overlap after {OVERLAP_STEPS} steps, "
            f"on {RANKS} ranks")


_VERDICTS = {"ranks": _ranks, "local": _local, "overlap": _overlap}
