"""Hierarchical allreduce: reduce-scatter inside each node, allreduce of the owned shard
across nodes, all-gather inside the node.

Taught in the chapter "Beyond one flat ring".  The communicator is split twice by its
:class:`~allreduce.topology.Layout`: into one group per **node**, and into ``s``
**columns**, the ranks with local rank ``j`` on every node (``s``, the smallest node's
ranks).  Then

1. a ring reduce-scatter inside each node leaves local rank ``j < s`` holding shard ``j``
   (``n/s`` bytes) summed over its node;
2. each column allreduces its shard across the nodes with the ``inner`` algorithm (any of
   the library's; ``auto`` by default), so only ``n/s`` bytes per rank leave a node;
3. a ring all-gather inside each node hands every rank the whole result.

On nodes of different sizes a rank beyond the smallest node's ``s`` owns an empty shard: it
takes part in its node's rings and sits out step 2.  Where the nodes come from: the
``nodes`` given (one id per rank), or ``ranks_per_node`` consecutive ranks, or else the
communicator's own (:meth:`~allreduce.comm.Communicator.nodes`: ``COMM_TYPE_SHARED`` under
MPI, the torchrun agent under torch.distributed).

Cost (:data:`COST`), with the largest node's ``K`` ranks and ``N`` nodes:
2(K−1)·α + 2(K−1)/s·n·β + (K−1)/s·n·γ inside the nodes, plus the inner algorithm's own
cost on ``N`` ranks and ``n/s`` bytes between them.  The 2D ring (:mod:`.torus`) is this
with the grid's rows as nodes and a ring across them.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..comm import Communicator
from ..cost import FORMULAS, Formula, Terms
from ..ops import Op
from ..topology import Layout
from . import ring
from ._schedule import chunk_bounds


def layout(comm: Communicator, ranks_per_node: int | None = None,
           nodes: Sequence | None = None) -> Layout:
    """The nodes a hierarchical call uses: ``nodes``, else ``ranks_per_node`` to a node,
    else the communicator's own (collective the first time)."""
    if nodes is not None:
        return Layout.of(nodes)
    if ranks_per_node is not None:
        return Layout.per_node(comm.size, ranks_per_node)
    return Layout.of(comm.nodes())


def shards(n: int, s: int, ranks: int) -> list[tuple[int, int]]:
    """A node's ring parts: ``chunk_bounds(n, s, j)`` for its first ``s`` local ranks, an
    empty range for the rest."""
    return [chunk_bounds(n, s, j) if j < s else (n, n) for j in range(ranks)]


def hierarchical(buf, comm: Communicator, op: Op, *, ranks_per_node: int | None = None,
                 nodes: Sequence | None = None, inner: str = "auto", source=None) -> None:
    """Hierarchical allreduce in place (of ``source`` into ``buf`` when given: the node's
    reduce-scatter reads it, as the ring's does)."""
    from . import REGISTRY  # the inner algorithm, by name (this module is one of them)

    where = layout(comm, ranks_per_node, nodes)
    node, column = comm.split(where.node_colors()), comm.split(where.column_colors())
    parts = shards(len(buf), where.smallest, node.size)
    lo, hi = ring.reduce_scatter(buf, node, op, source=source, parts=parts)
    if hi > lo and column.size > 1:
        REGISTRY[inner](buf[lo:hi], column, op)
    ring.allgather(buf, node, parts=parts)


# -- the two phases apart, with the ring's chunk ownership (allreduce.reduce_scatter) ----------

class Packing:
    """Where each rank's chunk ``chunk_bounds(n, p, r)`` goes in a packed copy of the buffer
    in which every column's chunks lie together, node by node: so that the node's ring and
    the column's ring each work on contiguous parts.  The **holder** of column ``j`` on a
    node is its local rank ``j``; a rank beyond the smallest node's ``s`` is held by local
    rank ``local mod s`` of its node, which hands it its chunk."""

    def __init__(self, where: Layout, n: int, rank: int):
        s, self.where = where.smallest, where
        self.held = {}  # holder → the ranks whose chunks it holds (itself first)
        for node in where.members:
            for local, member in enumerate(node):
                self.held.setdefault(node[local % s], []).append(member)
        self.at, at = {}, 0  # rank → its chunk's range in the packed buffer
        self.columns = []  # column j's range in the packed buffer
        for j in range(s):
            start = at
            for node in where.members:
                for member in self.held[node[j]]:
                    lo, hi = chunk_bounds(n, where.size, member)
                    self.at[member] = (at, at + hi - lo)
                    at += hi - lo
            self.columns.append((start, at))
        self.n, self.rank = n, rank

    def node_parts(self) -> list[tuple[int, int]]:
        """This rank's node's ring parts: column ``j`` for local rank ``j < s``."""
        size = len(self.where.members[self.where.node_of[self.rank]])
        return [self.columns[j] if j < len(self.columns) else (self.n, self.n)
                for j in range(size)]

    def column_parts(self, column: Communicator) -> list[tuple[int, int]]:
        """The column's ring parts, relative to the column's range: each holder's chunks."""
        j = self.where.local_rank(self.rank)
        holders = [node[j] for node in self.where.members]
        start = self.columns[j][0]
        spans = {h: (self.at[self.held[h][0]][0] - start, self.at[self.held[h][-1]][1] - start)
                 for h in holders}
        return [spans[h] for h in sorted(holders)]


def _phases(buf, comm: Communicator, ranks_per_node, nodes):
    where = layout(comm, ranks_per_node, nodes)
    node, column = comm.split(where.node_colors()), comm.split(where.column_colors())
    return Packing(where, len(buf), comm.rank), node, column, comm.empty(len(buf), like=buf)


def reduce_scatter(buf, comm: Communicator, op: Op, *, ranks_per_node: int | None = None,
                   nodes: Sequence | None = None) -> tuple[int, int]:
    """Hierarchical reduce-scatter in place: rank ``r`` ends with chunk ``r`` reduced, as the
    ring's (``chunk_bounds(n, p, r)``, returned); the rest of ``buf`` is left as it was.
    The node's ring, then the column's ring on the node's result, then each holder hands
    the ranks it holds their chunks."""
    packing, node, column, packed = _phases(buf, comm, ranks_per_node, nodes)
    for member, (lo, hi) in packing.at.items():
        comm.copy(packed[lo:hi], buf[slice(*chunk_bounds(len(buf), comm.size, member))])
    lo, hi = ring.reduce_scatter(packed, node, op, parts=packing.node_parts())
    if hi > lo:
        ring.reduce_scatter(packed[lo:hi], column, op, parts=packing.column_parts(column))
    _hand_over(packing, node, buf, packed, to_holder=False)
    return chunk_bounds(len(buf), comm.size, comm.rank)


def allgather(buf, comm: Communicator, *, ranks_per_node: int | None = None,
              nodes: Sequence | None = None) -> None:
    """Hierarchical all-gather in place: rank ``r`` starts with chunk ``r`` (as
    :func:`reduce_scatter` leaves it) and ends with all of them."""
    packing, node, column, packed = _phases(buf, comm, ranks_per_node, nodes)
    _hand_over(packing, node, buf, packed, to_holder=True)
    lo, hi = packing.node_parts()[node.rank]
    if hi > lo:
        ring.allgather(packed[lo:hi], column, parts=packing.column_parts(column))
    ring.allgather(packed, node, parts=packing.node_parts())
    for member, (lo, hi) in packing.at.items():
        comm.copy(buf[slice(*chunk_bounds(len(buf), comm.size, member))], packed[lo:hi])


def _hand_over(packing: Packing, node: Communicator, buf, packed, *, to_holder: bool) -> None:
    """Inside each node, every rank's own chunk between ``buf`` and the packed buffer of
    the rank that holds it: towards the holder (``to_holder``) or back from it."""
    where, me = packing.where, packing.rank
    mine = buf[slice(*chunk_bounds(len(buf), where.size, me))]
    if me not in packing.held:  # beyond the smallest node's ranks: held by another
        holder = where.local_rank(me) % where.smallest
        node.send(mine, holder) if to_holder else node.recv(mine, holder)
        return
    for member in packing.held[me]:  # itself first, then the ranks it holds
        held = packed[slice(*packing.at[member])]
        if member == me:
            node.copy(*((held, mine) if to_holder else (mine, held)))
        elif to_holder:
            node.recv(held, where.local_rank(member))
        else:
            node.send(held, where.local_rank(member))


class Hierarchy:
    """The hierarchical allreduce's cost: the node's two ring phases (a :class:`Formula` in
    ``K``, ``s`` and ``n``) plus the ``inner`` algorithm's own formula on ``N`` ranks and
    ``n/s`` bytes.  It answers as a :class:`~allreduce.cost.Formula` does (:meth:`terms`,
    :meth:`latex`) and as :class:`~allreduce.cost.Levels` do (:meth:`split`: the node's
    phases inside, the inner algorithm's between nodes).  ``inner`` defaults to the ring;
    ``auto`` must be resolved first."""

    local = Formula(steps="2*(K - 1)", bytes="2*(K - 1)/s*n", reduced="(K - 1)/s*n")
    #: The node's ``s`` column ranks all send their shards across at once.
    crossing = "s"

    def _shape(self, p: int, ranks_per_node=None, nodes=None) -> tuple[int, int, int]:
        where = Layout.of(nodes) if nodes is not None else Layout.per_node(
            p, ranks_per_node or p)
        return where.largest, where.nodes, where.smallest

    def split(self, p: int, n: float, k: int | None = None, whole=None, *,
              ranks_per_node: int | None = None, nodes: Sequence | None = None,
              inner: str = "ring") -> tuple[Terms, Terms]:
        """``(inside the nodes, between them)`` for ``n`` bytes on ``p`` ranks."""
        largest, count, smallest = self._shape(p, ranks_per_node or k, nodes)
        if inner not in FORMULAS or inner == "hierarchical":
            raise ValueError(f"no cost formula for the inner algorithm {inner!r}")
        names = {"K": largest, "s": smallest, "n": n}
        local = Terms(*(float(eval(e, {"__builtins__": {}}, names))
                        for e in (self.local.steps, self.local.bytes, self.local.reduced)))
        return local, FORMULAS[inner].terms(count, n / smallest)

    def terms(self, p: int, n: float, **options) -> Terms:
        """The whole critical path: the sum of the two levels."""
        inside, between = self.split(p, n, **options)
        return inside + between

    def is_exact(self, p: int, k: int) -> bool:
        return True

    def latex(self, name: str = "", **options) -> str:
        left = f"T_\\text{{{name}}} = " if name else ""
        return (left + r"2(K-1)\,\alpha + \frac{2(K-1)}{s}\,n\,\beta + \frac{K-1}{s}\,n\,\gamma"
                r" + T_\text{inner}\!\left(N, \tfrac{n}{s}\right)")


COST = Hierarchy()
