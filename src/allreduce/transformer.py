"""A small decoder-only transformer and a real English text to train it on, with no
download: the Python documentation's topics (``pydoc_data/topics.py``, shipped with
CPython, about 465,000 characters).  The sparse allreduce chapter takes its Top-k gradients
from it (:mod:`allreduce.sparse.samples`), as the thesis it follows took them from
fine-tuning Llama 2 7B, which cannot be downloaded here.

Bytes are the tokens (256 of them), so there is no tokenizer to ship.  The default model
has about 4.1 million parameters: 5 blocks of width 256 with 4 heads, a context of 64
bytes, an untied output layer.  The text is cut in two: the first part to train on, the
rest ("new topics") to fine-tune on; each data-parallel rank reads its own shard of every
batch.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F


@dataclass(frozen=True)
class Shape:
    """The model's size, as the scripts that record its gradients carry it in their
    settings (:mod:`allreduce.sparse.samples`, :mod:`allreduce.sparse.topk_training`)."""

    width: int = 256
    heads: int = 4
    blocks: int = 5
    context: int = 64

    def config(self) -> Config:
        return Config(self.width, self.heads, self.blocks, self.context)


@dataclass(frozen=True)
class Config(Shape):
    vocabulary: int = 256


class Block(nn.Module):
    """Pre-norm attention (causal) and a 4× MLP, each with a residual connection."""

    def __init__(self, config: Config):
        super().__init__()
        self.heads = config.heads
        self.norm1, self.norm2 = nn.LayerNorm(config.width), nn.LayerNorm(config.width)
        self.qkv = nn.Linear(config.width, 3 * config.width)
        self.out = nn.Linear(config.width, config.width)
        self.mlp = nn.Sequential(nn.Linear(config.width, 4 * config.width), nn.GELU(),
                                 nn.Linear(4 * config.width, config.width))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, length, width = x.shape
        q, k, v = self.qkv(self.norm1(x)).split(width, dim=2)
        q, k, v = (t.view(batch, length, self.heads, -1).transpose(1, 2) for t in (q, k, v))
        attended = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.out(attended.transpose(1, 2).reshape(batch, length, width))
        return x + self.mlp(self.norm2(x))


class TinyGPT(nn.Module):
    """Byte embeddings and positions, ``blocks`` blocks, a final norm and the output layer."""

    def __init__(self, config: Config = Config()):
        super().__init__()
        self.config = config
        self.embed = nn.Embedding(config.vocabulary, config.width)
        self.position = nn.Embedding(config.context, config.width)
        self.blocks = nn.Sequential(*(Block(config) for _ in range(config.blocks)))
        self.norm = nn.LayerNorm(config.width)
        self.head = nn.Linear(config.width, config.vocabulary)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(tokens.shape[1])
        x = self.blocks(self.embed(tokens) + self.position(positions))
        return self.head(self.norm(x))

    def loss(self, tokens: torch.Tensor) -> torch.Tensor:
        """Mean cross-entropy of predicting each next byte."""
        logits = self(tokens[:, :-1])
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), tokens[:, 1:].reshape(-1))


def seeded_model(shape: Shape, seed: int) -> TinyGPT:
    """A freshly initialised model, made the same on every run of one machine: one thread,
    deterministic algorithms, the seed."""
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    torch.manual_seed(seed)
    return TinyGPT(shape.config())


def text() -> bytes:
    """The Python documentation's topics, in key order, as UTF-8 bytes."""
    from pydoc_data.topics import topics

    return "".join(topics[key] for key in sorted(topics)).encode()


def split(data: bytes, train_fraction: float = 0.85) -> tuple[np.ndarray, np.ndarray]:
    """The bytes to train on and the bytes to fine-tune on."""
    array = np.frombuffer(data, np.uint8)
    cut = int(len(array) * train_fraction)
    return array[:cut], array[cut:]


def batch(data: np.ndarray, step: int, sequences: int, length: int, seed: int) -> torch.Tensor:
    """``sequences`` windows of ``length + 1`` bytes at places drawn from ``(seed, step)``:
    the same batch on every machine and every run."""
    rng = np.random.default_rng([seed, step])
    starts = rng.integers(0, len(data) - length - 1, sequences)
    return torch.from_numpy(np.stack([data[s:s + length + 1] for s in starts]).astype(np.int64))


def shard(tokens: torch.Tensor, rank: int, ranks: int) -> torch.Tensor:
    """Rank ``rank``'s contiguous share of a batch's sequences."""
    per = len(tokens) // ranks
    return tokens[rank * per:(rank + 1) * per]


def flat_gradient(model: nn.Module) -> np.ndarray:
    """Every parameter's gradient, in ``parameters()`` order, as one float32 vector."""
    return torch.cat([p.grad.reshape(-1) for p in model.parameters()]).numpy()
