"""The α-β-γ cost model: how long an allreduce of ``n`` bytes on ``p`` ranks should take.

Taught in the chapter "Why gradients must be aggregated" (and used by every algorithm
chapter).  A message of ``m`` bytes costs ``α + m·β``; reducing ``m`` bytes costs ``m·γ``.
An algorithm's time is

    T = steps·α + (bytes the busiest rank sends)·β + (bytes it reduces)·γ,

and :func:`terms` gives those three counts for every algorithm in closed form (Thakur,
Rabenseifner & Gropp 2005; Patarasuk & Yuan 2009).  The test suite checks each closed form
against the counts that :class:`~allreduce.trace.TracingCommunicator` records from the real
code, so the formulas printed in the book are the code's.

:func:`fit` finds α, β and γ from measured times by least squares on the *relative* error:
an ordinary fit is dominated by the largest messages and can give a negative α.
"""

from __future__ import annotations

import itertools
import json
import math
import os
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np


@dataclass(frozen=True)
class Terms:
    """The counts in front of α, β and γ: ``steps``, and the busiest rank's bytes sent and
    bytes reduced."""

    steps: float
    sent: float
    reduced: float

    def __add__(self, other: Terms) -> Terms:
        return Terms(self.steps + other.steps, self.sent + other.sent,
                     self.reduced + other.reduced)


def _lg(p: int) -> int:
    return math.ceil(math.log2(p)) if p > 1 else 0


def terms(algorithm: str, p: int, n: float, *, servers: int | None = None) -> Terms:
    """Cost terms of ``algorithm`` for ``n`` bytes on ``p`` ranks (``n`` divisible by ``p``
    and by the servers for exact agreement with a trace; otherwise the chunk sizes round)."""
    if p == 1:
        return Terms(0, 0, 0)
    q = 1 << (p.bit_length() - 1)  # the power of two the fold reduces to
    folded = p != q  # non-powers of two pay one step of n before and one after
    if algorithm == "ring":
        return Terms(2 * (p - 1), 2 * (p - 1) / p * n, (p - 1) / p * n)
    if algorithm == "pipelined_ring":  # each reduce-scatter step sends S segments
        from .algorithms.pipelined_ring import segments

        return Terms((p - 1) * (segments(math.ceil(n / p)) + 1), 2 * (p - 1) / p * n,
                     (p - 1) / p * n)
    if algorithm == "rabenseifner":
        return Terms(2 * _lg(q) + 2 * folded, 2 * (q - 1) / q * n + folded * n,
                     (q - 1) / q * n + folded * n)
    if algorithm == "recursive_doubling":
        return Terms(_lg(q) + 2 * folded, _lg(q) * n + folded * n, _lg(q) * n + folded * n)
    if algorithm == "tree":
        return Terms(2 * _lg(p), _lg(p) * n, _lg(p) * n)
    if algorithm == "reduce_broadcast":
        return Terms(2 * (p - 1), (p - 1) * n, (p - 1) * n)
    if algorithm == "naive":
        return Terms(p - 1, (p - 1) * n, (p - 1) * n)
    if algorithm in ("parameter_server", "sharded_parameter_server"):
        s = servers or (p if algorithm == "sharded_parameter_server" else 1)
        # a server pushes its other shards out and takes p-1 pushes of its own shard in;
        # then the reverse.  Sent: its shards to S-1 servers, its reduced shard to p-1 ranks.
        return Terms(2 * (p - 1), (p - 1) * n / s + (s - 1) * n / s, (p - 1) * n / s)
    raise ValueError(f"no cost formula for algorithm {algorithm!r}")


@dataclass(frozen=True)
class Model:
    """α in seconds per message, β in seconds per byte sent, γ in seconds per byte reduced."""

    alpha: float
    beta: float
    gamma: float = 0.0

    def time(self, algorithm: str, p: int, nbytes: float, **options) -> float:
        """Predicted seconds for one allreduce of ``nbytes`` bytes per rank."""
        t = terms(algorithm, p, nbytes, **options)
        return t.steps * self.alpha + t.sent * self.beta + t.reduced * self.gamma

    def message(self, nbytes: float) -> float:
        """Predicted seconds for one message of ``nbytes`` (α + n·β)."""
        return self.alpha + nbytes * self.beta


#: The two networks the chapter "Choosing an algorithm" simulates (and its lab checks
#: against): a 100 Gb/s cluster network, and an NVLink-class link with reductions on a GPU.
NETWORKS: dict[str, Model] = {
    "100 Gb/s, α = 2 µs": Model(alpha=2e-6, beta=1 / 12.5e9, gamma=1 / 100e9),
    "NVLink-class, α = 1 µs": Model(alpha=1e-6, beta=1 / 150e9, gamma=1 / 1000e9),
}


def busbw(nbytes: float, seconds: float, p: int) -> float:
    """nccl-tests' bus bandwidth of an allreduce, bytes/s: algbw·2(p−1)/p, where algbw is
    ``nbytes / seconds``.  It makes the ring's bandwidth-optimal cost read as link speed."""
    return nbytes / seconds * (2 * (p - 1) / p if p > 1 else 1.0)


def fit(counts: Sequence[Terms], seconds: Sequence[float], *, gamma: bool = True) -> Model:
    """α, β (and γ) ≥ 0 minimising the squared *relative* error of ``counts`` against
    ``seconds``.  Non-negativity is enforced by trying every subset of the parameters
    (there are at most three) and keeping the best feasible fit."""
    a = np.array([[c.steps, c.sent, c.reduced] for c in counts], dtype=float)
    t = np.asarray(seconds, dtype=float)
    if len(a) != len(t) or len(t) == 0 or (t <= 0).any():
        raise ValueError("fit needs one positive time per measurement")
    a = a / t[:, None]  # relative error: (a·x)/t − 1
    columns = [0, 1, 2] if gamma else [0, 1]
    best, best_error = np.zeros(3), math.inf
    for k in range(1, len(columns) + 1):
        for subset in itertools.combinations(columns, k):
            x, *_ = np.linalg.lstsq(a[:, subset], np.ones(len(t)), rcond=None)
            if (x < 0).any():
                continue
            full = np.zeros(3)
            full[list(subset)] = x
            error = float(np.sum((a @ full - 1) ** 2))
            if error < best_error:
                best, best_error = full, error
    return Model(*map(float, best))


def crossover(model: Model, first: str, second: str, p: int, *, largest: float = 2.0**50,
              **options) -> float | None:
    """The message size in bytes at which ``second`` becomes faster than ``first`` on
    ``p`` ranks under ``model`` (the chapter "Tree allreduce"), or ``None`` if ``first``
    is not faster for small messages or never loses below ``largest`` bytes.  Found by
    bisection; each algorithm's time is linear in ``n``, so there is at most one."""
    def gap(n: float) -> float:
        return model.time(first, p, n, **options) - model.time(second, p, n, **options)

    lo, hi = 1.0, largest
    if gap(lo) >= 0 or gap(hi) <= 0:
        return None
    while hi - lo > 1e-9 * hi:
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if gap(mid) < 0 else (lo, mid)
    return (lo + hi) / 2


def measured_crossover(sizes: Sequence[float], first: Sequence[float],
                       second: Sequence[float]) -> float | None:
    """Where measured times cross: the geometric mean of the last size at which ``first``
    was faster and the next one, once ``second`` stays faster; ``None`` if it never does
    or ``first`` is never faster."""
    faster = [a < b for a, b in zip(first, second)]
    if not faster[0] or all(faster):
        return None
    last = max(i for i, f in enumerate(faster) if f)
    if last == len(sizes) - 1:
        return None
    return math.sqrt(sizes[last] * sizes[last + 1])


def model_path() -> Path:
    """Where :func:`save` keeps this machine's fitted model: ``$ALLREDUCE_MODEL`` if set,
    else ``~/.cache/allreduce/model.json``."""
    default = Path.home() / ".cache" / "allreduce" / "model.json"
    return Path(os.environ.get("ALLREDUCE_MODEL", default))


def save(model: Model, path: Path | None = None) -> Path:
    """Keep a fitted model for later chapters' predictions (the lab "Why gradients must be
    aggregated" fits it).  Returns the path written."""
    path = path or model_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(asdict(model)))
    return path


def load(path: Path | None = None) -> Model | None:
    """The model :func:`save` kept, or ``None`` if there is none yet."""
    path = path or model_path()
    return Model(**json.loads(path.read_text())) if path.exists() else None
