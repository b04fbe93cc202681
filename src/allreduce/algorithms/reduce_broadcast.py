"""Reduce-then-broadcast allreduce: the "single master" of the textbooks.

Taught in the chapter "Naive allreduce".  Every rank sends its buffer to rank 0, which
reduces them one after another (:func:`reduce`); rank 0 then sends the result to every
rank, one after another (:func:`broadcast`).  Everything passes through one rank, whose
link carries 2(p−1)·n elements.

Cost (:data:`COST`): 2(p−1)·α + 2(p−1)·n·β + (p−1)·n·γ.
"""

from __future__ import annotations

from ..comm import Communicator
from ..cost import Formula
from ..ops import Op

ROOT = 0

COST = Formula(steps="2*(p - 1)", bytes="2*(p - 1)*n", reduced="(p - 1)*n")


def reduce(buf, comm: Communicator, op: Op, scratch) -> None:
    """Linear reduce to rank 0: it receives from ranks 1, 2, …, p−1 in turn."""
    if comm.rank != ROOT:
        comm.send(buf, ROOT)
        return
    for source in range(1, comm.size):
        comm.recv(scratch, source)
        comm.reduce_local(op, buf, scratch)


def broadcast(buf, comm: Communicator) -> None:
    """Linear broadcast from rank 0: it sends to ranks 1, 2, …, p−1 in turn."""
    if comm.rank != ROOT:
        comm.recv(buf, ROOT)
        return
    for dest in range(1, comm.size):
        comm.send(buf, dest)


def reduce_broadcast(buf, comm: Communicator, op: Op) -> None:
    """Reduce to rank 0, then broadcast from it, in place."""
    if comm.size > 1:
        reduce(buf, comm, op, comm.scratch(len(buf), like=buf))
        broadcast(buf, comm)
