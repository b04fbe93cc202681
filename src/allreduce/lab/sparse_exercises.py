"""The sparse lab's check cells in the kernel (chapter "Sparse allreduce"): the merge of two
sparse vectors and Top-k with error feedback."""

from __future__ import annotations

import numpy as np

from .local import LocalCheck


def _sparse_pairs(rng, n: int, k: int, low: int = -3, high: int = 4):
    indices = sorted(int(i) for i in rng.choice(n, size=min(k, n), replace=False)) if n else []
    return [indices, [int(v) for v in rng.integers(low, high, len(indices))]]


def _merge_cases():
    cases = [[[], [], [], []], [[2, 5], [1, 1], [], []], [[], [], [0, 9], [4, -4]],
             [[1, 3], [2, -7], [1, 3], [-2, 7]], [[0, 1, 2], [1, 1, 1], [3, 4], [1, 1]],
             [[7], [1], [0, 7, 8], [1, 1, 1]]]
    return cases + _merge_secret(np.random.default_rng(5))


def _merge_secret(rng):
    cases = []
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
    lambda f, case, given: f(*(np.array(x, np.int64) for x in case)),
    _merge_verdict, ("allreduce.sparse",), secret=_merge_secret)


def _feedback_cases():
    cases = [[[3.0, -1.0, 0.5, 4.0], [0.0, 0.0, 0.0, 0.0], 2],
             [[1.0, 1.0, 1.0], [0.0, 0.5, -2.0], 1],  # the residual changes the choice
             [[0.0, 0.0], [0.0, 0.0], 0], [[1.0, -2.0], [0.25, 0.0], 2]]
    return cases + _feedback_secret(np.random.default_rng(6))


def _feedback_secret(rng):
    cases = []
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
    lambda f, case, given: f(np.array(case[0]), np.array(case[1]), case[2]),
    _feedback_verdict, ("allreduce.sparse",), secret=_feedback_secret)
