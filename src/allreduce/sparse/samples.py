"""Top-k gradients of a real model, recorded once and committed (chapter "Sparse allreduce").

``python -m allreduce.sparse.samples`` trains the course's small transformer
(:mod:`allreduce.transformer`, about 4.1 M parameters) on the first part of the Python
documentation's topics, then fine-tunes it on the rest as ``shards`` data-parallel ranks
would, each on its own shard of every batch, and records every shard's gradient at each
fine-tuning step:

* the **fill-in**: the size of the union of the first ``s`` shards' Top-k supports, for
  ``s = 1 … shards`` (64 by default) at several densities, beside the independent-supports
  baseline ``n(1 − (1 − d)^s)``;
* the **supports** at the lowest density for every shard and step, and the Top-k pairs
  (index and float32 value) at :data:`PAIRS_DENSITY` for the first ``pair_shards`` shards:
  Top-k sets are nested, so the Top-k at every lower density is exactly the largest of
  those (ties to the lower index, as :func:`~allreduce.sparse.compression.topk` breaks them).

Everything is deterministic on one machine (one thread, fixed seeds, deterministic
algorithms): a rerun writes the same arrays.  Higher densities need the full gradients,
which :func:`full_gradients` regenerates by rerunning the recording (minutes) and caches.
"""

from __future__ import annotations

import argparse
import json
import os
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import numpy as np

from ..transformer import Shape
from .compression import topk

#: The committed record, read by the chapter, the lab and ``allreduce-bench --sparse``.
RECORD = Path(__file__).resolve().parents[3] / "chapters" / "data" / "topk_gradients.npz"
PAIRS_DENSITY = 0.01


@dataclass(frozen=True)
class Settings(Shape):
    pretrain_steps: int = 400
    pretrain_sequences: int = 32
    learning_rate: float = 1e-3
    shards: int = 64
    sequences_per_shard: int = 4
    steps: int = 3
    densities: tuple[float, ...] = (0.001, 0.01, 0.1)
    pair_shards: int = 4
    seed: int = 0
    keep_full: tuple[int, ...] = field(default=(), compare=False)  # steps to keep whole


#: A few seconds' worth, for the test that reruns the recording.
TINY = Settings(width=32, heads=2, blocks=1, context=16, pretrain_steps=3,
                pretrain_sequences=4, shards=8, sequences_per_shard=2, steps=2,
                densities=(0.01, 0.1), pair_shards=2)


def _delta(indices: np.ndarray) -> np.ndarray:
    """Sorted indices as gaps (uint32), which compress well."""
    return np.diff(indices, prepend=0).astype(np.uint32)


def undelta(gaps: np.ndarray) -> np.ndarray:
    return np.cumsum(gaps, dtype=np.int64)


def record(settings: Settings = Settings()) -> dict[str, np.ndarray]:
    """Train, fine-tune, and return the arrays of the record (see the module docstring)."""
    import torch

    from .. import transformer as tf

    model = tf.seeded_model(settings, settings.seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=settings.learning_rate)
    train, tune = tf.split(tf.text())
    losses = []
    for step in range(settings.pretrain_steps):
        optimizer.zero_grad()
        loss = model.loss(tf.batch(train, step, settings.pretrain_sequences,
                                   settings.context, settings.seed))
        loss.backward()
        optimizer.step()
        losses.append(float(loss.detach()))
    n = sum(p.numel() for p in model.parameters())
    top = max(settings.densities)
    shards, steps = settings.shards, settings.steps
    fill = np.zeros((len(settings.densities), steps, shards), np.int64)
    low, pairs, values, tune_losses, full = [], [], [], [], {}
    for step in range(steps):
        tokens = tf.batch(tune, step, shards * settings.sequences_per_shard, settings.context,
                          settings.seed + 1)
        total = np.zeros(n, np.float32)
        seen = np.zeros((len(settings.densities), n), bool)
        for s in range(shards):
            optimizer.zero_grad()
            loss = model.loss(tf.shard(tokens, s, shards))
            loss.backward()
            tune_losses.append(float(loss.detach()))
            gradient = tf.flat_gradient(model)
            total += gradient
            if step in settings.keep_full and s < settings.pair_shards:
                full[s] = gradient.copy()
            indices, chosen = topk(gradient, int(top * n))
            by_size = indices[np.argsort(-np.abs(chosen), kind="stable")]  # nested Top-k
            for d, density in enumerate(settings.densities):
                seen[d, by_size[:int(density * n)]] = True
                fill[d, step, s] = int(seen[d].sum())
            low.append(_delta(np.sort(by_size[:int(min(settings.densities) * n)])))
            if s < settings.pair_shards:
                kept = np.sort(by_size[:int(PAIRS_DENSITY * n)])
                pairs.append(_delta(kept))
                values.append(gradient[kept].copy())
        for parameter, piece in zip(model.parameters(), _pieces(total / shards, model)):
            parameter.grad = torch.from_numpy(piece)
        optimizer.step()  # the data-parallel update with the shards' mean gradient
    names = [name for name, _ in model.named_parameters()]
    sizes = [p.numel() for p in model.parameters()]
    meta = {"settings": {k: v for k, v in asdict(settings).items() if k != "keep_full"},
            "n": n, "pairs_density": PAIRS_DENSITY, "parameters": list(zip(names, sizes)),
            "pretrain_loss": losses, "fine_tune_loss": tune_losses}
    arrays = {"meta": np.frombuffer(json.dumps(meta).encode(), np.uint8),
              "fill_in": fill, "low_supports": np.concatenate(low),
              "low_counts": np.array([len(x) for x in low]),
              "pair_indices": np.concatenate(pairs), "pair_values": np.concatenate(values),
              "pair_counts": np.array([len(x) for x in pairs])}
    for s, gradient in full.items():
        arrays[f"full_{s}"] = gradient
    return arrays


def _pieces(flat: np.ndarray, model):
    start = 0
    for parameter in model.parameters():
        yield flat[start:start + parameter.numel()].reshape(parameter.shape).copy()
        start += parameter.numel()


class Samples:
    """The committed record, read back."""

    def __init__(self, path: Path | str = RECORD):
        with np.load(path) as data:
            self.arrays = {key: data[key] for key in data.files}
        self.meta = json.loads(self.arrays["meta"].tobytes())
        self.n = self.meta["n"]
        settings = self.meta["settings"]
        self.shards, self.steps = settings["shards"], settings["steps"]
        self.densities = tuple(settings["densities"])
        self.pair_shards = settings["pair_shards"]

    def fill_in(self, density: float) -> np.ndarray:
        """u_s for s = 1 … shards at ``density``, one row per step."""
        return self.arrays["fill_in"][self.densities.index(density)]

    def support(self, shard: int, step: int = 0) -> np.ndarray:
        """Shard ``shard``'s Top-k indices at the lowest density, sorted."""
        counts = self.arrays["low_counts"]
        at = step * self.shards + shard
        start = int(counts[:at].sum())
        return undelta(self.arrays["low_supports"][start:start + counts[at]])

    def pairs(self, shard: int, step: int = 0, density: float = PAIRS_DENSITY):
        """Shard ``shard``'s Top-k pairs at ``density`` ≤ the stored one, as sorted int64
        indices and float32 values: the largest by magnitude of the stored pairs, which is
        the Top-k of the gradient itself."""
        if density > self.meta["pairs_density"] or shard >= self.pair_shards:
            raise ValueError(f"stored: shards < {self.pair_shards}, densities up to "
                             f"{self.meta['pairs_density']}; regenerate with full_gradients()")
        counts = self.arrays["pair_counts"]
        at = step * self.pair_shards + shard
        start = int(counts[:at].sum())
        indices = undelta(self.arrays["pair_indices"][start:start + counts[at]])
        values = self.arrays["pair_values"][start:start + counts[at]]
        keep = np.sort(np.argsort(-np.abs(values), kind="stable")[:int(density * self.n)])
        return indices[keep], values[keep]


def full_gradients(shards: int = 4, step: int = 0, cache: Path | None = None) -> np.ndarray:
    """The first ``shards`` shards' whole gradients at fine-tuning ``step`` (shape
    ``(shards, n)``), for densities above the stored one: regenerated by rerunning the
    recording (several minutes, one thread), then kept in ``~/.cache/allreduce``."""
    import hashlib

    import torch

    cache = cache or Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "allreduce"
    settings = replace(Settings(), steps=step + 1, pair_shards=shards, keep_full=(step,))
    key = hashlib.sha256(f"{Settings()} {torch.__version__}".encode()).hexdigest()[:12]
    path = cache / f"topk_full_{shards}_{step}_{key}.npy"  # a new recipe is a new file
    if path.exists():
        return np.load(path)
    arrays = record(settings)
    gradients = np.stack([arrays[f"full_{s}"] for s in range(shards)])
    cache.mkdir(parents=True, exist_ok=True)
    np.save(path, gradients)
    return gradients


def save(arrays: dict[str, np.ndarray], path: Path) -> None:
    np.savez_compressed(path, **{k: v for k, v in arrays.items() if not k.startswith("full_")})


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=RECORD)
    parser.add_argument("--tiny", action="store_true", help="a few seconds' worth (tests)")
    arguments = parser.parse_args(argv)
    arrays = record(TINY if arguments.tiny else Settings())
    save(arrays, arguments.out)
    print(f"wrote {arguments.out} ({arguments.out.stat().st_size / 1e6:.2f} MB)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
