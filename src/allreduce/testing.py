"""Inputs with known results, for the test suite and the labs' check cells.

:func:`exact_input` makes data whose reduction is exact in every dtype and in *any* order
of combination (small integers, and powers of two for products), so an algorithm's result
must equal the reference bit for bit, floats included.  :func:`gradient_input` makes
realistic floating-point data, for which two correct algorithms may differ by rounding;
:func:`sum_tolerance` bounds that difference.  :func:`combination_order` shows in which order
an algorithm combines the ranks' data.
"""

from __future__ import annotations

import functools

import numpy as np

from .ops import OPS


def exact_input(rank: int, count: int, dtype: str, op: str, seed: int = 0) -> np.ndarray:
    """Rank ``rank``'s input.  Sums of up to 16 ranks stay below 2^11, and products are
    ±2^k with |k| ≤ 16, so float16 holds every partial result exactly."""
    rng = np.random.default_rng([seed, rank, count])
    if op == "prod" and dtype.startswith("float"):
        values = rng.choice(np.array([1.0, -1.0, 2.0, 0.5, -2.0]), size=count)
    elif op == "prod":  # integer products wrap the same way in any order
        values = rng.choice(np.array([1, -1, 2, 3]), size=count)
    else:
        values = rng.integers(-8, 9, size=count)
    return values.astype(dtype)


def gradient_input(rank: int, count: int, dtype: str, seed: int = 0) -> np.ndarray:
    """Rank ``rank``'s pseudo-gradient: normal values with a rank-dependent scale."""
    rng = np.random.default_rng([seed, rank, count, 7])
    return (rng.standard_normal(count) * (1 + rank)).astype(dtype)


def reference(inputs: list[np.ndarray], op: str) -> np.ndarray:
    """The reduction of ``inputs`` (one per rank), combined in rank order."""
    total = functools.reduce(getattr(np, OPS[op].combine), inputs)
    if op == "mean":
        total = total / np.array(len(inputs), dtype=total.dtype)
    return total.astype(inputs[0].dtype)


def sum_tolerance(inputs: list[np.ndarray]) -> np.ndarray:
    """Element-wise bound on how far two correct floating-point sums of ``inputs`` can be
    apart when they add the terms in different orders: each is within (p−1)·u·Σ|xᵢ| of
    the exact sum (Higham, *Accuracy and Stability of Numerical Algorithms*, §4.2), where
    ``u`` is the unit roundoff, so two of them are within twice that."""
    p = len(inputs)
    unit_roundoff = np.finfo(inputs[0].dtype).eps / 2
    magnitude = functools.reduce(np.add, [np.abs(x.astype(np.float64)) for x in inputs])
    return 2 * max(p - 1, 1) * unit_roundoff * magnitude


def first_difference(expected: np.ndarray, actual: np.ndarray) -> str:
    """``""`` if the arrays are equal, else where they first differ and by what."""
    expected, actual = np.asarray(expected).reshape(-1), np.asarray(actual).reshape(-1)
    if expected.shape != actual.shape:
        return f"length {actual.size}, expected {expected.size}"
    wrong = np.flatnonzero(~((expected == actual) | (np.isnan(expected.astype(float))
                                                      & np.isnan(actual.astype(float)))))
    if wrong.size == 0:
        return ""
    i = wrong[0]
    return (f"{wrong.size} of {expected.size} elements differ; first at index {i}: "
            f"expected {expected[i]!r}, got {actual[i]!r}")


def combination_order(name: str, p: int, n: int = 12) -> list[np.ndarray]:
    """Each rank's result of the algorithm ``name`` on ``p`` threads when rank ``r`` holds the
    letter ``"A" + r`` in each of ``n`` elements and the operation is concatenation
    (associative, not commutative): each element spells out the order in which the ranks'
    data were combined, a rank putting its own first (chapter "Why gradients must be
    aggregated")."""
    from .algorithms import REGISTRY
    from .ops import Op
    from .transports.threads import run_threads

    concatenate = Op("concatenate", "add")

    def body(comm):
        x = np.array([chr(ord("A") + comm.rank)] * n, dtype=object)
        REGISTRY[name](x, comm, concatenate)
        return x
    return run_threads(p, body)
