"""``auto`` for the sparse allreduce: the algorithm with the smallest predicted time
(chapter "Sparse allreduce").

The fill-in is not known before the data moves, so ``auto`` predicts with an estimator that
every rank can compute from what the call's check already gathered, the ranks' pair counts:
**independent supports**, the union of ``s`` ranks' supports of density ``d`` being
``n·(1 − (1 − d)^s)``.  Every rank has the same counts and (checked) the same model, so every
rank chooses the same.  Where the supports are known (the benchmark, the chapter), the same
prediction takes the real unions instead (``supports=``) and the critical path of the real
messages (:mod:`allreduce.sparse.cost`): that is the model the benchmark checks.

A prediction is the per-call overhead and the wire time under the dense α-β model, plus the
local work, which in Python is much of a call from about 1% density: checking the indices,
encoding and decoding pairs, merging sorted runs (a stable sort: m·lg m), densifying and
the dense path's presence mask; plus two costs that neither the dense model nor the local
work sees, a sparse call's own (its check, one more collective) and a sparse message's
(:data:`OVERHEADS`).  :data:`LOCAL` and :data:`OVERHEADS` are fitted together to the whole
calls' times on the course's reference machine, where four ranks share two cores, so they
also absorb whatever a call spends waiting for other ranks' work, as the dense model's α
absorbs a step's Python.
"""

from __future__ import annotations

import functools
import math

import numpy as np

from ..algorithms.auto import describe_model, fastest, model_source
from ..algorithms.auto import model as dense_model
from ..cost import Model, largest_power_of_two
from . import cost
from .dense import mask_bytes
from .vector import index_dtype

#: Seconds per pair encoded or decoded (per element of the range for a message in the dense
#: form), per m·lg m of a merge of m pairs, per element of a
#: densified vector (and of the presence mask read back), per pair of a result marked in the
#: mask and read back from the dense sum, and per pair of the call's check of its indices:
#: fitted with :data:`OVERHEADS` by :func:`allreduce.bench.sparse_record.fit` to two runs
#: on the idle reference machine (4 MPI ranks on 2 cores; ``chapters/data/sparse_bench_fit.json``:
#: uniform supports at n = 16 M, 0.01-50%, the course's gradients at 0.01-50%, identical
#: and disjoint supports at 0.01-1%), so that the committed record, a later run
#: (``chapters/data/sparse_bench_reference.json``), tests them.  A constant the fit found
#: no use for is 0 (non-negative least squares).
LOCAL = {"code": 5.72e-9, "code_dense": 12.3e-9, "merge": 1.70e-9, "densify": 4.85e-9,
         "gather": 11.6e-9, "check": 0.0}

#: Seconds that every sparse call costs beyond the dense model's overhead (``"call"``) and
#: that every sparse message on the critical path costs beyond the dense model's α
#: (``"message"``): what neither the wire nor the local work counts, such as the call's
#: check (one more collective), its Python outside the timed local work, and, on the
#: reference machine, ranks waiting for one another's work on shared cores.  Fitted with
#: :data:`LOCAL`; not measured apart.
OVERHEADS = {"call": 555e-6, "message": 42.1e-6}


def union(n: int, density: float, ranks: int) -> float:
    """Expected size of the union of ``ranks`` independent supports of ``density``."""
    return n * (1 - (1 - min(density, 1.0)) ** ranks)


def measured_unions(supports: list[np.ndarray]) -> list[float]:
    """``u[s]``, s = 0 … p: the mean size of the union of ``s`` ranks' supports (sorted,
    unique indices, as the sparse allreduce takes them), over the ``p`` windows of
    consecutive ranks (the groups a ring's partial sums hold)."""
    p = len(supports)
    length = 1 + max((int(s[-1]) for s in supports if len(s)), default=0)
    totals = np.zeros(p + 1)
    for r in range(p):  # grow the window ending at r one rank at a time: no sorting
        present = np.zeros(length, bool)
        size = 0
        for s in range(1, p + 1):
            support = supports[(r - s + 1) % p]
            size += len(support) - int(np.count_nonzero(present[support]))
            present[support] = True
            totals[s] += size
    return [float(total / p) for total in totals]


def _merging(m: float) -> float:
    """Seconds to merge sorted runs of ``m`` pairs in all (a stable sort: m·lg m)."""
    return m * math.log2(max(m, 2.0)) * LOCAL["merge"]


def local_work(algorithm: str, n: int, counts: list[int], unions: list[float], *,
               dense_output: bool = False, itemsize: int = 4) -> float:
    """Seconds of local work: ``unions[s]`` is the size of the union of ``s`` supports."""
    p, k = len(counts), max(counts)
    checked = k * LOCAL["check"]  # every call's pass over its indices
    if algorithm == "dense":
        return checked + n * LOCAL["densify"] + (
            0 if dense_output else unions[p] * LOCAL["gather"])

    def coded(pairs: float, width: float) -> float:  # one message, encoded and decoded
        return _coding(pairs, width, n, itemsize)

    return checked + _exchanges(algorithm, k, p, counts, unions, coded, n)


def _coding(pairs: float, width: float, n: int, itemsize: int) -> float:
    """Seconds to encode and decode one message of ``pairs`` pairs in a range of ``width``
    elements: per pair, or per element of the range once :func:`~allreduce.sparse.vector.encode`
    switches to the dense form (values and a presence bitmap)."""
    pair_bytes = pairs * (index_dtype(int(n)).itemsize + itemsize)
    if pair_bytes >= width * itemsize + width / 8:
        return 2 * width * LOCAL["code_dense"]
    return 2 * pairs * LOCAL["code"]


def _exchanges(algorithm: str, k: int, p: int, counts: list[int], unions: list[float],
               coded, n: int) -> float:
    chunk = n / p
    if algorithm == "allgather":
        return (p - 1) * coded(k, n) + _merging(sum(counts))
    gather = (p - 1) * coded(unions[p] / p, chunk)  # the all-gather of finished chunks
    if algorithm == "sparse_ring":
        sizes = [unions[s] / p for s in range(1, p)]
        merges = sum(_merging(s + k / p) for s in sizes)
        return gather + sum(coded(size, chunk) for size in sizes) + merges
    if algorithm == "sparse_direct":
        return gather + (p - 1) * coded(k / p, chunk) + _merging(k)
    if algorithm == "sparse_recursive_doubling":
        q = largest_power_of_two(p)
        held = [unions[1 << j] for j in range(q.bit_length() - 1)]
        if q != p:
            held = [k, *held, unions[p]]
        return sum(coded(h, n) for h in held) + sum(_merging(2 * h) for h in held)
    raise ValueError(f"no prediction for sparse algorithm {algorithm!r}")


def predict(algorithm: str, n: int, counts: list[int], itemsize: int, model: Model, *,
            dense_output: bool = False, supports: list[np.ndarray] | None = None) -> float:
    """Seconds ``algorithm`` should take for ``counts[r]`` pairs on rank ``r``: from the
    independent-supports estimator, or from the real ``supports`` when given.  (With
    ``dense_output``, ``dense`` needs neither the presence mask nor the gather.)"""
    p = len(counts)
    if p == 1:
        return 0.0
    if supports is not None:
        unions = measured_unions(supports)
    else:
        density = sum(counts) / p / n if n else 0.0
        unions = [union(n, density, s) for s in range(p + 1)]
    local = local_work(algorithm, n, counts, unions, dense_output=dense_output,
                       itemsize=itemsize) + OVERHEADS["call"]
    if algorithm == "dense":  # the values' allreduce, and the presence mask's
        dense_bytes = n * itemsize
        wire = model.time(fastest(dense_bytes, p, model), p, dense_bytes)
        if not dense_output:
            mask = mask_bytes(n, p)
            wire += model.time(fastest(mask, p, model), p, mask)
        return wire + local
    alpha = model.alpha + OVERHEADS["message"]  # a sparse message's α
    if supports is not None:
        steps = cost.schedule(algorithm, supports, n, itemsize)
        wire = cost.critical_path(steps, alpha, model.beta)
    else:
        expected = cost.expected_terms(algorithm, n, p, max(counts), itemsize,
                                       lambda s: unions[s])
        wire = expected.steps * alpha + expected.bytes * model.beta
    return model.overhead + wire + local


def choose(n: int, counts: list[int], itemsize: int, model: Model, candidates, *,
           dense_output: bool = False) -> str:
    """The candidate with the smallest :func:`predict` (ties to the one listed first),
    remembered: Top-k sends the same counts every step, and the predictions cost about
    as much as a small call's messages."""
    return _choose(n, tuple(counts), itemsize, model, tuple(candidates), dense_output)


@functools.lru_cache(maxsize=1024)
def _choose(n, counts, itemsize, model, candidates, dense_output) -> str:
    return min(candidates, key=lambda name: predict(name, n, list(counts), itemsize, model,
                                                    dense_output=dense_output))


def explain(n: int, counts: list[int], itemsize: int = 4, *, dense_output: bool = False,
            candidates=None) -> str:
    """What the sparse ``auto`` would run for ``counts[r]`` pairs on rank ``r`` of a vector
    of length ``n``: each exact algorithm's predicted time, the choice, and the model behind
    it with where it came from (the dense ``auto``'s, :func:`allreduce.auto.explain`)."""
    if candidates is None:
        from . import SPARSE_ALGORITHMS as candidates
    model = dense_model()
    times = {name: predict(name, n, list(counts), itemsize, model, dense_output=dense_output)
             for name in candidates}
    chosen = choose(n, counts, itemsize, model, candidates, dense_output=dense_output)
    listing = ", ".join(f"{name} {t * 1e3:.3f} ms" for name, t in times.items())
    return (f"sparse auto on {len(counts)} ranks, n = {n}, {sum(counts)} pairs in all: {chosen} "
            f"(predicted: {listing})\nmodel: {describe_model(model)}\nfrom {model_source()}")
