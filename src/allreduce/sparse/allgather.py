"""``allgather``: every rank's pairs travel around the ring (a ring all-gather of blocks of
different sizes), then every rank sums all ``p`` blocks itself.  What practice uses:
Horovod's sparse path, torch gloo's sparse ``all_reduce``.

Cost: 2(p−1)·α (each step sends a block's length, then the block) + the sum of the largest
block in flight at each step·β, about (p−1)·k·c for k pairs of c bytes per rank: it grows
with p, whatever the overlap of the supports."""

from __future__ import annotations

from ..comm import Communicator
from ..algorithms._schedule import left, right
from .exchange import sendrecv_packet
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
