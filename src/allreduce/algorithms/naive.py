"""Naive allreduce: every rank sends its whole buffer to every other rank.

Taught in the chapter "Naive allreduce".  After one all-to-all exchange each rank holds all
``p`` buffers and reduces them itself, in rank order, so every rank computes the same bits.
Rank ``r`` sends to ``r + k`` and receives from ``r - k`` in turn ``k`` (a shift schedule),
so no rank is sent two messages in one step.

Cost (:data:`COST`): (p−1)·α + (p−1)·n·β + (p−1)·n·γ, and p(p−1)·n bytes over the network
in total: every byte crosses the network p−1 times.
"""

from __future__ import annotations

from ..comm import Communicator
from ..cost import Formula
from ..ops import Op

COST = Formula(steps="p - 1", bytes="(p - 1)*n", reduced="(p - 1)*n")


def naive(buf, comm: Communicator, op: Op) -> None:
    """All-to-all allreduce in place."""
    p, rank, n = comm.size, comm.rank, len(buf)
    if p == 1:
        return
    everyone = [buf if r == rank else comm.empty(n, like=buf) for r in range(p)]
    requests = []
    for k in range(1, p):  # in turn k, send to rank + k and receive from rank - k
        requests.append(comm.irecv(everyone[(rank - k) % p], (rank - k) % p))
        requests.append(comm.isend(buf, (rank + k) % p))
    comm.waitall(requests)
    total = comm.empty(n, like=buf)
    comm.copy(total, everyone[0])
    for r in range(1, p):  # in rank order, so that every rank computes the same bits
        comm.reduce_local(op, total, everyone[r])
    comm.copy(buf, total)
