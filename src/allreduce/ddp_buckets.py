"""DDP's gradient buckets, as PyTorch assigns them (chapter "Allreduce on GPUs: NCCL").

What ``DistributedDataParallel`` does in torch 2.13, read in ``torch/nn/parallel/distributed.py``
and ``torch/csrc/distributed/c10d/reducer.cpp``:

* At construction, with the defaults (no ``find_unused_parameters``), the bucket limits are
  ``[sys.maxsize]`` (``_BucketCapacityConfig.compute_bucket_size_limits``): the **first
  iteration reduces every gradient in one bucket**.
* During that iteration the reducer records the order in which gradients become ready
  (``push_rebuilt_params``); at the start of the second forward, ``rebuild_buckets``
  packs the parameters **in that order** with the limits ``[first, cap]``: ``cap`` is
  ``bucket_cap_mb`` (25 MiB by default) and ``first`` is 1 MiB
  (``dist._DEFAULT_FIRST_BUCKET_BYTES``) when ``bucket_cap_mb`` was not given, else ``cap``.
  The order is then broadcast from rank 0 (``sync_bucket_indices``).
* ``compute_bucket_assignment_by_size`` closes a bucket once its bytes **reach** its limit,
  so a bucket can exceed it (:func:`buckets`).  Buckets never mix dtypes or devices.

:func:`real_ddp_buckets` reads the buckets a real DDP settled on, and the test suite checks
:func:`ddp_buckets` against it.
"""

from __future__ import annotations

import copy
import os
import tempfile

#: The first bucket's limit when ``bucket_cap_mb`` is not given
#: (``dist._DEFAULT_FIRST_BUCKET_BYTES``).
FIRST_BUCKET_BYTES = 1 << 20
#: ``bucket_cap_mb``'s default, in bytes.
BUCKET_BYTES = 25 << 20


def buckets(sizes: list[int], cap: int, first_cap: int | None = None) -> list[list[int]]:
    """Pack tensors of ``sizes`` bytes, in the order given, as DDP's
    ``compute_bucket_assignment_by_size`` does for one dtype and device: a bucket closes as
    soon as its bytes reach its limit (``first_cap`` for the first, ``cap`` after), so it may
    exceed it.  Returns each bucket's positions in ``sizes``."""
    packed: list[list[int]] = []
    current: list[int] = []
    filled, limit = 0, cap if first_cap is None else first_cap
    for index, size in enumerate(sizes):
        current.append(index)
        filled += size
        if filled >= limit:
            packed.append(current)
            current, filled, limit = [], 0, cap
    return packed + [current] if current else packed


def ddp_buckets(sizes: list[int], cap: int, first_cap: int | None = None) -> list[list[int]]:
    """The buckets DDP reduces from its second iteration on, for parameters registered in
    the order of ``sizes`` (gradient bytes of each) whose gradients become ready in reverse
    order, as backward produces them for a sequential model.  ``first_cap`` defaults to
    ``cap``, as when ``bucket_cap_mb`` is given; DDP's defaults are ``cap =``
    :data:`BUCKET_BYTES`, ``first_cap =`` :data:`FIRST_BUCKET_BYTES`.  Returns parameter
    indices, each bucket in the order its gradients are ready."""
    last = len(sizes) - 1
    return [[last - i for i in bucket] for bucket in buckets(sizes[::-1], cap, first_cap)]


def real_ddp_buckets(model, example, *, bucket_cap_mb: float | None = None,
                     iterations: int = 3) -> list[list[int]]:
    """The buckets (parameter indices) that a real ``DistributedDataParallel`` around a copy
    of ``model`` uses after its rebuild, from its logging data
    (``rebuilt_per_bucket_param_indices``, logged from the third iteration on).  Trains
    ``iterations`` steps on ``example`` in a one-rank gloo group of its own when no process
    group exists (the buckets do not depend on the number of ranks)."""
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    own_group = not dist.is_initialized()
    with tempfile.TemporaryDirectory() as folder:
        if own_group:
            store = dist.FileStore(os.path.join(folder, "store"), 1)
            dist.init_process_group("gloo", store=store, rank=0, world_size=1)
        try:
            options = {} if bucket_cap_mb is None else {"bucket_cap_mb": bucket_cap_mb}
            ddp = DistributedDataParallel(copy.deepcopy(model), **options)
            for _ in range(max(iterations, 3)):
                ddp.zero_grad()
                ddp(example).sum().backward()
            logged = ddp._get_ddp_logging_data()["rebuilt_per_bucket_param_indices"]
        finally:
            if own_group:
                dist.destroy_process_group()
    return [[int(i) for i in bucket.split()] for bucket in logged.split(",")]
