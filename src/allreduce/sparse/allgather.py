"""``allgather``: every rank's pairs reach every rank, unchanged, then every rank sums all
``p`` blocks itself (chapter "Sparse allreduce").  What practice uses: Horovod's sparse path
and torch gloo's sparse ``all_reduce`` call an all-gather of the pairs.

Two of MPICH's three all-gathers for ``MPI_Allgatherv`` (its tuning file,
``maint/tuning/coll/mpir/generic.json`` at v5.0.1: recursive doubling on a power of two
below 512 KiB gathered, Bruck's below 80 KiB on other counts, the ring above).  Below
:data:`BRUCK_LIMIT`, on any number of ranks, **Bruck's** (Bruck et al., IEEE TPDS 1997;
MPICH's ``allgatherv_intra_brucks.c``), which takes ⌈lg p⌉ steps, as recursive doubling
does on a power of two: in the step of distance ``d`` = 1, 2, 4, … rank ``r`` sends the
blocks it holds, those of ranks ``r … r + d − 1`` (at most ``p − d``: the last step sends
only what the receiver lacks), to rank ``r − d`` and receives as many from ``r + d``.  From
the limit, **the ring's** (:func:`~allreduce.sparse.exchange.ring_allgather`): p − 1 steps
of one block.

Cost (:func:`terms`): ⌈lg p⌉·α (Bruck's) or (p−1)·α (the ring's), and (p−1)·(h + k·c)·β
either way, for k pairs of c bytes on every rank, h the header of a block, whatever the
overlap of the supports; the merge of p·k pairs is local work."""

from __future__ import annotations

import numpy as np

from ..comm import Communicator
from ..cost import Terms
from .exchange import OVERHEAD_BYTES, ring_allgather
from .vector import HEADER_BYTES, decode, encode, index_dtype, merge, packet_bound, packets

#: Bruck's all-gather while the blocks gathered take less than this many bytes (bounded from
#: every rank's pair count, which every rank knows), the ring's from it: MPICH's limit for
#: recursive doubling on a power of two, taken here on any number of ranks (MPICH's limit
#: for Bruck's, on other counts, is 80 KiB).  Measured on the reference machine (4 MPI ranks
#: on 2 cores, whole calls, interleaved, 2026-11-27; no other count was measured): Bruck's
#: 7% faster at 4 blocks of 32 KB, 5% slower at 4 of 134 KB.
BRUCK_LIMIT = 512 << 10


def allgather(indices, values, n: int, comm: Communicator, *, most_pairs: int | None = None):
    """Sum of every rank's sparse vector, merged in rank order on every rank (``most_pairs``:
    every rank's pairs together; see :mod:`~allreduce.sparse.exchange`)."""
    p, dtype = comm.size, values.dtype
    if uses_bruck(p, n, dtype.itemsize, most_pairs):
        blocks = _bruck(indices, values, n, comm, most_pairs)
    else:
        blocks = [None] * p
        blocks[comm.rank] = (indices, values)
        ring_allgather(comm, blocks, [(0, n)] * p, dtype, most_pairs)
    return merge(blocks, dtype)


def uses_bruck(p: int, n: int, itemsize: int, most_pairs: float | None) -> bool:
    """Whether :func:`allgather` takes Bruck's all-gather: when the ``p`` blocks, holding
    ``most_pairs`` pairs in all (None: not known), take less than :data:`BRUCK_LIMIT` bytes
    however they are encoded."""
    return most_pairs is not None and _bound(p, n, itemsize, most_pairs) < BRUCK_LIMIT


def _bruck(indices, values, n: int, comm: Communicator, most_pairs: int) -> list:
    """Every rank's pairs, by rank, after Bruck's ⌈lg p⌉ steps."""
    p, rank, dtype = comm.size, comm.rank, values.dtype
    held = [encode(indices, values, 0, n)]  # held[i]: the block of rank (rank + i) mod p
    distance = 1
    while distance < p:
        count = min(distance, p - distance)  # the blocks the receiver lacks
        outgoing = held[0] if count == 1 else np.concatenate(held[:count])
        inbox = comm.scratch(int(_bound(count, n, dtype.itemsize, most_pairs)), outgoing)
        comm.sendrecv_any(comm.native(outgoing), (rank - distance) % p, comm.native(inbox),
                          (rank + distance) % p)
        # the blocks of ranks r + d, r + d + 1, …, copied out of the inbox it reuses
        held += [packet.copy() for packet in packets(inbox, dtype.itemsize, count)]
        distance *= 2
    blocks = [None] * p
    for i, packet in enumerate(held):
        blocks[(rank + i) % p] = (indices, values) if i == 0 else decode(packet, dtype)
    return blocks


def _bound(count: int, n: int, itemsize: int, most_pairs: float) -> float:
    """The most bytes ``count`` blocks of ``[0, n)`` take when at most ``most_pairs`` pairs
    travel in all: each block no more than its dense form or its pairs form."""
    return min(count * packet_bound(0, n, itemsize),
               count * HEADER_BYTES + most_pairs * (index_dtype(n).itemsize + itemsize))


def terms(p: int, k: int, pair_bytes: int, supports: str = "any") -> Terms:
    """Critical-path steps and bytes for ``k`` pairs of ``pair_bytes`` on each of ``p``
    ranks (below the dense switch), whatever the ``supports``: Bruck's steps while the
    blocks gathered take less than :data:`BRUCK_LIMIT`, the ring's from it."""
    bytes_ = (p - 1) * (OVERHEAD_BYTES + k * pair_bytes)
    gathered = p * (OVERHEAD_BYTES + k * pair_bytes)
    return Terms((p - 1).bit_length() if gathered < BRUCK_LIMIT else p - 1, bytes_, 0)
