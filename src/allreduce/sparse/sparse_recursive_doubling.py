"""``sparse_recursive_doubling``: recursive doubling on whole sparse vectors, SparCML's
algorithm for small data, "SSAR_Recursive_double" (Renggli et al., SC 2019; chapter
"Sparse allreduce").  In round
``j`` partners whose ranks differ in bit ``j`` swap everything they hold and merge it, lower
rank's first, so both hold the same bits; a number of ranks that is not a power of two is
folded first, as the dense algorithm does
(:class:`~allreduce.algorithms._schedule.PowerOfTwoFold`).

Cost: lg q·α (one message a round; +2 folded) + Σ over rounds of the merged vector's size·β:
min(u_{2^j}·c, n·w) in round j, the support doubling its contributors each round.  In closed
form (:func:`terms`): (lg q + 2f)·(h + k·c) bytes when the supports are identical, and
h·lg p + (p−1)·k·c when they are disjoint on p = 2^j."""

from __future__ import annotations

from ..algorithms._schedule import PowerOfTwoFold
from ..comm import Communicator
from ..cost import Terms, largest_power_of_two
from .exchange import OVERHEAD_BYTES, exchange, receive, send
from .vector import decode, encode, merge


def sparse_recursive_doubling(indices, values, n: int, comm: Communicator, *,
                              most_pairs: int | None = None):
    """Sum of every rank's sparse vector by recursive doubling (``most_pairs``: see
    :mod:`~allreduce.sparse.exchange`)."""
    fold, rank, dtype = PowerOfTwoFold(comm), comm.rank, values.dtype
    mine, whole = (indices, values), (0, n)
    if rank < 2 * fold.extra:  # the fold: even ranks hand their vector to the odd one above
        if rank % 2 == 0:
            send(comm, encode(*mine, *whole), rank + 1)
            return receive(comm, rank + 1, whole, dtype, most_pairs)
        mine = merge([receive(comm, rank - 1, whole, dtype, most_pairs), mine], dtype)
    me, mask = fold.virtual_rank, 1
    while mask < fold.participants:
        peer = fold.real_rank(me ^ mask)
        theirs = decode(exchange(comm, encode(*mine, *whole), peer, peer, whole, dtype,
                                 most_pairs), dtype)
        mine = merge([theirs, mine] if me & mask else [mine, theirs], dtype)
        mask <<= 1
    if rank < 2 * fold.extra:
        send(comm, encode(*mine, *whole), rank - 1)
    return mine


def terms(p: int, k: int, pair_bytes: int, supports: str) -> Terms:
    """Critical-path steps and bytes for ``k`` pairs of ``pair_bytes`` per rank, below the
    dense switch: ``"identical"`` supports on any ``p``, ``"disjoint"`` on a power of two."""
    q = largest_power_of_two(p)
    rounds, folded = q.bit_length() - 1, int(p != q)
    steps = rounds + 2 * folded
    if supports == "identical":
        return Terms(steps, (rounds + 2 * folded) * (OVERHEAD_BYTES + k * pair_bytes), 0)
    if folded:
        raise ValueError("the disjoint closed form is for a power of two")
    return Terms(steps, rounds * OVERHEAD_BYTES + (p - 1) * k * pair_bytes, 0)
