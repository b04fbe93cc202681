"""``allgather``: every rank's pairs travel around the ring (a ring all-gather of blocks of
different sizes), then every rank sums all ``p`` blocks itself (chapter "Sparse
allreduce").  What practice uses: Horovod's sparse path, torch gloo's sparse ``all_reduce``.

Cost (:func:`terms`): (p−1)·α and (p−1)·(h + k·c)·β for k pairs of c bytes on every rank,
h the header of a message: it grows with p, whatever the overlap of the supports; the merge
of p·k pairs is local work."""

from __future__ import annotations

from ..comm import Communicator
from ..cost import Terms
from .exchange import OVERHEAD_BYTES, ring_allgather
from .vector import merge


def allgather(indices, values, n: int, comm: Communicator, *, most_pairs: int | None = None):
    """Sum of every rank's sparse vector, merged in rank order on every rank (``most_pairs``:
    see :mod:`~allreduce.sparse.exchange`)."""
    blocks = [None] * comm.size
    blocks[comm.rank] = (indices, values)
    ring_allgather(comm, blocks, [(0, n)] * comm.size, values.dtype, most_pairs)
    return merge(blocks, values.dtype)


def terms(p: int, k: int, pair_bytes: int, supports: str = "any") -> Terms:
    """Critical-path steps and bytes for ``k`` pairs of ``pair_bytes`` on each of ``p``
    ranks (below the dense switch), whatever the ``supports``."""
    return Terms(p - 1, (p - 1) * (OVERHEAD_BYTES + k * pair_bytes), 0)
