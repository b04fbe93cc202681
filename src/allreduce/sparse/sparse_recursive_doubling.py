"""``sparse_recursive_doubling``: recursive doubling on whole sparse vectors, SparCML's
latency-optimal variant (Renggli et al., SC 2019).  In round ``k`` partners whose ranks
differ in bit ``k`` swap everything they hold and merge it, lower rank's first, so both
hold the same bits; a number of ranks that is not a power of two is folded first, as the
dense algorithm does (:class:`~allreduce.algorithms._schedule.PowerOfTwoFold`).

Cost: 2·lg p·α (each round sends a length, then the vector; +4 folded) + Σ over rounds of
the merged vector's size·β: min(u_{2^k}·c, n·w) in round k, the support doubling its
contributors each round."""

from __future__ import annotations

from ..algorithms._schedule import PowerOfTwoFold
from ..comm import Communicator
from .exchange import recv_packet, send_packet, sendrecv_packet
from .vector import decode, encode, merge


def sparse_recursive_doubling(indices, values, n: int, comm: Communicator):
    """Sum of every rank's sparse vector by recursive doubling."""
    fold, rank, dtype = PowerOfTwoFold(comm), comm.rank, values.dtype
    mine = (indices, values)
    if rank < 2 * fold.extra:  # the fold: even ranks hand their vector to the odd one above
        if rank % 2 == 0:
            send_packet(comm, encode(*mine, 0, n), rank + 1)
            return decode(recv_packet(comm, rank + 1), dtype, 0, n)
        mine = merge([decode(recv_packet(comm, rank - 1), dtype, 0, n), mine], dtype)
    me, mask = fold.virtual_rank, 1
    while mask < fold.participants:
        peer = fold.real_rank(me ^ mask)
        theirs = decode(sendrecv_packet(comm, encode(*mine, 0, n), peer, peer), dtype, 0, n)
        mine = merge([theirs, mine] if me & mask else [mine, theirs], dtype)
        mask <<= 1
    if rank < 2 * fold.extra:
        send_packet(comm, encode(*mine, 0, n), rank - 1)
    return mine
