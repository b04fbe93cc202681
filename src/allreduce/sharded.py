"""Sharded data parallelism's communication: what DDP, ZeRO's stages and FSDP send per
training step, built from the allreduce's two halves (chapter "Beyond one flat ring").

DDP allreduces the gradients.  ZeRO stages 1 and 2 (and FSDP's ``SHARD_GRAD_OP``) reduce-
scatter the gradients, let each rank update only the parameters of its own chunk, and all-
gather the updated parameters: Ψ + Ψ, the allreduce's own volume (ZeRO paper, §7.2.1).
Stage 3 (FSDP's ``FULL_SHARD``) keeps only the chunk between steps, so it all-gathers the
parameters before the forward pass and again before the backward pass: 3Ψ, 1.5 times
DDP's (§7.2.2).  Each phase here is the library's ring phase, ``(p−1)/p·n`` bytes sent
per rank (``allreduce.reduce_scatter`` and ``allreduce.allgather``, rank ``r`` owning
``chunk_bounds(n, p, r)``); the tests count them in traces.
"""

from __future__ import annotations

#: The collectives each strategy runs per training step, in order, on ``n`` bytes.
STEPS: dict[str, tuple[str, ...]] = {
    "DDP": ("allreduce",),
    "ZeRO-1": ("reduce_scatter", "allgather"),
    "ZeRO-2": ("reduce_scatter", "allgather"),
    "ZeRO-3 / FSDP": ("allgather", "allgather", "reduce_scatter"),
}

#: Bytes one rank sends in each collective, as a multiple of (p−1)/p·n (the ring's).
PHASE_VOLUME = {"allreduce": 2, "reduce_scatter": 1, "allgather": 1}

#: What each rank keeps of the model state between steps, as a fraction of the whole (1/p
#: for a sharded part): optimizer state, gradients, parameters.
SHARDED_STATE = {"DDP": (), "ZeRO-1": ("optimizer",), "ZeRO-2": ("optimizer", "gradients"),
                 "ZeRO-3 / FSDP": ("optimizer", "gradients", "parameters")}


def volume(strategy: str, p: int, n: float) -> float:
    """Bytes one rank sends per training step under ``strategy`` (a key of :data:`STEPS`)
    for ``n`` bytes of gradients (as many of parameters) on ``p`` ranks."""
    if strategy not in STEPS:
        raise ValueError(f"unknown strategy {strategy!r}; choose one of {', '.join(STEPS)}")
    return sum(PHASE_VOLUME[phase] for phase in STEPS[strategy]) * (p - 1) / p * n
