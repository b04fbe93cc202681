"""Recursive-doubling allreduce.

Taught in the chapter "Tree allreduce".  In round ``k`` every rank swaps its whole buffer
with the rank whose bit ``k`` differs and reduces: after lg p rounds every rank has the
total.  A number of ranks that is not a power of two is first folded onto one
(:class:`~allreduce.algorithms._schedule.PowerOfTwoFold`), at two extra steps.

Cost: ⌈lg p⌉·α + ⌈lg p⌉·n·(β + γ) for a power of two (Thakur, Rabenseifner & Gropp 2005).
The fewest steps of any algorithm here, and the most bytes per rank: the choice for tiny
messages.
"""

from __future__ import annotations

from ..comm import Communicator
from ..ops import Op
from ._schedule import PowerOfTwoFold


def recursive_doubling(buf, comm: Communicator, op: Op) -> None:
    """Recursive-doubling allreduce in place."""
    if comm.size == 1:
        return
    scratch = comm.empty(len(buf), like=buf)
    fold = PowerOfTwoFold(comm)
    fold.fold(buf, op, scratch)
    me = fold.virtual_rank
    if me is not None:
        mask = 1
        while mask < fold.participants:
            partner = me ^ mask
            comm.sendrecv(buf, fold.real_rank(partner), scratch, fold.real_rank(partner))
            # both partners compute lower ⊕ upper, so every rank ends with the same bits
            comm.reduce_local(op, buf, scratch, incoming_first=partner < me)
            mask <<= 1
    fold.unfold(buf)
