"""Ring allreduce: a ring reduce-scatter followed by a ring all-gather.

Taught in the chapter "Ring allreduce".  The buffer is cut into ``p`` chunks (uneven when
``p`` does not divide ``n``: see :func:`~allreduce.algorithms._schedule.chunk_bounds`).  In
each of ``p - 1`` reduce-scatter steps every rank sends one chunk to its right neighbour and
adds the chunk it receives from its left neighbour; afterwards rank ``r`` holds chunk ``r``
fully reduced.  ``p - 1`` all-gather steps then pass the finished chunks around the ring.

Cost (:data:`COST`): 2(p−1)·α + 2·(p−1)/p·n·β + (p−1)/p·n·γ, which meets the bandwidth
lower bound 2·(p−1)/p·n·β for allreduce (Patarasuk & Yuan 2009).
"""

from __future__ import annotations

from collections.abc import Sequence

from ..comm import Communicator
from ..cost import Formula, Levels
from ..ops import Op
from ._schedule import chunk_bounds, left, right

#: Each step sends n/p bytes and receives n/p; p−1 steps of each phase.
COST = Formula(steps="2*(p - 1)", bytes="2*(p - 1)/p*n", reduced="(p - 1)/p*n")
#: On several nodes every step is charged the link between them (chapter "Beyond one flat
#: ring"): the rank after that link receives over it in every step, and the others wait.
LEVELS = Levels.flat(COST, exact="True", crossing="1")  # one rank of a node sends across


def reduce_scatter(buf, comm: Communicator, op: Op, *, source=None,
                   parts: Sequence[tuple[int, int]] | None = None) -> tuple[int, int]:
    """Ring reduce-scatter in place: afterwards ``buf[lo:hi]`` on rank ``r`` holds chunk
    ``r`` reduced over all ranks, and ``(lo, hi)`` is returned.  Other chunks hold partial
    results.

    With ``source``, the input is read from ``source`` instead of ``buf``: each chunk this
    rank reduces is touched once, so ``source (op) incoming`` can be written straight into
    ``buf``, and the first chunk sent is still the input.  That saves copying the input
    into ``buf`` (a pass over n bytes) before starting.  ``buf``'s chunk ``r − 1`` is then
    left unwritten, for the all-gather to fill.

    ``parts`` gives each rank's chunk as an element range, instead of ``chunk_bounds``'s
    nearly equal ones: the hierarchical allreduce's chunks (chapter "Beyond one flat ring")."""
    p, rank, n = comm.size, comm.rank, len(buf)
    part = _parts(n, p, parts)
    mine = buf if source is None else source
    if p > 1:
        incoming = comm.scratch(max(hi - lo for lo, hi in map(part, range(p))), like=buf)
        for step in range(p - 1):
            send_lo, send_hi = part((rank - step - 1) % p)
            recv_lo, recv_hi = part((rank - step - 2) % p)
            received = incoming[: recv_hi - recv_lo]
            sent = (mine if step == 0 else buf)[send_lo:send_hi]
            comm.sendrecv(sent, right(comm), received, left(comm))
            comm.reduce_local(op, buf[recv_lo:recv_hi], received, source=mine[recv_lo:recv_hi])
    elif source is not None:
        comm.copy(buf, source)
    return part(rank)


def _parts(n: int, p: int, parts: Sequence[tuple[int, int]] | None):
    """Chunk ``c``'s element range: ``parts[c]`` when given, else ``chunk_bounds``."""
    if parts is None:
        return lambda c: chunk_bounds(n, p, c)
    if len(parts) != p:
        raise ValueError(f"the ring needs one part per rank ({p}), got {len(parts)}")
    return parts.__getitem__


def taught_reduce_scatter(buf, comm: Communicator, op: Op) -> tuple[int, int]:
    """The ring reduce-scatter as the chapter "Ring allreduce" shows it: :func:`reduce_scatter`
    without its two speed-ups (reading the input from ``source=``, and a scratch buffer kept
    from call to call).  The test suite checks that both give the same bits."""
    p, rank, n = comm.size, comm.rank, len(buf)
    incoming = comm.empty(-(-n // p), like=buf)  # room for the largest chunk
    for step in range(p - 1):
        send_lo, send_hi = chunk_bounds(n, p, (rank - step - 1) % p)
        recv_lo, recv_hi = chunk_bounds(n, p, (rank - step - 2) % p)
        received = incoming[: recv_hi - recv_lo]
        comm.sendrecv(buf[send_lo:send_hi], right(comm), received, left(comm))
        comm.reduce_local(op, buf[recv_lo:recv_hi], received)
    return chunk_bounds(n, p, rank)


def allgather(buf, comm: Communicator, *, parts: Sequence[tuple[int, int]] | None = None) -> None:
    """Ring all-gather in place: rank ``r`` starts with chunk ``r`` and ends with all of them
    (``parts`` as in :func:`reduce_scatter`)."""
    p, rank, n = comm.size, comm.rank, len(buf)
    part = _parts(n, p, parts)
    for step in range(p - 1):
        send_lo, send_hi = part((rank - step) % p)
        recv_lo, recv_hi = part((rank - step - 1) % p)
        comm.sendrecv(buf[send_lo:send_hi], right(comm), buf[recv_lo:recv_hi], left(comm))


def ring(buf, comm: Communicator, op: Op, *, source=None) -> None:
    """Ring allreduce in place (of ``source`` into ``buf`` when ``source`` is given):
    :func:`reduce_scatter`, then :func:`allgather`."""
    reduce_scatter(buf, comm, op, source=source)
    allgather(buf, comm)
