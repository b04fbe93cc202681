"""Where the sparse ring and the direct algorithm cut the index range (chapter "Sparse
allreduce"): into ``p`` chunks of equal **length**, as the dense ring does, or of equal
**nonzeros**.  A ring step waits for its largest message, so when the Top-k entries cluster
(an embedding, an output layer) equal lengths make one chunk carry most pairs; equal
nonzeros balance them, at the price of one small dense allreduce: a histogram of every
rank's indices in ``BINS_PER_RANK·p`` bins, whose sum every rank cuts at the same places."""

from __future__ import annotations

import numpy as np

from ..algorithms._schedule import chunk_bounds
from ..comm import Communicator

BOUNDARIES = ("length", "nonzeros")
BINS_PER_RANK = 64

#: The algorithms that cut the index range into chunks (and take ``boundaries``).
CHUNKED = ("sparse_ring", "sparse_direct")


def equal_length(n: int, p: int) -> list[tuple[int, int]]:
    return [chunk_bounds(n, p, c) for c in range(p)]


def bins(n: int, p: int) -> int:
    """How many bins the histogram has: ``BINS_PER_RANK·p``, at least 1, at most ``n``."""
    return max(1, min(n, BINS_PER_RANK * p))


def bin_starts(n: int, p: int) -> np.ndarray:
    """Where each bin starts, and ``n``: bin ``j`` holds the indices ``i`` with
    ``⌊i·bins/n⌋ = j``, so it starts at ``⌈j·n/bins⌉``."""
    count = bins(n, p)
    whole, part = divmod(n, count)  # j·n = j·whole·count + j·part: no int64 overflow of j·n
    j = np.arange(count + 1, dtype=np.int64)
    return j * whole - (-j * part // count)


def histogram(indices: np.ndarray, n: int, p: int) -> np.ndarray:
    """How many of ``indices`` (sorted, as every sparse vector here) fall in each of the
    bins that :func:`balanced` cuts: a binary search per bin edge, not a pass over them."""
    return np.diff(np.searchsorted(indices, bin_starts(n, p))).astype(np.int64)


def balanced(total: np.ndarray, n: int, p: int) -> list[tuple[int, int]]:
    """Chunk ``c`` starts at the first bin edge where the summed histogram ``total`` reaches
    ``c/p`` of its pairs (equal lengths when there are none)."""
    if not total.sum():
        return equal_length(n, p)
    before = np.concatenate(([0], np.cumsum(total)))  # pairs before each bin edge
    edges = [int(np.searchsorted(before, c * before[-1] / p)) for c in range(p)]
    starts = [int(start) for start in bin_starts(n, p)[edges]] + [n]
    return [(starts[c], starts[c + 1]) for c in range(p)]


def chunk_ranges(indices: np.ndarray, n: int, comm: Communicator,
                 boundaries: str = "length") -> list[tuple[int, int]]:
    """The ``p`` index ranges, the same on every rank."""
    p = comm.size
    if boundaries not in BOUNDARIES:
        raise ValueError(f"boundaries must be one of {', '.join(BOUNDARIES)}, got {boundaries!r}")
    if boundaries == "length" or p == 1:
        return equal_length(n, p)
    from ..api import allreduce

    total = allreduce(histogram(indices, n, p), comm, algorithm="recursive_doubling")
    return balanced(total, n, p)
