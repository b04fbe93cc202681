"""Parameter-server allreduce: workers push to servers, servers reduce, workers pull.

Taught in the chapter "Parameter server".  The buffer is split into ``servers`` shards and
rank ``s < servers`` serves shard ``s``; every rank is also a worker.  Push: each worker
sends shard ``s`` to server ``s``, which reduces the ``p`` contributions.  Pull: each server
sends its reduced shard back to every worker.  Transfers follow a shift schedule (in turn
``k``, rank ``r`` sends to ``r + k`` and receives from ``r - k``), so with one shard per rank
no server is sent two messages in one step.

Cost with S servers (:data:`COST`): a server receives p−1 shards of n/S, then sends p−1,
so 2(p−1)·α + 2(p−1)·(n/S)·β + (p−1)·(n/S)·γ (its own pushes to the other servers travel
on its send port while its receive port is busy).  With one server that is the bottleneck the
chapter measures; with S = p it is the bandwidth of the ring in p−1 steps per phase.
"""

from __future__ import annotations

from ..comm import Communicator
from ..cost import Formula
from ..ops import Op
from ._schedule import chunk_bounds

def _cost(default_servers: str) -> Formula:
    return Formula(steps="2*(p - 1)", bytes="2*(p - 1)*n/S", reduced="(p - 1)*n/S",
                   options=(("servers", "S", default_servers),))


COST = _cost("1")
#: The same, with one shard per rank unless ``servers`` says otherwise.
SHARDED_COST = _cost("p")


def parameter_server(buf, comm: Communicator, op: Op, servers: int = 1) -> None:
    """Parameter-server allreduce in place, with ``servers`` shards on ranks 0..servers−1."""
    p, rank, n = comm.size, comm.rank, len(buf)
    if p == 1:
        return

    def shard(server: int):
        lo, hi = chunk_bounds(n, servers, server)
        return buf[lo:hi]

    # push, in turns: in turn k my shard of server r + k leaves while, as a server, I reduce
    # what rank r − k sends me (a turn's send and receive progress together, as NCCL needs)
    if rank < servers:
        mine = shard(rank)
        incoming = comm.scratch(len(mine), like=buf)
    for k in range(1, p):
        server = (rank + k) % p
        push = comm.isend(shard(server), server) if server < servers else None
        if rank < servers:
            comm.recv(incoming, (rank - k) % p)
            comm.reduce_local(op, mine, incoming)
        if push is not None:
            comm.wait(push)
    # pull: every server sends its reduced shard back to every worker
    requests = [comm.irecv(shard(s), s) for k in range(1, p) if (s := (rank - k) % p) < servers]
    if rank < servers:
        requests += [comm.isend(shard(rank), (rank + k) % p) for k in range(1, p)]
    comm.waitall(requests)


def sharded_parameter_server(buf, comm: Communicator, op: Op, servers: int | None = None) -> None:
    """Parameter server with the parameters sharded over ``servers`` ranks (all by default)."""
    parameter_server(buf, comm, op, servers=comm.size if servers is None else servers)
