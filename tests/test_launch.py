"""Launches that span hosts, as far as one machine can test them (chapter "The allreduce
library", "On a cluster"): no machine here reaches another, so each test starts its
job the way a multi-host job starts (two separate torchrun agents meeting at a rendezvous,
an ``mpiexec`` hostfile, an ipyparallel profile) with every "host" on this one.  What they
cannot show: a real network between hosts, a real Slurm (``srun``, ``sbatch``)."""

from __future__ import annotations

import importlib
import os
import shutil
import socket
import subprocess
import sys
import time
import uuid
from contextlib import redirect_stdout
from io import StringIO
from pathlib import Path

import pytest
from conftest import ROOT, child_env, run_launcher

lab_cluster = importlib.import_module("allreduce.lab.cluster")  # lab.cluster is also a function

LAUNCH = ROOT / "tests" / "launch"
PROFILE = ROOT / "etc" / "cluster" / "profile_allreduce"
TIMEOUT = 180


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_two_torchrun_agents_meet_and_run_the_hierarchical_allreduce(venv_bin):
    """Two separate ``torchrun --nnodes 2`` launches, 2 processes each, rendezvous through
    c10d on 127.0.0.1 (which ignores ``--node-rank`` and gives each agent a GROUP_RANK:
    torch/distributed/run.py warns so); each agent is one of the library's nodes.

    The rendezvous store is this test's, as a long-lived endpoint on a cluster would be, and
    both agents are its clients (``is_host=false``).  Left to host it, one agent would: and
    when that agent's workers finished first it exited, taking the store, and the other
    agent, still polling it, failed with RendezvousConnectionError after its workers had
    succeeded (measured here, 2 runs in 4 beside another launch)."""
    from torch.distributed import TCPStore

    port, run_id = free_port(), uuid.uuid4().hex[:8]
    store = TCPStore("127.0.0.1", port, is_master=True, wait_for_workers=False)
    agents = [subprocess.Popen(
        [str(venv_bin / "torchrun"), "--nnodes", "2", "--nproc-per-node", "2",
         "--node-rank", str(node), "--rdzv-backend", "c10d",
         "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", run_id,
         "--rdzv-conf", "is_host=false", str(LAUNCH / "two_agents.py")],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=child_env())
        for node in (0, 1)]
    outputs = []
    try:
        for agent in agents:
            outputs.append(agent.communicate(timeout=TIMEOUT)[0])
    finally:
        for agent in agents:
            if agent.poll() is None:
                agent.kill()
        del store
    report = "\n".join(outputs)
    assert all(agent.returncode == 0 for agent in agents), report[-4000:]
    lines = sorted(line for line in report.splitlines() if line.startswith("rank "))
    assert [line.split(":")[0] for line in lines] == [
        f"rank {r} agent {0 if r < 2 else 1}" for r in range(4)], report[-4000:]
    assert all(line.endswith(": ok") for line in lines), report[-4000:]


@pytest.mark.parametrize(("hosts", "ranks", "sizes"), [
    (["localhost:2", "localhost:2"], 4, "4"),
    (["localhost:3", "127.0.0.1:2"], 5, "3,2")], ids=["one name twice", "two names, uneven"])
def test_a_hostfile_places_the_ranks_and_the_library_finds_the_nodes(venv_bin, tmp_path,
                                                                     hosts, ranks, sizes):
    """``mpiexec -f hostfile``: MPICH's Hydra merges the lines of one host name into one
    host (one node of 4), and starts a proxy per distinct name, which COMM_TYPE_SHARED
    then sees as separate nodes (3 and 2 ranks: uneven nodes, the library's default)."""
    hostfile = tmp_path / "hostfile"
    hostfile.write_text("\n".join(hosts) + "\n")
    run = run_launcher([str(venv_bin / "mpiexec"), "-f", str(hostfile), "-n", str(ranks),
                        sys.executable, "-m", "mpi4py", str(LAUNCH / "hostfile_check.py"),
                        sizes], TIMEOUT)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert run.stdout.strip() == f"nodes [{sizes.replace(',', ', ')}]: ok", run.stdout


# -- allreduce.lab.start on a cluster: the overrides ------------------------------------------

def test_settings_keywords_then_environment_then_defaults():
    settings = lab_cluster.settings
    default = settings(environ={})
    assert default.n == 4 and default.profile is None
    assert default.mpiexec == (str(Path(sys.executable).parent / "mpiexec"),)
    environ = {"ALLREDUCE_MPIEXEC": "srun --mpi=pmi2", "ALLREDUCE_IPP_PROFILE": "course",
               "SLURM_NTASKS": "8"}
    assert settings(environ=environ) == lab_cluster.Settings(8, ("srun", "--mpi=pmi2"), "course")
    assert settings(3, mpiexec="/opt/mpi/bin/mpiexec -bind-to core", profile="/p",
                    environ=environ) == lab_cluster.Settings(
        3, ("/opt/mpi/bin/mpiexec", "-bind-to", "core"), "/p")
    # a profile without a command: the profile's ipcluster_config.py names the launcher
    assert settings(environ={"ALLREDUCE_IPP_PROFILE": "course"}).mpiexec is None
    with pytest.raises(ValueError, match="SLURM_NTASKS must be a positive integer, got 'four'"):
        settings(environ={"SLURM_NTASKS": "four"})
    with pytest.raises(ValueError, match="asks for 8 ranks, but the Slurm job has 4 tasks"):
        settings(8, environ={"SLURM_NTASKS": "4"})
    for bad in (0, -1, 2.0, True):
        with pytest.raises(ValueError, match="n must be a positive integer"):
            settings(bad, environ={})
    with pytest.raises(ValueError, match="the mpiexec command is empty"):
        settings(environ={"ALLREDUCE_MPIEXEC": "  "})


def test_isolated_python_ignores_the_variables(venv_bin):
    """How the grader starts a rank (``python -I``): the variables do not count."""
    code = ("from allreduce.lab.cluster import settings; s = settings(); "
            "print(s.n, s.profile, s.mpiexec[0].endswith('/mpiexec'))")
    env = dict(child_env(), ALLREDUCE_MPIEXEC="/bin/false", ALLREDUCE_IPP_PROFILE="evil",
               SLURM_NTASKS="64")
    for flags, expected in (([], "64 evil False"), (["-I"], "4 None True")):
        out = subprocess.run([sys.executable, *flags, "-c", code], capture_output=True,
                             text=True, env=env, timeout=60, check=False)
        assert out.stdout.strip() == expected, out.stderr[-2000:]


CHECK = """
from allreduce import chunk_bounds

def allgather(buf, comm):  # lab 50's ring all-gather, its key
    p, rank, n = comm.size, comm.rank, len(buf)
    for step in range(p - 1):
        send_lo, send_hi = chunk_bounds(n, p, (rank - step) % p)
        recv_lo, recv_hi = chunk_bounds(n, p, (rank - step - 1) % p)
        comm.sendrecv(buf[send_lo:send_hi], (rank + 1) % p, buf[recv_lo:recv_hi], (rank - 1) % p)
"""


def test_ipcluster_from_the_example_profile_runs_a_lab_check(venv_bin, tmp_path):
    """``ipcluster start`` with the shipped profile (its MPI engines; not by lab.start),
    then a client on that profile runs a lab's check cell on the engines."""
    import ipyparallel as ipp

    from allreduce import lab

    profile = tmp_path / "profile_allreduce"
    shutil.copytree(PROFILE, profile, ignore=shutil.ignore_patterns("log", "pid", "security"))
    ipcluster = [str(venv_bin / "ipcluster")]
    env = dict(child_env(), IPYTHONDIR=str(tmp_path / "ipython"))
    started = subprocess.run([*ipcluster, "start", "-n", "2", f"--profile-dir={profile}",
                              "--daemonize", "--log-level=ERROR"],
                             capture_output=True, text=True, env=env, timeout=60, check=False)
    try:
        assert started.returncode == 0, started.stderr[-3000:]
        client = ipp.Client(profile_dir=str(profile), timeout=30)
        client.wait_for_engines(2, timeout=60, interactive=False)
        view = client[:]
        view.block = True
        view.execute(CHECK)
        with redirect_stdout(StringIO()) as printed:
            lab.check(view, "allgather", "allgather")
        lines = printed.getvalue().split("\n")
        assert lines[0].startswith("allgather: correct on 2 ranks"), lines
        view.execute("from mpi4py import MPI; ranks = (MPI.COMM_WORLD.rank, MPI.COMM_WORLD.size)")
        assert view["ranks"] == [(0, 2), (1, 2)]  # engine i is rank i of one MPI job
        client.close()
    finally:
        subprocess.run([*ipcluster, "stop", f"--profile-dir={profile}"],
                       capture_output=True, env=env, timeout=60, check=False)


def test_lab_start_from_the_variables_and_the_sbatch_script(venv_bin, tmp_path):
    """etc/cluster/lab.sbatch run as Slurm would run it, with SLURM_NTASKS=2: it points
    lab.start at the example profile; ALLREDUCE_MPIEXEC names a wrapper that records each
    launch.  The notebook calls ``lab.start()`` with no count and runs a check."""
    import nbformat

    log = tmp_path / "launches"
    wrapper = tmp_path / "mpiexec"
    wrapper.write_text(f'#!/bin/sh\nprintf "%s\\n" "$*" >> {log}\nexec {venv_bin / "mpiexec"} "$@"\n')
    wrapper.chmod(0o755)
    notebook = tmp_path / "lab.ipynb"
    cells = ["from allreduce import lab\nview = lab.start()\nprint(len(view))",
             f"view.execute({CHECK!r})",
             'lab.check(view, "allgather", "allgather")',
             "lab.stop()"]
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells]),
                   notebook)
    profile = tmp_path / "profile_allreduce"  # ipyparallel writes its logs into the profile
    shutil.copytree(PROFILE, profile, ignore=shutil.ignore_patterns("log", "pid", "security"))
    env = dict(child_env(), SLURM_NTASKS="2", ALLREDUCE_MPIEXEC=str(wrapper),
               ALLREDUCE_IPP_PROFILE=str(profile), IPYTHONDIR=str(tmp_path / "ipython"))
    start = time.monotonic()
    run = subprocess.run(["bash", str(ROOT / "etc" / "cluster" / "lab.sbatch"), str(notebook),
                          str(tmp_path / "out")],
                         capture_output=True, text=True, env=env, timeout=TIMEOUT, cwd=ROOT,
                         check=False)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    done = nbformat.read(tmp_path / "out" / "lab.ipynb", as_version=4)
    texts = ["".join(o.get("text", "") for o in c.outputs) for c in done.cells]
    assert texts[0].strip() == "2" and texts[2].startswith("allgather: correct on 2"), texts
    assert log.read_text().split()[:2] == ["-n", "2"], log.read_text()
    assert time.monotonic() - start < TIMEOUT
    assert os.environ.get("ALLREDUCE_MPIEXEC") is None  # the test changed only the child's
    assert (profile / "log").is_dir()  # the copy was used, not the shipped profile
