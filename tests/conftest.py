"""Shared fixtures.  Tests that start processes (mpiexec, torchrun) find the tools in the
virtual environment that runs pytest, never on PATH."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent

# The tests and their child processes keep any fitted model (allreduce-bench --save-model
# saves one; auto reads it only when loaded) in a folder of their own, so that a run neither
# reads nor overwrites the user's ~/.cache/allreduce/model.json.
os.environ["ALLREDUCE_MODEL"] = str(
    Path(tempfile.mkdtemp(prefix="allreduce-tests-")) / "model.json")


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


def run_launcher(command: list[str], timeout: float) -> subprocess.CompletedProcess:
    """Run a launcher (mpiexec, torchrun) to completion; a run that outlasts ``timeout``
    is killed and fails the test as a deadlock instead of hanging the suite."""
    try:
        return subprocess.run(command, capture_output=True, text=True, timeout=timeout,
                              env=child_env())
    except subprocess.TimeoutExpired as expired:
        output = expired.stdout.decode() if isinstance(expired.stdout, bytes) else expired.stdout
        pytest.fail(f"{' '.join(command[:4])} … did not finish in {timeout} s (a deadlock?)\n"
                    f"{(output or '')[-3000:]}")


def inner_pytest(folder: str) -> list[str]:
    """Arguments that run the pytest suite in ``tests/<folder>`` inside a launched job."""
    return ["-m", "pytest", str(ROOT / "tests" / folder), "-q", "-p", "no:cacheprovider",
            "--rootdir", str(ROOT)]


def assert_inner_suite_passed(run: subprocess.CompletedProcess) -> None:
    """The launched suite exited cleanly and its rank-0 report shows passes, no failures."""
    report = run.stdout[-5000:] + run.stderr[-3000:]
    assert run.returncode == 0, report
    assert " passed" in run.stdout and "failed" not in run.stdout, report


class BuiltBook:
    """The book built once per session by :func:`built_book`: ``html`` (the site), the build's
    ``output`` (stdout and stderr), its ``returncode`` and the ``seconds`` it took."""

    def __init__(self, folder: Path, run: subprocess.CompletedProcess, seconds: float):
        self.folder, self.html = folder, folder / "_build" / "html"
        self.output, self.returncode, self.seconds = run.stdout + run.stderr, run.returncode, seconds


@pytest.fixture(scope="session")
def built_book(tmp_path_factory) -> BuiltBook:
    """The book, built strictly (``-W -n --keep-going``, as ``make book``) into a temporary
    folder once per test session: tests/test_book.py checks the build, tests/browser/ reads
    the site in a browser, and the solutions-policy tests read what it publishes."""
    import time

    folder = tmp_path_factory.mktemp("book")
    start = time.monotonic()
    run = subprocess.run(
        [str(BIN / "jupyter-book"), "build", str(ROOT), "--path-output", str(folder),
         "-W", "-n", "--keep-going"],
        check=False, capture_output=True, text=True, timeout=600, env=child_env(),
    )
    return BuiltBook(folder, run, time.monotonic() - start)


def pytest_terminal_summary(terminalreporter):
    """Say loudly, at the end of the run, that the grading tests did not run for want of a
    sandbox (tests/test_grading.py skips them then, unless ALLREDUCE_REQUIRE_SANDBOX=1)."""
    skipped = [r for r in terminalreporter.stats.get("skipped", [])
               if "no sandbox here" in str(r.longrepr)]
    if not skipped:
        return
    reason = str(skipped[0].longrepr[-1] if isinstance(skipped[0].longrepr, tuple)
                 else skipped[0].longrepr)
    terminalreporter.write_sep("!", "GRADING TESTS DID NOT RUN: NO SANDBOX", red=True, bold=True)
    terminalreporter.write_line(reason, red=True, bold=True)
    terminalreporter.write_line(
        f"{len(skipped)} grading tests were skipped: the hostile submissions, every lab's key "
        "and student copy, and the limits were NOT checked.  Run as root, or allow user "
        "namespaces (studyguide/instructor.md, 'Without user namespaces'); "
        "ALLREDUCE_REQUIRE_SANDBOX=1 makes this a failure (.ci/run sets it).", red=True)
