"""Where the ranks sit: nodes (machines) and grids (chapter "Beyond one flat ring").

A :class:`Layout` says which node each rank runs on.  The hierarchical allreduce
(:mod:`allreduce.algorithms.hierarchical`) splits a communicator by it twice: into one
group per **node**, and into **columns**, the ranks with the same place (local rank) on
their nodes, one per node.  :func:`grid` lays ``p`` ranks out as the rows and columns of
the 2D (torus) ring.  The cost model (:class:`allreduce.cost.Network`) reads the same
layouts, so a formula and the code that it describes agree on who sits where.

Nothing here communicates: a layout is plain data that every rank computes alike.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property


def grid(p: int) -> tuple[int, int]:
    """The 2D ring's ``(rows, columns)`` for ``p`` ranks: ``rows`` is the largest divisor
    of ``p`` not above √p, so the grid is as square as ``p`` allows and ``rows ≤ columns``;
    rank ``r`` sits in row ``r // columns``.  A prime ``p`` gives one row of ``p``: the 2D
    ring is then the flat ring.

    >>> [grid(p) for p in (1, 4, 6, 7, 12, 16)]
    [(1, 1), (2, 2), (2, 3), (1, 7), (3, 4), (4, 4)]
    """
    if p < 1:
        raise ValueError(f"a grid needs at least one rank, got {p}")
    rows = max(d for d in range(1, math.isqrt(p) + 1) if p % d == 0)
    return rows, p // rows


@dataclass(frozen=True)
class Layout:
    """The node of every rank, as node indices ``0 .. N−1`` numbered in order of first
    appearance (so ``Layout.of([7, 7, 3])`` is ``(0, 0, 1)``).  A rank's **local rank** is
    its place among its node's ranks, in rank order."""

    node_of: tuple[int, ...]

    @classmethod
    def of(cls, ids: Sequence) -> Layout:
        """The layout in which ranks with equal ``ids`` (any hashable values) share a node."""
        numbers: dict = {}
        return cls(tuple(numbers.setdefault(i, len(numbers)) for i in ids))

    @classmethod
    def per_node(cls, size: int, ranks_per_node: int) -> Layout:
        """``ranks_per_node`` consecutive ranks on each node (node-major, as ``mpiexec``
        places them); the last node holds the rest when ``size`` is not a multiple."""
        return cls(tuple(rank // ranks_per_node for rank in range(size)))

    @property
    def size(self) -> int:
        return len(self.node_of)

    @cached_property
    def members(self) -> tuple[tuple[int, ...], ...]:
        """Each node's ranks, in rank order."""
        nodes: list[list[int]] = [[] for _ in range(max(self.node_of, default=-1) + 1)]
        for rank, node in enumerate(self.node_of):
            nodes[node].append(rank)
        return tuple(map(tuple, nodes))

    @property
    def nodes(self) -> int:
        """N, the number of nodes."""
        return len(self.members)

    @property
    def largest(self) -> int:
        """The number of ranks on the fullest node."""
        return max(map(len, self.members), default=0)

    @property
    def smallest(self) -> int:
        """s, the number of ranks on the emptiest node: the number of **columns**, since
        every column has one rank on every node."""
        return min(map(len, self.members), default=0)

    def local_rank(self, rank: int) -> int:
        return self.members[self.node_of[rank]].index(rank)

    def node_colors(self) -> tuple[int, ...]:
        """Colours for :meth:`~allreduce.comm.Communicator.split` into one group per node."""
        return self.node_of

    def column_colors(self) -> tuple[int, ...]:
        """Colours that split into the ``s`` columns (local rank ``j < s`` on every node);
        a rank beyond them on a fuller node gets a colour of its own and owns no shard."""
        s = self.smallest
        return tuple(local if (local := self.local_rank(r)) < s else s + r
                     for r in range(self.size))
