"""The labs' cluster: ipyparallel engines started by MPI, in one call; and the check cells.

In a script, a ``with`` block::

    with allreduce.lab.cluster(n=4) as view:
        view.execute("from mpi4py import MPI; rank = MPI.COMM_WORLD.rank")
        print(view["rank"])         # [0, 1, 2, 3]: engine i is MPI rank i

In a notebook, where a block cannot span cells, ``view = allreduce.lab.start(n=4)`` and, in
the last cell, ``allreduce.lab.stop()``.  The engines also stop when the kernel exits or
restarts, so a failing cell never leaves them behind.

The engines are started with the ``mpiexec`` of the environment that runs this Python (the
PyPI MPICH that ``make`` installs into ``.venv``), never with whatever ``mpiexec`` is first on
PATH: Debian's cannot start the PyPI MPICH.  The view is blocking and activated, so ``%%px``
cells work at once, and the engines are stopped when the block ends, even if a cell fails.

On a cluster the same calls start the engines with the cluster's MPI command, an
ipyparallel profile, or both, named by keyword arguments or by ``ALLREDUCE_MPIEXEC`` and
``ALLREDUCE_IPP_PROFILE``; in a Slurm allocation a call that gives no ``n`` takes the rank
count from ``SLURM_NTASKS`` (``from allreduce.lab.cluster import settings``; the chapter
"The allreduce library", "On a cluster").
"""

from pathlib import Path

from ..launch import ONE_THREAD_PER_RANK, mpiexec, rank_environment
from .checks import CHECK_COUNTS, PHASES
from .cluster import cluster, start, stop
from .engines import check, patient
from .exercises import (
    LOCAL_CHECKS,
    check_busbw,
    check_choice,
    check_crossover,
    check_ddp_buckets,
    check_fit,
    check_torus_cost,
)
from .overlap import check_overlap
from .patterns import PATTERNS
from .sparse_exercises import check_error_feedback, check_merge

#: Where the lab "Averaging gradients" saves the α and β it fits, and labs 20 and 30 load
#: them from, by name: a file of the labs' own, which ``auto`` never reads.
MODEL_FILE = Path.home() / ".cache" / "allreduce" / "lab10_model.json"

__all__ = ["CHECK_COUNTS", "LOCAL_CHECKS", "MODEL_FILE", "ONE_THREAD_PER_RANK", "PATTERNS",
           "PHASES", "check", "patient",
           "check_busbw", "check_choice", "check_crossover", "check_ddp_buckets",
           "check_error_feedback", "check_fit", "check_merge", "check_overlap",
           "check_torus_cost", "cluster", "mpiexec", "rank_environment", "start", "stop"]
