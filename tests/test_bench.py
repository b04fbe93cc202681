"""allreduce-bench: sizes as nccl-tests reads them, and real runs under mpiexec and torchrun
that print the table, check every result (#wrong) and write CSV and JSON."""

from __future__ import annotations

import csv
import json

import pytest

from allreduce import bench
from conftest import run_launcher

ARGS = ["-b", "1K", "-e", "16K", "-f", "4", "-a", "ring,auto", "-n", "2", "-w", "1",
        "--least-timed", "0.01"]


def test_sizes_read_like_nccl_tests():
    assert bench.parse_size("8") == 8 and bench.parse_size("1K") == 1024
    assert bench.parse_size("64M") == 64 << 20 and bench.parse_size("1g") == 1 << 30
    assert bench.size_range(1024, 16384, 4) == [1024, 4096, 16384]
    with pytest.raises(ValueError, match="not a size"):
        bench.parse_size("lots")


def test_a_short_call_is_timed_for_the_least_time_a_long_one_for_n_iterations():
    """``--least-timed``: each call gets at least ``-n`` iterations, and more, up to the
    most, where ``-n`` of them take less than the least time."""
    import time

    from allreduce.bench.timing import enough

    calls = {"instant": lambda: None, "2 ms": lambda: time.sleep(0.002)}
    counts = enough(calls, 2, 0.02, 50, barrier=lambda: None, slowest=lambda t: t, probes=3,
                    warm=True)
    assert counts["instant"] == 50  # 0.02 s of a no-op is more than the most
    assert 2 <= counts["2 ms"] <= 10  # 0.02 s of 2 ms calls, a sleep overshooting
    assert enough(calls, 30, 0.02, 50, barrier=lambda: None, slowest=lambda t: t) == {
        "instant": 50, "2 ms": 30}  # never fewer than asked for
    # the counts come from what slowest() says (the slowest rank's time a call), the same on
    # every rank: 2 ms a call, so 0.02 s takes 10 of them
    assert enough(calls, 2, 0.02, 50, barrier=lambda: None, slowest=lambda t: 0.002,
                  probes=3) == {"instant": 10, "2 ms": 10}


def _check_output(stdout: str, peers: list[str], csv_path, json_path, one_rank=False):
    assert "#wrong" in stdout and "busbw" in stdout and "vs best peer" in stdout
    assert "to time each for 0.01 s, in up to 5 interleaved rounds" in stdout
    rows = list(csv.DictReader(csv_path.open()))
    names = [*peers, "ring", "auto"]
    assert [(int(r["nbytes"]), r["name"]) for r in rows] == [
        (n, name) for n in (1024, 4096, 16384) for name in names]
    assert all(r["wrong"] == "0" for r in rows)
    assert all(float(r["seconds"]) > 0 and float(r["peer_ratio"]) > 0 for r in rows)
    assert json.loads(json_path.read_text()) and len(json.loads(json_path.read_text())) == len(rows)
    from allreduce.validation import IN_BAND_LIMIT  # each row says how its check travelled

    assert all(r["in_band_limit"] == IN_BAND_LIMIT for r in json.loads(json_path.read_text()))
    assert all(r["least_timed"] == 0.01 for r in json.loads(json_path.read_text()))
    for name in names:
        assert f"# Avg bus bandwidth {name:>24}:" in stdout
    if not one_rank:  # one rank moves no data: nothing to fit or predict
        assert "# model fitted to this run's algorithm rows" in stdout
    from allreduce.algorithms.auto import DEFAULT_MODEL

    committed = f"# auto chose with alpha = {DEFAULT_MODEL.alpha * 1e6:.1f} us per step"
    assert committed in stdout  # the committed default, not a saved model
    assert "from the committed default (auto.DEFAULT_MODEL" in stdout
    for r in rows:  # predictions for the library's algorithms, none for the peers
        assert (r["predicted"] == "") == (r["name"] in peers or one_rank)


def test_under_mpiexec_with_both_peers(venv_bin, tmp_path):
    run = run_launcher([venv_bin / "mpiexec", "-n", "3", venv_bin / "python", "-m", "mpi4py",
                        "-m", "allreduce.bench", *ARGS, "--csv", tmp_path / "r.csv",
                        "--json", tmp_path / "r.json", "--plot", tmp_path / "r.png"], timeout=180)
    assert run.returncode == 0, run.stdout + run.stderr
    _check_output(run.stdout, ["MPI_Allreduce", "torch_all_reduce"], tmp_path / "r.csv",
                  tmp_path / "r.json")
    assert (tmp_path / "r.png").stat().st_size > 1000


def test_under_torchrun(venv_bin, tmp_path, monkeypatch):
    """Also --save-model: the fitted model is kept where auto reads it."""
    from allreduce import cost

    monkeypatch.setenv("ALLREDUCE_MODEL", str(tmp_path / "model.json"))
    run = run_launcher([venv_bin / "torchrun", "--standalone", "--nproc-per-node", "2", "-m",
                        "allreduce.bench", *ARGS, "--csv", tmp_path / "r.csv",
                        "--json", tmp_path / "r.json", "--save-model"], timeout=180)
    assert run.returncode == 0, run.stdout + run.stderr
    _check_output(run.stdout, ["torch_all_reduce"], tmp_path / "r.csv", tmp_path / "r.json")
    assert f"# saved the model for auto to {tmp_path / 'model.json'}" in run.stdout
    saved = cost.load(tmp_path / "model.json")
    assert f"alpha = {saved.alpha * 1e6:.1f} us per step" in run.stdout


def test_auto_uses_a_saved_model_only_when_given(venv_bin, tmp_path):
    """--model FILE: auto chooses with the model in FILE, and the output says so."""
    from allreduce import cost

    path = cost.save(cost.Model(alpha=1.0, beta=1e-12), tmp_path / "mine.json")
    run = run_launcher([venv_bin / "mpiexec", "-n", "2", venv_bin / "python", "-m", "mpi4py",
                        "-m", "allreduce.bench", *ARGS, "--no-torch", "--model", path,
                        "--csv", tmp_path / "r.csv", "--json", tmp_path / "r.json"],
                       timeout=180)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "# auto chose with alpha = 1000000.0 us per step" in run.stdout
    assert f"from the file {path}, saved 20" in run.stdout


def test_an_unknown_algorithm_is_refused_on_every_rank(venv_bin):
    run = run_launcher([venv_bin / "mpiexec", "-n", "2", venv_bin / "python", "-m", "mpi4py",
                        "-m", "allreduce.bench", "-a", "ring,fastest"], timeout=60)
    assert run.returncode != 0
    assert run.stderr.count("unknown algorithm(s) fastest") == 2


def test_fit_model_recovers_times_made_by_a_model():
    from allreduce import cost

    truth = cost.Model(alpha=50e-6, beta=1e-9, gamma=0.5e-9)
    rows = []
    for name in ("ring", "recursive_doubling", "auto", "MPI_Allreduce"):
        for nbytes in (1 << 10, 1 << 16, 1 << 22):
            run_as = bench.call_terms(bench.Row(nbytes, nbytes // 4, "float32", "sum", name, 1.0, 4, 0)) \
                if name != "MPI_Allreduce" else cost.Terms(1, nbytes, 0)
            seconds = (run_as.steps * truth.alpha + run_as.bytes * truth.beta
                       + run_as.reduced * truth.gamma)
            rows.append(bench.Row(nbytes, nbytes // 4, "float32", "sum", name, seconds, 4, 0))
    model, annotated = bench.fit_model(rows, ["MPI_Allreduce"])
    assert model.alpha == pytest.approx(truth.alpha) and model.beta == pytest.approx(truth.beta)
    for row in annotated:
        if row.name == "MPI_Allreduce":
            assert row.predicted is None
        else:
            assert row.predicted == pytest.approx(row.seconds)


def test_sparse_benchmark_under_mpiexec(venv_bin, tmp_path):
    """allreduce-bench --sparse on 3 ranks, on uniform, identical and disjoint supports and
    on the recorded gradients: every sparse algorithm (the chunked ones with each
    boundaries), the two dense peers on the densified
    vector, gloo's sparse all_reduce (uniform, gradients) and the Top-k selection at each
    density, with no wrong element, the nonzeros of the output (the union of the supports:
    k on identical supports, p·k on disjoint ones), the local work (less than the call), the
    model's prediction (positive) and what auto ran, and the speed-up over the dense ring."""
    import json

    run = run_launcher([venv_bin / "mpiexec", "-n", "3", venv_bin / "python", "-m", "mpi4py",
                        "-m", "allreduce.bench", "--sparse", "--count", "64K",
                        "--densities", "0.001,0.01", "-n", "2", "-w", "1", "--least-timed", "0",
                        "--supports", "uniform,identical,disjoint,gradients",
                        "--json", tmp_path / "s.json"], timeout=240)
    assert run.returncode == 0, run.stdout + run.stderr
    rows = json.loads((tmp_path / "s.json").read_text())
    from allreduce.sparse import SPARSE_CHOICES
    from allreduce.sparse.samples import Samples

    for supports in ("uniform", "identical", "disjoint", "gradients"):
        names = {row["name"] for row in rows if row["supports"] == supports}
        peers = {"torch gloo sparse"} if supports in ("uniform", "gradients") else set()
        assert names == {"MPI_Allreduce", "ring (densified)", *SPARSE_CHOICES, "auto",
                         "Top-k selection", *peers}, supports
    assert all(row["wrong"] == 0 and row["seconds"] > 0 for row in rows)
    sparse = [row for row in rows if row["name"] in (*SPARSE_CHOICES, "auto")]
    assert all(0 < row["local"] < row["seconds"] and row["predicted"] > 0 for row in sparse)
    assert all(row["chosen"] in SPARSE_CHOICES for row in sparse if row["name"] == "auto")
    for (supports, density) in {(row["supports"], row["density"]) for row in rows}:
        out = {row["nnz_out"] for row in sparse
               if (row["supports"], row["density"]) == (supports, density)}
        assert len(out) == 1, (supports, density, out)  # the union of the supports
        k = max(row["nnz_in"] for row in sparse if row["supports"] == supports
                and row["density"] == density)
        if supports == "identical":
            assert out == {k}
        if supports == "disjoint":
            assert out == {3 * k}
    assert {row["n"] for row in rows if row["supports"] == "gradients"} == {Samples().n}
    ring = [row for row in rows if row["name"] == "ring (densified)"]
    assert all(row["vs_ring"] == 1.0 for row in ring)
    assert "vs ring" in run.stdout and "sparse_ring" in run.stdout and "local" in run.stdout


@pytest.mark.gpu
def test_under_torchrun_on_nccl(venv_bin, tmp_path):
    """On GPUs: CUDA tensors over NCCL, one process per GPU (on one GPU, one process), every
    result checked against ``dist.all_reduce`` on the GPU."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device on this machine")
    gpus = torch.cuda.device_count()
    run = run_launcher([venv_bin / "torchrun", "--standalone", "--nproc-per-node", str(gpus),
                        "-m", "allreduce.bench", *ARGS, "--csv", tmp_path / "r.csv",
                        "--json", tmp_path / "r.json", *["--allow-one-rank"] * (gpus == 1)],
                       timeout=300)
    assert run.returncode == 0, run.stdout[-5000:] + run.stderr[-3000:]
    _check_output(run.stdout, ["torch_all_reduce"], tmp_path / "r.csv", tmp_path / "r.json",
                  one_rank=gpus == 1)
    assert f"{torch.cuda.get_device_name()} ({gpus} visible), NCCL" in run.stdout


def test_the_micro_measurements_take_help(capsys):
    """``python -m allreduce.bench.micro --help`` ran the measurements instead."""
    from allreduce.bench import micro

    with pytest.raises(SystemExit) as ended:
        micro.main(["--help"])
    assert ended.value.code == 0 and "--in-band" in capsys.readouterr().out
