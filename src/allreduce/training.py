"""Data-parallel training with the course's own allreduce (chapter "Capstone: data-parallel
training").

A small classifier learns scikit-learn's handwritten digits (1,797 images of 8×8 pixels,
shipped with the package: no download).  Every rank takes the same sequence of batches and
computes the gradient of *its shard* of each batch; the shards' gradients are summed with
:func:`allreduce.allreduce`, and every rank applies the same SGD step.  Each rank's loss is
its shard's summed loss divided by the *whole* batch's size, so the sum over ranks is exactly
the full batch's mean loss, and the trained weights equal single-process training on the
full batches up to the order of floating-point additions.

How the gradients are reduced is a parameter, as in PyTorch's ``DistributedDataParallel``
(DDP):

* :func:`per_tensor`: one allreduce per parameter tensor;
* :func:`fused`: the tensors packed into buckets as DDP packs them, one allreduce per
  bucket (DDP's gradient bucketing);
* :class:`Overlap`: hooks start each tensor's allreduce on a communication thread as soon as
  backward has produced it, so communication overlaps the rest of the backward pass.
"""

from __future__ import annotations

import functools
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from .api import allreduce
from .ddp_buckets import ddp_buckets


@functools.lru_cache(maxsize=1)  # read once per process: every run trains on the same data
def digits():
    """The digits data set as ``(X, y)`` torch tensors: ``X`` float32 of shape (1797, 64)
    scaled to [0, 1], ``y`` int64 labels 0–9.  Shared: index them, do not modify them."""
    import torch
    from sklearn.datasets import load_digits

    data = load_digits()
    return (torch.tensor(data.data / 16.0, dtype=torch.float32),
            torch.tensor(data.target, dtype=torch.int64))


def make_model(seed: int = 0, hidden: int = 64):
    """A two-layer perceptron 64 → ``hidden`` → 10, initialised the same on every rank: each
    layer uniform in ±1/√fan-in as PyTorch does, but from a numpy generator of its own, so
    that ranks running as threads of one process do not share torch's global one."""
    import torch

    model = torch.nn.Sequential(torch.nn.Linear(64, hidden), torch.nn.ReLU(),
                                torch.nn.Linear(hidden, 10))
    rng = np.random.default_rng(seed)
    with torch.no_grad():
        for layer in (model[0], model[2]):
            bound = 1 / np.sqrt(layer.in_features)
            for parameter in (layer.weight, layer.bias):
                parameter.copy_(torch.from_numpy(
                    rng.uniform(-bound, bound, tuple(parameter.shape)).astype(np.float32)))
    return model


def batches(samples: int, batch_size: int, steps: int, seed: int = 0) -> list[np.ndarray]:
    """The sample indices of every step's batch: the same on every rank (seeded)."""
    rng = np.random.default_rng(seed)
    return [rng.choice(samples, batch_size, replace=False) for _ in range(steps)]


def shard(batch: np.ndarray, rank: int, size: int) -> np.ndarray:
    """This rank's part of a batch: ``size`` nearly equal contiguous pieces."""
    return np.array_split(batch, size)[rank]


# -- ways to sum the gradients ------------------------------------------------------------------

def gradients(model) -> list:
    """The model's gradient tensors, in parameter order."""
    return [p.grad for p in model.parameters()]


def per_tensor(model, comm, algorithm: str = "auto") -> None:
    """Sum every gradient over the ranks, one allreduce per parameter tensor, in place."""
    for grad in gradients(model):
        allreduce(grad, comm, algorithm=algorithm, out=grad)


def fused(model, comm, algorithm: str = "auto", bucket_bytes: int = 25 << 20) -> None:
    """Sum the gradients with one allreduce per bucket: the tensors, packed into flat
    buffers as DDP packs them after its first iteration when given ``bucket_cap_mb`` (in
    reverse order, each bucket closing once it reaches ``bucket_bytes``, the first too;
    by default DDP closes its first at 1 MiB: :func:`allreduce.ddp_buckets.ddp_buckets`)."""
    import torch

    every = gradients(model)
    for bucket in ddp_buckets([g.numel() * g.element_size() for g in every], bucket_bytes):
        grads = [every[i] for i in bucket]
        flat = torch.cat([g.reshape(-1) for g in grads])
        allreduce(flat, comm, algorithm=algorithm, out=flat)
        offset = 0
        for g in grads:
            g.copy_(flat[offset:offset + g.numel()].view_as(g))
            offset += g.numel()


class CommThread:
    """A thread that runs allreduces in the order they are submitted, so that the caller
    (the backward pass) can go on computing meanwhile.  ``wait()`` returns once every
    submitted tensor has been summed; an exception on the thread is raised there."""

    def __init__(self, comm, algorithm: str = "auto"):
        self.comm, self.algorithm = comm, algorithm
        self._work: queue.SimpleQueue = queue.SimpleQueue()
        self._pending = 0
        self._error: BaseException | None = None
        self._done = threading.Condition()
        self._thread = threading.Thread(target=self._run, name="allreduce-comm", daemon=True)
        self._thread.start()

    def submit(self, tensor) -> None:
        with self._done:
            self._pending += 1
        self._work.put(tensor)

    def _run(self) -> None:
        while (tensor := self._work.get()) is not None:
            try:
                if self._error is None:
                    allreduce(tensor, self.comm, algorithm=self.algorithm, out=tensor)
            except BaseException as error:  # noqa: BLE001 - handed to wait()
                self._error = error
            with self._done:
                self._pending -= 1
                self._done.notify_all()

    def wait(self) -> None:
        with self._done:
            while self._pending:
                self._done.wait()
        if self._error is not None:
            error, self._error = self._error, None
            raise error

    def close(self) -> None:
        self._work.put(None)
        self._thread.join()


class InOrder:
    """Hands gradients to a :class:`CommThread` in one fixed order, the reverse of the
    parameters' (roughly the order backward produces them), whatever order the hooks fire
    in: a gradient ready early waits for those before it.  Each allreduce is collective, so
    every rank must start them in the same order; autograd does not promise that its hooks
    fire in the same order on every rank, so, like DDP, which reduces its buckets strictly in
    index order, the order is fixed and not left to the hooks."""

    def __init__(self, thread: CommThread, parameters):
        self.thread = thread
        self.order = list(reversed(list(parameters)))
        self._ready: set[int] = set()
        self._next = 0

    def submit(self, grad) -> None:
        """``grad`` (a parameter's ``.grad``) is ready; submit every gradient now due."""
        index = next((i for i, p in enumerate(self.order) if p.grad is grad), None)
        if index is None:
            raise ValueError("submit was given a tensor that is not the .grad of any of the "
                             "model's parameters")
        if index < self._next or index in self._ready:
            raise RuntimeError(f"the gradient of parameter {len(self.order) - 1 - index} was "
                               "submitted twice in one step")
        self._ready.add(index)
        while self._next in self._ready:
            self.thread.submit(self.order[self._next].grad)
            self._next += 1
        if self._next == len(self.order):  # the step's last gradient: start the next step
            self._next = 0
            self._ready.clear()

    def check_step_complete(self) -> None:
        """Raise unless every gradient of the step was submitted (called before waiting)."""
        if self._next or self._ready:
            missing = len(self.order) - self._next - len(self._ready)
            self._next, self._ready = 0, set()
            raise RuntimeError(f"{missing} of the model's {len(self.order)} gradients were not "
                               "submitted in this step: every parameter must get a gradient "
                               "(as DDP requires without find_unused_parameters)")


class Overlap:
    """Overlap the gradient allreduce with the backward pass: a hook on every parameter
    hands its gradient, as soon as backward has accumulated it, to :class:`InOrder`, which
    submits the gradients to a :class:`CommThread` in the order every rank agreed on (the
    ranks check at the start that their models have the same parameter shapes).  Use
    :meth:`__call__` where :func:`per_tensor` would be called: it waits for the thread."""

    def __init__(self, model, comm, algorithm: str = "auto", *, attach=None):
        shapes = [tuple(p.shape) for p in model.parameters()]
        if any(theirs != shapes for theirs in comm.allgather_object(shapes)):
            raise ValueError("the ranks' models differ: their parameter shapes do not agree")
        self.thread = CommThread(comm, algorithm)
        self.ordered = InOrder(self.thread, model.parameters())
        (attach or attach_hooks)(model, self.ordered)

    def __call__(self, model, comm, algorithm: str = "auto") -> None:
        self.ordered.check_step_complete()
        self.thread.wait()

    def close(self) -> None:
        self.thread.close()


def attach_hooks(model, thread: CommThread | InOrder) -> None:
    """The overlap: after backward accumulates a parameter's gradient, submit it."""
    for parameter in model.parameters():
        parameter.register_post_accumulate_grad_hook(lambda p: thread.submit(p.grad))


# -- the training loop ----------------------------------------------------------------------------

@dataclass
class Run:
    """What :func:`train` returns: the final weights (flat float64 numpy), the full batch's
    mean loss at every step, and each step's seconds of compute, of waiting at a barrier for
    the slowest rank to finish its compute, and of communication."""

    weights: np.ndarray
    losses: list[float] = field(default_factory=list)
    compute: list[float] = field(default_factory=list)
    wait: list[float] = field(default_factory=list)
    communicate: list[float] = field(default_factory=list)


def flat_weights(model) -> np.ndarray:
    return np.concatenate([p.detach().double().reshape(-1).numpy() for p in model.parameters()])


def train(comm=None, *, algorithm: str = "auto", average: Callable | str = "per_tensor",
          steps: int = 40, batch_size: int = 64, lr: float = 0.5, seed: int = 0,
          bucket_bytes: int = 25 << 20, attach: Callable | None = None) -> Run:
    """Data-parallel SGD on the digits.  ``comm`` is an mpi4py communicator, a
    torch.distributed process group or an :class:`~allreduce.comm.Communicator`; ``None``
    trains in one process on the full batches (the reference).  ``average`` is
    ``"per_tensor"``, ``"fused"`` or ``"overlap"``, or a function ``average(model, comm,
    algorithm)`` that sums the gradients in place.  ``attach(model, thread)`` replaces
    :func:`attach_hooks` for ``"overlap"`` (the capstone lab's exercise)."""
    import torch

    from .transports import as_communicator

    torch.set_num_threads(1)
    communicator = None if comm is None else as_communicator(comm)
    rank, size = (0, 1) if communicator is None else (communicator.rank, communicator.size)
    X, y = digits()
    model = make_model(seed)
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    overlap = None
    if average == "per_tensor":
        average = per_tensor
    elif average == "fused":
        average = lambda m, c, a: fused(m, c, a, bucket_bytes)  # noqa: E731
    elif average == "overlap" and communicator is not None:
        overlap = average = Overlap(model, communicator, algorithm, attach=attach)
    run = Run(weights=np.empty(0))
    try:
        for batch in batches(len(X), batch_size, steps, seed):
            mine = shard(batch, rank, size)
            start = time.perf_counter()
            optimizer.zero_grad(set_to_none=False)
            loss = torch.nn.functional.cross_entropy(model(X[mine]), y[mine], reduction="sum")
            (loss / batch_size).backward()  # Σ over ranks = the full batch's mean loss
            computed = time.perf_counter()
            if communicator is not None and overlap is None:
                # measurement only: without it, the time a rank waits for a slower one
                # (on an oversubscribed machine, for the ranks sharing its core) would be
                # counted as communication.  With overlap, communication is already under
                # way during backward, and a barrier would stop it from overlapping.
                communicator.barrier()
            waited = time.perf_counter()
            total = torch.tensor([loss.item() / batch_size], dtype=torch.float64)
            if communicator is not None:
                average(model, communicator, algorithm)
                allreduce(total, communicator, algorithm=algorithm, out=total)
            run.compute.append(computed - start)
            run.wait.append(waited - computed)
            run.communicate.append(time.perf_counter() - waited)
            optimizer.step()
            run.losses.append(float(total))
    finally:
        if overlap is not None:
            overlap.close()
    run.weights = flat_weights(model)
    return run


def train_ddp(group, *, steps: int = 40, batch_size: int = 64, lr: float = 0.5,
              seed: int = 0) -> Run:
    """The same training with PyTorch's ``DistributedDataParallel`` over the process group
    ``group`` (gloo on CPU), for comparison.  DDP averages the gradients, so each rank's
    loss is its shard's mean; the batch must divide evenly among the ranks for this to be
    the full batch's mean."""
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    torch.set_num_threads(1)
    rank, size = dist.get_rank(group), dist.get_world_size(group)
    if batch_size % size:
        raise ValueError(f"batch_size {batch_size} must be a multiple of the {size} ranks")
    X, y = digits()
    model = DistributedDataParallel(make_model(seed), process_group=group)
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    run = Run(weights=np.empty(0))
    for batch in batches(len(X), batch_size, steps, seed):
        mine = shard(batch, rank, size)
        optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(X[mine]), y[mine])
        loss.backward()
        optimizer.step()
        total = loss.detach().double().reshape(1) / size
        dist.all_reduce(total, group=group)
        run.losses.append(float(total))
    run.weights = flat_weights(model.module)
    return run


def compare(algorithms: list[str], *, steps: int = 40, batch_size: int = 64) -> dict:
    """Under ``mpiexec``: train with each algorithm (per-tensor, fused and overlapped
    gradient sums for the first), with DDP over gloo, and in one process on the full
    batches; return every run (collective; rank 0's dict is complete).  What the
    capstone chapter runs at build time, through :func:`run_compare`."""
    import torch.distributed as dist
    from mpi4py import MPI

    from .transports.torchdist import init_from_mpi

    world = MPI.COMM_WORLD
    options = {"steps": steps, "batch_size": batch_size}
    runs = {"single process": train(None, **options)}
    for index, algorithm in enumerate(algorithms):
        for average in (("per_tensor", "fused", "overlap") if index == 0 else ("per_tensor",)):
            runs[f"{algorithm}, {average}"] = train(world, algorithm=algorithm, average=average,
                                                    **options)
    init_from_mpi(world)
    try:
        runs["DDP (gloo)"] = train_ddp(dist.group.WORLD, **options)
    finally:
        dist.destroy_process_group()
    def slowest(run: Run) -> dict[str, list[float]]:
        mine = np.array([run.compute, run.wait, run.communicate], dtype=np.float64)
        everyone = np.empty((world.size, *mine.shape))
        world.Allgather(mine, everyone)
        return slowest_rank_parts(everyone)

    return {"ranks": world.size, "steps": steps, "batch_size": batch_size,
            "runs": {name: {"weights": run.weights.tolist(), "losses": run.losses,
                            **slowest(run)}
                     for name, run in runs.items()}}


def slowest_rank_parts(everyone: np.ndarray) -> dict[str, list[float]]:
    """Each step's compute, wait and communication on the rank whose step took longest,
    from every rank's ``[compute, wait, communicate]`` seconds (shape ``(ranks, 3, steps)``):
    one rank's parts, so that they add up to its step (the largest wait belongs to the
    fastest rank, so the largest of each part would add up to no rank's step)."""
    worst = everyone.sum(axis=1).argmax(axis=0)  # per step
    parts = everyone[worst, :, np.arange(everyone.shape[2])]  # (steps, 3)
    return {name: parts[:, i].tolist()
            for i, name in enumerate(("compute", "wait", "communicate"))}


def run_compare(ranks: int, algorithms: list[str], *, steps: int = 40, timeout: float = 300) -> dict:
    """:func:`compare` on ``ranks`` fresh MPI processes (this environment's ``mpiexec``)."""
    import json
    import subprocess
    import sys

    from .launch import mpiexec, rank_environment

    command = [str(mpiexec()), "-n", str(ranks), sys.executable, "-m", "mpi4py", "-m",
               "allreduce.training", "--steps", str(steps), *algorithms]
    run = subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False,
                         env=rank_environment())
    if run.returncode:
        raise RuntimeError(f"{' '.join(command)} failed:\n{run.stderr[-2000:]}")
    return json.loads(run.stdout)


def _main() -> None:
    import argparse
    import json

    from mpi4py import MPI

    parser = argparse.ArgumentParser(description="data-parallel training of the digits, "
                                     "every way of summing the gradients (run under mpiexec)")
    parser.add_argument("algorithms", nargs="+")
    parser.add_argument("--steps", type=int, default=40)
    args = parser.parse_args()
    result = compare(args.algorithms, steps=args.steps)
    if MPI.COMM_WORLD.rank == 0:
        print(json.dumps(result))


if __name__ == "__main__":
    _main()
