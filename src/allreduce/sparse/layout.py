"""What the chunked sparse algorithms' messages hold (chapter "Sparse allreduce"): the index
range cut into ``p`` chunks, each rank's pairs in each chunk, the sparse ring's partial sums
as they grow, and each finished chunk.  Computed from the real supports
(:func:`from_supports`, what the benchmark's prediction replays), or expected from the
pairs each rank holds in each of ``p`` equal-length chunks (:func:`expected`), which the
call's check gathers, so ``auto`` sees when the supports cluster in a few chunks.  The
expectation takes each rank's pairs as spread uniformly and independently inside a chunk:
the union of ranks ``S`` in a chunk of ``w`` elements holds ``w·(1 − Π_{r∈S}(1 − d_r))``,
``d_r`` rank ``r``'s density there."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .chunks import BINS_PER_RANK, balanced, equal_length, histogram
from .vector import split_at

#: The algorithms that cut the index range into chunks (and take ``boundaries``).
CHUNKED = ("sparse_ring", "sparse_direct")


@dataclass
class Layout:
    """``pieces[r, c]``: rank ``r``'s pairs in chunk ``c``; ``ring[s, r]``: the pairs rank
    ``r`` sends in the sparse ring's step ``s`` (chunk ``r − s − 1`` summed over ranks
    ``r − s … r``); ``finished[c]``: chunk ``c``'s sum; ``histogram_bytes``: the histogram's
    dense allreduce that cuts chunks of equal nonzeros (0 for equal lengths)."""

    bounds: list[tuple[int, int]]
    pieces: np.ndarray
    ring: np.ndarray
    finished: np.ndarray
    histogram_bytes: int = 0

    @property
    def widths(self) -> np.ndarray:
        return np.array([hi - lo for lo, hi in self.bounds], float)


def _histogram_bytes(n: int, p: int) -> int:
    return 8 * max(1, min(n, BINS_PER_RANK * p))


def from_supports(supports: list[np.ndarray], n: int, boundaries: str = "length") -> Layout:
    """The layout of ``supports`` (each rank's sorted indices), exactly."""
    p = len(supports)
    if boundaries == "nonzeros":
        bounds = balanced(sum(histogram(s, n, p) for s in supports), n, p)
    else:
        bounds = equal_length(n, p)
    pieces = np.array([[len(support[sl]) for sl in split_at(support, bounds)]
                       for support in supports], float)
    ring = np.zeros((max(p - 1, 0), p))
    finished = np.zeros(p)
    for c, (lo, hi) in enumerate(bounds):  # chunk c takes in ranks c + 1, c + 2, ... in turn
        present = np.zeros(hi - lo, bool)
        count = 0
        for s in range(p):
            r = (c + s + 1) % p
            support = supports[r]
            piece = support[np.searchsorted(support, lo):np.searchsorted(support, hi)] - lo
            count += len(piece) - int(np.count_nonzero(present[piece]))
            present[piece] = True
            if s < p - 1:
                ring[s, r] = count
        finished[c] = count
    return Layout(bounds, pieces, ring, finished,
                  _histogram_bytes(n, p) if boundaries == "nonzeros" else 0)


def chunk_counts(indices: np.ndarray, n: int, p: int) -> np.ndarray:
    """How many of ``indices`` (sorted) fall in each of the ``p`` equal-length chunks: what
    a rank adds to the call's check for :func:`expected`."""
    return np.diff(np.searchsorted(indices, [lo for lo, _ in equal_length(n, p)] + [n]))


def _rebalanced(loads: np.ndarray, n: int) -> tuple[list[tuple[int, int]], np.ndarray]:
    """Chunks of equal expected nonzeros, cut where the summed loads, spread uniformly
    inside each equal-length chunk, reach ``c/p`` of the pairs, and each rank's pairs in
    them (by overlap)."""
    p = len(loads)
    old = equal_length(n, p)
    totals = loads.sum(axis=0)
    if not totals.sum():
        return old, loads
    edges = np.array([lo for lo, _ in old] + [n], float)
    cumulative = np.concatenate(([0.0], np.cumsum(totals)))
    targets = np.arange(p) * cumulative[-1] / p
    cuts = [int(np.ceil(x)) for x in np.interp(targets, cumulative, edges)] + [n]
    cuts[0] = 0
    bounds = [(cuts[c], max(cuts[c], cuts[c + 1])) for c in range(p)]
    overlap = np.zeros((p, p))
    for a, (lo, hi) in enumerate(old):
        for b, (new_lo, new_hi) in enumerate(bounds):
            if hi > lo:
                overlap[a, b] = max(0, min(hi, new_hi) - max(lo, new_lo)) / (hi - lo)
    return bounds, loads @ overlap


def expected(loads, n: int, boundaries: str = "length") -> Layout:
    """The layout expected when rank ``r`` holds ``loads[r][c]`` pairs in equal-length
    chunk ``c``, each spread uniformly and independently inside its chunk."""
    loads = np.asarray(loads, float)
    p = len(loads)
    if boundaries == "nonzeros":
        bounds, loads = _rebalanced(loads, n)
    else:
        bounds = equal_length(n, p)
    widths = np.array([hi - lo for lo, hi in bounds], float)
    absent = 1 - np.divide(loads, widths, out=np.zeros_like(loads), where=widths > 0)
    ring = np.zeros((max(p - 1, 0), p))
    finished = np.zeros(p)
    for c in range(p):
        missing = 1.0
        for s in range(p):
            r = (c + s + 1) % p
            missing *= absent[r, c]
            if s < p - 1:
                ring[s, r] = widths[c] * (1 - missing)
        finished[c] = widths[c] * (1 - missing)
    return Layout(bounds, loads, ring, finished,
                  _histogram_bytes(n, p) if boundaries == "nonzeros" else 0)


def window_unions(loads, n: int) -> list[float]:
    """``u[s]``, s = 0 … p: the expected union of ``s`` consecutive ranks' supports, the mean
    over the ``p`` windows, from the pairs per equal-length chunk (what allgather and
    recursive doubling carry)."""
    loads = np.asarray(loads, float)
    p = len(loads)
    widths = np.array([hi - lo for lo, hi in equal_length(n, p)], float)
    absent = 1 - np.divide(loads, widths, out=np.zeros_like(loads), where=widths > 0)
    totals = np.zeros(p + 1)
    for r in range(p):  # the windows ending at r: ranks r, r − 1, ..., r − p + 1
        missing = np.cumprod(absent[(r - np.arange(p)) % p], axis=0)
        totals[1:] += (1 - missing) @ widths
    return [float(total / p) for total in totals]
