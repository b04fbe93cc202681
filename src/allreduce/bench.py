"""Timing allreduce the way the field does (nccl-tests, OSU): warm-up, barrier, time, take
the slowest rank, and check every result.  The algorithms and peers of one size are timed
in interleaved rounds (:func:`_interleaved`), so that a shared machine's drift hits them
alike.

* The labs and the book's pages measure with :func:`sweep` (ring steps, local adds and
  algorithms over an mpi4py communicator; :func:`run_sweep` starts it under ``mpiexec``)
  and :func:`fit_step_model`.  Taught in the chapter "Ring allreduce".
* ``allreduce-bench`` (:func:`main`) prints the nccl-tests table with the MPI library's and
  torch's own allreduce as peers, under ``mpiexec`` or ``torchrun``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

PEER = "MPI_Allreduce"


@dataclass(frozen=True)
class Timing:
    """``seconds``: time of one call on the slowest rank (:func:`_interleaved`); ``wrong``:
    elements of the last result that differ from MPI_Allreduce's (summed over ranks)."""

    seconds: float
    wrong: int


def _mean_time(call, barrier, iterations: int, warmup: int) -> float:
    """This rank's mean seconds per ``call()``: warm-up calls, a barrier, timed calls."""
    for _ in range(warmup):
        call()
    barrier()
    start = time.perf_counter()
    for _ in range(iterations):
        call()
    return (time.perf_counter() - start) / iterations


def _slowest(comm, seconds: float) -> float:
    from mpi4py import MPI

    return comm.allreduce(seconds, op=MPI.MAX)


def time_allreduces(comm, algorithms: list[str], count: int, *, dtype: str = "float32",
                    iterations: int = 10, warmup: int = 2) -> dict[str, Timing]:
    """Time each of ``algorithms`` (names in :data:`allreduce.ALGORITHMS`, or
    ``"MPI_Allreduce"``) on ``count`` elements per rank of ``comm`` (an ``mpi4py``
    communicator), in interleaved rounds (:func:`_interleaved`), and check each result."""
    import allreduce

    from .testing import exact_input

    x = exact_input(comm.rank, count, dtype, "sum")  # small integers: exact in any order
    expected = np.empty_like(x)
    comm.Allreduce(x, expected)
    outs = {name: np.empty_like(x) for name in algorithms}

    def call_of(name: str):
        out = outs[name]
        if name == PEER:
            return lambda: comm.Allreduce(x, out)
        return lambda: allreduce.allreduce(x, comm, algorithm=name, out=out)

    seconds = _interleaved({name: call_of(name) for name in algorithms}, iterations, warmup,
                           barrier=comm.Barrier, slowest=lambda t: _slowest(comm, t))
    return {name: Timing(seconds[name], comm.allreduce(int(np.count_nonzero(outs[name] != expected))))
            for name in algorithms}


def time_allreduce(comm, algorithm: str, count: int, *, dtype: str = "float32",
                   iterations: int = 10, warmup: int = 2) -> Timing:
    """:func:`time_allreduces` for one algorithm."""
    return time_allreduces(comm, [algorithm], count, dtype=dtype, iterations=iterations,
                           warmup=warmup)[algorithm]


def time_sendrecv(comm, nbytes: int, *, iterations: int = 20, warmup: int = 3) -> float:
    """Seconds for one ring step: every rank sends ``nbytes`` to its right neighbour while
    receiving as many from its left (the message the α-β model prices at α + n·β)."""
    send = np.zeros(nbytes, dtype=np.uint8)
    recv = np.empty_like(send)
    right, left = (comm.rank + 1) % comm.size, (comm.rank - 1) % comm.size

    def step():
        comm.Sendrecv(send, right, 0, recv, left, 0)

    return _slowest(comm, _mean_time(step, comm.Barrier, iterations, warmup))


def time_pingpong(comm, nbytes: int, *, iterations: int = 20, warmup: int = 3) -> float:
    """Seconds for one message of ``nbytes`` from rank 0 to rank 1: half the round trip of
    a ping-pong (OSU's latency test).  The other ranks wait; every rank gets the time."""
    buf = np.zeros(nbytes, dtype=np.uint8)
    seconds = 0.0
    if comm.rank < 2 and comm.size >= 2:
        peer = 1 - comm.rank
        for i in range(warmup + iterations):
            if i == warmup:
                start = time.perf_counter()
            if comm.rank == 0:
                comm.Send(buf, peer, 1)
                comm.Recv(buf, peer, 1)
            else:
                comm.Recv(buf, peer, 1)
                comm.Send(buf, peer, 1)
        seconds = (time.perf_counter() - start) / iterations / 2
    return comm.bcast(seconds, root=0)


def time_reduce(nbytes: int, *, dtype: str = "float32", iterations: int = 20) -> float:
    """Seconds to add ``nbytes`` of ``dtype`` into a buffer in place (the γ term)."""
    a = np.ones(nbytes // np.dtype(dtype).itemsize, dtype=dtype)
    b = np.ones_like(a)
    np.add(a, b, out=a)
    start = time.perf_counter()
    for _ in range(iterations):
        np.add(a, b, out=a)
    return (time.perf_counter() - start) / iterations


def sweep(comm, algorithms: list[str], sizes: list[int], *, iterations: int = 5) -> dict:
    """Time, for every size in bytes per rank: a message from rank 0 to rank 1
    (``pingpong``; 0 on one rank), one ring step (``step``), a local add
    (``add``, slowest rank) and each algorithm on float32 data (``times``, with the count
    of wrong elements in ``wrong``).  Collective; every rank gets the same dict."""
    from mpi4py import MPI

    result = {"ranks": comm.size, "sizes": sizes, "times": {}, "wrong": {},
              "pingpong": [time_pingpong(comm, n, iterations=2 * iterations) for n in sizes],
              "step": [time_sendrecv(comm, n, iterations=2 * iterations) for n in sizes],
              "add": [comm.allreduce(time_reduce(n), op=MPI.MAX) for n in sizes]}
    # the algorithms of one size are timed together, in interleaved rounds
    runs = [time_allreduces(comm, algorithms, n // 4, iterations=iterations) for n in sizes]
    for name in algorithms:
        result["times"][name] = [run[name].seconds for run in runs]
        result["wrong"][name] = [run[name].wrong for run in runs]
    return result


def fit_step_model(measured: dict):
    """The α-β-γ model of a :func:`sweep`: α and β fitted to its ring steps, γ to its local
    adds, on relative error (:func:`allreduce.cost.fit`)."""
    from .cost import Terms, fit

    sizes = measured["sizes"]
    return fit([Terms(1, n, 0) for n in sizes] + [Terms(0, 0, n) for n in sizes],
               list(measured["step"]) + list(measured["add"]))


def run_sweep(ranks: int, algorithms: list[str], sizes: list[int], *, iterations: int = 5,
              timeout: float = 300) -> dict:
    """:func:`sweep` on ``ranks`` fresh MPI processes started with this environment's
    ``mpiexec`` (what the book's pages call at build time)."""
    import json
    import subprocess
    import sys

    from .launch import mpiexec, rank_environment

    command = [str(mpiexec()), "-n", str(ranks), sys.executable, "-m", "mpi4py", "-m",
               "allreduce.bench", "--sweep", "--iterations", str(iterations),
               "--sizes", *map(str, sizes), "--", *algorithms]
    run = subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False,
                         env=rank_environment())
    if run.returncode:
        raise RuntimeError(f"{' '.join(command)} failed:\n{run.stderr[-2000:]}")
    return json.loads(run.stdout)


# --- allreduce-bench: the nccl-tests-style table ---------------------------------------------

UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def parse_size(text: str) -> int:
    """``"64K"`` → 65536, as nccl-tests' ``-b``/``-e`` read sizes."""
    text = text.strip().upper().removesuffix("B")
    unit = text[-1] if text and text[-1] in UNITS else ""
    try:
        return int(float(text[: len(text) - len(unit)]) * UNITS[unit])
    except ValueError:
        raise ValueError(f"not a size: {text!r} (use e.g. 8, 1K, 64M)") from None


def size_range(begin: int, end: int, factor: int) -> list[int]:
    """``begin, begin·factor, …`` up to ``end`` (nccl-tests' ``-b -e -f``)."""
    if begin <= 0 or end < begin or factor < 2:
        raise ValueError("need 0 < begin <= end and factor >= 2")
    sizes = [begin]
    while sizes[-1] * factor <= end:
        sizes.append(sizes[-1] * factor)
    return sizes


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

    @property
    def algbw(self) -> float:
        return self.nbytes / self.seconds

    @property
    def busbw(self) -> float:
        from .cost import busbw

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

        from .transports.torchdist import init_from_mpi

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


#: How many rounds the timed iterations of one size are split into (see :func:`_interleaved`).
ROUNDS = 5


def _interleaved(calls: dict, iterations: int, warmup: int, *, barrier, slowest) -> dict:
    """Seconds per call of each of ``calls`` (name → function): the median, over rounds,
    of the slowest rank's mean time per call in that round.

    The iterations are split into :data:`ROUNDS` blocks, and the rounds take turns among
    the calls, starting one further along each time: on a shared machine whose speed
    drifts over seconds, every call then sees the same mix of fast and slow moments,
    whereas timing each call's iterations in one block credits the drift to whichever
    call ran at the time.  Each block is timed after a barrier, as a whole, on every rank.
    The median of the rounds, rather than their mean, keeps one round that another
    process's burst slowed from deciding the result; it applies to the peers alike.
    ``barrier()`` synchronises the ranks and ``slowest(seconds)`` is the largest over them."""
    for call in calls.values():
        for _ in range(warmup):
            call()
    names = list(calls)
    if not names:
        return {}
    rounds = max(1, min(ROUNDS, iterations))
    per_call: dict[str, list[float]] = {name: [] for name in names}
    for index in range(rounds):
        block = iterations // rounds + (index < iterations % rounds)
        shift = index % len(names)
        for name in names[shift:] + names[:shift]:
            call = calls[name]
            barrier()
            start = time.perf_counter()
            for _ in range(block):
                call()
            per_call[name].append(slowest(time.perf_counter() - start) / block)
    return {name: float(np.median(times)) for name, times in per_call.items()}


def run_table(world: _World, algorithms: list[str], sizes: list[int], *, dtype: str = "float32",
              op: str = "sum", iterations: int = 20, warmup: int = 5, progress=None) -> list[Row]:
    """Time every algorithm and every peer at every size, in interleaved rounds
    (:func:`_interleaved`; collective); every rank gets the rows.  Each result is compared
    with the first peer's, element by element (#wrong).
    Under MPI the torch peer is timed last, over all sizes (see
    :meth:`_World.enable_torch_peer`)."""
    import allreduce

    from . import arrays
    from .testing import exact_input

    itemsize = np.dtype(dtype).itemsize
    reference = next(iter(world.peers.values()))
    inputs = {}
    for nbytes in sizes:
        count = nbytes // itemsize
        x = exact_input(world.rank, count, dtype, op)  # results exact in any order
        expected = np.empty_like(x)
        reference(x, expected, "sum" if op == "mean" else op)
        if op == "mean":  # the peers have no mean: their sum, divided as the library does
            expected = (expected / world.size).astype(dtype)
        if world.device == "cuda":  # the data stays on the GPU: nothing crosses to the host
            import torch

            x, expected = torch.from_numpy(x).cuda(), torch.from_numpy(expected).cuda()
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

        seconds = _interleaved({name: call_of(name) for name in names}, iterations, warmup,
                               barrier=world.barrier,
                               slowest=lambda t: world.reduce_scalar(t, "max"))
        wrong = {name: int(world.reduce_scalar(float((outs[name] != expected).sum()), "sum"))
                 for name in names}
        return [Row(arrays.nbytes(x), len(x), dtype, op, name, seconds[name], world.size,
                    wrong[name]) for name in names]

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


def call_terms(row: Row, *, in_band: bool = True):
    """The cost terms of the whole call a row timed: its algorithm's, as traced
    (:func:`allreduce.cost.terms`; ``auto`` as the algorithm it chose), plus, where the
    call's check travels in band (over MPI), the check's
    (:func:`allreduce.validation.in_band_terms`): header-only rounds before every algorithm
    but recursive doubling of at most 1 MiB."""
    from . import cost
    from .algorithms.auto import choose
    from .validation import in_band_terms

    name = choose(row.nbytes, row.ranks) if row.name == "auto" else row.name
    own = cost.terms(name, row.ranks, row.nbytes)
    return own + in_band_terms(name, row.ranks, row.nbytes) if in_band else own


def fit_model(rows: list[Row], peers: list[str], *, in_band: bool = True):
    """Fit α, β, γ and the per-call overhead to this run's own algorithm rows, each
    described by the critical path of its whole call (:func:`call_terms`), on relative error;
    return the model and the rows with their predicted times.  ``in_band``: the rows were
    timed over a transport whose check travels in band (MPI; not torch.distributed)."""
    from . import cost

    mine = [row for row in rows if row.name not in peers and row.ranks > 1]
    if len(mine) < 3:
        return None, rows
    model = cost.fit([call_terms(row, in_band=in_band) for row in mine],
                     [row.seconds for row in mine], overhead=True)

    def predict(row: Row) -> float | None:
        if row.name in peers or row.ranks == 1:
            return None
        return model.predict(call_terms(row, in_band=in_band))

    return model, [Row(**{**row.__dict__, "predicted": predict(row)}) for row in rows]


def format_table(rows: list[Row], peers: list[str]) -> str:
    """The rows in nccl-tests' columns, with each row's ratio to the best peer, and the
    average bus bandwidth of each algorithm at the end."""
    head = (f"{'size':>12} {'count':>11} {'type':>8} {'redop':>6} {'algorithm':>24} "
            f"{'time':>10} {'algbw':>8} {'busbw':>8} {'#wrong':>7} {'vs best peer':>13} "
            f"{'model':>10} {'error':>6}")
    units = (f"{'(B)':>12} {'(elements)':>11} {'':>8} {'':>6} {'':>24} "
             f"{'(us)':>10} {'(GB/s)':>8} {'(GB/s)':>8} {'':>7} {'(busbw)':>13} "
             f"{'(us)':>10} {'':>6}")
    lines = [head, units]
    for row in rows:
        ratio = f"{row.peer_ratio:.2f}x" if row.peer_ratio is not None else "-"
        model = f"{row.predicted * 1e6:>10.1f}" if row.predicted else f"{'-':>10}"
        error = (f"{(row.predicted - row.seconds) / row.seconds:>+6.0%}" if row.predicted
                 else f"{'-':>6}")
        lines.append(f"{row.nbytes:>12} {row.count:>11} {row.dtype:>8} {row.op:>6} "
                     f"{row.name:>24} {row.seconds * 1e6:>10.1f} {row.algbw / 1e9:>8.3f} "
                     f"{row.busbw / 1e9:>8.3f} {row.wrong:>7} {ratio:>13} {model} {error}")
    lines.append("")
    for name in dict.fromkeys(row.name for row in rows):
        mine = [row.busbw for row in rows if row.name == name]
        lines.append(f"# Avg bus bandwidth {name:>24}: {sum(mine) / len(mine) / 1e9:.3f} GB/s")
    lines.append(f"# peers: {', '.join(peers)}; ratios are busbw over the best peer's at the "
                 "same size (higher is better)")
    return "\n".join(lines)


def _main(argv: list[str] | None = None) -> int:
    import argparse
    import csv
    import json
    import sys

    from . import cost
    from .api import ALGORITHMS
    from .transports import as_communicator

    parser = argparse.ArgumentParser(
        prog="allreduce-bench",
        description="Allreduce benchmark in nccl-tests' columns, with the libraries' own "
                    "allreduce as peers in the same run.  Launch it with "
                    "`.venv/bin/mpiexec -n 4 .venv/bin/python -m mpi4py -m allreduce.bench` "
                    "or `.venv/bin/torchrun --nproc-per-node 4 -m allreduce.bench`.")
    parser.add_argument("-b", "--minbytes", default="1K", help="smallest size (default 1K)")
    parser.add_argument("-e", "--maxbytes", default="64M", help="largest size (default 64M)")
    parser.add_argument("-f", "--stepfactor", type=int, default=4, help="size factor (default 4)")
    parser.add_argument("-a", "--algorithms", default="ring,rabenseifner,auto",
                        help="comma-separated, or 'all' (default ring,rabenseifner,auto)")
    parser.add_argument("-o", "--op", default="sum", help="sum, mean, max, min or prod")
    parser.add_argument("-d", "--dtype", default="float32", help="float16/32/64, int32/64")
    parser.add_argument("-n", "--iters", type=int, default=20, help="timed iterations")
    parser.add_argument("-w", "--warmup_iters", type=int, default=5, help="warm-up iterations")
    parser.add_argument("--no-torch", action="store_true",
                        help="under mpiexec, leave out the torch gloo peer")
    parser.add_argument("--csv", type=Path, help="write the rows as CSV")
    parser.add_argument("--json", type=Path, help="write the rows as JSON")
    parser.add_argument("--plot", type=Path, help="plot busbw against size (PNG)")
    parser.add_argument("--save-model", action="store_true",
                        help="keep the fitted model for auto (at $ALLREDUCE_MODEL or "
                             "~/.cache/allreduce/model.json); every rank must see the same file")
    parser.add_argument("--sweep", action="store_true", help=argparse.SUPPRESS)  # run_sweep
    parser.add_argument("--sizes", nargs="+", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--iterations", type=int, default=5, help=argparse.SUPPRESS)
    args, rest = parser.parse_known_args(argv)
    if args.sweep:  # the book's build-time measurements (run_sweep)
        from mpi4py import MPI

        algorithms = [a for a in rest if not a.startswith("-")] if rest else []
        result = sweep(MPI.COMM_WORLD, algorithms, args.sizes, iterations=args.iterations)
        if MPI.COMM_WORLD.rank == 0:
            print(json.dumps(result))
        return 0
    if rest:
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    algorithms = [a for a in ALGORITHMS] if args.algorithms == "all" else args.algorithms.split(",")
    unknown = [a for a in algorithms if a not in ALGORITHMS]
    if unknown:
        parser.error(f"unknown algorithm(s) {', '.join(unknown)}; known: {', '.join(ALGORITHMS)}")
    sizes = size_range(parse_size(args.minbytes), parse_size(args.maxbytes), args.stepfactor)
    world = _World(torch_peer=not args.no_torch)
    show = world.rank == 0

    def progress(done, total, nbytes):
        if show:
            print(f"\r# measured {done}/{total} size passes ({nbytes} B)", end="",
                  file=sys.stderr, flush=True)

    try:
        rows = run_table(world, algorithms, sizes, dtype=args.dtype, op=args.op,
                         iterations=args.iters, warmup=args.warmup_iters, progress=progress)
    finally:
        world.close()
    if not show:
        return 0
    print(file=sys.stderr)
    in_band = world.mpi is not None and as_communicator(world.comm).receives_any_length
    model, rows = fit_model(rows, list(world.peers), in_band=in_band)
    print(f"# allreduce-bench: {world.size} ranks on {world.describe()}, {args.dtype} {args.op}, "
          f"{args.warmup_iters} warm-up + {args.iters} timed iterations in "
          f"{min(ROUNDS, args.iters)} interleaved rounds; time = median over rounds of the "
          "slowest rank's mean per call")
    print(format_table(rows, list(world.peers)))
    if model:
        print(f"# model fitted to this run's algorithm rows (critical path of the whole call, "
              f"relative error): alpha = {model.alpha * 1e6:.1f} us per step, 1/beta = "
              f"{1 / model.beta / 1e9 if model.beta else float('inf'):.2f} GB/s, 1/gamma = "
              f"{1 / model.gamma / 1e9 if model.gamma else float('inf'):.2f} GB/s, "
              f"overhead = {model.overhead * 1e6:.1f} us per call")
        if args.save_model:
            print(f"# saved the model for auto to {cost.save(model)}")
    fields = ["nbytes", "count", "dtype", "op", "name", "seconds", "ranks", "wrong",
              "peer_ratio", "predicted", "algbw", "busbw"]
    records = [{f: getattr(row, f) for f in fields} for row in rows]
    if args.csv:
        with args.csv.open("w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=fields)
            writer.writeheader()
            writer.writerows(records)
    if args.json:
        args.json.write_text(json.dumps(records, indent=1))
    if args.plot:
        _plot(rows, args.plot)
    return 1 if any(row.wrong for row in rows) else 0


def _plot(rows: list[Row], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5), constrained_layout=True)
    for name in dict.fromkeys(row.name for row in rows):
        mine = [row for row in rows if row.name == name]
        ax.semilogx([r.nbytes for r in mine], [r.busbw / 1e9 for r in mine], "o-", label=name)
    ax.set_xlabel("size per rank (bytes)")
    ax.set_ylabel("busbw (GB/s)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.savefig(path, dpi=100)


def main() -> None:
    """Console script ``allreduce-bench``."""
    raise SystemExit(_main())


if __name__ == "__main__":
    main()
