"""``sparse_direct``: each rank owns one chunk of the index range and every rank sends its
pairs in that chunk straight to the owner, which sums what it receives once; then the
ring's all-gather passes the finished chunks around (chapter "Sparse allreduce").  The
scatter takes ``p − 1`` steps in which rank ``r`` sends to ``r + s`` and receives from
``r − s``, so each rank sends one message and receives one per step, as in the ring.

Unlike the sparse ring, a message carries one rank's pairs, never a partial sum: no
fill-in travels in the reduce-scatter, and each owner merges ``p`` sorted runs once instead
of merging at every step.  This is the course's own construction (the all-to-all that
sparse reduce-scatters such as SparCML's and Ok-Topk's start from).

Cost: 2(p−1)·α + [Σ_{s<p} (h + k_s·c) + (p−1)·(h + u_p·c/p)]·β on the critical path, k_s the
pairs a rank sends in step s (about k/p) and u_p the union of all supports:
(p−1)·(1/2 − 1/p)·k·c less than the ring when the supports are disjoint (nothing on 2
ranks), the same when they are identical (:func:`terms`)."""

from __future__ import annotations

import numpy as np

from ..comm import Communicator
from ..cost import Terms
from .chunks import chunk_ranges
from .exchange import OVERHEAD_BYTES, exchange, ring_allgather
from .vector import decode, encode, merge, split_at


def scatter_to_owners(pieces: list, bounds: list[tuple[int, int]], comm: Communicator,
                      dtype: np.dtype, most_pairs: int | None = None) -> list:
    """Send ``pieces[c]`` (this rank's pairs in chunk ``c``) to rank ``c``; returns the
    pieces of this rank's chunk from every rank, by rank."""
    p, rank = comm.size, comm.rank
    received = [None] * p
    received[rank] = pieces[rank]
    for step in range(1, p):
        dest, source = (rank + step) % p, (rank - step) % p
        incoming = exchange(comm, encode(*pieces[dest], *bounds[dest]), dest, source,
                            bounds[rank], dtype, most_pairs)
        received[source] = decode(incoming, dtype)
    return received


def sparse_direct(indices, values, n: int, comm: Communicator, *, boundaries: str = "length",
                  most_pairs: int | None = None):
    """Sum of every rank's sparse vector: pairs to their chunk's owner, one merge there,
    then the ring's all-gather of the summed chunks (``most_pairs``: see
    :mod:`~allreduce.sparse.exchange`)."""
    rank, dtype = comm.rank, values.dtype
    bounds = chunk_ranges(indices, n, comm, boundaries)
    pieces = [(indices[s], values[s]) for s in split_at(indices, bounds)]
    chunks = [None] * comm.size
    chunks[rank] = merge(scatter_to_owners(pieces, bounds, comm, dtype, most_pairs),
                         dtype)  # rank order
    ring_allgather(comm, chunks, bounds, dtype, most_pairs)
    return (np.concatenate([i for i, _ in chunks]), np.concatenate([v for _, v in chunks]))


def terms(p: int, k: int, pair_bytes: int, supports: str) -> Terms:
    """Critical-path steps and bytes for ``k`` pairs of ``pair_bytes`` per rank, ``k/p`` in
    each chunk, below the dense switch, when the ``supports`` are ``"identical"`` or
    ``"disjoint"``."""
    head = 2 * (p - 1) * OVERHEAD_BYTES
    union = k if supports == "identical" else p * k
    return Terms(2 * (p - 1), head + (p - 1) * (k + union) * pair_bytes / p, 0)
