"""Shared fixtures.  Tests that start processes (mpiexec, torchrun) find the tools in the
virtual environment that runs pytest, never on PATH."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent


@pytest.fixture(scope="session")
def venv_bin() -> Path:
    return BIN


@pytest.fixture(scope="session")
def root() -> Path:
    return ROOT


def child_env() -> dict[str, str]:
    """Environment for child processes: this Python's bin first, one thread per rank."""
    env = dict(os.environ)
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    env["OMP_NUM_THREADS"] = "1"
    env["PYTHONUNBUFFERED"] = "1"
    return env
