"""Run by tests/test_launch.py as ``mpiexec -f HOSTFILE -n P``: the hostfile's lines, as MPICH
places ranks on them, against the nodes the library finds (COMM_TYPE_SHARED), and the
hierarchical allreduce on those nodes (its default) against MPI_Allreduce.  argv[1] is the
expected node sizes, e.g. ``3,2``.  Rank 0 prints ``nodes ...: ok`` or the problems."""

from __future__ import annotations

import sys

import numpy as np
from mpi4py import MPI

import allreduce
from allreduce.testing import exact_input, first_difference
from allreduce.topology import Layout
from allreduce.transports.mpi import MPICommunicator

world = MPI.COMM_WORLD
expected_sizes = [int(k) for k in sys.argv[1].split(",")]
layout = Layout.of(MPICommunicator(world).nodes())
problems = []
if [len(m) for m in layout.members] != expected_sizes:
    problems.append(f"nodes {layout.members}, expected sizes {expected_sizes}")
for op, mpi_op, dtype in (("sum", MPI.SUM, "int64"), ("max", MPI.MAX, "float32"),
                          ("prod", MPI.PROD, "int32")):
    for count in (0, 1, 7, 1001, 100_003):
        x = exact_input(world.rank, count, dtype, op)
        reference = np.empty_like(x)
        world.Allreduce(x, reference, op=mpi_op)
        wrong = first_difference(reference, allreduce.allreduce(x, world, "hierarchical", op))
        if wrong:
            problems.append(f"{op} {dtype} n={count}: {wrong}")
everyone = world.gather(problems)
if world.rank == 0:
    print(f"nodes {[len(m) for m in layout.members]}: "
          + ("; ".join(p for ps in everyone for p in ps) or "ok"), flush=True)
