"""Checking a sparse allreduce on every rank: each rank checks its own arguments, then one
all-gather of a few integers per rank (which also gives every rank the others' pair counts
in each of ``p`` equal-length chunks, for ``auto``) tells every rank whether all calls are
valid and agree; if not, every rank raises the same error, naming each rank's values, before
any data moves."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..comm import Communicator
from ..ops import DTYPES, check_op_for_dtype
from ..validation import _index, _problem_code, raise_on_every_rank
from .chunks import BOUNDARIES, CHUNKED
from .layout import chunk_counts
from .vector import timed

SPARSE_OPS = ("sum", "mean")
_ALIASES = {"avg": "mean"}


@dataclass
class SparseCall:
    """One rank's call, as numpy arrays, and the first problem found in it."""

    indices: np.ndarray | None = None
    values: np.ndarray | None = None
    n: int = -1
    op: str | None = None
    algorithm: str | None = None
    boundaries: str | None = None
    k: int = -1  # topk_allreduce's k; -1 for the exact sum
    dense_output: bool = False  # it changes auto's choice and the dense path's messages
    torch: bool = False
    problem: Exception | None = field(default=None, repr=False)

    def row(self, algorithms: tuple[str, ...], model_bits: tuple[int, ...], p: int,
            probes: np.ndarray) -> np.ndarray:
        """What the check gathers: the call's fields, then ``probes`` (int64 words, as many
        on every rank: :func:`allreduce.sparse.overlap.pack`), then this rank's pairs in
        each of ``p`` equal-length chunks (-1 where the call is bad)."""
        code = _problem_code(self.problem)
        dtype = -1 if self.values is None else _index(DTYPES, self.values.dtype.name)
        loads = ([-1] * p if self.problem is not None or self.indices is None
                 else chunk_counts(self.indices, self.n, p))
        return np.array([code, self.n, dtype, _index(SPARSE_OPS, self.op),
                         _index(algorithms, self.algorithm), _index(BOUNDARIES, self.boundaries),
                         self.k, int(self.dense_output), *model_bits, *probes, *loads], np.int64)

    def fields(self) -> dict[str, object]:
        return {"dense length n": self.n, "dtype": None if self.values is None else
                self.values.dtype.name, "op": self.op, "algorithm": self.algorithm,
                "boundaries": self.boundaries, "k": self.k, "dense_output": self.dense_output}


_NO_K = object()  # sparse_allreduce's calls: no k to check


@timed  # local work: a pass over the indices (sorted, unique, in range)
def describe(indices, values, n, op, algorithm, algorithms, boundaries="length",
             k=_NO_K, dense_output=False) -> SparseCall:
    """Check one rank's arguments locally; record the first problem instead of raising.
    ``k`` is given by :func:`~allreduce.sparse.topk_allreduce` only."""
    call = SparseCall(op=_ALIASES.get(op, op) if isinstance(op, str) else None,
                      algorithm=algorithm if isinstance(algorithm, str) else None,
                      boundaries=boundaries if isinstance(boundaries, str) else None,
                      dense_output=bool(dense_output))
    try:
        if k is not _NO_K:
            if not isinstance(k, (int, np.integer)) or isinstance(k, bool) or k < 0:
                raise TypeError(f"k, the pairs the result keeps, must be an integer >= 0, "
                                f"got {k!r}")
            call.k = int(k)
        if _is_torch_sparse(indices):
            call.torch = True
            length = n
            indices, values, n = _from_torch(indices)
            if length is not None and length != n:
                raise TypeError(f"sparse_allreduce(t, comm, algorithm) takes the length from "
                                f"t ({n}); got n = {length!r} as well")
        elif _is_torch(indices) and values is None:
            raise TypeError(f"sparse_allreduce(t, comm) takes a torch sparse COO tensor, got "
                            f"one of layout {indices.layout}: pass t.to_sparse(), or reduce a "
                            "dense tensor with allreduce.allreduce")
        if not isinstance(n, (int, np.integer)) or isinstance(n, bool) or not 0 <= n < 2**63:
            raise TypeError(f"n, the dense length, must be an integer from 0 to 2**63 - 1, "
                            f"got {n!r}")
        call.n = int(n)
        if not (isinstance(indices, np.ndarray) and isinstance(values, np.ndarray)):
            raise TypeError("indices and values must be numpy arrays (or pass one torch "
                            f"sparse COO tensor), got {type(indices).__name__} and "
                            f"{type(values).__name__}")
        if values.ndim != 1 or values.dtype.name not in DTYPES:
            raise TypeError(f"values must be a 1-D array of one of {', '.join(DTYPES)}, got "
                            f"{values.ndim}-D {values.dtype.name}")
        if not values.dtype.isnative:
            raise TypeError(f"values have the non-native byte order {values.dtype.str!r}: "
                            "convert them with values.astype(values.dtype.newbyteorder('='))")
        call.values = values
        if indices.ndim != 1 or indices.dtype.kind not in "iu":
            raise TypeError(f"indices must be a 1-D integer array, got {indices.ndim}-D "
                            f"{indices.dtype.name}")
        if len(indices) != len(values):
            raise ValueError(f"indices and values differ in length: {len(indices)} and "
                             f"{len(values)}")
        call.indices = ours = indices.astype(np.int64, copy=False)
        # one pass: strictly increasing indices lie between their first and their last
        increasing = len(ours) < 2 or bool((ours[1:] > ours[:-1]).all())
        if len(ours):
            least, most = (ours[0], ours[-1]) if increasing else (ours.min(), ours.max())
            if least < 0 or most >= n:
                raise ValueError(f"indices must lie in [0, n) = [0, {n}); found "
                                 f"{int(least)} to {int(most)}")
        if not increasing:
            raise ValueError("indices must be sorted and unique (strictly increasing)")
        if call.op not in SPARSE_OPS:
            raise ValueError(f"sparse_allreduce supports op 'sum' and 'mean' (or 'avg'), got "
                             f"{op!r}: a rank's absent entries, counted as zeros, would change "
                             "max, min and prod where other ranks have pairs, and the "
                             "algorithms merge only the pairs")
        check_op_for_dtype(call.op, values.dtype.name)
        if algorithm not in algorithms:
            raise ValueError(f"unknown sparse algorithm {algorithm!r}; choose one of "
                             f"{', '.join(algorithms)}")
        if boundaries is not None and boundaries not in BOUNDARIES:
            raise ValueError(f"boundaries must be one of {', '.join(BOUNDARIES)} (or None: "
                             f"auto's choice), got {boundaries!r}")
        if boundaries == "nonzeros" and algorithm not in (*CHUNKED, "auto", "topk"):
            raise ValueError(f"boundaries='nonzeros' applies only to {' and '.join(CHUNKED)} "
                             f"(and auto, for those it may pick), not to {algorithm!r}, "
                             "which does not cut the index range")
    except (TypeError, ValueError) as problem:
        call.problem = problem
    except Exception as problem:  # anything unforeseen is still reported on every rank
        call.problem = TypeError(f"{type(problem).__name__}: {problem}")
    return call


def agree(comm: Communicator, call: SparseCall, algorithms: tuple[str, ...],
          model_bits: tuple[int, ...], caller: str = "sparse_allreduce", *,
          probes: np.ndarray) -> tuple[list[list[int]], np.ndarray]:
    """Every rank's pairs in each of the ``p`` equal-length chunks (``loads[r][c]``) and
    every rank's ``probes`` (``[r, word]``, carried in the same all-gather), once every rank's
    call is valid and the calls agree on n, dtype, op, algorithm, boundaries, k,
    dense_output and cost model; otherwise the same error on every rank.  ``probes`` must
    be as long on every rank (:data:`allreduce.sparse.overlap.WORDS`, or none)."""
    p, w = comm.size, len(probes)
    table = comm.allgather_ints(call.row(algorithms, model_bits, p, probes))
    fields = table[:, :-(p + w)]
    if not table[:, 0].any() and (fields == fields[0]).all():
        return table[:, -p:].tolist(), table[:, -(p + w):-p]
    raise_on_every_rank(comm, call.fields(), call.problem, caller,
                        "Every rank must pass the same n, dtype, op, algorithm, boundaries, "
                        "k and dense_output.",
                        ValueError(f"{caller}: the ranks' cost models differ (a saved "
                                   "model, or allreduce.sparse.auto's constants, such as "
                                   "RANKS_PER_CORE, LOCAL or PROBE_FROM, changed on some "
                                   "ranks only?), so auto could choose, or probe, "
                                   "differently on each"))
    return [], table  # not reached: raise_on_every_rank always raises


def _is_torch(x) -> bool:
    return type(x).__module__.startswith("torch") and hasattr(x, "layout")


def _is_torch_sparse(x) -> bool:
    return _is_torch(x) and getattr(x, "is_sparse", False)


def _from_torch(tensor):
    if tensor.dim() != 1:
        raise TypeError(f"a torch sparse tensor must be 1-D, got {tensor.dim()}-D")
    if tensor.is_cuda:
        raise TypeError("sparse_allreduce moves CPU tensors; got a CUDA sparse tensor")
    tensor = tensor.detach().coalesce()  # a gradient's own (requires_grad) refused .numpy()
    return (tensor.indices()[0].numpy(), tensor.values().numpy(), int(tensor.shape[0]))


def as_torch(indices: np.ndarray, values: np.ndarray, n: int):
    """A coalesced 1-D torch sparse COO tensor."""
    import torch

    return torch.sparse_coo_tensor(torch.from_numpy(indices.astype(np.int64))[None],
                                   torch.from_numpy(values), (n,), is_coalesced=True,
                                   check_invariants=False)
