"""Real torch.distributed process groups, started by torchrun: gloo across 3 processes on
every machine, and NCCL on CUDA devices where there are any (marked ``gpu``)."""

from __future__ import annotations

import pytest
from conftest import assert_inner_suite_passed, inner_pytest, run_launcher

TIMEOUT = 300


def torchrun(venv_bin, processes, *args):
    command = [str(venv_bin / "torchrun"), "--standalone", "--nproc-per-node", str(processes), *args]
    return run_launcher(command, TIMEOUT)


@pytest.mark.parametrize("processes", [1, 3])
def test_gloo_suite_under_torchrun(venv_bin, processes):
    assert_inner_suite_passed(torchrun(venv_bin, processes, *inner_pytest("torchdist")))


@pytest.mark.gpu
def test_nccl_every_algorithm(venv_bin, root):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device on this machine")
    run = torchrun(venv_bin, max(1, torch.cuda.device_count()),
                   str(root / "tests" / "gpu" / "nccl_check.py"))
    assert run.returncode == 0, run.stdout[-5000:] + run.stderr[-3000:]
