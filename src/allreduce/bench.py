"""Timing allreduce the way the field does (nccl-tests, OSU): warm-up, barrier, time, take
the slowest rank.  The labs measure with these functions.

Taught in the chapter "Ring allreduce" (measured against predicted).  Every timing here is
collective over an mpi4py communicator, and every allreduce timed is also checked: the
result of the last iteration is compared with MPI_Allreduce of the same input, and the
number of wrong elements is returned next to the time.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

PEER = "MPI_Allreduce"


@dataclass(frozen=True)
class Timing:
    """``seconds``: mean time of one call on the slowest rank; ``wrong``: elements of the
    last result that differ from MPI_Allreduce's (summed over ranks)."""

    seconds: float
    wrong: int


def _slowest(comm, seconds: float) -> float:
    from mpi4py import MPI

    return comm.allreduce(seconds, op=MPI.MAX)


def time_allreduce(comm, algorithm: str, count: int, *, dtype: str = "float32",
                   iterations: int = 10, warmup: int = 2) -> Timing:
    """Time ``algorithm`` (a name in :data:`allreduce.ALGORITHMS`, or ``"MPI_Allreduce"``)
    on ``count`` elements per rank of ``comm`` (an ``mpi4py`` communicator)."""
    import allreduce

    x = (np.arange(count) % 7 + comm.rank).astype(dtype)  # small integers: exact sums
    out = np.empty_like(x)

    def call():
        if algorithm == PEER:
            comm.Allreduce(x, out)
        else:
            allreduce.allreduce(x, comm, algorithm=algorithm, out=out)

    for _ in range(warmup):
        call()
    comm.Barrier()
    start = time.perf_counter()
    for _ in range(iterations):
        call()
    seconds = (time.perf_counter() - start) / iterations
    expected = np.empty_like(x)
    comm.Allreduce(x, expected)
    wrong = comm.allreduce(int(np.count_nonzero(out != expected)))
    return Timing(_slowest(comm, seconds), wrong)


def time_sendrecv(comm, nbytes: int, *, iterations: int = 20, warmup: int = 3) -> float:
    """Seconds for one ring step: every rank sends ``nbytes`` to its right neighbour while
    receiving as many from its left (the message the α-β model prices at α + n·β)."""
    send = np.zeros(nbytes, dtype=np.uint8)
    recv = np.empty_like(send)
    right, left = (comm.rank + 1) % comm.size, (comm.rank - 1) % comm.size
    for _ in range(warmup):
        comm.Sendrecv(send, right, 0, recv, left, 0)
    comm.Barrier()
    start = time.perf_counter()
    for _ in range(iterations):
        comm.Sendrecv(send, right, 0, recv, left, 0)
    return _slowest(comm, (time.perf_counter() - start) / iterations)


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
    for name in algorithms:
        runs = [time_allreduce(comm, name, n // 4, iterations=iterations) for n in sizes]
        result["times"][name] = [run.seconds for run in runs]
        result["wrong"][name] = [run.wrong for run in runs]
    return result


def run_sweep(ranks: int, algorithms: list[str], sizes: list[int], *, iterations: int = 5,
              timeout: float = 300) -> dict:
    """:func:`sweep` on ``ranks`` fresh MPI processes started with this environment's
    ``mpiexec`` (what the book's pages call at build time)."""
    import json
    import subprocess
    import sys

    from .lab import mpiexec

    command = [str(mpiexec()), "-n", str(ranks), sys.executable, "-m", "mpi4py", "-m",
               "allreduce.bench", "--iterations", str(iterations),
               "--algorithms", *algorithms, "--sizes", *map(str, sizes)]
    run = subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False)
    if run.returncode:
        raise RuntimeError(f"{' '.join(command)} failed:\n{run.stderr[-2000:]}")
    return json.loads(run.stdout)


def _main() -> None:
    import argparse
    import json

    from mpi4py import MPI

    parser = argparse.ArgumentParser(description="Print a timing sweep as JSON (rank 0).")
    parser.add_argument("--algorithms", nargs="*", default=["ring", PEER])
    parser.add_argument("--sizes", nargs="+", type=int, default=[1 << 12, 1 << 16, 1 << 20])
    parser.add_argument("--iterations", type=int, default=5)
    args = parser.parse_args()
    result = sweep(MPI.COMM_WORLD, args.algorithms, args.sizes, iterations=args.iterations)
    if MPI.COMM_WORLD.rank == 0:
        print(json.dumps(result))


if __name__ == "__main__":
    _main()
