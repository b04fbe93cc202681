"""Starting the course's MPI processes: the environment's own ``mpiexec`` and the
environment each rank runs with.  Used by the labs' cluster, the book's measurements, the
benchmark and the capstone's training (chapter "The allreduce library")."""

from __future__ import annotations

import os
import sys
from pathlib import Path


def mpiexec() -> Path:
    """The ``mpiexec`` next to this Python (the environment's own MPI)."""
    path = Path(sys.executable).parent / "mpiexec"
    if not path.exists():
        raise FileNotFoundError(
            f"no mpiexec next to {sys.executable}: install the environment with `make venv` "
            "(it brings MPI as the mpich wheel)"
        )
    return path


#: One compute thread per rank.  Numerical libraries (OpenBLAS, MKL, OpenMP in torch) start
#: a thread per core in every process by default; with several MPI ranks per machine those
#: threads spin on the same cores as the ranks, and a 20 µs allreduce can take 20 ms.
#: Measured here: numpy work between allreduces on 4 ranks made each allreduce 40× slower.
ONE_THREAD_PER_RANK = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1",
                       "MKL_NUM_THREADS": "1"}


def rank_environment() -> dict[str, str]:
    """This process's environment, with :data:`ONE_THREAD_PER_RANK` where the user has not
    chosen otherwise: what the processes that the labs, the book and the benchmark start
    under ``mpiexec`` run with."""
    return {**ONE_THREAD_PER_RANK, **os.environ}
