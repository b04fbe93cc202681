"""allreduce: the allreduce algorithms of data-parallel training, written to be read and run.

The companion library of the book *Allreduce*.  One entry point runs any algorithm over MPI
(mpi4py), torch.distributed (gloo on CPU, nccl on GPU) or threads::

    from mpi4py import MPI
    import numpy as np, allreduce

    x = np.full(1000, MPI.COMM_WORLD.rank, dtype=np.float32)
    y = allreduce.allreduce(x, MPI.COMM_WORLD, algorithm="ring", op="sum")

Run it with ``.venv/bin/mpiexec -n 4 .venv/bin/python -m mpi4py script.py``.
"""

from .algorithms._schedule import chunk_bounds
from . import auto  # allreduce.auto.explain, load_model: which model auto chooses with
from .api import ALGORITHMS, allgather, allreduce, reduce_scatter
from .comm import Communicator
from .ops import DTYPES, OP_NAMES, OPS
from .ddp_hook import DDPHookState, ddp_hook
from .sparse import SPARSE_ALGORITHMS, SPARSE_CHOICES, sparse_allreduce, topk_allreduce
from .transports import as_communicator

__all__ = [
    "ALGORITHMS",
    "DTYPES",
    "OPS",
    "OP_NAMES",
    "SPARSE_ALGORITHMS",
    "SPARSE_CHOICES",
    "Communicator",
    "DDPHookState",
    "allgather",
    "allreduce",
    "as_communicator",
    "chunk_bounds",
    "ddp_hook",
    "reduce_scatter",
    "sparse_allreduce",
    "topk_allreduce",
]
__version__ = "0.1.0"
