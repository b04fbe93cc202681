"""The vectors ``allreduce-bench --sparse`` reduces (chapter "Sparse allreduce"), one kind of
support per ``--supports`` name, each rank's ``k = density·n`` float32 pairs:

* ``uniform``: each rank's own uniformly random support (nearly disjoint at low density);
* ``identical``: every rank the same support, its own values (the best case for the ring);
* ``disjoint``: the ranks' supports never meet (the worst case for the ring);
* ``gradients``: the course transformer's Top-k gradients (:mod:`allreduce.sparse.samples`),
  rank ``r`` taking shard ``r``'s; ``n`` is then the model's parameter count.
"""

from __future__ import annotations

import numpy as np

SOURCES = ("uniform", "identical", "disjoint", "gradients")


def gradient_length() -> int:
    from ..sparse.samples import Samples

    return Samples().n


def inputs(source: str, rank: int, size: int, n: int, density: float):
    """Rank ``rank``'s ``(indices, values)``: sorted int64 indices and float32 values."""
    k = min(n, int(round(density * n)))
    values = np.random.default_rng(2000 + rank).standard_normal(k).astype(np.float32)
    if source == "uniform":
        rng = np.random.default_rng(1000 + rank)
        return np.sort(rng.choice(n, size=k, replace=False)), values
    if source == "identical":
        rng = np.random.default_rng(1000)
        return np.sort(rng.choice(n, size=k, replace=False)), values
    if source == "disjoint":  # a random permutation cut into one block per rank
        k = min(k, n // size)
        order = np.random.default_rng(1000).permutation(n)
        return np.sort(order[rank * k:(rank + 1) * k]), values[:k]
    if source == "gradients":
        from ..sparse.compression import topk
        from ..sparse.samples import PAIRS_DENSITY, Samples, full_gradients

        if density <= PAIRS_DENSITY and size <= Samples().pair_shards:
            return Samples().pairs(rank, 0, density)
        return topk(full_gradients(size, 0)[rank], k)
    raise ValueError(f"unknown supports {source!r}; choose one of {', '.join(SOURCES)}")
