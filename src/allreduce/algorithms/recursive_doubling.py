"""Recursive-doubling allreduce.

Taught in the chapter "Tree allreduce".  In round ``k`` every rank swaps its whole buffer
with the rank whose bit ``k`` differs and reduces: after lg p rounds every rank has the
total.  A number of ranks that is not a power of two is first folded onto one
(:class:`~allreduce.algorithms._schedule.PowerOfTwoFold`), at two extra steps.

Cost (:data:`COST`): lg p·α + lg p·n·(β + γ) for a power of two (Thakur, Rabenseifner &
Gropp 2005); folded, lg q rounds plus two steps of n bytes and one reduction of n.  The
fewest steps of any algorithm here for a power of two, and lg p·n bytes per rank: the
choice for tiny messages.
"""

from __future__ import annotations

from ..comm import Communicator
from ..cost import Formula, Levels
from ..ops import Op
from ._schedule import PowerOfTwoFold

COST = Formula(steps="lg(q) + 2*f", bytes="lg(q)*n + 2*f*n", reduced="lg(q)*n + f*n")

#: On N nodes of k ranks, both powers of two, node-major: the first lg k rounds (partners
#: 1 .. k/2 apart) stay inside a node, the last lg N cross (chapter "Beyond one flat ring").
LEVELS = Levels(Formula(steps="lg(k)", bytes="lg(k)*n", reduced="lg(p)*n"),
                Formula(steps="lg(N)", bytes="lg(N)*n", reduced="0"),
                exact="f == 0 and k & (k - 1) == 0")


def recursive_doubling(buf, comm: Communicator, op: Op, *, source=None) -> None:
    """Recursive-doubling allreduce in place (of ``source`` into ``buf`` when ``source`` is
    given: the first round sends ``source`` and writes ``source ⊕ incoming`` into ``buf``,
    which saves copying the input into ``buf`` first)."""
    fold = PowerOfTwoFold(comm)
    source = fold.take_input(buf, source)
    if comm.size == 1:
        return
    scratch = comm.scratch(len(buf), like=buf)
    fold.fold(buf, op, scratch)
    me = fold.virtual_rank
    mine = buf if source is None else source
    if me is not None:
        mask = 1
        while mask < fold.participants:
            partner = me ^ mask
            comm.sendrecv(mine, fold.real_rank(partner), scratch, fold.real_rank(partner))
            # both partners compute lower ⊕ upper, so every rank ends with the same bits
            comm.reduce_local(op, buf, scratch, incoming_first=partner < me, source=mine)
            mine = buf  # from the second round on, this rank's data is in buf
            mask <<= 1
    fold.unfold(buf)
