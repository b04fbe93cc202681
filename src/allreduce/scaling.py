"""How data-parallel training scales: a step's compute, its allreduce and the part of the
allreduce the backward pass cannot hide, from the α-β-γ model (chapter "Capstone:
data-parallel training", section on scaling).

A step on ``p`` ranks computes ``batch`` samples per rank at ``sample_seconds`` each, then
allreduces ``gradient_bytes`` of gradients with the algorithm ``auto``'s rule picks
(:func:`allreduce.algorithms.auto.fastest`) under a :class:`~allreduce.cost.Model`.  With
overlap, the allreduce starts during the backward pass, which is ``overlap`` of the compute,
and only what does not fit behind it is **exposed**.

* **Weak scaling** keeps the per-rank batch: the global batch grows with ``p``, each step
  takes longer than on one rank only by the exposed allreduce, and an epoch takes fewer
  steps.  Efficiency = T(1) / T(p).
* **Strong scaling** keeps the global batch: each rank computes ``global_batch / p``
  samples, so compute shrinks while the allreduce does not.  Efficiency = T(1) / (p·T(p)).
"""

from __future__ import annotations

from dataclasses import dataclass

from .algorithms.auto import fastest
from .cost import Model


@dataclass(frozen=True)
class Step:
    """One training step on ``ranks`` ranks, in seconds."""

    ranks: int
    algorithm: str  # the allreduce auto's rule picks ("" on one rank)
    compute: float  # forward and backward of one rank's samples
    communicate: float  # the gradient allreduce
    exposed: float  # the part of the allreduce not hidden behind the backward pass

    @property
    def seconds(self) -> float:
        return self.compute + self.exposed

    @property
    def ratio(self) -> float:
        """The communication-to-computation ratio of the step."""
        return self.communicate / self.compute


def step(p: int, *, gradient_bytes: float, samples: float, sample_seconds: float,
         model: Model, overlap: float = 0.0) -> Step:
    """A step of ``samples`` samples per rank on ``p`` ranks; ``overlap`` is the fraction of
    the compute (the backward pass) that the allreduce can run behind (0: none)."""
    compute = samples * sample_seconds
    if p == 1:
        return Step(1, "", compute, 0.0, 0.0)
    algorithm = fastest(gradient_bytes, p, model)
    communicate = model.time(algorithm, p, gradient_bytes)
    return Step(p, algorithm, compute, communicate, max(0.0, communicate - overlap * compute))


def weak_efficiency(p: int, *, batch: float, **options) -> float:
    """T(1) / T(p) with ``batch`` samples per rank on any number of ranks."""
    return step(1, samples=batch, **options).seconds / step(p, samples=batch, **options).seconds


def strong_efficiency(p: int, *, global_batch: float, **options) -> float:
    """T(1) / (p·T(p)) with ``global_batch`` samples per step shared by the ``p`` ranks."""
    one = step(1, samples=global_batch, **options).seconds
    return one / (p * step(p, samples=global_batch / p, **options).seconds)
