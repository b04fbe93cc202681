"""The course's real Top-k gradients and training record: the scripts that make them rerun
deterministically at a tiny size, the committed record reads back consistently, and the
fill-in extrapolations are fitted and checked as the chapter says."""

from __future__ import annotations

import json
from dataclasses import asdict

import numpy as np
import pytest

pytest.importorskip("torch")

from allreduce.sparse import fill_in
from allreduce.sparse.layout import union
from allreduce.sparse.compression import topk
from allreduce.sparse.samples import PAIRS_DENSITY, RECORD, TINY, Samples, record, save


def test_the_recording_reruns_to_the_same_arrays(tmp_path):
    first, second = record(TINY), record(TINY)
    assert first.keys() == second.keys()
    for key in first:
        assert first[key].tobytes() == second[key].tobytes(), key
    save(first, tmp_path / "tiny.npz")
    samples = Samples(tmp_path / "tiny.npz")
    n, k = samples.n, int(max(TINY.densities) * samples.n)
    fill = samples.fill_in(max(TINY.densities))
    assert fill.shape == (TINY.steps, TINY.shards)
    assert (np.diff(fill, axis=1) >= 0).all() and (fill[:, 0] == k).all()
    assert (fill <= np.minimum(np.arange(1, TINY.shards + 1) * k, n)).all()
    # the stored pairs are the Top-k of the shard's gradient, nested: lower densities are
    # the largest of them, and the low-density support is the same set
    for shard in range(TINY.pair_shards):
        indices, values = samples.pairs(shard, 1)
        assert len(indices) == int(PAIRS_DENSITY * n) and np.all(np.diff(indices) > 0)
        low = samples.support(shard, 1)
        small, _ = samples.pairs(shard, 1, min(TINY.densities))
        assert np.array_equal(low, small)
    with pytest.raises(ValueError, match="regenerate"):
        samples.pairs(TINY.pair_shards, 0)


def test_the_committed_record():
    from allreduce.sparse.samples import Settings

    samples = Samples(RECORD)
    assert samples.meta["settings"] == json.loads(json.dumps(
        {k: v for k, v in asdict(Settings()).items() if k != "keep_full"}))
    assert samples.n >= 4_000_000 and samples.shards >= 64
    assert RECORD.stat().st_size < 4e6
    assert samples.meta["pretrain_loss"][-1] < samples.meta["pretrain_loss"][0] / 2
    for density in samples.densities:
        k = int(density * samples.n)
        measured = samples.fill_in(density).mean(axis=0)
        assert measured[0] == k and (np.diff(measured) >= 0).all()
        # real gradients overlap: the union of 64 shards is far below independent supports
        assert measured[63] < 0.7 * union(samples.n, density, 64)
    indices, values = samples.pairs(0, 0, 0.001)
    assert len(indices) == int(0.001 * samples.n)
    # the stored values keep the Top-k order: re-selecting the 0.01% gives the largest
    top_indices, _ = topk(values, int(0.0001 * samples.n))
    assert np.all(np.abs(values[top_indices]).min() >= np.abs(np.delete(values, top_indices)).max())


@pytest.mark.parametrize("density", [0.001, 0.01, 0.1])
def test_the_fill_in_extrapolations_hold_on_the_shards_they_were_not_fitted_on(density):
    """The chapter's simulation extrapolates with both models: each within 25% of the
    measured union on shards 33 to 64, which neither was fitted on."""
    samples = Samples(RECORD)
    k = int(density * samples.n)
    measured = samples.fill_in(density).mean(axis=0)
    for law in (fill_in.fit_power_law(measured, samples.n, k),
                fill_in.fit_beta_binomial(measured, samples.n, k)):
        assert fill_in.worst_error(law, measured, 33) < 0.25, law
        assert law(1) == pytest.approx(k, rel=0.2)
        assert law(4096) <= samples.n


def test_the_models_on_synthetic_unions():
    """A power law is recovered exactly; independent supports fit a beta-binomial with a
    large a (nearly one chance for every coordinate) and a small error."""
    n, k = 1_000_000, 1000
    unions = np.array([k * 1.3 * s ** 0.6 if s > 1 else k for s in range(1, 65)])
    law = fill_in.fit_power_law(unions, n, k)
    assert law.exponent == pytest.approx(0.6) and law.scale == pytest.approx(1.3)
    independent = np.array([union(n, k / n, s) for s in range(1, 65)])
    beta = fill_in.fit_beta_binomial(independent, n, k)
    assert beta.a > 10 and fill_in.worst_error(beta, independent, 1) < 0.01


def test_the_training_script_runs_and_the_committed_record_says_what_the_chapter_says(tmp_path):
    from allreduce.sparse import topk_training

    assert topk_training.main(["--tiny", "--out", str(tmp_path / "t.json")]) == 0
    tiny = json.loads((tmp_path / "t.json").read_text())
    assert set(tiny["runs"]) == {name for name, _, _ in topk_training.RUNS}
    for run in tiny["runs"].values():
        assert len(run["train_loss"]) == topk_training.TINY.steps
        assert all(np.isfinite(run["train_loss"]))
    committed = json.loads(topk_training.RECORD.read_text())
    final = {name: run["held_out_loss"][-1][1] for name, run in committed["runs"].items()}
    assert final["top-1% + error feedback"] < final["top-1%, no feedback"]
    assert final["top-0.1% + error feedback"] < final["top-0.1%, no feedback"]
    assert committed["settings"] == asdict(topk_training.Settings())  # made by the script as is


@pytest.mark.parametrize("p", [2, 3, 5, 8])
def test_the_cost_from_the_supports_is_the_replayed_trace_on_real_gradients(p):
    """allreduce.sparse.cost on the recorded Top-k supports (0.1%, n = the transformer's
    parameter count, shards 0 .. p-1): every algorithm's steps and bytes equal the tracing
    communicator's replay of the real code."""
    from allreduce.sparse import cost, sparse_allreduce
    from allreduce.trace import Trace, TracingCommunicator
    from allreduce.transports.threads import run_threads

    samples = Samples(RECORD)
    supports = [samples.support(shard) for shard in range(p)]
    for name in ("allgather", "sparse_ring", "sparse_direct", "sparse_recursive_doubling"):
        for boundaries in ("length", "nonzeros") if name in ("sparse_ring",) else ("length",):
            def body(comm, name=name, boundaries=boundaries):
                tracer = TracingCommunicator(comm)
                mine = supports[comm.rank]
                sparse_allreduce(mine, np.ones(len(mine), np.float32), samples.n, tracer,
                                 algorithm=name, boundaries=boundaries)
                return tracer.events

            got = Trace(run_threads(p, body)).terms()
            want = cost.terms(name, supports, samples.n, 4, boundaries)
            assert (got.steps, got.bytes) == (want.steps, want.bytes), (name, boundaries)
