"""``auto`` for the sparse allreduce: the algorithm with the smallest predicted time
(chapter "Sparse allreduce", in preparation).

The fill-in is not known before the data moves, so the prediction uses an estimator that
every rank can compute from what the call's check already gathered, the ranks' pair counts:
**independent supports**, the union of ``s`` ranks' supports of density ``d`` being
``n·(1 − (1 − d)^s)``.  Every rank has the same counts, so every rank chooses the same."""

from __future__ import annotations

import math

from ..algorithms.auto import fastest
from ..cost import Model, largest_power_of_two
from .vector import index_dtype


def union(n: int, density: float, ranks: int) -> float:
    """Expected size of the union of ``ranks`` independent supports of ``density``."""
    return n * (1 - (1 - min(density, 1.0)) ** ranks)


def predict(algorithm: str, n: int, counts: list[int], itemsize: int, model: Model) -> float:
    """Seconds ``algorithm`` should take for ``counts[r]`` pairs on rank ``r``."""
    p = len(counts)
    if p == 1:
        return 0.0
    pair = index_dtype(n).itemsize + itemsize
    density = sum(counts) / p / n if n else 0.0
    if algorithm == "dense":
        return model.time(fastest(n * itemsize, p, model), p, n * itemsize)
    if algorithm == "allgather":  # each step carries one rank's block; all are merged
        block = min(max(counts) * pair, n * itemsize)
        return 2 * (p - 1) * model.alpha + (p - 1) * block * model.beta \
            + sum(counts) * pair * model.gamma
    if algorithm == "sparse_ring":
        chunk = n / p * itemsize  # a chunk never costs more than its dense values
        moved = sum(min(union(n, density, s) * pair / p, chunk) for s in range(1, p))
        moved += (p - 1) * min(union(n, density, p) * pair / p, chunk)
        return 4 * (p - 1) * model.alpha + moved * model.beta + moved / 2 * model.gamma
    if algorithm == "sparse_recursive_doubling":
        q = largest_power_of_two(p)
        rounds = int(math.log2(q))
        moved = sum(min(union(n, density, 1 << k) * pair, n * itemsize) for k in range(rounds))
        if q != p:  # the fold: two more messages of one rank's pairs, and of the result
            moved += min(max(counts) * pair, n * itemsize) + min(union(n, density, p) * pair,
                                                                 n * itemsize)
        steps = 2 * rounds + 4 * (q != p)
        return steps * model.alpha + moved * model.beta + moved * model.gamma
    raise ValueError(f"no prediction for sparse algorithm {algorithm!r}")


def choose(n: int, counts: list[int], itemsize: int, model: Model, candidates) -> str:
    """The candidate with the smallest :func:`predict` (ties to the one listed first)."""
    return min(candidates, key=lambda name: predict(name, n, counts, itemsize, model))
