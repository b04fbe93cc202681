"""Rabenseifner's allreduce: recursive-halving reduce-scatter, recursive-doubling all-gather.

Taught in the chapter "Tree allreduce".  In each halving round a rank keeps half of the
range it is responsible for, sends the other half to its partner and reduces the half it
receives; after lg p rounds rank ``v`` holds chunk ``v`` reduced.  The all-gather retraces
the rounds in reverse, doubling the range each time.  Other rank counts are folded onto a
power of two first (:class:`~allreduce.algorithms._schedule.PowerOfTwoFold`).

Cost (:data:`COST`): 2·lg p·α + 2·(p−1)/p·n·β + (p−1)/p·n·γ for a power of two
(Rabenseifner 2004; Thakur, Rabenseifner & Gropp 2005): the ring's bandwidth term with the
tree's step count.  Folded, q = 2^⌊lg p⌋ ranks run it and the fold adds two steps of n
bytes and one reduction of n: (2(q−1)/q + 2)·n·β.  MPICH's cost comment in
``allreduce_intra_reduce_scatter_allgather.c`` writes it (2(p−1)/p + 2)·n·β, with p in the
fraction; the replayed trace has q there, the ranks that remain after the fold.
"""

from __future__ import annotations

from ..comm import Communicator
from ..cost import Formula
from ..ops import Op
from ._schedule import PowerOfTwoFold, span_bounds

COST = Formula(steps="2*lg(q) + 2*f", bytes="2*(q - 1)/q*n + 2*f*n",
               reduced="(q - 1)/q*n + f*n")


def rabenseifner(buf, comm: Communicator, op: Op, *, source=None) -> None:
    """Rabenseifner allreduce in place (of ``source`` into ``buf`` when ``source`` is given:
    the first halving round reads the input from ``source``, as the ring's reduce-scatter
    does, which saves copying it into ``buf`` first)."""
    fold = PowerOfTwoFold(comm)
    if source is not None and (fold.extra or comm.size == 1):
        comm.copy(buf, source)  # the fold reduces whole buffers in place
        source = None
    if comm.size == 1:
        return
    n = len(buf)
    me, parts = fold.virtual_rank, fold.participants
    # a fold receives a whole buffer; a halving round at most the first half (the largest)
    scratch = comm.scratch(n if fold.extra else span_bounds(n, parts, 0, parts // 2)[1], like=buf)
    fold.fold(buf, op, scratch)
    mine = buf if source is None else source
    if me is not None:
        first, last = 0, parts  # the chunks this rank is responsible for
        mask = parts >> 1
        while mask:  # reduce-scatter by recursive halving
            partner = me ^ mask
            middle = (first + last) // 2
            keep, give = ((first, middle), (middle, last)) if me < partner else (
                (middle, last), (first, middle))
            keep_lo, keep_hi = span_bounds(n, parts, *keep)
            give_lo, give_hi = span_bounds(n, parts, *give)
            received = scratch[: keep_hi - keep_lo]
            peer = fold.real_rank(partner)
            comm.sendrecv(mine[give_lo:give_hi], peer, received, peer)
            comm.reduce_local(op, buf[keep_lo:keep_hi], received, incoming_first=partner < me,
                              source=mine[keep_lo:keep_hi])
            first, last = keep
            mine = buf  # from the second round on, this rank's data is in buf
            mask >>= 1
        mask = 1
        while mask < parts:  # all-gather by recursive doubling
            partner = me ^ mask
            width = last - first
            theirs = (last, last + width) if me < partner else (first - width, first)
            mine_lo, mine_hi = span_bounds(n, parts, first, last)
            their_lo, their_hi = span_bounds(n, parts, *theirs)
            peer = fold.real_rank(partner)
            comm.sendrecv(buf[mine_lo:mine_hi], peer, buf[their_lo:their_hi], peer)
            first, last = min(first, theirs[0]), max(last, theirs[1])
            mask <<= 1
    fold.unfold(buf)
