"""Gradient compression that makes gradients sparse: Top-k and random-k, with error feedback
(chapter "Sparse allreduce").

Sending only ``k`` of a gradient's ``n`` entries biases every step: the entries left out are
lost.  **Error feedback** keeps them: what a rank did not send is its *residual*, added to its
next gradient before selecting again (Stich, Cordonnier & Jaggi 2018; Karimireddy et al.
2019), so that every entry is sent eventually and the sum of what was sent plus the residual
always equals the sum of the gradients.  This is separate from the exact collective:
:func:`~allreduce.sparse.sparse_allreduce` sums whatever each rank selected; with
:func:`~allreduce.sparse.topk_allreduce`, whose result drops some of what was sent, a rank
gives its dropped pairs back to its residual with :meth:`ErrorFeedback.restore`.
"""

from __future__ import annotations

import numpy as np


def topk(x: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The ``k`` entries of the 1-D ``x`` largest in magnitude, as sorted indices and their
    values (ties broken by the lower index, so every call on the same data agrees).  A NaN
    counts as infinite, so that it is sent and shows in the sum instead of vanishing."""
    k = max(0, min(int(k), len(x)))
    if k == 0:
        return np.empty(0, np.int64), x[:0].copy()
    magnitude = np.abs(x)
    if magnitude.dtype.kind == "i":  # |minimum| wraps to the minimum: unsigned, it is largest
        magnitude = magnitude.view(magnitude.dtype.str.replace("i", "u"))
    n = len(x)
    largest = np.partition(magnitude, n - k)[n - k:]  # the k largest, NaNs last: O(n)
    if magnitude.dtype.kind == "f" and np.isnan(largest).any():  # no comparison picks a NaN
        magnitude = np.where(np.isnan(magnitude), np.inf, magnitude)
        largest = np.partition(magnitude, n - k)[n - k:]
    threshold = largest.min()  # the k-th largest
    above = np.flatnonzero(magnitude > threshold)
    ties = np.flatnonzero(magnitude == threshold)[:k - len(above)]  # lower indices first
    indices = np.sort(np.concatenate([above, ties]))
    return indices, x[indices].copy()


def randomk(x: np.ndarray, k: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """``k`` entries of ``x`` chosen uniformly without replacement, scaled by ``n/k`` so that
    the result is unbiased (its expectation is ``x``)."""
    k = max(0, min(int(k), len(x)))
    indices = np.sort(rng.choice(len(x), size=k, replace=False)) if k else np.empty(0, np.int64)
    scale = len(x) / k if k else 0.0
    return indices, (x[indices] * scale).astype(x.dtype)


class ErrorFeedback:
    """Top-k with a residual: :meth:`compress` adds the residual to the gradient, selects the
    ``k`` largest entries to send, and keeps the rest as the next residual."""

    def __init__(self, n: int, k: int, dtype=np.float32):
        self.k = k
        self.residual = np.zeros(n, dtype)

    def compress(self, gradient: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        corrected = gradient + self.residual
        indices, values = topk(corrected, self.k)
        corrected[indices] = 0
        self.residual = corrected  # what was not sent waits for the next step
        return indices, values

    def restore(self, indices: np.ndarray, values: np.ndarray) -> None:
        """Put back pairs that :meth:`compress` selected but the reduction dropped
        (:func:`~allreduce.sparse.topk_allreduce`'s ``unsent``): they wait for the next step
        like everything else that was not sent."""
        np.add.at(self.residual, indices, values)
