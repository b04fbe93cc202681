"""A job in which the last rank passes a shorter buffer.  Run as
``mpiexec -n 4 python -m mpi4py tests/mpi/scripts/mismatched_length.py``: every rank raises
the same ValueError, and ``-m mpi4py`` turns the uncaught exception into an abort of the job."""

import numpy as np
from mpi4py import MPI

import allreduce

comm = MPI.COMM_WORLD
x = np.ones(1000 - (comm.rank == comm.size - 1))
allreduce.allreduce(x, comm, algorithm="ring")
print("not reached", flush=True)
