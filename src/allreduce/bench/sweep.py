"""The book's and labs' measurements: ring steps, local adds and algorithms over an mpi4py
communicator (:func:`sweep`; :func:`run_sweep` starts it under ``mpiexec``), and the model
fitted to the steps (chapter "Ring allreduce")."""

from __future__ import annotations

from .timing import time_allreduces, time_pingpong, time_reduce, time_sendrecv


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
    from ..cost import Terms, fit

    sizes = measured["sizes"]
    return fit([Terms(1, n, 0) for n in sizes] + [Terms(0, 0, n) for n in sizes],
               list(measured["step"]) + list(measured["add"]))


def run_sweep(ranks: int, algorithms: list[str], sizes: list[int], *, iterations: int = 5,
              timeout: float = 300, hostfile: str | None = None) -> dict:
    """:func:`sweep` on ``ranks`` fresh MPI processes started with this environment's
    ``mpiexec`` (what the book's pages call at build time); ``hostfile`` places them
    (``mpiexec -f``: two names of this machine make two "nodes", chapter "Beyond one flat
    ring")."""
    import json
    import subprocess
    import sys

    from ..launch import mpiexec, rank_environment

    command = [str(mpiexec()), *(["-f", hostfile] if hostfile else []), "-n", str(ranks),
               sys.executable, "-m", "mpi4py", "-m",
               "allreduce.bench", "--sweep", "--iterations", str(iterations),
               "--sizes", *map(str, sizes), "--", *algorithms]
    run = subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False,
                         env=rank_environment())
    if run.returncode:
        raise RuntimeError(f"{' '.join(command)} failed:\n{run.stderr[-2000:]}")
    return json.loads(run.stdout)
