"""allreduce-bench's command line, as a newcomer meets it: it refuses to measure on one rank
unless told, each mode's --help lists that mode's options with every default, progress is a
bar on a terminal and plain lines in a log, and no figure prints as "inf"."""

from __future__ import annotations

import io
import re
import subprocess

import pytest
from conftest import run_launcher

from allreduce.bench import cli
from allreduce.bench.progress import Progress
from allreduce.sparse import SPARSE_CHOICES

SMALL = ["-b", "1K", "-e", "4K", "-f", "4", "-a", "ring", "-n", "1", "-w", "0", "--no-torch"]


def _entries(help_text: str) -> dict[str, str]:
    """Each option's entry in a --help, by its first option string."""
    options = help_text.split("options:", 1)[1]
    found = {}
    for block in re.split(r"\n(?=  -)", options):
        block = block.strip()
        if block.startswith("-"):
            found[block.split()[0].rstrip(",")] = " ".join(block.split())
    return found


@pytest.mark.parametrize("sparse", [False, True])
def test_every_option_shows_its_default(sparse):
    entries = _entries(cli._parser(sparse).format_help())
    assert len(entries) >= 10
    for option, text in entries.items():
        if option != "-h":
            assert "(default: " in text, (option, text)


def test_sparse_help_shows_the_sparse_options(venv_bin):
    dense = _entries(cli._parser(False).format_help())
    sparse = _entries(cli._parser(True).format_help())
    for option in ("--count", "--densities", "--supports"):
        assert option in sparse and option not in dense
    for option in ("-b", "-o", "-d", "--csv", "--plot", "--save-model"):
        assert option in dense and option not in sparse
    every = ",".join([*SPARSE_CHOICES, "auto"])
    assert cli._parser(True).get_default("algorithms") == every
    assert "(default: dense," in sparse["-a"]
    shown = subprocess.run([venv_bin / "allreduce-bench", "--sparse", "--help"],
                           capture_output=True, text=True, check=True, timeout=60).stdout
    assert shown.startswith("usage: allreduce-bench --sparse") and "--densities" in shown


@pytest.mark.parametrize("sparse", [[], ["--sparse", "--count", "4K", "--densities", "0.01"]])
def test_one_rank_is_refused_unless_allowed(venv_bin, sparse):
    """Started without mpiexec, mpi4py runs as a singleton: one rank, which measures copies."""
    args = SMALL if not sparse else ["-n", "1", "-w", "0", "--no-torch", "-a", "dense"]
    refused = run_launcher([venv_bin / "python", "-m", "allreduce.bench", *args, *sparse],
                           timeout=120)
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert "refusing to measure on 1 rank" in refused.stderr
    assert "mpiexec -n 4" in refused.stderr and "--allow-one-rank" in refused.stderr
    assert refused.stdout == ""
    if not sparse:
        allowed = run_launcher([venv_bin / "python", "-m", "allreduce.bench", *args,
                                "--allow-one-rank"], timeout=120)
        assert allowed.returncode == 0, allowed.stdout + allowed.stderr
        assert "# allreduce-bench: 1 ranks" in allowed.stdout


def test_progress_in_a_log_is_plain_lines_and_on_a_terminal_a_bar():
    log = io.StringIO()
    progress = Progress(log, tty=False)
    for done in (1, 2, 3):
        progress(done, 3, f"size passes ({done} B)")
    progress.close()
    assert "\r" not in log.getvalue()
    assert log.getvalue().splitlines() == [f"# measured {d}/3: size passes ({d} B)"
                                           for d in (1, 2, 3)]
    terminal = io.StringIO()
    bar = Progress(terminal, tty=True, width=10)
    bar(1, 2, "size passes")
    bar(2, 2, "size passes")
    bar.close()
    drawn = terminal.getvalue()
    assert drawn.count("\r") == 2 and drawn.endswith("\n")
    assert "# [#####.....] 1/2 size passes" in drawn and "# [##########] 2/2" in drawn


def test_a_run_under_mpiexec_logs_plain_progress_and_no_inf(venv_bin):
    run = run_launcher([venv_bin / "mpiexec", "-n", "2", venv_bin / "python", "-m", "mpi4py",
                        "-m", "allreduce.bench", *SMALL], timeout=180)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "\r" not in run.stderr and "# measured 1/" in run.stderr
    assert not re.search(r"\binf\b", run.stdout), run.stdout


def test_a_rate_the_fit_left_at_zero_is_not_measured():
    assert cli._per_second(0.0) == "not measured"
    assert cli._per_second(1e-9) == "1.00 GB/s"


def test_least_timed_takes_a_finite_number_of_seconds():
    """``--least-timed nan`` ran every probe and then failed in the arithmetic; a negative or
    infinite time means nothing either: the parser refuses them."""
    import argparse

    assert cli._seconds("0") == 0.0 and cli._seconds("0.25") == 0.25
    for bad in ("nan", "inf", "-1", "soon"):
        with pytest.raises(argparse.ArgumentTypeError, match="not a number of seconds"):
            cli._seconds(bad)
