"""``sparse_ring``: the ring allreduce on sparse chunks (chapter "Sparse allreduce").  The
index range is cut into ``p`` chunks (:mod:`~allreduce.sparse.chunks`: equal lengths, or
equal nonzeros); in the reduce-scatter each rank sends a chunk's partial sum to the right
and merges the one it receives from the left into its own, so a chunk's support grows as it
travels ("fill-in"); the all-gather then passes the finished chunks around.  Each message is
index-value pairs, or the chunk's dense values once those are no larger
(:func:`~allreduce.sparse.vector.encode`: SparCML's switch).

This is the course's own construction of the sparse ring; the thesis that motivates it
("Optimizing Ring AllReduce for Sparse Data") has only its abstract public.

Cost: 2(p−1)·α + Σ over steps of the message on the critical path·β, about
(c/p)·[Σ_{s<p} u_s + (p−1)·u_p]·β where u_s is the size of the union of s ranks' supports
and c the bytes of a pair (:mod:`allreduce.sparse.cost` computes it exactly from the
supports).  In closed form (:func:`terms`), with k pairs per rank spread evenly over the
chunks: 2(p−1)·(h + k·c/p) bytes when the supports are identical, 2(p−1)·h + 1.5·(p−1)·k·c
when they are disjoint, h the header of a message."""

from __future__ import annotations

import numpy as np

from ..algorithms._schedule import chunk_bounds, left, right
from ..comm import Communicator
from ..cost import Terms
from .chunks import chunk_ranges
from .exchange import OVERHEAD_BYTES, exchange, ring_allgather
from .vector import decode, encode, merge, split_at


def sparse_ring(indices, values, n: int, comm: Communicator, *, boundaries: str = "length",
                most_pairs: int | None = None):
    """Sum of every rank's sparse vector: a sparse ring reduce-scatter, then all-gather
    (``most_pairs``: see :mod:`~allreduce.sparse.exchange`)."""
    p, rank, dtype = comm.size, comm.rank, values.dtype
    bounds = chunk_ranges(indices, n, comm, boundaries)
    chunks = [(indices[s], values[s]) for s in split_at(indices, bounds)]
    for step in range(p - 1):  # reduce-scatter: afterwards chunk r is complete on rank r
        send, receive = (rank - step - 1) % p, (rank - step - 2) % p
        incoming = exchange(comm, encode(*chunks[send], *bounds[send]), right(comm), left(comm),
                            bounds[receive], dtype, most_pairs)
        chunks[receive] = merge([chunks[receive], decode(incoming, dtype)], dtype)
    ring_allgather(comm, chunks, bounds, dtype, most_pairs)
    # the chunks cover disjoint ranges, in order: putting them side by side is the sum
    return (np.concatenate([i for i, _ in chunks]), np.concatenate([v for _, v in chunks]))


def taught_reduce_scatter(indices, values, n: int, comm: Communicator):
    """The sparse ring's reduce-scatter as the chapter teaches it: chunks of equal length,
    and in each step the packet's length, then the packet, with plain ``sendrecv``s (the
    receiver must know a message's length).  Returns this rank's finished chunk ``r``.
    :func:`sparse_ring` sends each packet alone (``sendrecv_any``); a test checks that both
    give the same bits."""
    p, rank, dtype = comm.size, comm.rank, values.dtype
    bounds = [chunk_bounds(n, p, c) for c in range(p)]
    chunks = [(indices[s], values[s]) for s in split_at(indices, bounds)]
    for step in range(p - 1):
        send, receive = (rank - step - 1) % p, (rank - step - 2) % p
        packet = encode(*chunks[send], *bounds[send])
        length = np.array([len(packet)], np.int64)
        incoming_length = np.empty(1, np.int64)
        comm.sendrecv(length, right(comm), incoming_length, left(comm))
        incoming = np.empty(int(incoming_length[0]), np.uint8)
        comm.sendrecv(packet, right(comm), incoming, left(comm))
        chunks[receive] = merge([chunks[receive], decode(incoming, dtype)], dtype)
    return chunks[rank]


def terms(p: int, k: int, pair_bytes: int, supports: str) -> Terms:
    """Critical-path steps and bytes for ``k`` pairs of ``pair_bytes`` per rank, ``k/p`` in
    each chunk, below the dense switch, when the ``supports`` are ``"identical"`` or
    ``"disjoint"``."""
    head = 2 * (p - 1) * OVERHEAD_BYTES
    if supports == "identical":
        return Terms(2 * (p - 1), head + 2 * (p - 1) * k * pair_bytes / p, 0)
    return Terms(2 * (p - 1), head + 1.5 * (p - 1) * k * pair_bytes, 0)
