"""Real MPI: the suite in tests/mpi at world sizes 1 to 5, and a job that must abort.

Each run uses the virtual environment's mpiexec (the PyPI MPICH that `make` installs) and
starts Python with ``-m mpi4py``, so that an uncaught exception on one rank aborts the job.
Each run has a timeout: a deadlock fails the test instead of hanging it."""

from __future__ import annotations

import sys
import time

import pytest
from conftest import assert_inner_suite_passed, inner_pytest, run_launcher

TIMEOUT = 300  # about 20 s is typical for 5 ranks on 2 cores; a hang is killed at this


def mpiexec(venv_bin, n, *args, timeout=TIMEOUT):
    command = [str(venv_bin / "mpiexec"), "-n", str(n), sys.executable, "-m", "mpi4py", *args]
    return run_launcher(command, timeout)


@pytest.mark.parametrize("ranks", [1, 2, 3, 4, 5])
def test_suite_under_mpiexec(venv_bin, ranks):
    assert_inner_suite_passed(mpiexec(venv_bin, ranks, *inner_pytest("mpi")))


def test_beyond_one_flat_ring_at_six_to_eight_ranks(venv_bin, root):
    """tests/mpi/test_mpi_hierarchical.py under one ``mpiexec -n 8``: on communicators of
    6, 7 and 8 ranks (chapter 65's algorithms; the whole folder runs at 1-5 above)."""
    command = ["-m", "pytest", str(root / "tests" / "mpi" / "test_mpi_hierarchical.py"), "-q",
               "-p", "no:cacheprovider", "--rootdir", str(root)]
    assert_inner_suite_passed(mpiexec(venv_bin, 8, *command))


def test_a_mismatched_length_aborts_the_job(venv_bin, root):
    start = time.monotonic()
    run = mpiexec(venv_bin, 4, str(root / "tests" / "mpi" / "scripts" / "mismatched_length.py"),
                  timeout=60)
    elapsed = time.monotonic() - start
    assert run.returncode != 0
    assert "not reached" not in run.stdout
    assert "ValueError: allreduce: the ranks disagree on the element count: " \
           "1000 on ranks 0, 1, 2, 999 on rank 3" in run.stderr, run.stderr[-3000:]
    assert elapsed < 30, f"the job took {elapsed:.0f} s to exit"
