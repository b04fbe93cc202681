"""``allreduce-bench``'s table: every algorithm and the peers (the MPI library's and torch's
own allreduce), size by size in interleaved rounds, as rows in nccl-tests' columns."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .timing import PEER, _interleaved, enough


@dataclass(frozen=True)
class Row:
    """One line of the table: one algorithm (or peer) at one size."""

    nbytes: int
    count: int
    dtype: str
    op: str
    name: str
    seconds: float
    ranks: int
    wrong: int
    peer_ratio: float | None = None  # our busbw / the best peer's busbw at this size
    predicted: float | None = None  # seconds, from the model fitted to this run (fit_model)
    #: the bytes up to which recursive doubling carried the check when this row was timed
    #: (:data:`allreduce.validation.IN_BAND_LIMIT` then); ``None``: today's
    in_band_limit: int | None = None
    #: the least seconds each call was timed for (``--least-timed``; 0: exactly ``-n``
    #: iterations); ``None``: a row from before the option
    least_timed: float | None = None

    @property
    def algbw(self) -> float:
        return self.nbytes / self.seconds

    @property
    def busbw(self) -> float:
        from ..cost import busbw

        return busbw(self.nbytes, self.seconds, self.ranks)


class _World:
    """What the benchmark needs from the launcher: the communicator that ``allreduce``
    runs on, barriers and reductions of scalars, and the peers (the libraries' own
    allreduce) with the reference result."""

    def __init__(self, torch_peer: bool):
        import os

        self.torch = None
        self.device = "cpu"
        if "TORCHELASTIC_RUN_ID" in os.environ:  # started by torchrun
            self._init_torch_only()
        else:
            self._init_mpi(torch_peer)

    def _init_mpi(self, torch_peer: bool) -> None:
        from mpi4py import MPI

        self.mpi = MPI
        self.comm = MPI.COMM_WORLD
        self.rank, self.size = self.comm.rank, self.comm.size
        ops = {"sum": MPI.SUM, "max": MPI.MAX, "min": MPI.MIN, "prod": MPI.PROD}
        self.peers = {PEER: lambda x, out, op: self.comm.Allreduce(x, out, op=ops[op])}
        self.deferred_torch_peer = torch_peer

    def enable_torch_peer(self) -> None:
        """Start a gloo process group on the MPI ranks and add torch's all_reduce as a peer.
        Called after everything else is timed: gloo's threads, once started, slow the
        other measurements of 4 ranks sharing 2 cores by up to 3x."""
        import torch
        import torch.distributed as dist

        from ..transports.torchdist import init_from_mpi

        torch.set_num_threads(1)  # ranks already share the cores
        init_from_mpi(self.comm)
        self.torch = dist
        self.peers["torch_all_reduce"] = _torch_all_reduce
        self.deferred_torch_peer = False

    def _init_torch_only(self) -> None:
        """Under torchrun: NCCL on CUDA tensors when this machine has a GPU (one per
        process, or several processes on one GPU where NCCL allows it), gloo otherwise."""
        import os

        import torch
        import torch.distributed as dist

        if torch.cuda.is_available():
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")) % torch.cuda.device_count())
            dist.init_process_group("nccl")
            self.device = "cuda"
        else:
            dist.init_process_group("gloo")
        self.mpi = None
        self.torch = dist
        self.comm = dist.group.WORLD
        self.rank, self.size = dist.get_rank(), dist.get_world_size()
        self.peers = {"torch_all_reduce": _torch_all_reduce}
        self.deferred_torch_peer = False

    def barrier(self) -> None:
        if self.mpi:
            self.comm.Barrier()
        else:
            self.torch.barrier()

    def synchronize(self) -> None:
        """Wait for the GPU: NCCL calls return before the data has moved."""
        if self.device == "cuda":
            import torch

            torch.cuda.synchronize()

    def describe(self) -> str:
        if self.device != "cuda":
            return "CPU"
        import torch

        return (f"{torch.cuda.get_device_name()} ({torch.cuda.device_count()} visible), NCCL "
                f"{'.'.join(map(str, torch.cuda.nccl.version()))}")

    def reduce_scalar(self, value: float, op: str) -> float:
        if self.mpi:
            return self.comm.allreduce(value, op=self.mpi.MAX if op == "max" else self.mpi.SUM)
        import torch

        t = torch.tensor([value], dtype=torch.float64, device=self.device)
        self.torch.all_reduce(t, op=self.torch.ReduceOp.MAX if op == "max" else self.torch.ReduceOp.SUM)
        return float(t[0])

    def close(self) -> None:
        if self.torch is not None:
            self.torch.destroy_process_group()


def _torch_all_reduce(x, out, op: str) -> None:
    import torch
    import torch.distributed as dist

    ops = {"sum": dist.ReduceOp.SUM, "max": dist.ReduceOp.MAX, "min": dist.ReduceOp.MIN,
           "prod": dist.ReduceOp.PRODUCT}
    if isinstance(out, np.ndarray):
        out[...] = x
        out = torch.from_numpy(out)
    else:  # a CUDA tensor (NCCL)
        out.copy_(x)
    dist.all_reduce(out, op=ops[op])


#: The least time, in seconds, that ``allreduce-bench`` times each call at a size for by
#: default (``--least-timed``): a short call gets more than ``-n`` iterations, up to
#: :data:`MOST_ITERATIONS`.  With ``-n 20`` alone a 1 KiB call was timed on 20 calls, about
#: a millisecond in all, in blocks of four after a barrier, and ``auto``'s ratio to
#: ``MPI_Allreduce`` there was 0.48-0.56 in three runs (2026-11-26) where runs of 3,000
#: iterations gave 0.55-0.68 (median 0.61) and a harness that alternates them gave 0.61-0.68.
LEAST_TIMED = 0.2
MOST_ITERATIONS = 10_000
#: Calls timed together to probe a call's time (:func:`~allreduce.bench.timing.enough`),
#: after one untimed call.
PROBES = 3


def run_table(world: _World, algorithms: list[str], sizes: list[int], *, dtype: str = "float32",
              op: str = "sum", iterations: int = 20, warmup: int = 5, least_timed: float = 0.0,
              progress=None) -> list[Row]:
    """Time every algorithm and every peer at every size, in interleaved rounds
    (:func:`_interleaved`; collective); every rank gets the rows.  Each call is timed
    ``iterations`` times, or more if that takes less than ``least_timed`` seconds
    (:data:`LEAST_TIMED` from the command line).  Each result is compared
    with the first peer's, element by element (#wrong).
    Under MPI the torch peer is timed last, over all sizes (see
    :meth:`_World.enable_torch_peer`)."""
    import allreduce

    from .. import api, arrays
    from ..testing import exact_input

    itemsize = np.dtype(dtype).itemsize
    reference = next(iter(world.peers.values()))
    inputs = {}
    for nbytes in sizes:
        count = nbytes // itemsize
        x = exact_input(world.rank, count, dtype, op)  # results exact in any order
        if world.device == "cuda":  # the data, and the reference sum, stay on the GPU:
            import torch  # an NCCL group moves no CPU tensor

            x = torch.from_numpy(x).cuda()
        expected = x.clone() if world.device == "cuda" else np.empty_like(x)
        reference(x, expected, "sum" if op == "mean" else op)
        if op == "mean":  # the peers have no mean: their sum, divided as the library does
            expected = expected / world.size
            if isinstance(expected, np.ndarray):
                expected = expected.astype(dtype)
        inputs[nbytes] = x, expected

    def measure(names: list[str], nbytes: int) -> list[Row]:
        x, expected = inputs[nbytes]
        outs = {name: x.clone() if world.device == "cuda" else np.empty_like(x) for name in names}

        def call_of(name: str):
            out = outs[name]
            if name in world.peers:
                def call():
                    world.peers[name](x, out, op)
                    world.synchronize()
            else:
                def call():
                    allreduce.allreduce(x, world.comm, algorithm=name, op=op, out=out)
                    world.synchronize()
            return call

        calls = {name: call_of(name) for name in names}
        slowest = lambda t: world.reduce_scalar(t, "max")
        counts = iterations if not least_timed else enough(
            calls, iterations, least_timed, MOST_ITERATIONS, barrier=world.barrier,
            slowest=slowest, probes=PROBES, warm=True)
        seconds = _interleaved(calls, counts, warmup, barrier=world.barrier, slowest=slowest)
        wrong = {name: int(world.reduce_scalar(float((outs[name] != expected).sum()), "sum"))
                 for name in names}
        return [Row(arrays.nbytes(x), len(x), dtype, op, name, seconds[name], world.size,
                    wrong[name], in_band_limit=api.IN_BAND_LIMIT, least_timed=least_timed)
                for name in names]

    peers = list(world.peers) if op != "mean" else []  # the peers have no mean
    passes = 2 if world.deferred_torch_peer and op != "mean" else 1
    rows: list[Row] = []
    for index, nbytes in enumerate(sizes):
        rows += measure([*peers, *algorithms], nbytes)
        if progress:
            progress(index + 1, len(sizes) * passes, nbytes)
    if passes == 2:
        world.enable_torch_peer()
        peers.append("torch_all_reduce")
        for index, nbytes in enumerate(sizes):
            rows += measure(["torch_all_reduce"], nbytes)
            if progress:
                progress(len(sizes) + index + 1, len(sizes) * passes, nbytes)
    order = {name: i for i, name in enumerate([*peers, *algorithms])}
    rows.sort(key=lambda row: (row.nbytes, order[row.name]))
    best = {n: min((r.seconds for r in rows if r.nbytes == n and r.name in peers), default=None)
            for n in sizes}
    return [Row(**{**row.__dict__, "peer_ratio": best[row.nbytes] / row.seconds
                   if best[row.nbytes] else None}) for row in rows]
