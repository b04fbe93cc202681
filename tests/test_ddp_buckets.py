"""DDP's buckets as the course computes them (allreduce.ddp_buckets) against the buckets a
real DistributedDataParallel logs after its rebuild, on models and caps that give several
buckets, the capstone's model included; and the packing rule on its own."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from allreduce import training  # noqa: E402
from allreduce.ddp_buckets import (  # noqa: E402
    BUCKET_BYTES,
    FIRST_BUCKET_BYTES,
    buckets,
    ddp_buckets,
    real_ddp_buckets,
)


def sizes_of(model):
    return [p.numel() * p.element_size() for p in model.parameters()]


def stack(dims):
    torch.manual_seed(0)
    layers = []
    for a, b in zip(dims[:-1], dims[1:]):
        layers += [torch.nn.Linear(a, b), torch.nn.ReLU()]
    return torch.nn.Sequential(*layers[:-1])


def test_a_bucket_closes_once_it_reaches_its_cap():
    assert buckets([4, 4, 4], 8) == [[0, 1], [2]]
    assert buckets([5, 1, 9, 2], 4) == [[0], [1, 2], [3]]  # [1, 9] is 10 bytes: over the cap
    assert buckets([3, 3, 3, 3], 100, first_cap=3) == [[0], [1, 2, 3]]
    assert buckets([], 8) == []
    assert ddp_buckets([4, 4, 4], 8) == [[2, 1], [0]]
    assert ddp_buckets([10, 2, 3], 4) == [[2, 1], [0]]


@pytest.mark.parametrize(("dims", "cap_mb"), [
    ([300, 512, 400, 360, 256, 192, 128, 600, 40, 10], 0.25),  # 6 buckets
    ([300, 512, 400, 360, 256, 192, 128, 600, 40, 10], 97800 / 2**20),  # caps met exactly
    ([64, 64, 10], 100 / 2**20),  # the capstone's shape, 3 buckets
])
def test_the_buckets_equal_a_real_ddps_after_its_rebuild(dims, cap_mb):
    model = stack(dims)
    cap = int(cap_mb * 2**20)
    real = real_ddp_buckets(model, torch.randn(5, dims[0]), bucket_cap_mb=cap_mb)
    assert len(real) >= 3
    assert ddp_buckets(sizes_of(model), cap) == real


def test_the_capstone_model_and_ddps_default_caps():
    """The capstone's own model: with DDP's defaults one bucket; with a cap that splits it,
    DDP's real buckets; and a larger model under the defaults (1 MiB first bucket)."""
    capstone = training.make_model()
    example = training.digits()[0][:8]
    assert real_ddp_buckets(capstone, example) == ddp_buckets(
        sizes_of(capstone), BUCKET_BYTES, FIRST_BUCKET_BYTES) == [[3, 2, 1, 0]]
    split = real_ddp_buckets(capstone, example, bucket_cap_mb=100 / 2**20)
    assert split == ddp_buckets(sizes_of(capstone), 100) and len(split) == 3
    big = stack([300, 512, 400, 360, 256, 192, 128, 600, 40, 10])
    assert real_ddp_buckets(big, torch.randn(5, 300)) == ddp_buckets(
        sizes_of(big), BUCKET_BYTES, FIRST_BUCKET_BYTES)


def test_chapter_70s_encoder_has_the_buckets_a_real_ddp_makes():
    """The nccl chapter's 12-layer encoder of width 1,024 (about 600 MB of gradients): a
    real DDP, after its rebuild, makes as many buckets as the reverse order the chapter
    takes, each within one LayerNorm's bytes of it: the chapter says the order is nearly
    so (each layer's first norm is ready a little later than its place)."""
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(d_model=1024, nhead=16, dim_feedforward=4096)
    encoder = torch.nn.TransformerEncoder(layer, num_layers=12, enable_nested_tensor=False)
    sizes = sizes_of(encoder)
    ours = ddp_buckets(sizes, BUCKET_BYTES, FIRST_BUCKET_BYTES)
    real = real_ddp_buckets(encoder, torch.randn(8, 2, 1024))
    assert len(real) == len(ours) == 19
    norm = 2 * 1024 * 4  # a LayerNorm's weight and bias, float32
    for theirs, mine in zip(real, ours):
        assert abs(sum(sizes[i] for i in theirs) - sum(sizes[i] for i in mine)) <= norm
    assert real != ours  # the norms: not the same tensors in every bucket
