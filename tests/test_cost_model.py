"""allreduce.cost: the pipelined ring's segments counted, the Formula's options and LaTeX, and the
fit recovers a known model."""

from __future__ import annotations

import numpy as np
import pytest

from allreduce import cost
from allreduce.trace import record

@pytest.mark.parametrize(("p", "n"), [(2, 100_000), (3, 200_001), (4, 1 << 18), (5, 300_000)])
def test_pipelined_ring_terms_with_several_segments(p, n):
    """Chunks larger than SEGMENT_BYTES are cut into segments, each its own message (the
    formulas of every algorithm are checked against traces in test_cost_formulas)."""
    from allreduce.algorithms.pipelined_ring import SEGMENT_BYTES, segments

    assert segments(-(-n // p) * 8) > 1 and SEGMENT_BYTES < n * 8 // p
    trace, _ = record("pipelined_ring", p, n, dtype="int64")
    t, traced = cost.terms("pipelined_ring", p, n * 8), trace.terms()
    assert traced.steps == t.steps
    if n % p == 0:
        assert traced == t
    else:  # uneven chunks: the largest chunk sets each step's pace
        assert t.bytes <= traced.bytes <= t.bytes + 2 * (p - 1) * 8


def test_formula_options_and_latex():
    """The servers option and its default; the LaTeX the chapters print, in general and for
    p = 2^k (where the fold's q and f drop out); an unknown option is an error."""
    ps = cost.FORMULAS["parameter_server"]
    assert ps.terms(8, 800.0) == cost.Terms(14, 11200, 5600)
    assert ps.terms(8, 800.0, servers=4) == cost.Terms(14, 2800, 1400)
    assert cost.terms("sharded_parameter_server", 8, 800.0) == cost.Terms(14, 1400, 700)
    with pytest.raises(TypeError, match="unknown cost options"):
        cost.terms("ring", 4, 8.0, servers=2)
    with pytest.raises(ValueError, match="no cost formula"):
        cost.terms("no_such_algorithm", 4, 8.0)
    rab = cost.FORMULAS["rabenseifner"]
    assert rab.latex("rab", power_of_two=True) == (
        r"T_\text{rab} = 2 \log_2 p\,\alpha + \frac{2 n \left(p - 1\right)}{p}\,\beta"
        r" + \frac{n \left(p - 1\right)}{p}\,\gamma")
    assert r"\left(2 f + 2 \log_2 q\right)\,\alpha" in rab.latex()
    for name, formula in cost.FORMULAS.items():
        assert formula.latex(name).count(r"\alpha") == 1, name


def test_fit_recovers_a_known_model():
    truth = cost.Model(alpha=20e-6, beta=1e-9, gamma=0.3e-9)
    sizes = [2**k for k in range(8, 27, 2)]
    counts = [cost.terms(a, p, n) for a in ("ring", "recursive_doubling") for p in (2, 4) for n in sizes]
    seconds = [c.steps * truth.alpha + c.bytes * truth.beta + c.reduced * truth.gamma
               for c in counts]
    model = cost.fit(counts, seconds)
    assert model.alpha == pytest.approx(truth.alpha, rel=1e-6)
    assert model.beta == pytest.approx(truth.beta, rel=1e-6)
    assert model.gamma == pytest.approx(truth.gamma, rel=1e-6)


def test_fit_never_returns_a_negative_parameter():
    # times with no latency at all and a slight curvature: a plain fit would give α < 0
    sizes = np.array([2**k for k in range(10, 24)], dtype=float)
    counts = [cost.Terms(1, n, 0) for n in sizes]
    model = cost.fit(counts, sizes * 1e-9 * (1 + 0.05 * np.log2(sizes)), gamma=False)
    assert model.alpha >= 0 and model.beta > 0 and model.gamma == 0


def test_busbw_is_algbw_times_two_p_minus_one_over_p():
    assert cost.busbw(1e9, 1.0, 4) == pytest.approx(1.5e9)
    assert cost.busbw(1e9, 1.0, 1) == 1e9


@pytest.mark.parametrize("p", [4, 8, 64, 1024])
def test_crossover_matches_the_chapter_formula(p):
    model = cost.Model(alpha=2e-6, beta=1 / 12.5e9)
    k = np.log2(p)
    formula = model.alpha / model.beta * (2 * (p - 1) - k) / (k - 2 * (p - 1) / p)
    assert cost.crossover(model, "recursive_doubling", "ring", p) == pytest.approx(formula)
    assert cost.crossover(model, "ring", "recursive_doubling", p) is None  # ring never first


@pytest.mark.parametrize("network", list(cost.NETWORKS))
def test_wins_somewhere_is_exact_where_a_grid_of_sizes_is_not(network):
    """cost.wins_somewhere agrees with the fastest algorithm on a fine grid of sizes, and
    finds the narrow window on 7 ranks that powers of two step over: off a power of two,
    Rabenseifner wins on 7 ranks and more, never on 3, 5 or 6 (the fold's two steps)."""
    model = cost.NETWORKS[network]
    names = ("recursive_doubling", "rabenseifner", "ring")
    sizes = np.geomspace(8, 2.0**34, 2500)  # steps of 0.9%: the 7-rank windows are 4-7% wide
    for p in range(2, 13):
        for name in names:
            rivals = [other for other in names if other != name]
            on_grid = any(all(model.time(name, p, n) < model.time(r, p, n) for r in rivals)
                          for n in sizes)
            assert cost.wins_somewhere(model, name, p, rivals) == on_grid, (name, p)
    odd = [p for p in range(3, 20) if p & (p - 1)]
    wins = [p for p in odd if cost.wins_somewhere(model, "rabenseifner", p,
                                                  ("recursive_doubling", "ring"))]
    assert wins[0] == 7 and set(odd) - set(wins) == {3, 5, 6}
    powers = [1 << e for e in range(3, 34)]
    assert not any(min(names, key=lambda a: model.time(a, 7, n)) == "rabenseifner"
                   for n in powers)  # what a grid of powers of two missed


def test_measured_crossover():
    sizes = [1, 2, 4, 8, 16]
    assert cost.measured_crossover(sizes, [1, 1, 1, 5, 9], [2, 2, 2, 4, 4]) == pytest.approx(
        np.sqrt(32))
    assert cost.measured_crossover(sizes, [1] * 5, [2] * 5) is None
    assert cost.measured_crossover(sizes, [3] * 5, [2] * 5) is None


def test_save_and_load_round_trip(tmp_path, monkeypatch):
    monkeypatch.setenv("ALLREDUCE_MODEL", str(tmp_path / "m.json"))
    assert cost.load() is None
    model = cost.Model(alpha=3e-6, beta=2e-10, gamma=1e-10, overhead=4e-5)
    assert cost.save(model) == tmp_path / "m.json"
    assert cost.load() == model
    # a model saved before the overhead term existed still loads, with no overhead
    (tmp_path / "m.json").write_text('{"alpha": 3e-06, "beta": 2e-10, "gamma": 1e-10}')
    assert cost.load() == cost.Model(alpha=3e-6, beta=2e-10, gamma=1e-10, overhead=0.0)
    # a hand-edited file whose numbers are strings failed later, inside auto's choice on
    # the ranks that loaded it, before the check: now at once, naming the file
    (tmp_path / "m.json").write_text('{"alpha": "3e-06", "beta": 2e-10}')
    with pytest.raises(ValueError, match=r"m\.json is not a model .* alpha must be a number"):
        cost.load()
    with pytest.raises(TypeError, match="beta must be a number of seconds, got True"):
        cost.Model(alpha=1e-6, beta=True)


def test_fit_recovers_a_per_call_overhead():
    """With overhead=True the fit finds a constant per call beside α, β and γ, and the
    model's prediction adds it to the formula's terms."""
    truth = cost.Model(alpha=20e-6, beta=1e-9, gamma=0.3e-9, overhead=50e-6)
    sizes = [2**k for k in range(8, 27, 2)]
    counts = [cost.terms(a, p, n) for a in ("ring", "recursive_doubling") for p in (2, 4)
              for n in sizes]
    seconds = [truth.predict(c) for c in counts]
    assert seconds[0] == pytest.approx(counts[0].steps * 20e-6 + counts[0].bytes * 1e-9
                                       + counts[0].reduced * 0.3e-9 + 50e-6)
    fitted = cost.fit(counts, seconds, overhead=True)
    for name in ("alpha", "beta", "gamma", "overhead"):
        assert getattr(fitted, name) == pytest.approx(getattr(truth, name), rel=1e-6), name
    assert cost.fit(counts, seconds).overhead == 0  # not fitted unless asked for


def test_auto_never_uses_a_saved_model_unless_asked(tmp_path, monkeypatch):
    """Issue 24 §3: a model file that exists changes nothing until a call loads it; then
    explain() names the file and its date, and use_model(None) goes back to the default."""
    from allreduce import auto

    monkeypatch.setenv("ALLREDUCE_MODEL", str(tmp_path / "m.json"))
    latency_only = cost.Model(alpha=1.0, beta=1e-12)
    cost.save(latency_only)
    try:
        assert auto.model() == auto.DEFAULT_MODEL and auto.model_source() == auto.DEFAULT_SOURCE
        before = auto.explain(1 << 26, 4)
        assert before.model == auto.DEFAULT_MODEL and before.chosen == "rabenseifner"
        assert "committed default" in str(before)
        assert auto.load_model() == latency_only  # the default path: $ALLREDUCE_MODEL
        after = auto.explain(1 << 26, 4)
        assert after.model == latency_only and after.chosen == "recursive_doubling"
        assert str(tmp_path / "m.json") in after.source and "saved 20" in after.source
        assert "overhead left out" in str(after) and "gamma left out" in str(after)
        assert after.predicted == {name: latency_only.time(name, 4, 1 << 26)
                                   for name in ("recursive_doubling", "rabenseifner", "ring")}
    finally:
        auto.use_model(None)
    assert auto.model() == auto.DEFAULT_MODEL and auto.model_source() == auto.DEFAULT_SOURCE
    with pytest.raises(FileNotFoundError, match="no saved model at"):
        auto.load_model(tmp_path / "missing.json")
    assert auto.model() == auto.DEFAULT_MODEL  # a failed load changes nothing


def test_explain_on_nodes_lists_the_hierarchical_allreduce():
    from allreduce import auto
    from allreduce.algorithms.auto import resolve

    found = auto.explain(1 << 26, 8, ranks_per_node=4)
    assert (found.chosen, found.options) == resolve(1 << 26, 8, 4)
    assert set(found.predicted) == {"recursive_doubling", "rabenseifner", "ring", "hierarchical"}
    assert min(found.predicted, key=found.predicted.get) == found.chosen


def test_the_default_model_is_the_fit_of_its_committed_runs():
    """``auto.DEFAULT_MODEL`` is reproducible: fitting the named algorithms' rows of the three
    committed ``make bench`` runs (``chapters/data/bench_fit.json``) gives it back, to the
    three significant figures it is written with."""
    import json
    from pathlib import Path

    from allreduce import auto
    from allreduce.bench import Row
    from allreduce.bench.record import fit_model

    path = Path(__file__).resolve().parent.parent / "chapters" / "data" / "bench_fit.json"
    rows = [Row(**{k: v for k, v in r.items() if k not in ("algbw", "busbw")})
            for r in json.loads(path.read_text())]
    assert len({r.name for r in rows} & {"ring", "rabenseifner", "recursive_doubling"}) == 3
    fitted, _ = fit_model([r for r in rows if r.name != "auto"],
                          ["MPI_Allreduce", "torch_all_reduce"])
    default = auto.DEFAULT_MODEL
    for got, want in ((fitted.alpha, default.alpha), (1 / fitted.beta, 1 / default.beta),
                      (1 / fitted.gamma, 1 / default.gamma),
                      (fitted.overhead, default.overhead)):
        assert got == pytest.approx(want, rel=5e-3)  # written to three figures
