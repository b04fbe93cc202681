"""Training with Top-k gradients, recorded once and committed (chapter "Sparse allreduce").

``python -m allreduce.sparse.topk_training`` trains the course's small transformer
(:mod:`allreduce.transformer`) from the same initialisation on the same batches, ``ranks``
data-parallel ranks each on its own shard, once per way of summing the gradients:

* ``dense``: the library's dense allreduce (mean) of every rank's whole gradient;
* Top-k at 1% and at 0.1%, **with** error feedback (each rank's residual kept and added to
  its next gradient: :class:`~allreduce.sparse.compression.ErrorFeedback`) and **without**
  (what is not sent is lost), summed with the library's ``sparse_allreduce``.

The ranks are threads of this process and the collectives are the library's own, on the
threads transport; the gradients are computed one rank after another, which gives the same
numbers as ranks side by side.  The record holds each run's training loss at every step,
the loss on a held-out batch of the fine-tuning text every ``evaluate_every`` steps, and the
pairs sent.  The chapter plots it and computes its claims from it; it never trains.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict, dataclass
from pathlib import Path

from ..transformer import Shape

RECORD = Path(__file__).resolve().parents[3] / "chapters" / "data" / "topk_training.json"

#: (name, density, error feedback); density None is the dense allreduce.
RUNS = (("dense", None, False), ("top-1% + error feedback", 0.01, True),
        ("top-1%, no feedback", 0.01, False), ("top-0.1% + error feedback", 0.001, True),
        ("top-0.1%, no feedback", 0.001, False))


@dataclass(frozen=True)
class Settings(Shape):
    steps: int = 300
    ranks: int = 4
    sequences_per_rank: int = 8
    learning_rate: float = 1e-3
    evaluate_every: int = 25
    evaluate_sequences: int = 64
    seed: int = 0


TINY = Settings(width=32, heads=2, blocks=1, context=16, steps=4, ranks=2,
                sequences_per_rank=2, evaluate_every=2, evaluate_sequences=4)


def train(settings: Settings, density: float | None, feedback: bool) -> dict:
    """One run; returns its losses and the pairs each rank sent per step."""
    import torch

    from .. import transformer as tf
    from ..api import allreduce
    from ..transports.threads import run_threads
    from . import sparse_allreduce
    from .compression import ErrorFeedback, topk

    model = tf.seeded_model(settings, settings.seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=settings.learning_rate)
    train_bytes, held_out = tf.split(tf.text())
    evaluation = tf.batch(held_out, 0, settings.evaluate_sequences, settings.context,
                          settings.seed + 2)
    n = sum(p.numel() for p in model.parameters())
    k = int(density * n) if density else n
    residuals = [ErrorFeedback(n, k) for _ in range(settings.ranks)] if feedback else None
    losses, evaluations = [], []
    for step in range(settings.steps + 1):
        if step % settings.evaluate_every == 0 or step == settings.steps:
            with torch.no_grad():
                evaluations.append([step, float(model.loss(evaluation))])
        if step == settings.steps:
            break
        tokens = tf.batch(train_bytes, step, settings.ranks * settings.sequences_per_rank,
                          settings.context, settings.seed)
        gradients, step_loss = [], 0.0
        for rank in range(settings.ranks):
            optimizer.zero_grad()
            loss = model.loss(tf.shard(tokens, rank, settings.ranks))
            loss.backward()
            step_loss += float(loss.detach()) / settings.ranks
            gradients.append(tf.flat_gradient(model).copy())
        losses.append(step_loss)
        if density is None:
            mean = run_threads(settings.ranks, lambda c: allreduce(
                gradients[c.rank], c, op="mean"))[0]
        else:
            pairs = [residuals[r].compress(g) if feedback else topk(g, k)
                     for r, g in enumerate(gradients)]
            mean = run_threads(settings.ranks, lambda c: sparse_allreduce(
                *pairs[c.rank], n, c, op="mean", dense_output=True))[0]
        start = 0
        for parameter in model.parameters():
            size = parameter.numel()
            parameter.grad = torch.from_numpy(mean[start:start + size].reshape(parameter.shape))
            start += size
        optimizer.step()
    return {"train_loss": losses, "held_out_loss": evaluations, "pairs_per_rank": k}


def record(settings: Settings = Settings()) -> dict:
    runs = {name: {"density": density, "error_feedback": feedback,
                   **train(settings, density, feedback)}
            for name, density, feedback in RUNS}
    return {"settings": asdict(settings), "runs": runs}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=RECORD)
    parser.add_argument("--tiny", action="store_true", help="a few seconds' worth (tests)")
    arguments = parser.parse_args(argv)
    result = record(TINY if arguments.tiny else Settings())
    arguments.out.write_text(json.dumps(result, indent=1) + "\n")
    for name, run in result["runs"].items():
        print(f"{name:>28}: held-out loss {run['held_out_loss'][-1][1]:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
