"""2D (torus) ring allreduce: a ring reduce-scatter along each row of a grid, a ring
allreduce of the owned shard down each column, a ring all-gather along the rows.

Taught in the chapter "Beyond one flat ring".  The ``p`` ranks form the grid
:func:`allreduce.topology.grid` gives: ``R`` rows of ``C`` consecutive ranks, as square as
``p`` allows.  This is the hierarchical allreduce (:mod:`.hierarchical`) with the rows as
its "nodes" and a ring across them, written once there.  How it degrades: a prime ``p`` is
one row, and the 2D ring is then the flat ring; a ``p`` with only small divisors (2·q for a
prime q) is a thin grid with little gain.  Mikami et al. (2018) used it across 3,456 GPUs.

Cost (:data:`COST`): 2(C−1)+2(R−1) steps instead of the flat ring's 2(p−1), the ring's
bytes 2·(p−1)/p·n: about 4√p steps on a square grid.
"""

from __future__ import annotations

from ..comm import Communicator
from ..cost import Formula, Levels
from ..ops import Op
from ..topology import grid
from . import hierarchical

#: Rows then columns; n/C bytes go down the columns.
COST = Formula(steps="2*(C - 1) + 2*(R - 1)", bytes="2*(C - 1)/C*n + 2*(R - 1)/R*n/C",
               reduced="(C - 1)/C*n + (R - 1)/R*n/C")

_ROWS = ("2*(C - 1)", "2*(C - 1)/C*n", "(C - 1)/C*n")
_COLUMNS = ("2*(R - 1)", "2*(R - 1)/R*n/C", "(R - 1)/R*n/C")
_ROW_INSIDE = "(N == 1 or k % C == 0)"  # every row within one node
#: On nodes of k ranks (node-major): a row ring runs inside a node when C divides k, and a
#: column ring crosses nodes as soon as there are two (one slow link slows every step).
LEVELS = Levels(
    Formula(*(f"{_ROW_INSIDE}*({r}) + (N == 1)*({c})" for r, c in zip(_ROWS, _COLUMNS))),
    Formula(*(f"(not {_ROW_INSIDE})*({r}) + (N > 1)*({c})" for r, c in zip(_ROWS, _COLUMNS))))


def reduce_scatter(buf, comm: Communicator, op: Op) -> tuple[int, int]:
    """The 2D ring's reduce-scatter (rows, then columns), with the ring's ownership."""
    return hierarchical.reduce_scatter(buf, comm, op, ranks_per_node=grid(comm.size)[1])


def allgather(buf, comm: Communicator) -> None:
    """The 2D ring's all-gather (columns, then rows), with the ring's ownership."""
    hierarchical.allgather(buf, comm, ranks_per_node=grid(comm.size)[1])


def torus(buf, comm: Communicator, op: Op, *, source=None) -> None:
    """2D ring allreduce in place (of ``source`` into ``buf`` when given)."""
    hierarchical.hierarchical(buf, comm, op, ranks_per_node=grid(comm.size)[1], inner="ring",
                              source=source)
