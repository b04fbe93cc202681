"""The labs' other check cells: exercises checked here in the kernel (a fit, a rule, a
formula, DDP's buckets) or by training on the engines (the capstone's overlap)."""

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
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, (list, tuple, np.ndarray)):
        return [_plain(v) for v in (value.tolist() if isinstance(value, np.ndarray) else value)]
    return {"unreadable": type(value).__name__}


@dataclass(frozen=True)
class LocalCheck:
    """A check of a function that runs in the kernel, in three parts kept apart so that the
    grader can call the student's function in one process and judge in another:
    ``cases()`` (plain data), ``call(function, case)`` (the student's result, made plain by
    :func:`_plain`) and ``verdict(cases, results)`` (raises ``AssertionError``, or returns
    the line a passing check prints)."""

    cases: Callable[[], list]
    call: Callable[[Callable, Any], Any]
    verdict: Callable[[list, list], str]

    def __call__(self, function) -> None:
        cases = self.cases()
        print(self.verdict(cases, [_plain(self.call(function, case)) for case in cases]))


# -- the alpha-beta fit ----------------------------------------------------------------------

def _fit_cases():
    sizes = [2**k for k in range(25)]
    ripple = [1 + 0.05 * ((-1) ** k) for k in range(len(sizes))]
    return [[sizes, [(4e-6 + n * 1e-10) * r for n, r in zip(sizes, ripple)]]]


def _fit_verdict(cases, results) -> str:
    from .. import cost

    (sizes, seconds), got = cases[0], results[0]
    expected = cost.fit([cost.Terms(1, n, 0) for n in sizes], seconds, gamma=False)
    if not isinstance(got, list) or len(got) != 2 or not all(
            isinstance(v, (int, float)) for v in got):
        raise AssertionError(f"the fit should return (alpha, beta), got {got!r}")
    for name, value, want in (("alpha", got[0], expected.alpha), ("beta", got[1], expected.beta)):
        if not np.isclose(value, want, rtol=1e-6, atol=0):
            raise AssertionError(f"{name} = {value:.6g}, expected {want:.6g} (the minimum of the "
                                 "squared relative error; an ordinary least-squares fit gives "
                                 "a different alpha)")
    return (f"fit: alpha = {got[0] * 1e6:.2f} us, 1/beta = {1 / got[1] / 1e9:.2f} GB/s, "
            "as allreduce.cost.fit finds")


#: Check cell for the α-β fitting exercise (chapter "Why gradients must be aggregated"):
#: ``function(sizes, seconds)`` must return ``(alpha, beta)`` minimising the squared relative
#: error, as :func:`allreduce.cost.fit` does, on synthetic ping-pong times with known α and β
#: and a fixed 5% ripple.  Runs here, not on the engines.
check_fit = LocalCheck(_fit_cases, lambda f, case: f(*case), _fit_verdict)


def _check_models():
    """The machines the lab "Choosing an algorithm" checks its exercises on: this course's
    reference model, and the chapter's two simulated networks."""
    from .. import cost
    from ..algorithms.auto import DEFAULT_MODEL

    return {"the reference machine": DEFAULT_MODEL, **cost.NETWORKS}


# -- choosing an algorithm -------------------------------------------------------------------

def _choice_cases():
    return [[machine, p, 8 * 4**k] for machine in _check_models()
            for p in (2, 3, 4, 5, 8, 12, 64, 100, 1024, 4096) for k in range(14)]


def _choice_verdict(cases, results) -> str:
    from ..algorithms.auto import CANDIDATES

    models = _check_models()
    for (machine, p, nbytes), got in zip(cases, results, strict=True):
        model = models[machine]
        times = {name: model.time(name, p, nbytes) for name in CANDIDATES}
        if not isinstance(got, str) or got not in times:
            raise AssertionError(f"p = {p}, n = {nbytes} B: got {got!r}, expected one "
                                 f"of {', '.join(CANDIDATES)}")
        if times[got] > min(times.values()):
            best = min(times, key=times.get)
            raise AssertionError(
                f"{machine}, p = {p}, n = {nbytes} B: {got} is predicted to take "
                f"{times[got] * 1e6:.3g} us, but {best} takes {times[best] * 1e6:.3g} us")
    return f"choose_algorithm: the fastest candidate in all {len(cases)} cases"


#: Check cell for the exercise ``choose_algorithm(model, p, nbytes)`` (chapter "Choosing an
#: algorithm"): it must name a candidate of ``auto`` with the smallest predicted time, on
#: three machines, 2 to 4,096 ranks and 8 B to 512 MiB.  Runs here.
check_choice = LocalCheck(
    _choice_cases, lambda f, case: f(_check_models()[case[0]], case[1], case[2]),
    _choice_verdict)


def _crossover_cases():
    return [[machine, p] for machine in _check_models() for p in (2, 4, 8, 64, 1024, 4096)]


def _crossover_verdict(cases, results) -> str:
    from .. import cost

    models = _check_models()
    for (machine, p), got in zip(cases, results, strict=True):
        want = cost.crossover(models[machine], "recursive_doubling", "rabenseifner", p)
        if want is None or got is None:
            if want is not got:
                raise AssertionError(f"{machine}, p = {p}: got {got!r}, expected {want!r}")
            continue
        if not isinstance(got, (int, float)) or not np.isclose(got, want, rtol=1e-6):
            shown = f"{got:.6g} B" if isinstance(got, (int, float)) else repr(got)
            raise AssertionError(f"{machine}, p = {p}: got {shown}, bisection of the "
                                 f"model gives {want:.6g} B")
    return "doubling_crossover: agrees with the model's bisection on 3 machines, p = 2 to 4,096"


#: Check cell for the exercise ``doubling_crossover(model, p)``: the closed-form size in
#: bytes at which Rabenseifner overtakes recursive doubling on a power-of-two ``p``, against
#: :func:`allreduce.cost.crossover`'s bisection.  Runs here.
check_crossover = LocalCheck(
    _crossover_cases, lambda f, case: f(_check_models()[case[0]], case[1]), _crossover_verdict)


# -- NCCL ------------------------------------------------------------------------------------

def _busbw_cases():
    return [[nbytes, seconds, p] for p in (1, 2, 3, 4, 8, 1024)
            for nbytes, seconds in ((1024, 1e-5), (1 << 30, 0.01), (12345, 3.5e-3))]


def _busbw_verdict(cases, results) -> str:
    from .. import cost

    for (nbytes, seconds, p), got in zip(cases, results, strict=True):
        want = cost.busbw(nbytes, seconds, p)
        if not isinstance(got, (int, float)) or not np.isclose(got, want, rtol=1e-9):
            shown = f"{got:.6g} B/s" if isinstance(got, (int, float)) else repr(got)
            raise AssertionError(f"p = {p}, n = {nbytes} B in {seconds} s: got {shown}, "
                                 f"expected {want:.6g} B/s")
    return "busbw: agrees with nccl-tests' definition for p = 1 to 1,024"


#: Check cell for the exercise ``busbw(nbytes, seconds, p)`` (chapter "Allreduce on GPUs:
#: NCCL"), against :func:`allreduce.cost.busbw`.  Runs here.
check_busbw = LocalCheck(_busbw_cases, lambda f, case: f(*case), _busbw_verdict)


def _bucket_cases():
    rng = np.random.default_rng(0)
    cases = [[[4, 4, 4], 8], [[10, 2, 3], 4], [[], 8], [[1] * 7, 3]]
    cases += [[[int(s) for s in rng.integers(1, 100, rng.integers(1, 30))],
               int(rng.integers(50, 300))] for _ in range(50)]
    return cases


def _bucket_verdict(cases, results) -> str:
    from ..ddp_buckets import ddp_buckets

    for (sizes, cap), got in zip(cases, results, strict=True):
        want = ddp_buckets(sizes, cap)
        if got != want:
            raise AssertionError(f"sizes {sizes}, cap {cap}: got {got}, expected {want}")
    return f"ddp_buckets: the buckets DDP would make, in {len(cases)} cases"


#: Check cell for the exercise ``ddp_buckets(sizes, cap)``: the buckets DDP reduces after its
#: rebuild (:func:`allreduce.ddp_buckets.ddp_buckets`, checked against a real DDP by the
#: test suite).  Runs here.
check_ddp_buckets = LocalCheck(_bucket_cases, lambda f, case: f(*case), _bucket_verdict)

# -- sparse allreduce ------------------------------------------------------------------------

def _sparse_pairs(rng, n: int, k: int, low: int = -3, high: int = 4):
    indices = sorted(int(i) for i in rng.choice(n, size=min(k, n), replace=False)) if n else []
    return [indices, [int(v) for v in rng.integers(low, high, len(indices))]]


def _merge_cases():
    rng = np.random.default_rng(5)
    cases = [[[], [], [], []], [[2, 5], [1, 1], [], []], [[], [], [0, 9], [4, -4]],
             [[1, 3], [2, -7], [1, 3], [-2, 7]], [[0, 1, 2], [1, 1, 1], [3, 4], [1, 1]],
             [[7], [1], [0, 7, 8], [1, 1, 1]]]
    for _ in range(40):
        n = int(rng.integers(1, 60))
        cases.append(_sparse_pairs(rng, n, int(rng.integers(0, n + 1)))
                     + _sparse_pairs(rng, n, int(rng.integers(0, n + 1))))
    return cases


def _merge_verdict(cases, results) -> str:
    from ..sparse.vector import merge

    for (ia, va, ib, vb), got in zip(cases, results, strict=True):
        runs = [(np.array(ia, np.int64), np.array(va, np.int64)),
                (np.array(ib, np.int64), np.array(vb, np.int64))]
        indices, values = merge(runs, np.dtype(np.int64))
        want = [indices.tolist(), values.tolist()]
        if got != want:
            raise AssertionError(f"merging ({ia}, {va}) and ({ib}, {vb}): got {got}, expected "
                                 f"{want} (every index of either, once, in order; the sum "
                                 "where both have it, kept even when it is 0)")
    return f"merge_two: the sum of two sparse vectors in all {len(cases)} cases"


#: Check cell for the exercise ``merge_two(ia, va, ib, vb)`` (chapter "Sparse allreduce"):
#: the sum of two sparse vectors on the union of their supports, against
#: :func:`allreduce.sparse.vector.merge`.  Runs here.
check_merge = LocalCheck(
    _merge_cases,
    lambda f, case: f(*(np.array(x, np.int64) for x in case)),
    _merge_verdict)


def _feedback_cases():
    rng = np.random.default_rng(6)
    cases = [[[3.0, -1.0, 0.5, 4.0], [0.0, 0.0, 0.0, 0.0], 2],
             [[1.0, 1.0, 1.0], [0.0, 0.5, -2.0], 1],  # the residual changes the choice
             [[0.0, 0.0], [0.0, 0.0], 0], [[1.0, -2.0], [0.25, 0.0], 2]]
    for _ in range(30):
        n = int(rng.integers(1, 50))
        gradient = [float(x) for x in rng.integers(-40, 40, n) / 8]
        residual = [float(x) for x in rng.integers(-40, 40, n) / 8]
        cases.append([gradient, residual, int(rng.integers(0, n + 1))])
    return cases


def _feedback_verdict(cases, results) -> str:
    from ..sparse.compression import topk

    for (gradient, residual, k), got in zip(cases, results, strict=True):
        corrected = np.array(gradient) + np.array(residual)
        indices, values = topk(corrected, k)
        left = corrected.copy()
        left[indices] = 0
        want = [indices.tolist(), values.tolist(), left.tolist()]
        if got != want:
            raise AssertionError(
                f"gradient {gradient}, residual {residual}, k = {k}: got {got}, expected "
                f"{want} (the k largest |gradient + residual|, ties to the lower index, sorted "
                "by index; the new residual is gradient + residual with those entries zeroed)")
    return f"compress_with_feedback: Top-k with error feedback in all {len(cases)} cases"


#: Check cell for the exercise ``compress_with_feedback(gradient, residual, k)`` (chapter
#: "Sparse allreduce"): Top-k of the corrected gradient and the new residual, against
#: :func:`allreduce.sparse.compression.topk`.  Runs here.
check_error_feedback = LocalCheck(
    _feedback_cases,
    lambda f, case: f(np.array(case[0]), np.array(case[1]), case[2]),
    _feedback_verdict)

#: The checks above by the name a check cell calls them with (the grader reads it there).
LOCAL_CHECKS = {"check_fit": check_fit, "check_choice": check_choice,
                "check_crossover": check_crossover, "check_busbw": check_busbw,
                "check_ddp_buckets": check_ddp_buckets, "check_merge": check_merge,
                "check_error_feedback": check_error_feedback}


class SubmitLog:
    """Wraps the ``thread`` that ``attach_overlap(model, thread)`` is given and notes every
    submission made outside the backward pass: the overlap must hand each gradient over from
    a hook, while backward is still running, not after it."""

    def __init__(self, attach):
        self.attach, self.late = attach, 0

    def __call__(self, model, thread) -> None:
        log = self

        class Thread:
            __slots__ = ()

            def submit(self, grad) -> None:
                import torch

                if torch._C._current_graph_task_id() == -1:  # not inside backward
                    log.late += 1
                thread.submit(grad)

        self.attach(model, Thread())

    def problem(self, name: str) -> str | None:
        if self.late:
            return (f"{name} submitted {self.late} gradients after backward had finished: the "
                    "overlap must submit each gradient from a hook, as backward produces it "
                    "(register_post_accumulate_grad_hook)")
        return None


def _overlap_check(attach, name: str, steps: int) -> str | None:
    """On each engine: train with the student's hooks and without overlap; compare."""
    from mpi4py import MPI

    from ..training import train

    world = MPI.COMM_WORLD
    private = world.Dup()
    log = SubmitLog(attach)
    try:
        plain = train(private, average="per_tensor", steps=steps)
        overlapped = train(private, average="overlap", attach=log, steps=steps)
    finally:
        private.Free()
    if overlapped.weights.tobytes() != plain.weights.tobytes():
        worst = int(np.argmax(np.abs(overlapped.weights - plain.weights)))
        return (f"rank {world.rank}: after {steps} steps weight {worst} is "
                f"{overlapped.weights[worst]:.6g} with your hooks, {plain.weights[worst]:.6g} "
                "without overlap (is every gradient submitted exactly once?)")
    return log.problem(name)


def check_overlap(view, function: str, *, steps: int = 5, timeout: float = 60) -> None:
    """Check cell for the exercise ``attach_overlap(model, thread)`` (the capstone): train
    on the engines with the student's hooks and without overlap; the weights must be the
    same bits, and every gradient must be submitted during backward."""
    import ipyparallel as ipp

    result = view.apply_async(_overlap_check, ipp.Reference(function), function, steps)
    try:
        problems = [p for p in result.get(timeout=timeout) if p]
    except ipp.error.TimeoutError:
        raise TimeoutError(f"{function}: training did not finish within {timeout:.0f} s on "
                           "every rank: were the gradients submitted in a different order on "
                           "different ranks?  Restart the kernel and run again.") from None
    if problems:
        raise AssertionError(problems[0])
    print(f"{function}: the same weights as without overlap after {steps} steps, on "
          f"{len(view)} ranks")
