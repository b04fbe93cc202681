"""Fill-in: how the union of the ranks' Top-k supports grows with their number (chapter
"Sparse allreduce").

The sparse ring's messages carry partial sums, whose support is the union ``u_s`` of the
``s`` ranks' supports summed so far; every exact algorithm's result carries ``u_p``.  For
independent supports of density ``d``, ``u_s = n(1 − (1 − d)^s)``: almost ``s·k`` while
``s·d`` is small.  Real Top-k gradients overlap far more (:mod:`allreduce.sparse.samples`
measures them up to 64 shards).  To simulate thousands of ranks the chapter extrapolates
with two models, each fitted on the points up to ``fit_until`` ranks and checked on the
rest, and shows both, since nothing measured tells between them beyond 64:

* :class:`PowerLaw`, ``u_s = c·k·s^b`` (capped by the independent curve): keeps growing;
* :class:`BetaBinomial`: each coordinate lands in a shard's Top-k with its own probability
  π, drawn from a Beta distribution of mean ``d``; then ``u_s = n·(1 − E[(1 − π)^s])``,
  which grows ever more slowly once the coordinates that are ever large run out.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class PowerLaw:
    """``u_s = min(scale·k·s^exponent, n(1 − (1 − d)^s))``, ``k = d·n``."""

    scale: float
    exponent: float
    n: int
    k: int

    def __call__(self, s: float) -> float:
        independent = self.n * (1 - (1 - self.k / self.n) ** s)
        return min(self.k if s <= 1 else self.scale * self.k * s ** self.exponent, independent)


@dataclass(frozen=True)
class BetaBinomial:
    """``u_s = n·(1 − B(a, b + s)/B(a, b))`` with ``b = a(1 − d)/d``: the expected union when
    each coordinate's chance of being in one shard's Top-k is Beta(a, b)-distributed."""

    a: float
    n: int
    k: int

    def __call__(self, s: float) -> float:
        d = self.k / self.n
        a, b = self.a, self.a * (1 - d) / d
        log_miss = math.lgamma(a + b) + math.lgamma(b + s) - math.lgamma(b) - math.lgamma(a + b + s)
        return self.n * (1 - math.exp(log_miss))


def fit_power_law(unions: np.ndarray, n: int, k: int, fit_until: int = 32) -> PowerLaw:
    """Least squares of ``log(u_s/k)`` on ``log s`` for ``s = 2 … fit_until``
    (``unions[s - 1] = u_s``)."""
    s = np.arange(2, fit_until + 1)
    exponent, intercept = np.polyfit(np.log(s), np.log(np.asarray(unions[1:fit_until]) / k), 1)
    return PowerLaw(float(np.exp(intercept)), float(exponent), n, k)


def fit_beta_binomial(unions: np.ndarray, n: int, k: int, fit_until: int = 32) -> BetaBinomial:
    """The ``a`` (searched on a log grid from 1e-8 to 1e4) whose curve is closest to
    ``u_s``, ``s = 1 … fit_until``, in squared log error."""
    measured = np.asarray(unions[:fit_until], float)

    def error(a: float) -> float:
        law = BetaBinomial(a, n, k)
        return sum(math.log(law(s) / u) ** 2 for s, u in enumerate(measured, start=1))

    return BetaBinomial(min(np.logspace(-8, 4, 1201), key=error), n, k)


def worst_error(law, unions: np.ndarray, start: int) -> float:
    """The largest relative error of ``law`` on the measured ``u_s`` for ``s ≥ start``."""
    return max(abs(law(s) / u - 1) for s, u in enumerate(unions, start=1) if s >= start)
