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

from .chunks import balanced, bins, equal_length, histogram
from .vector import split_at


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


def histogram_round_bytes(n: int, p: int) -> int:
    """Bytes of the histogram's allreduce that cuts chunks of equal nonzeros."""
    return 8 * bins(n, p)  # int64 counts


def _absent(loads: np.ndarray, widths: np.ndarray) -> np.ndarray:
    """``1 − d``, each rank's density in each chunk, kept in [0, 1] (rounded loads can
    exceed a full chunk)."""
    density = np.divide(loads, widths, out=np.zeros_like(loads), where=widths > 0)
    return 1 - np.clip(density, 0, 1)


def union(n: int, density: float, ranks: int) -> float:
    """Expected size of the union of ``ranks`` independent supports of ``density``."""
    return n * (1 - (1 - min(density, 1.0)) ** ranks)


def measured_unions(supports: list[np.ndarray]) -> list[float]:
    """``u[s]``, s = 0 … p: the mean size of the union of ``s`` ranks' supports (sorted,
    unique indices, as the sparse allreduce takes them), over the ``p`` windows of
    consecutive ranks (the groups a ring's partial sums hold)."""
    p = len(supports)
    length = 1 + max((int(s[-1]) for s in supports if len(s)), default=0)
    totals = np.zeros(p + 1)
    for r in range(p):  # grow the window ending at r one rank at a time: no sorting
        present = np.zeros(length, bool)
        size = 0
        for s in range(1, p + 1):
            support = supports[(r - s + 1) % p]
            size += len(support) - int(np.count_nonzero(present[support]))
            present[support] = True
            totals[s] += size
    return [float(total / p) for total in totals]


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
                  histogram_round_bytes(n, p) if boundaries == "nonzeros" else 0)


def chunk_counts(indices: np.ndarray, n: int, p: int) -> list[int]:
    """How many of ``indices`` (sorted) fall in each of the ``p`` equal-length chunks: what
    a rank adds to the call's check for :func:`expected`."""
    return [sl.stop - sl.start for sl in split_at(indices, equal_length(n, p))]


def _rebalanced(loads: np.ndarray, n: int) -> tuple[list[tuple[int, int]], np.ndarray]:
    """Chunks of equal expected nonzeros, cut where the summed loads, spread uniformly
    inside each equal-length chunk, reach ``c/p`` of the pairs; and ``overlap[a, b]``, the
    elements equal-length chunk ``a`` shares with new chunk ``b``."""
    p = len(loads)
    old = equal_length(n, p)
    totals = loads.sum(axis=0)
    bounds = old
    if totals.sum():
        edges = np.array([lo for lo, _ in old] + [n], float)
        cumulative = np.concatenate(([0.0], np.cumsum(totals)))
        targets = np.arange(p) * cumulative[-1] / p
        cuts = [int(np.ceil(x)) for x in np.interp(targets, cumulative, edges)] + [n]
        cuts[0] = 0
        bounds = [(cuts[c], cuts[c + 1]) for c in range(p)]
    overlap = np.array([[max(0, min(hi, new_hi) - max(lo, new_lo)) for new_lo, new_hi in bounds]
                        for lo, hi in old], float)
    return bounds, overlap


def expected(loads, n: int, boundaries: str = "length") -> Layout:
    """The layout expected when rank ``r`` holds ``loads[r][c]`` pairs in equal-length
    chunk ``c``, each spread uniformly and independently inside its chunk; a cut of equal
    nonzeros takes, in each new chunk, each part of an equal-length chunk at that chunk's
    densities."""
    loads = np.asarray(loads, float)
    p = len(loads)
    widths = np.array([hi - lo for lo, hi in equal_length(n, p)], float)
    if boundaries == "nonzeros":
        bounds, overlap = _rebalanced(loads, n)
    else:
        bounds, overlap = equal_length(n, p), np.diag(widths)
    absent = _absent(loads, widths)  # by equal-length chunk
    pieces = ((1 - absent) @ overlap if boundaries == "nonzeros"  # rank r's pairs in chunk b
              else np.minimum(loads, widths))
    ring = np.zeros((max(p - 1, 0), p))
    finished = np.zeros(p)
    for c in range(p):  # chunk c takes in ranks c + 1, c + 2, ... in turn
        order = (c + 1 + np.arange(p)) % p
        held = (1 - np.cumprod(absent[order], axis=0)) @ overlap[:, c]  # [s]: s + 1 ranks
        ring[np.arange(p - 1), order[:-1]] = held[:-1]
        finished[c] = held[-1]
    return Layout(bounds, pieces, ring, finished,
                  histogram_round_bytes(n, p) if boundaries == "nonzeros" else 0)


def window_unions(loads, n: int) -> list[float]:
    """``u[s]``, s = 0 … p: the expected union of ``s`` consecutive ranks' supports, the mean
    over the ``p`` windows, from the pairs per equal-length chunk (what allgather and
    recursive doubling carry)."""
    loads = np.asarray(loads, float)
    p = len(loads)
    widths = np.array([hi - lo for lo, hi in equal_length(n, p)], float)
    absent = _absent(loads, widths)
    totals = np.zeros(p + 1)
    for r in range(p):  # the windows ending at r: ranks r, r − 1, ..., r − p + 1
        missing = np.cumprod(absent[(r - np.arange(p)) % p], axis=0)
        totals[1:] += (1 - missing) @ widths
    return [float(total / p) for total in totals]
