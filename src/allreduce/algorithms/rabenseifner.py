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

import functools
from types import SimpleNamespace

from ..comm import Communicator
from ..cost import Formula, Levels
from ..ops import Op
from ._schedule import PowerOfTwoFold, span_bounds

COST = Formula(steps="2*lg(q) + 2*f", bytes="2*(q - 1)/q*n + 2*f*n",
               reduced="(q - 1)/q*n + f*n")

#: On N nodes of k ranks, both powers of two, node-major: the halving's first lg N rounds
#: (partners p/2 .. k apart, n/2 .. n/N bytes) cross nodes, its last lg k stay inside, and
#: the doubling retraces them (chapter "Beyond one flat ring").
LEVELS = Levels(Formula(steps="2*lg(k)", bytes="2*(k - 1)/p*n", reduced="(p - 1)/p*n"),
                Formula(steps="2*lg(N)", bytes="2*(N - 1)/N*n", reduced="0"),
                exact="f == 0 and k & (k - 1) == 0")


def rabenseifner(buf, comm: Communicator, op: Op, *, source=None) -> None:
    """Rabenseifner allreduce in place (of ``source`` into ``buf`` when ``source`` is given:
    the first halving round reads the input from ``source``, as the ring's reduce-scatter
    does, which saves copying it into ``buf`` first)."""
    fold = PowerOfTwoFold(comm)
    source = fold.take_input(buf, source)
    if comm.size == 1:
        return
    n = len(buf)
    parts = fold.participants
    # a fold receives a whole buffer; a halving round at most the first half (the largest)
    scratch = comm.scratch(n if fold.extra else span_bounds(n, parts, 0, parts // 2)[1], like=buf)
    fold.fold(buf, op, scratch)
    if fold.virtual_rank is not None:
        span = lambda first, last: span_bounds(n, parts, first, last)
        halve(buf, comm, op, fold, span, scratch, buf if source is None else source)
        double(buf, comm, fold, span)
    fold.unfold(buf)


def halve(buf, comm: Communicator, op: Op, fold: PowerOfTwoFold, span, scratch, mine) -> None:
    """Reduce-scatter by recursive halving among the fold's participants: afterwards virtual
    rank ``v`` holds its virtual chunk, ``span(v, v + 1)``, reduced.  ``span(first, last)``
    is the element range of virtual chunks ``first .. last − 1``; ``mine`` is where this
    rank's data is read in the first round (``buf``, or the caller's input)."""
    me, parts = fold.virtual_rank, fold.participants
    first, last = 0, parts  # the chunks this rank is responsible for
    mask = parts >> 1
    while mask:
        partner = me ^ mask
        middle = (first + last) // 2
        keep, give = ((first, middle), (middle, last)) if me < partner else (
            (middle, last), (first, middle))
        keep_lo, keep_hi = span(*keep)
        give_lo, give_hi = span(*give)
        received = scratch[: keep_hi - keep_lo]
        peer = fold.real_rank(partner)
        comm.sendrecv(mine[give_lo:give_hi], peer, received, peer)
        comm.reduce_local(op, buf[keep_lo:keep_hi], received, incoming_first=partner < me,
                          source=mine[keep_lo:keep_hi])
        first, last = keep
        mine = buf  # from the second round on, this rank's data is in buf
        mask >>= 1


def double(buf, comm: Communicator, fold: PowerOfTwoFold, span) -> None:
    """All-gather by recursive doubling: the rounds of :func:`halve` in reverse, each
    swapping the range gathered so far."""
    me, parts = fold.virtual_rank, fold.participants
    first, last, mask = me, me + 1, 1
    while mask < parts:
        partner = me ^ mask
        width = last - first
        theirs = (last, last + width) if me < partner else (first - width, first)
        mine_lo, mine_hi = span(first, last)
        their_lo, their_hi = span(*theirs)
        peer = fold.real_rank(partner)
        comm.sendrecv(buf[mine_lo:mine_hi], peer, buf[their_lo:their_hi], peer)
        first, last = min(first, theirs[0]), max(last, theirs[1])
        mask <<= 1


# -- the fast path: the same messages, from a schedule worked out once per size ---------------

def fast(buf, comm: Communicator, op: Op, *, source=None) -> None:
    """:func:`rabenseifner` with the index arithmetic of :func:`halve` and :func:`double`
    done once per (count, ranks, rank) and kept (:func:`schedule`): the same messages, the
    same reductions in the same order, the same bits (a test checks both against each other).
    This is what ``allreduce(..., algorithm="rabenseifner")`` runs."""
    fold = PowerOfTwoFold(comm)
    source = fold.take_input(buf, source)
    if comm.size == 1:
        return
    n = len(buf)
    halving, doubling, largest = schedule(n, comm.size, comm.rank)
    scratch = comm.scratch(n if fold.extra else largest, like=buf)
    fold.fold(buf, op, scratch)
    mine = buf if source is None else source
    sendrecv, reduce_local = comm.sendrecv, comm.reduce_local
    for peer, give_lo, give_hi, keep_lo, keep_hi, incoming_first in halving:
        received = scratch[: keep_hi - keep_lo]
        sendrecv(mine[give_lo:give_hi], peer, received, peer)
        reduce_local(op, buf[keep_lo:keep_hi], received, incoming_first=incoming_first,
                     source=mine[keep_lo:keep_hi])
        mine = buf
    for peer, mine_lo, mine_hi, their_lo, their_hi in doubling:
        sendrecv(buf[mine_lo:mine_hi], peer, buf[their_lo:their_hi], peer)
    fold.unfold(buf)


@functools.lru_cache(maxsize=256)
def schedule(n: int, size: int, rank: int) -> tuple[tuple, tuple, int]:
    """The steps :func:`halve` and :func:`double` take on ``rank`` of ``size`` for ``n``
    elements, as ``(peer, give_lo, give_hi, keep_lo, keep_hi, incoming_first)`` and
    ``(peer, mine_lo, mine_hi, their_lo, their_hi)``, and the largest range received while
    halving.  Empty for a rank that sits out of the fold."""
    fold = PowerOfTwoFold(SimpleNamespace(rank=rank, size=size))  # it reads only these two
    me, parts = fold.virtual_rank, fold.participants
    if me is None:
        return (), (), 0
    halving, doubling = [], []
    first, last, mask = 0, parts, parts >> 1
    while mask:
        partner = me ^ mask
        middle = (first + last) // 2
        keep, give = ((first, middle), (middle, last)) if me < partner else (
            (middle, last), (first, middle))
        halving.append((fold.real_rank(partner), *span_bounds(n, parts, *give),
                        *span_bounds(n, parts, *keep), partner < me))
        first, last = keep
        mask >>= 1
    first, last, mask = me, me + 1, 1
    while mask < parts:
        partner = me ^ mask
        width = last - first
        theirs = (last, last + width) if me < partner else (first - width, first)
        doubling.append((fold.real_rank(partner), *span_bounds(n, parts, first, last),
                         *span_bounds(n, parts, *theirs)))
        first, last = min(first, theirs[0]), max(last, theirs[1])
        mask <<= 1
    largest = max((step[4] - step[3] for step in halving), default=0)
    return tuple(halving), tuple(doubling), largest


# -- the two phases apart, with the ring's chunk ownership (allreduce.reduce_scatter) ----------

def _real_span(n: int, fold: PowerOfTwoFold):
    """Virtual chunk ``v`` as the real ranks' chunks it stands for, as MPICH's recursive
    halving reduce-scatter counts them (``reduce_scatter_intra_recursive_halving.c``):
    ranks ``2v`` and ``2v + 1`` for a participant that took a folded rank's data, rank
    ``v + extra`` otherwise."""
    def real(v: int) -> int:
        return 2 * v if v < fold.extra else v + fold.extra

    return lambda first, last: span_bounds(n, fold.comm.size, real(first),
                                           real(last - 1) + 1 + (last - 1 < fold.extra))


def reduce_scatter(buf, comm: Communicator, op: Op) -> tuple[int, int]:
    """Recursive-halving reduce-scatter in place: rank ``r`` ends with chunk ``r`` reduced,
    as the ring's (``chunk_bounds(n, p, r)``, returned).  Off a power of two, a
    participant that took a folded rank's data hands it its chunk back at the end."""
    fold, n, rank = PowerOfTwoFold(comm), len(buf), comm.rank
    mine = span_bounds(n, comm.size, rank, rank + 1)
    if comm.size == 1:
        return mine
    scratch = comm.scratch(n, like=buf)
    fold.fold(buf, op, scratch)
    if fold.virtual_rank is not None:
        halve(buf, comm, op, fold, _real_span(n, fold), scratch, buf)
    if rank < 2 * fold.extra:  # the pair's even rank gets its chunk from the odd one
        lo, hi = span_bounds(n, comm.size, rank - rank % 2, rank - rank % 2 + 1)
        comm.send(buf[lo:hi], rank - 1) if rank % 2 else comm.recv(buf[lo:hi], rank + 1)
    return mine


def allgather(buf, comm: Communicator) -> None:
    """Recursive-doubling all-gather in place: rank ``r`` starts with chunk ``r`` (as
    :func:`reduce_scatter` leaves it) and ends with all of them."""
    fold, n, rank = PowerOfTwoFold(comm), len(buf), comm.rank
    if rank < 2 * fold.extra:  # the even rank's chunk joins the odd one's
        lo, hi = span_bounds(n, comm.size, rank - rank % 2, rank - rank % 2 + 1)
        comm.send(buf[lo:hi], rank + 1) if rank % 2 == 0 else comm.recv(buf[lo:hi], rank - 1)
    if fold.virtual_rank is not None:
        double(buf, comm, fold, _real_span(n, fold))
    fold.unfold(buf)
