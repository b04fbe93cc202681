"""Bidirectional ring allreduce: two rings at once, in opposite directions, each on half of
the buffer.

Taught in the chapter "Beyond one flat ring".  The first half goes round the ring as in
:mod:`~allreduce.algorithms.ring` (rank ``r`` sends to ``r + 1``); the second half goes
the other way (to ``r − 1``), so each step every rank sends two messages of ``n/(2p)``
bytes, one to each neighbour, and receives two.  Each link of the ring then carries data in
both directions, where a single ring leaves one direction idle.  (NCCL, likewise, runs
several rings at once, its "channels", each on part of the buffer.)

Cost (:data:`COST`): 4(p−1)·α + 2·(p−1)/p·n·β + (p−1)/p·n·γ when a rank has **one** port,
as the α-β model assumes: its two messages of a step leave one after the other, so the
two rings move the ring's bytes in twice its messages.  It pays where each link is a port
of its own (NVLink, a torus), which ``Trace.critical_path(ports="link")`` replays: there
the β term halves, (p−1)/p·n.
"""

from __future__ import annotations

from ..comm import Communicator
from ..cost import Formula, Levels
from ..ops import Op
from ._schedule import chunk_bounds, left, right

#: Two messages of n/(2p) per step, one to each neighbour; the ring's bytes and steps.
COST = Formula(steps="4*(p - 1)", bytes="2*(p - 1)/p*n", reduced="(p - 1)/p*n")
#: On several nodes: an upper bound (each step's two messages, one over the slow link).
#: A node's two ends each send half a chunk across a step: n/p through a shared card, as
#: through one rank's port.
LEVELS = Levels.flat(COST, crossing="1")


def bidirectional_ring(buf, comm: Communicator, op: Op) -> None:
    """Bidirectional ring allreduce in place."""
    p, rank, n = comm.size, comm.rank, len(buf)
    if p == 1:
        return
    half = -(-n // 2)
    # the first half clockwise (rank r is itself), the second counter-clockwise: there rank
    # r plays rank −r of a clockwise ring, so the same chunk arithmetic serves both
    rings = [(buf[:half], rank, right(comm), left(comm)),
             (buf[half:], (-rank) % p, left(comm), right(comm))]
    largest = -(-half // p)
    scratch = comm.scratch(2 * largest, like=buf)
    for shift in (1, 0):  # the reduce-scatter's p − 1 steps, then the all-gather's
        for step in range(p - 1):
            requests, reductions = [], []
            for tag, (part, me, to, frm) in enumerate(rings):
                send_lo, send_hi = chunk_bounds(len(part), p, (me - step - shift) % p)
                recv_lo, recv_hi = chunk_bounds(len(part), p, (me - step - shift - 1) % p)
                target = part[recv_lo:recv_hi]
                if shift:  # reduce-scatter: receive aside, then add
                    target = scratch[tag * largest:tag * largest + recv_hi - recv_lo]
                    reductions.append((part[recv_lo:recv_hi], target))
                requests += [comm.irecv(target, frm, tag),
                             comm.isend(part[send_lo:send_hi], to, tag)]
            comm.waitall(requests)
            for mine, received in reductions:
                comm.reduce_local(op, mine, received)
