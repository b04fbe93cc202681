"""Tree allreduce: a binomial-tree reduce to rank 0, then a binomial-tree broadcast.

Taught in the chapter "Tree allreduce".  In round ``k`` of the reduce, every rank whose bit
``k`` is set sends its partial result to the rank with that bit cleared and drops out; after
⌈lg p⌉ rounds rank 0 holds the total.  The broadcast runs the same tree backwards.

Cost (:data:`COST`): 2·⌈lg p⌉·α + 2·⌈lg p⌉·n·β + ⌈lg p⌉·n·γ: rank 0 receives ⌈lg p⌉
buffers, one a round, then sends ⌈lg p⌉.  Few steps, so it wins on small messages; every
step carries the whole buffer, so it loses on large ones.
"""

from __future__ import annotations

from ..comm import Communicator
from ..cost import Formula
from ..ops import Op

COST = Formula(steps="2*clg(p)", bytes="2*clg(p)*n", reduced="clg(p)*n")


def binomial_reduce(buf, comm: Communicator, op: Op, scratch) -> None:
    """Reduce every rank's ``buf`` into rank 0's ``buf``, combining in rank order."""
    rank, mask = comm.rank, 1
    while mask < comm.size:
        if rank & mask:
            comm.send(buf, rank - mask)
            return
        child = rank | mask
        if child < comm.size:
            comm.recv(scratch, child)
            comm.reduce_local(op, buf, scratch)
        mask <<= 1


def binomial_broadcast(buf, comm: Communicator) -> None:
    """Copy rank 0's ``buf`` to every rank along the same binomial tree."""
    rank, mask = comm.rank, 1
    while mask < comm.size:  # a rank receives from its parent at its lowest set bit
        if rank & mask:
            comm.recv(buf, rank - mask)
            break
        mask <<= 1
    mask >>= 1
    while mask:
        if rank + mask < comm.size:
            comm.send(buf, rank + mask)
        mask >>= 1


def tree(buf, comm: Communicator, op: Op) -> None:
    """Binomial-tree allreduce in place."""
    if comm.size > 1:
        binomial_reduce(buf, comm, op, comm.scratch(len(buf), like=buf))
        binomial_broadcast(buf, comm)
