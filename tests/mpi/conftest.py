"""Run by tests/test_mpi.py as ``mpiexec -n N python -m mpi4py -m pytest tests/mpi``.

Every rank runs every test in the same order.  Assertions go through
:func:`assert_on_all_ranks`, so a failure on one rank fails the same test on every rank
and the ranks never fall out of step.  Only rank 0 prints the report."""

from __future__ import annotations

import pytest
from mpi4py import MPI


@pytest.hookimpl(trylast=True)
def pytest_configure(config):
    if MPI.COMM_WORLD.rank != 0:
        reporter = config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            config.pluginmanager.unregister(reporter)


@pytest.fixture
def world():
    return MPI.COMM_WORLD


def assert_on_all_ranks(comm, ok: bool, message: str = "") -> None:
    """Fail on every rank if the check failed on any rank, naming the ranks and why."""
    everyone = comm.allgather((bool(ok), message))
    failures = [f"rank {rank}: {why}" for rank, (good, why) in enumerate(everyone) if not good]
    assert not failures, "; ".join(failures)
