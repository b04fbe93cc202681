"""A communication hook that plugs this course's allreduce into PyTorch's
``DistributedDataParallel`` (chapter "Sparse allreduce"), the way torch
ships ``powerSGD_hook`` and ``fp16_compress_hook``::

    state = allreduce.DDPHookState(density=0.01)      # Top-k at 1%, error feedback
    model.register_comm_hook(state, allreduce.ddp_hook)

What DDP does around a hook (torch 2.13, ``reducer.cpp``): it no longer divides the
gradients by the number of ranks as it copies them into a bucket, so the hook averages, as
torch's own ``allreduce_hook`` does; and it reduces everything in one bucket in the first
iteration, then rebuilds its buckets (:mod:`allreduce.ddp_buckets`), so residuals kept per
bucket start only after ``start_iteration`` (one of the two reasons ``powerSGD_hook``
gives for its ``start_powerSGD_iter``, which must be at least 2 with error feedback:
``torch/distributed/algorithms/ddp_comm_hooks/powerSGD_hook.py``); before that, and always with ``density=None``, the hook runs the
dense allreduce (on any backend).  Top-k works on CPU buckets (gloo): the sparse allreduce
moves numpy arrays.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from .api import allreduce
from .sparse import sparse_allreduce
from .sparse.compression import ErrorFeedback, topk
from .transports import as_communicator


@dataclass
class DDPHookState:
    """What :func:`ddp_hook` needs: the process group (``None``: the default group), the
    dense algorithm, the Top-k ``density`` (``None``: dense), whether Top-k keeps an
    ``error_feedback`` residual, and the iteration from which Top-k runs (at least 2, after
    DDP's bucket rebuild)."""

    group: object = None
    algorithm: str = "auto"
    density: float | None = None
    error_feedback: bool = True
    start_iteration: int = 10
    iteration: int = 0
    residuals: dict[int, ErrorFeedback] = field(default_factory=dict)

    def __post_init__(self):
        if self.density is not None and not 0 < self.density <= 1:
            raise ValueError(f"density must be in (0, 1], got {self.density}")
        if self.start_iteration < 2:
            raise ValueError("start_iteration must be at least 2: DDP rebuilds its buckets "
                             "after the first iteration, and residuals are kept per bucket")


def ddp_hook(state: DDPHookState, bucket):
    """Average one bucket of gradients over the ranks with the course's allreduce (dense, or
    Top-k with error feedback through :func:`~allreduce.sparse_allreduce`), in place, and
    return a completed future, as ``register_comm_hook`` expects."""
    import torch
    import torch.distributed as dist

    group = state.group if state.group is not None else dist.group.WORLD
    comm = as_communicator(group)
    buffer = bucket.buffer()
    if state.density is None or state.iteration < state.start_iteration:
        allreduce(buffer, comm, algorithm=state.algorithm, out=buffer)
    else:
        flat = buffer.detach().numpy()
        feedback = state.residuals.get(bucket.index())
        if feedback is None or len(feedback.residual) != len(flat):
            k = max(1, math.ceil(state.density * len(flat)))
            feedback = state.residuals[bucket.index()] = ErrorFeedback(len(flat), k, flat.dtype)
        indices, values = feedback.compress(flat) if state.error_feedback else \
            topk(flat, feedback.k)
        summed = sparse_allreduce(indices, values, len(flat), comm, dense_output=True)
        buffer.copy_(torch.from_numpy(np.ascontiguousarray(summed)))
    buffer.div_(comm.size)
    if bucket.is_last():
        state.iteration += 1
    future = torch.futures.Future()
    future.set_result(buffer)
    return future
