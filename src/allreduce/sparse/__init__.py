"""The sparse allreduce: the sum over ranks of sparse vectors, such as Top-k gradients
(chapter "Sparse allreduce", ``chapters/75_sparse.md``).

``sparse_allreduce(indices, values, n, comm)`` takes each rank's sorted, unique indices into
a dense vector of length ``n`` and their values, and gives every rank the sum on the union
of the supports, as ``(indices, values)``: indices int32 (int64 from 2³¹ elements) and
values of the input's dtype.  It equals the dense allreduce of the densified vectors, exactly
for integers and to rounding for floats, and every rank gets the same bits.  A torch sparse
COO 1-D tensor may be passed instead, ``sparse_allreduce(t, comm)``, and one comes back.

The exact algorithms, one module each, are listed in :data:`SPARSE_ALGORITHMS`; ``auto``
picks one, and for ``sparse_ring`` and ``sparse_direct`` how they cut the index range, by
predicted time (:mod:`allreduce.sparse.auto`).  ``topk_allreduce`` is the
approximate sum that stays k-sparse (:mod:`allreduce.sparse.topk_allreduce`).  Each call is
checked on every rank first (:mod:`allreduce.sparse.check`): a bad or mismatched call raises
the same error everywhere, before any data moves, and leaves the caller's arrays alone.
"""

from __future__ import annotations

import functools

import numpy as np

from ..algorithms.auto import model as auto_model
from ..transports import as_communicator
from . import auto, overlap
from .allgather import allgather
from .check import _is_torch, agree, as_torch, describe
from .chunks import BOUNDARIES, CHUNKED
from .dense import dense
from .sparse_direct import sparse_direct
from .sparse_recursive_doubling import sparse_recursive_doubling
from .sparse_ring import sparse_ring
from .topk_allreduce import TopkResult, reselecting_allreduce
from .vector import densify, index_dtype

_REGISTRY = {"dense": dense, "allgather": allgather, "sparse_ring": sparse_ring,
             "sparse_direct": sparse_direct,
             "sparse_recursive_doubling": sparse_recursive_doubling}

#: The exact sparse algorithms, for a test (or a benchmark) to loop over.
SPARSE_ALGORITHMS: tuple[str, ...] = tuple(_REGISTRY)

#: What ``auto`` chooses among: each exact algorithm with each boundaries it takes, named
#: as :func:`allreduce.sparse.auto.label` names them (``sparse_direct:nonzeros``).
SPARSE_CHOICES: tuple[str, ...] = tuple(auto.label(*option)
                                        for option in auto.options(SPARSE_ALGORITHMS))

__all__ = ["BOUNDARIES", "SPARSE_ALGORITHMS", "SPARSE_CHOICES", "TopkResult", "sparse_allreduce",
           "topk_allreduce"]


def _model_bits(model) -> tuple[int, ...]:
    """The dense model's four constants and a digest of the sparse ones
    (:func:`allreduce.sparse.auto.constants_digest`), which the check compares across ranks."""
    return (*_dense_bits(model), auto.constants_digest())


@functools.lru_cache(maxsize=16)
def _dense_bits(model) -> tuple[int, ...]:
    return tuple(int(v) for v in np.array([model.alpha, model.beta, model.gamma,
                                           model.overhead]).view(np.int64))


def _probe_words(mine, p: int) -> np.ndarray:
    """What the check's row carries of the overlap's probes: the same count of words in
    every sparse call on ``p`` ranks (none on one), so that a rank that calls
    ``topk_allreduce`` where the others sum exactly is told so by the check."""
    return overlap.pack(mine) if p > 1 else np.zeros(0, np.int64)


def sparse_allreduce(indices, values=None, n=None, comm=None, algorithm: str = "auto",
                     op: str = "sum", *, dense_output: bool = False,
                     boundaries: str | None = None):
    """Sum the sparse vectors ``(indices, values)`` of length ``n`` over every rank of
    ``comm``; ``op`` is ``"sum"`` or ``"mean"`` (``"avg"``).  Returns ``(indices, values)``
    on the union of the ranks' supports, or the dense sum when ``dense_output``; for a torch
    sparse tensor ``sparse_allreduce(t, comm)`` (or ``(t, comm, algorithm)``), a torch
    sparse tensor (or dense tensor).
    ``boundaries`` (``"length"`` or ``"nonzeros"``) is how ``sparse_ring`` and
    ``sparse_direct`` cut the index range; by default ``auto`` chooses it with the
    algorithm, and an algorithm named cuts equal lengths (one that cuts no chunks refuses
    ``"nonzeros"``).  The caller's arrays are never modified."""
    if _is_torch(indices) and comm is None:  # sparse_allreduce(t, comm); a dense t is refused
        comm, values = values, None  # by the check, on every rank
        if isinstance(n, str) and algorithm == "auto":  # sparse_allreduce(t, comm, "sparse_ring")
            algorithm, n = n, None
    communicator = as_communicator(comm)
    names = (*SPARSE_ALGORITHMS, "auto")
    if boundaries is None and algorithm != "auto":
        boundaries = "length"  # a named algorithm cuts equal lengths, said or not
    call = describe(indices, values, n, op, algorithm, names, boundaries,
                    dense_output=dense_output)
    model = auto_model()
    p = communicator.size
    mine = None  # this rank's probes, looked up where its pairs alone make a long call
    if call.problem is None and call.algorithm == "auto":
        try:  # before the check: nothing here may raise on one rank alone
            if auto.worth_probing(call.n, len(call.indices), p, call.values.dtype.itemsize,
                                  model, SPARSE_ALGORITHMS, dense_output=call.dense_output,
                                  boundaries=call.boundaries):
                mine = overlap.hits(call.indices, call.n, p)
        except Exception:  # noqa: BLE001 - the probes are optional; the check speaks for it
            mine = None
    loads, probes = agree(communicator, call, names, _model_bits(model),
                          probes=_probe_words(mine, p))
    n, values = call.n, call.values
    chosen = call.algorithm
    if chosen == "auto":
        counts = [sum(row) for row in loads]  # the probes count only where every rank looked
        hits = None if mine is None else overlap.unpack(probes, len(mine))
        chosen, boundaries = auto.choose(n, counts, values.dtype.itemsize, model,
                                         SPARSE_ALGORITHMS, dense_output=dense_output,
                                         loads=loads, boundaries=boundaries, hits=hits)
    options = {"boundaries": boundaries or "length"} if chosen in CHUNKED else {}
    if chosen != "dense":  # no message holds more than every rank's pairs together
        options["most_pairs"] = sum(map(sum, loads))
    full = result = None
    if communicator.size == 1:
        result = (call.indices, values.copy())
    elif chosen == "dense" and dense_output:
        full = dense(call.indices, values, n, communicator, dense_output=True)
    else:
        result = _REGISTRY[chosen](call.indices, values, n, communicator, **options)
    if call.op == "mean":
        if full is not None:
            full /= communicator.size
        else:
            result = (result[0], result[1] / values.dtype.type(communicator.size))
    if dense_output:
        if full is None:
            full = densify(*result, n)
        if call.torch:
            import torch

            return torch.from_numpy(full)
        return full
    out_indices, out_values = result[0].astype(index_dtype(n)), result[1]
    if np.may_share_memory(out_values, values):  # one rank's pairs alone: its own array
        out_values = out_values.copy()
    if call.torch:
        return as_torch(out_indices, out_values, n)
    return out_indices, out_values


def topk_allreduce(indices, values, n: int, k: int, comm, op: str = "sum", *,
                   boundaries: str = "length") -> TopkResult:
    """An approximate sum that keeps at most ``p·⌈k/p⌉`` pairs: each rank sends each chunk's
    owner at most ``⌈k/p⌉`` of its largest pairs there, and each owner keeps its ``⌈k/p⌉``
    largest sums (:mod:`allreduce.sparse.topk_allreduce` says exactly what the result is).
    Returns the result's ``indices`` and ``values`` (the same on every rank) and this rank's
    own pairs that are not in it, ``unsent_indices`` and ``unsent_values``, to be added back
    to its error-feedback residual.  With ``op="mean"`` the result is divided by ``p``; what
    is unsent never is.  Numpy arrays only.  (``boundaries=None`` cuts equal lengths.)"""
    communicator = as_communicator(comm)
    boundaries = boundaries or "length"
    call = describe(indices, values, n, op, "topk", ("topk",), boundaries, k)
    if call.torch and call.problem is None:
        call.problem = TypeError("topk_allreduce takes numpy indices and values")
    agree(communicator, call, ("topk",), _model_bits(auto_model()), "topk_allreduce",
          probes=_probe_words(None, communicator.size))  # none, in a row as long as the sum's
    result = reselecting_allreduce(call.indices, call.values, call.n, call.k, communicator,
                                   boundaries=boundaries)
    if call.op == "mean":
        result.values = result.values / call.values.dtype.type(communicator.size)
    small = index_dtype(call.n)
    result.indices = result.indices.astype(small)
    result.unsent_indices = result.unsent_indices.astype(small)
    return result
