"""allreduce.scaling: a training step's compute, allreduce and exposed allreduce from the
cost model, and the weak and strong scaling efficiencies chapter 80 computes with it."""

from __future__ import annotations

import pytest

from allreduce import cost, scaling
from allreduce.algorithms.auto import fastest

NET = cost.NETWORKS["100 Gb/s, α = 2 µs"]
EXAMPLE = dict(gradient_bytes=1e9, sample_seconds=0.25 / 32, model=NET)


def test_a_step_is_compute_plus_the_exposed_allreduce():
    one = scaling.step(1, samples=32, **EXAMPLE)
    assert (one.compute, one.communicate, one.exposed, one.algorithm) == (0.25, 0, 0, "")
    many = scaling.step(64, samples=32, **EXAMPLE)
    assert many.algorithm == fastest(1e9, 64, NET)
    assert many.communicate == pytest.approx(NET.time(many.algorithm, 64, 1e9))
    assert many.seconds == pytest.approx(0.25 + many.communicate)
    assert many.ratio == pytest.approx(many.communicate / 0.25)
    hidden = scaling.step(64, samples=32, overlap=2 / 3, **EXAMPLE)
    assert hidden.exposed == pytest.approx(max(0.0, many.communicate - 0.25 * 2 / 3))
    fully = scaling.step(64, samples=3200, overlap=2 / 3, **EXAMPLE)  # backward outlasts it
    assert fully.exposed == 0 and fully.seconds == fully.compute


@pytest.mark.parametrize("p", [2, 8, 64, 512])
def test_efficiencies_follow_their_definitions(p):
    weak = scaling.weak_efficiency(p, batch=32, **EXAMPLE)
    assert weak == pytest.approx(0.25 / scaling.step(p, samples=32, **EXAMPLE).seconds)
    strong = scaling.strong_efficiency(p, global_batch=1024, **EXAMPLE)
    assert strong == pytest.approx(
        1024 * 0.25 / 32 / (p * scaling.step(p, samples=1024 / p, **EXAMPLE).seconds))
    # the same per-rank batch: the same step, so the same efficiency
    assert scaling.strong_efficiency(p, global_batch=32 * p, **EXAMPLE) == pytest.approx(weak)


def test_strong_scaling_falls_as_ranks_are_added():
    """Each rank's compute shrinks as 1/p while the allreduce does not."""
    values = [scaling.strong_efficiency(p, global_batch=1024, **EXAMPLE)
              for p in (2, 8, 64, 512)]
    assert values == sorted(values, reverse=True) and 0 < values[-1] < 0.15


def test_the_chapters_worked_example_by_hand():
    """512 GPUs, 1e9 bytes, 100 Gb/s: Rabenseifner's formula written out (18 steps of 2 µs,
    2·511/512·n bytes at 12.5 GB/s, 511/512·n reduced at 100 GB/s), then the step with and
    without overlap, and the weak-scaling efficiency, computed here without scaling.step."""
    allreduce_seconds = 18 * 2e-6 + 2 * 511 / 512 * 1e9 / 12.5e9 + 511 / 512 * 1e9 / 100e9
    step = scaling.step(512, samples=32, **EXAMPLE)
    assert step.algorithm == "rabenseifner"
    assert step.communicate == pytest.approx(allreduce_seconds)
    assert step.seconds == pytest.approx(0.25 + allreduce_seconds)
    hidden = scaling.step(512, samples=32, overlap=2 / 3, **EXAMPLE)
    assert hidden.seconds == pytest.approx(0.25 + allreduce_seconds - 0.25 * 2 / 3)
    assert scaling.weak_efficiency(512, batch=32, **EXAMPLE) == pytest.approx(
        0.25 / (0.25 + allreduce_seconds))
