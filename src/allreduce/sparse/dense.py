"""``dense``: densify, run the dense allreduce (``auto``), and read the result back at the
union of the supports.  The baseline every sparse algorithm is measured against.

The union is where the sum is not zero, unless some rank's pair sums to zero there (an
explicit zero, or values that cancel): a place no rank holds sums zeros only, so a non-zero
sum has a pair behind it, and where every rank finds each of its own pairs' sums non-zero
the non-zeros are the union, exactly.  Each rank counts its pairs whose sums are zero and
one all-gather of the counts tells every rank alike; only where one is not zero does a
second allreduce, of a presence mask, find the union.  (For floating-point gradients an
exact zero is rare: on the course's gradients at 0.01-50% (4 ranks) and the benchmark's
uniform, identical and disjoint float32 supports at 1% and 10% no pair summed to zero,
so the mask round was never needed; at 10% on the gradients, 4 MPI ranks on the reference
machine, counting and gathering the zero sums took 2.8-4.3 ms of a call where marking the
mask and its allreduce had taken 5.2-6.5.)

The mask is one byte per element, 0 or 1, summed as int32 words: four elements to a word,
and no byte can carry into the next while it sums at most 255 ranks' ones, so a byte is
non-zero exactly where some rank has a pair (from 256 ranks, one int32 per element).

Unless the caller takes the dense sum (``dense_output``, which needs no union), the dense
vector and the mask are the communicator's kept scratch buffers
(:meth:`~allreduce.comm.Communicator.scratch`), zeroed at each call, not fresh arrays: a
fresh 64 MiB array is mapped anew and its pages faulted in at every call, and the path ran
12-14% faster at 10% density on 16 M float32 (4 MPI ranks on the reference machine, three
interleaved pairs of runs).

Cost: the dense allreduce's on n values, a gather of one integer per rank, and where a sum
is zero one allreduce on :func:`mask_bytes` more."""

from __future__ import annotations

import numpy as np

from ..comm import Communicator
from .vector import densify, timed

#: Bytes a rank sends in the gather of its count of pairs that sum to zero (one int64);
#: the model prices that gather as an allreduce of this many bytes.
ZERO_COUNT_BYTES = np.dtype(np.int64).itemsize

#: The most ranks whose 0/1 bytes can be summed in place without a carry.
PACKED_RANKS = 255
_WORD = np.zeros(0, np.int32)  # the mask's dtype, as scratch() takes it


def mask_bytes(n: int, p: int) -> int:
    """Bytes of the presence mask's allreduce: ``n`` bytes padded to whole int32 words, or
    ``4n`` from 256 ranks."""
    return 4 * -(-n // 4) if p <= PACKED_RANKS else 4 * n


def dense(indices, values, n: int, comm: Communicator, *, dense_output: bool = False):
    """The sum as a dense array when ``dense_output``, else as ``(indices, values)`` on the
    union of the ranks' supports."""
    from ..api import allreduce

    kept = None if dense_output else comm.scratch(n, values, purpose="sparse dense sum")
    full = densify(indices, values, n, out=kept)
    allreduce(full, comm, algorithm="auto", out=full)
    if dense_output:
        return full
    if not comm.allgather_ints(np.array([_zero_sums(full, indices)], np.int64)).any():
        return _non_zeros(full)
    present = _mark(indices, n, comm.size, out=comm.scratch(
        mask_bytes(n, comm.size) // 4, _WORD, purpose="sparse dense mask"))
    allreduce(present, comm, algorithm="auto", out=present)
    return _read_back(present, full, n, comm.size)


@timed
def _zero_sums(full: np.ndarray, indices) -> int:
    """How many of this rank's pairs sum to zero (or -0.0) in ``full``."""
    return int(np.count_nonzero(full[indices] == 0))


@timed
def _non_zeros(full: np.ndarray):
    where = np.flatnonzero(full != 0)  # compared first: 7x faster than of the floats
    return where, full[where]


def _flags(present: np.ndarray, n: int, p: int) -> np.ndarray:
    return present.view(np.uint8)[:n] if p <= PACKED_RANKS else present


@timed
def _mark(indices, n: int, p: int, out=None) -> np.ndarray:
    """This rank's presence mask, as the int32 words the allreduce sums (written into
    ``out``, of :func:`mask_bytes` bytes, when given)."""
    if out is None:
        present = np.zeros(mask_bytes(n, p) // 4, np.int32)
    else:
        present = out
        present.fill(0)
    _flags(present, n, p)[indices] = 1
    return present


@timed
def _read_back(present: np.ndarray, full: np.ndarray, n: int, p: int):
    # compared first: numpy's nonzero of a bool array ran 2-5x faster than of the uint8 sums
    # (16 M elements, 1-94% of them set, on the reference machine)
    where = np.flatnonzero(_flags(present, n, p) != 0)
    return where, full[where]
