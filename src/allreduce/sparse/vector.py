"""Sparse vectors as the sparse allreduce moves them: sorted, unique indices with their
values, of a dense length ``n`` (chapter "Sparse allreduce").

Inside the library a sparse vector is a pair ``(indices, values)`` of numpy arrays, indices
int64 and strictly increasing.  :func:`merge` is the one routine that sums sparse vectors;
:func:`encode` and :func:`decode` turn one into the bytes of a message, as index-value pairs
or, when that is no smaller, as the dense values of its index range (SparCML's switch,
Renggli et al. 2019).
"""

from __future__ import annotations

import functools
import threading
import time

import numpy as np

#: The header of a message, four int64: its form (pairs or dense), the number of pairs, and
#: the index range ``[lo, hi)`` it covers.
HEADER_BYTES = 32
PAIRS, DENSE = 0, 1


_clock = threading.local()


def local_seconds() -> float:
    """Seconds this thread has spent in the local work of sparse allreduces (checking the
    indices, merging, encoding, decoding, densifying, the dense path's read-back of its
    union: its count of zero sums, the non-zeros or the presence mask; and the overlap's
    probes) since it started: what a benchmark subtracts from a call's time to see the time on the wire.
    No :func:`timed` function calls another, so nothing is counted twice."""
    return getattr(_clock, "seconds", 0.0)


def timed(function):
    """Count the time ``function`` takes in :func:`local_seconds`."""
    @functools.wraps(function)
    def counted(*args, **kwargs):
        start = time.perf_counter()
        try:
            return function(*args, **kwargs)
        finally:
            _clock.seconds = local_seconds() + time.perf_counter() - start
    return counted


_INT32, _INT64 = np.dtype(np.int32), np.dtype(np.int64)


def index_dtype(n: int) -> np.dtype:
    """int32 indices while they fit, int64 from 2³¹ elements."""
    return _INT32 if n < 2**31 else _INT64


#: The merge sums in a dense array of the runs' index range, instead of sorting, once the
#: pairs are at least this share of the range: measured on the reference machine (one
#: process, 2 or 4 runs of float32 pairs on random supports, ranges of 128 K-8 M), sorting
#: (a stable argsort, about 15 ns a pair) was faster at 9% of the range (1.1-2.8x) and the
#: dense sum at 12.5% (1.0-1.7x; even for 2 runs in 128 K) and 25% (1.4-2.5x).  Much of the
#: dense sum's cost below that is numpy's ``flatnonzero`` of the presence mask, which takes
#: a slower, branching path while at most a tenth of the mask is set.
DENSE_MERGE_SHARE = 0.125


@timed
def merge(runs: list[tuple[np.ndarray, np.ndarray]],
          dtype: np.dtype) -> tuple[np.ndarray, np.ndarray]:
    """The sum of sparse vectors of values ``dtype``: an index present in several runs is
    summed left to right, in the order of the runs, so every rank that merges the same runs
    gets the same bits, and both ways of merging (sorting, or a dense array of the range
    once the pairs fill :data:`DENSE_MERGE_SHARE` of it) give the same bits."""
    runs = [run for run in runs if len(run[0])]
    if not runs:
        return np.empty(0, np.int64), np.empty(0, dtype)
    if len(runs) == 1:
        return runs[0]
    lo = min(int(indices[0]) for indices, _ in runs)
    hi = max(int(indices[-1]) for indices, _ in runs) + 1
    if sum(len(indices) for indices, _ in runs) >= DENSE_MERGE_SHARE * (hi - lo):
        return _merge_in_range(runs, np.dtype(dtype), lo, hi)
    return _merge_sorted(runs)


def _merge_sorted(runs):
    """Sort the pairs (stably: equal indices keep the runs' order), then sum each index's
    values left to right."""
    indices = np.concatenate([i for i, _ in runs])
    values = np.concatenate([v for _, v in runs])
    order = np.argsort(indices, kind="stable")
    indices, values = indices[order], values[order]
    starts = np.flatnonzero(np.concatenate(([True], indices[1:] != indices[:-1])))
    lengths = np.diff(np.append(starts, len(indices)))
    sums = values[starts]
    for j in range(1, int(lengths.max())):  # the j-th value of every index that has one
        longer = np.flatnonzero(lengths > j)
        sums[longer] += values[starts[longer] + j]
    return indices[starts], sums


def _merge_in_range(runs, dtype: np.dtype, lo: int, hi: int):
    """Add each run into a dense array of ``[lo, hi)`` in turn, starting from -0.0 (the
    floating-point sum's identity: -0.0 + x is x, bit for bit), and keep where any run had
    a pair."""
    sums = np.full(hi - lo, -0.0 if dtype.kind == "f" else 0, dtype)
    present = np.zeros(hi - lo, bool)
    for indices, values in runs:
        sums[indices - lo] += values
        present[indices - lo] = True
    where = np.flatnonzero(present)
    return where + lo, sums[where]


@timed
def encode(indices: np.ndarray, values: np.ndarray, lo: int, hi: int) -> np.ndarray:
    """A message (uint8) holding the part of a sparse vector in ``[lo, hi)``: a header (its
    form, its pair count, ``lo`` and ``hi``), then its pairs, or, when the pairs would take
    at least as many bytes, the dense values of the range and a bitmap of which entries are
    present (so that the support survives the switch).  The header makes every message
    readable alone, by the receiver and by a trace."""
    itemsize = values.dtype.itemsize
    small = index_dtype(hi)
    pairs_bytes = len(indices) * (small.itemsize + itemsize)
    dense_bytes = (hi - lo) * itemsize + -(-(hi - lo) // 8)
    dense = pairs_bytes >= dense_bytes
    packet = np.empty(HEADER_BYTES + (dense_bytes if dense else pairs_bytes), np.uint8)
    packet[:HEADER_BYTES].view(np.int64)[:] = (DENSE if dense else PAIRS, len(indices), lo, hi)
    body = packet[HEADER_BYTES:]
    if dense:
        split = (hi - lo) * itemsize
        chunk = body[:split].view(values.dtype)
        chunk[:] = 0
        chunk[indices - lo] = values
        present = np.zeros(hi - lo, bool)
        present[indices - lo] = True
        body[split:] = np.packbits(present)
    else:
        split = len(indices) * small.itemsize
        body[:split].view(small)[:] = indices - lo
        body[split:].view(values.dtype)[:] = values
    return packet


def header(packet: np.ndarray) -> tuple[int, int, int, int]:
    """A message's form (:data:`PAIRS` or :data:`DENSE`), pair count, ``lo`` and ``hi``."""
    kind, count, lo, hi = (int(v) for v in packet[:HEADER_BYTES].view(np.int64))
    return kind, count, lo, hi


def packet_bound(lo: int, hi: int, itemsize: int, most_pairs: int | None = None) -> int:
    """The most bytes :func:`encode` can make of ``[lo, hi)``: its dense form, since it
    switches to that as soon as the pairs would not be smaller; or, for a vector of at most
    ``most_pairs`` pairs, their pairs form when that is smaller (the dense form is chosen only
    when it is no longer than the pairs').  A receiver that does not know a message's length
    receives into a buffer of this size."""
    dense = HEADER_BYTES + (hi - lo) * itemsize + -(-(hi - lo) // 8)
    if most_pairs is None:
        return dense
    return min(dense, HEADER_BYTES + most_pairs * (index_dtype(hi).itemsize + itemsize))


def packet_length(packet: np.ndarray, itemsize: int) -> int:
    """The bytes of the message from :func:`encode` at the start of ``packet``."""
    kind, count, lo, hi = header(packet)
    if kind == DENSE:
        return packet_bound(lo, hi, itemsize)
    return HEADER_BYTES + count * (index_dtype(hi).itemsize + itemsize)


def packets(buffer: np.ndarray, itemsize: int, count: int | None = None) -> list[np.ndarray]:
    """The messages from :func:`encode` lying back to back at the start of ``buffer`` (views
    on it): the first ``count``, or as many as it holds whole headers for."""
    found, at = [], 0
    while (len(found) < count) if count is not None else (len(buffer) - at >= HEADER_BYTES):
        length = packet_length(buffer[at:], itemsize)
        found.append(buffer[at:at + length])
        at += length
    return found


@timed
def decode(packet: np.ndarray, dtype: np.dtype) -> tuple[np.ndarray, np.ndarray]:
    """The sparse vector a message from :func:`encode` holds (``packet`` may be longer)."""
    dtype = np.dtype(dtype)
    kind, count, lo, hi = header(packet)
    body = packet[HEADER_BYTES:]
    if kind == DENSE:
        split = (hi - lo) * dtype.itemsize
        chunk = body[:split].view(dtype)
        bits = np.unpackbits(body[split:split + -(-(hi - lo) // 8)], count=hi - lo)
        where = np.flatnonzero(bits.view(bool))  # 0 or 1: as bools, numpy's faster nonzero
        return where + lo, chunk[where].copy()
    small = index_dtype(hi)
    split = count * small.itemsize
    indices = body[:split].view(small).astype(np.int64) + lo
    return indices, body[split:split + count * dtype.itemsize].view(dtype).copy()


@timed
def densify(indices: np.ndarray, values: np.ndarray, n: int, out=None) -> np.ndarray:
    """The dense vector of length ``n`` that the pairs describe (zeros elsewhere), written
    into ``out`` (``n`` elements of ``values``' dtype) when given."""
    if out is None:
        full = np.zeros(n, values.dtype)
    else:
        full = out
        full.fill(0)
    full[indices] = values
    return full


def split_at(indices: np.ndarray, bounds: list[tuple[int, int]]) -> list[slice]:
    """The slices of ``indices`` (sorted) that fall in each ``[lo, hi)`` of ``bounds``."""
    cuts = np.searchsorted(indices, [lo for lo, _ in bounds] + [bounds[-1][1]])
    return [slice(int(a), int(b)) for a, b in zip(cuts[:-1], cuts[1:])]
