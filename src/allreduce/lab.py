"""The labs' cluster: ipyparallel engines started by MPI, in one call.

::

    with allreduce.lab.cluster(n=4) as view:
        view.execute("from mpi4py import MPI; rank = MPI.COMM_WORLD.rank")
        print(view["rank"])         # [0, 1, 2, 3]: engine i is MPI rank i

The engines are started with the ``mpiexec`` of the environment that runs this Python (the
PyPI MPICH that ``make`` installs into ``.venv``), never with whatever ``mpiexec`` is first on
PATH: Debian's cannot start the PyPI MPICH.  The view is blocking and activated, so ``%%px``
cells work at once, and the engines are stopped when the block ends, even if a cell fails.

On a cluster, start the engines with ipyparallel's own launchers instead (``ipcluster
start --engines=MPI`` in an allocation, or ``--engines=Slurm``/``SSH``) and connect with
``ipyparallel.Client()``: see the chapter "The allreduce library".
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
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


@contextmanager
def cluster(n: int = 4, *, timeout: float = 60) -> Iterator:
    """Start ``n`` MPI engines and yield a blocking, activated ``DirectView`` on all of them.

    Engine ``i`` is MPI rank ``i`` of ``MPI.COMM_WORLD`` on the engines.  The controller and
    engines are stopped when the ``with`` block ends, however it ends.
    """
    import ipyparallel as ipp
    from traitlets.config import Config

    config = Config()
    config.MPILauncher.mpi_cmd = [str(mpiexec())]
    engines = ipp.Cluster(engines="mpi", n=n, config=config, load_profile=False)
    try:
        engines.start_cluster_sync()
        client = engines.connect_client_sync()
        client.wait_for_engines(n, timeout=timeout, interactive=False)
        view = client[:]
        view.block = True
        if _in_ipython():
            view.activate()  # %px and %%px now run on these engines
        yield view
    finally:
        engines.stop_cluster_sync()


def _in_ipython() -> bool:
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    return get_ipython() is not None
