"""Run by tests/test_torch_distributed.py as ``torchrun --nproc-per-node N -m pytest
tests/torchdist``: one gloo process group for the whole session, collective assertions,
and only rank 0 printing the report."""

from __future__ import annotations

import datetime

import pytest
import torch.distributed as dist


def pytest_sessionstart(session):
    if not dist.is_initialized():
        dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))


@pytest.hookimpl(trylast=True)
def pytest_configure(config):
    import os

    if int(os.environ.get("RANK", "0")) != 0:
        reporter = config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            config.pluginmanager.unregister(reporter)


def pytest_sessionfinish(session, exitstatus):
    if dist.is_initialized():
        dist.destroy_process_group()


@pytest.fixture
def world():
    return dist.group.WORLD


def assert_on_all_ranks(ok: bool, message: str = "", group=None) -> None:
    everyone = [None] * dist.get_world_size(group)
    dist.all_gather_object(everyone, (bool(ok), message), group=group)
    failures = [f"rank {rank}: {why}" for rank, (good, why) in enumerate(everyone) if not good]
    assert not failures, "; ".join(failures)
