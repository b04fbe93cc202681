"""``auto``: pick an algorithm from the message size and the number of ranks.

The crossover it uses is the subject of the chapter "Tree allreduce".  Below it, latency
dominates and recursive doubling's ⌈lg p⌉ steps win; above it, bandwidth dominates and the
ring, which meets the bandwidth lower bound, wins.  Every rank makes the same choice,
because the choice depends only on metadata that the ranks have already agreed on.
"""

from __future__ import annotations

from ..arrays import nbytes
from ..comm import Communicator
from ..ops import Op
from .recursive_doubling import recursive_doubling
from .ring import ring

#: Messages up to this many bytes use recursive doubling, larger ones the ring.
SMALL_MESSAGE_BYTES = 16 * 1024


def choose(nbytes: int, size: int) -> str:
    """The name of the algorithm ``auto`` runs for ``nbytes`` bytes on ``size`` ranks."""
    if size <= 2 or nbytes <= SMALL_MESSAGE_BYTES:
        return "recursive_doubling"  # with two ranks both do one exchange; doubling is simpler
    return "ring"


_CANDIDATES = {"recursive_doubling": recursive_doubling, "ring": ring}


def auto(buf, comm: Communicator, op: Op) -> None:
    """Allreduce in place with the algorithm :func:`choose` picks."""
    _CANDIDATES[choose(nbytes(buf), comm.size)](buf, comm, op)
