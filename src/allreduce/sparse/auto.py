"""``auto`` for the sparse allreduce: the algorithm with the smallest predicted time
(chapter "Sparse allreduce").

The fill-in is not known before the data moves, so the prediction uses an estimator that
every rank can compute from what the call's check already gathered, the ranks' pair counts:
**independent supports**, the union of ``s`` ranks' supports of density ``d`` being
``n·(1 − (1 − d)^s)``.  Every rank has the same counts and (checked) the same model, so every
rank chooses the same.

A prediction is the wire time under the dense α-β model plus the local work, which in
Python dominates from about 1% density: encoding and decoding pairs, and merging sorted
runs (a stable sort: m·lg m).  :data:`LOCAL` holds those costs as measured on the course's
reference machine (4 MPI ranks on 2 cores, n = 16 M float32, densities 0.1%, 1% and 10%;
fitted on relative error, it ranks the three sparse algorithms in the measured order at all
three densities).
"""

from __future__ import annotations

import math

from ..algorithms.auto import fastest
from ..cost import Model, largest_power_of_two
from .vector import index_dtype

#: Seconds per pair encoded or decoded, per m·lg m of a merge of m pairs, per element of a
#: densified vector, and per pair of a result read back from a dense one (measured; see above).
LOCAL = {"code": 17.5e-9, "merge": 3.1e-9, "densify": 3.5e-9, "gather": 39e-9}


def union(n: int, density: float, ranks: int) -> float:
    """Expected size of the union of ``ranks`` independent supports of ``density``."""
    return n * (1 - (1 - min(density, 1.0)) ** ranks)


def _sort(m: float) -> float:
    return m * math.log2(max(m, 2.0))


def predict(algorithm: str, n: int, counts: list[int], itemsize: int, model: Model, *,
            dense_output: bool = False) -> float:
    """Seconds ``algorithm`` should take for ``counts[r]`` pairs on rank ``r`` (with
    ``dense_output``, ``dense`` needs neither the presence mask nor the gather)."""
    p = len(counts)
    if p == 1:
        return 0.0
    pair = index_dtype(n).itemsize + itemsize
    density = sum(counts) / p / n if n else 0.0
    k = max(counts)
    dense_bytes = n * itemsize
    if algorithm == "dense":  # the values' allreduce, the presence mask's, and the copies
        wire = model.time(fastest(dense_bytes, p, model), p, dense_bytes)
        if dense_output:
            return wire + n * LOCAL["densify"]
        return 2 * wire + n * LOCAL["densify"] + union(n, density, p) * LOCAL["gather"]
    if algorithm == "allgather":  # each step forwards one block; every rank merges all
        wire = (p - 1) * model.alpha + (p - 1) * min(k * pair, dense_bytes) * model.beta
        return wire + 2 * (p - 1) * k * LOCAL["code"] + _sort(sum(counts)) * LOCAL["merge"]
    chunk = union(n, density, p) / p  # a finished chunk, for the all-gather
    gather = ((p - 1) * min(chunk * pair, dense_bytes / p) * model.beta
              + 2 * (p - 1) * chunk * LOCAL["code"])
    if algorithm == "sparse_ring":
        sizes = [union(n, density, s) / p for s in range(1, p)]
        moved = sum(min(s * pair, dense_bytes / p) for s in sizes)
        wire = 2 * (p - 1) * model.alpha + moved * model.beta
        merge = sum(_sort(s + k / p) for s in sizes)
        return wire + gather + 2 * sum(sizes) * LOCAL["code"] + merge * LOCAL["merge"]
    if algorithm == "sparse_direct":  # one rank's pairs per message; one merge of p runs
        wire = 2 * (p - 1) * model.alpha + (p - 1) * min(k / p * pair, dense_bytes / p) * model.beta
        return wire + gather + 2 * k * LOCAL["code"] + _sort(k) * LOCAL["merge"]
    if algorithm == "sparse_recursive_doubling":
        q = largest_power_of_two(p)
        held = [union(n, density, 1 << j) for j in range(int(math.log2(q)))]
        if q != p:  # the fold: one rank's pairs in, the result out
            held = [k, *held, union(n, density, p)]
        moved = sum(min(h * pair, dense_bytes) for h in held)
        steps = int(math.log2(q)) + 2 * (q != p)
        wire = steps * model.alpha + moved * model.beta
        merge = sum(_sort(2 * h) for h in held)
        return wire + 2 * sum(held) * LOCAL["code"] + merge * LOCAL["merge"]
    raise ValueError(f"no prediction for sparse algorithm {algorithm!r}")


def choose(n: int, counts: list[int], itemsize: int, model: Model, candidates, *,
           dense_output: bool = False) -> str:
    """The candidate with the smallest :func:`predict` (ties to the one listed first)."""
    return min(candidates, key=lambda name: predict(name, n, counts, itemsize, model,
                                                    dense_output=dense_output))
