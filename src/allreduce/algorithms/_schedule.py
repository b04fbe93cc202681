"""Schedule helpers that several algorithms share: chunk bounds, ring neighbours, and the
fold that lets power-of-two algorithms run on any number of ranks.

Each algorithm module imports these instead of writing its own index arithmetic, so a
chunk boundary means the same thing in the ring, in Rabenseifner and in the parameter
server.
"""

from __future__ import annotations

from ..comm import Communicator
from ..cost import largest_power_of_two
from ..ops import Op


def chunk_bounds(count: int, parts: int, index: int) -> tuple[int, int]:
    """Element range ``[lo, hi)`` of chunk ``index`` when ``count`` elements are split into
    ``parts`` nearly equal chunks: the first ``count % parts`` chunks get one element more.

    >>> [chunk_bounds(10, 4, i) for i in range(4)]
    [(0, 3), (3, 6), (6, 8), (8, 10)]
    """
    base, extra = divmod(count, parts)
    lo = index * base + min(index, extra)
    return lo, lo + base + (1 if index < extra else 0)


def span_bounds(count: int, parts: int, first: int, last: int) -> tuple[int, int]:
    """Element range covered by the consecutive chunks ``first .. last - 1``."""
    return chunk_bounds(count, parts, first)[0], chunk_bounds(count, parts, last - 1)[1]


def right(comm: Communicator) -> int:
    """The next rank around the ring."""
    return (comm.rank + 1) % comm.size


def left(comm: Communicator) -> int:
    """The previous rank around the ring."""
    return (comm.rank - 1) % comm.size


class PowerOfTwoFold:
    """Reduce ``p`` ranks to ``p' = 2^⌊lg p⌋`` participants and back (Thakur et al. 2005, §4).

    With ``r = p - p'`` extra ranks, each of the first ``r`` even ranks sends its whole
    buffer to the odd rank above it and sits out; the odd rank reduces the two.  The ``p'``
    participants then run a power-of-two algorithm under *virtual* ranks ``0 .. p'-1``,
    and :meth:`unfold` hands the result back to the ranks that sat out.  This costs two
    extra steps of ``n`` elements when ``p`` is not a power of two, and none when it is.
    """

    def __init__(self, comm: Communicator):
        self.comm = comm
        self.participants = largest_power_of_two(comm.size)
        self.extra = comm.size - self.participants
        rank = comm.rank
        if rank < 2 * self.extra:
            self.virtual_rank = rank // 2 if rank % 2 else None
        else:
            self.virtual_rank = rank - self.extra

    def real_rank(self, virtual_rank: int) -> int:
        """The communicator rank that plays ``virtual_rank``."""
        if virtual_rank < self.extra:
            return 2 * virtual_rank + 1
        return virtual_rank + self.extra

    def take_input(self, buf, source):
        """Where the power-of-two phase reads this rank's input: ``source`` itself, or, where
        a fold reduces whole buffers in place (or one rank has nothing to exchange), ``None``
        once ``source`` has been copied into ``buf``."""
        if source is not None and (self.extra or self.comm.size == 1):
            self.comm.copy(buf, source)
            return None
        return source

    def fold(self, buf, op: Op, scratch) -> None:
        """Before the power-of-two phase: the extra ranks hand their data over."""
        rank = self.comm.rank
        if rank >= 2 * self.extra:
            return
        if rank % 2 == 0:
            self.comm.send(buf, rank + 1)
        else:
            self.comm.recv(scratch, rank - 1)
            self.comm.reduce_local(op, buf, scratch, incoming_first=True)

    def unfold(self, buf) -> None:
        """After it: the ranks that sat out receive the finished result."""
        rank = self.comm.rank
        if rank >= 2 * self.extra:
            return
        if rank % 2 == 0:
            self.comm.recv(buf, rank + 1)
        else:
            self.comm.send(buf, rank - 1)
