"""``allgather``: every rank's pairs travel around the ring (a ring all-gather of blocks of
different sizes), then every rank sums all ``p`` blocks itself.  What practice uses:
Horovod's sparse path, torch gloo's sparse ``all_reduce``.

Cost (:func:`terms`): 2(p−1)·α (each step sends a block's length, then the block) and
(p−1)·(h + k·c)·β for k pairs of c bytes on every rank, h the bytes an exchange adds: it
grows with p, whatever the overlap of the supports; the merge is local work (γ)."""

from __future__ import annotations

from ..algorithms._schedule import left, right
from ..comm import Communicator
from ..cost import Terms
from .exchange import OVERHEAD_BYTES, sendrecv_packet
from .vector import decode, encode, merge


def allgather(indices, values, n: int, comm: Communicator):
    """Sum of every rank's sparse vector, merged in rank order on every rank."""
    p, rank = comm.size, comm.rank
    blocks = [None] * p
    blocks[rank] = (indices, values)
    packet = encode(indices, values, 0, n)
    for step in range(p - 1):  # in step s, rank r forwards the block of rank r - s
        packet = sendrecv_packet(comm, packet, right(comm), left(comm))
        blocks[(rank - step - 1) % p] = decode(packet, values.dtype, 0, n)
    return merge(blocks, values.dtype)


def terms(p: int, k: int, pair_bytes: int, supports: str = "any") -> Terms:
    """Critical-path steps and bytes for ``k`` pairs of ``pair_bytes`` on each of ``p``
    ranks (below the dense switch), whatever the ``supports``."""
    return Terms(2 * (p - 1), (p - 1) * (OVERHEAD_BYTES + k * pair_bytes), 0)
