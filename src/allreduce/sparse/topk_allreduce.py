"""``topk_allreduce``: a sum that stays k-sparse, at the price of being approximate
(chapter "Sparse allreduce").  This is not one of the exact algorithms: kept apart from them.

The exact sparse allreduce returns the union of the supports, which grows with ``p``
(fill-in).  Re-selecting as the reduction goes keeps every message small (gTop-k, Shi et al.
2019; Ok-Topk, Li & Hoefler, PPoPP 2022; SparDL).  Here, on the direct schedule of
:mod:`~allreduce.sparse.sparse_direct`, each rank sends the owner of each chunk at most
``⌈k/p⌉`` of its largest pairs there; the owner sums what it receives and keeps its chunk's
``⌈k/p⌉`` largest sums; the ring's all-gather passes those around.  So every message holds at
most ``⌈k/p⌉`` pairs and the result at most ``p·⌈k/p⌉``.

What the result means: at each index it keeps, the exact sum of the contributions that
were sent there; everything else is dropped.  Each rank learns which of *its own* pairs did
not make it into the result (capped before sending, or sent to an index the owner dropped)
and gets them back as ``unsent``, for its error-feedback residual
(:meth:`~allreduce.sparse.compression.ErrorFeedback.restore`).  The owner receives each
rank's pairs apart, so it never has to split a partial sum between ranks: the result plus
every rank's ``unsent`` is exactly the sum of the inputs.  Selection per chunk approximates
the global Top-k of the sum; with ``boundaries="nonzeros"`` the chunks hold similar shares
of the pairs, as Ok-Topk balances its regions."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..comm import Communicator
from .chunks import chunk_ranges
from .compression import topk
from .exchange import ring_allgather
from .sparse_direct import scatter_to_owners
from .vector import merge, split_at


@dataclass
class TopkResult:
    """The k-sparse sum, and this rank's pairs that it does not include."""

    indices: np.ndarray
    values: np.ndarray
    unsent_indices: np.ndarray
    unsent_values: np.ndarray


def largest(indices: np.ndarray, values: np.ndarray, count: int):
    """The ``count`` pairs of largest magnitude, still sorted by index."""
    positions, _ = topk(values, count)
    return indices[positions], values[positions]


def reselecting_allreduce(indices, values, n: int, k: int, comm: Communicator, *,
                          boundaries: str = "length") -> TopkResult:
    """The sum of at most ``⌈k/p⌉`` pairs per chunk from each rank, cut to the ``⌈k/p⌉``
    largest sums per chunk (checked arguments: see :func:`allreduce.sparse.topk_allreduce`)."""
    p, rank, dtype = comm.size, comm.rank, values.dtype
    per_chunk = -(-k // p)
    bounds = chunk_ranges(indices, n, comm, boundaries)
    pieces = [largest(indices[s], values[s], per_chunk) for s in split_at(indices, bounds)]
    chunks = [None] * p
    chunks[rank] = largest(*merge(scatter_to_owners(pieces, bounds, comm, dtype, per_chunk),
                                  dtype), per_chunk)
    ring_allgather(comm, chunks, bounds, dtype, per_chunk)  # no message holds more
    kept_indices = np.concatenate([i for i, _ in chunks])
    sent = np.concatenate([i for i, _ in pieces])
    # a pair counts in the result if it was sent and its index was kept
    kept = np.isin(indices, np.intersect1d(sent, kept_indices, assume_unique=True),
                   assume_unique=True)
    return TopkResult(kept_indices, np.concatenate([v for _, v in chunks]),
                      indices[~kept], values[~kept])
