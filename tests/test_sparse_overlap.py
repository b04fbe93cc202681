"""The sparse ``auto``'s probes of how the ranks' supports overlap
(:mod:`allreduce.sparse.overlap`): what they estimate against the real supports, when
``auto`` takes them, and that a call that probes still gives every rank the exact sum."""

from __future__ import annotations

import numpy as np
import pytest

from allreduce.algorithms.auto import DEFAULT_MODEL
from allreduce.sparse import SPARSE_ALGORITHMS, auto, layout, overlap, sparse_allreduce
from allreduce.sparse.chunks import equal_length
from allreduce.transports.threads import run_threads


def kinds(rng, n: int, p: int, density: float) -> dict[str, list[np.ndarray]]:
    """Supports of every kind of overlap, each rank's sorted indices."""
    k = int(density * n)
    one = np.sort(rng.choice(n, k, replace=False))
    spread = rng.permutation(n)
    shared = rng.choice(n, k // 2, replace=False)
    return {
        "independent": [np.sort(rng.choice(n, k, replace=False)) for _ in range(p)],
        "identical": [one] * p,
        "disjoint": [np.sort(spread[r * (n // p):][:min(k, n // p)]) for r in range(p)],
        "half shared": [np.union1d(shared, rng.choice(n, k - k // 2, replace=False))
                        for _ in range(p)],
        "clustered": [np.sort(rng.choice(n // 5, k // 4, replace=False)) for _ in range(p)],
        "uneven": [np.sort(rng.choice(n, int(k * r / p), replace=False)) for r in range(p)],
    }


def table(supports, n):
    return np.array([overlap.hits(s, n, len(supports)) for s in supports])


def within_sampling(estimate, real, width: int, probes: int) -> bool:
    """Whether a count estimated from ``probes`` probes over ``width`` elements is within
    five standard deviations (and one probe's weight) of the real one."""
    share = np.clip(np.asarray(real, float) / width, 0, 1)
    spread = width / probes * np.sqrt(probes * share * (1 - share))
    return bool(np.all(np.abs(np.asarray(estimate) - real) <= 5 * spread + width / probes))


@pytest.mark.parametrize("p", [2, 4, 7])
def test_the_probes_estimate_the_unions_and_what_each_chunk_holds(p):
    """On supports of every kind of overlap (one with a rank that holds nothing and each
    rank a different density): the windows' unions, and with equal lengths the ring's
    partial sums and the finished chunks (at 10%; at 1% a chunk's probes are too few to
    measure them, and they are only bounded), that the probes estimate are the real
    supports' within sampling error, and exact for one rank's window (and the ring's first
    step);
    with equal lengths the cut and each rank's pairs per chunk are exact; identical
    supports' probes give every window the same union, as the real ones do; a cut of
    equal nonzeros of supports that cluster in the first fifth of the range cuts there too."""
    n = 1 << 20
    for density in (0.01, 0.1):
        for kind, supports in kinds(np.random.default_rng(p), n, p, density).items():
            hits = table(supports, n)
            probes = hits.shape[1]
            assert probes == p * overlap.per_chunk(p)
            counts = [len(s) for s in supports]
            unions = overlap.unions(hits, n, counts)
            assert within_sampling(unions, layout.measured_unions(supports), n, probes), kind
            assert unions[1] == pytest.approx(np.mean(counts), rel=1e-12)
            real, guess = layout.from_supports(supports, n), overlap.held(
                hits, n, "length", [layout.chunk_counts(s, n, p) for s in supports])
            assert guess.bounds == real.bounds and (guess.pieces == real.pieces).all()
            for ours, theirs in ((guess.ring, real.ring), (guess.finished, real.finished)):
                # at 1%, a chunk's hundred-odd probes find a rank's pairs once or twice:
                # too few to measure its overlap, so there it is only bounded
                if density >= 0.1:
                    assert within_sampling(ours, theirs, n // p, probes // p), kind
                assert (ours <= guess.pieces.sum() + 1e-6).all() and (ours >= 0).all()
            assert np.allclose(guess.ring[0], real.ring[0], rtol=1e-12), kind
            cut = overlap.held(hits, n, "nonzeros", None)
            assert cut.bounds[0][0] == 0 and cut.bounds[-1][1] == n
            assert all(a[1] == b[0] for a, b in zip(cut.bounds, cut.bounds[1:]))
            assert cut.histogram_bytes == layout.from_supports(
                supports, n, "nonzeros").histogram_bytes > 0
            assert within_sampling(cut.finished.sum(), real.finished.sum(), n, probes), kind
            if kind == "clustered":
                assert cut.bounds[-1][0] <= 1.1 * n / 5, cut.bounds
            if kind == "identical":
                assert unions[1:] == pytest.approx([unions[1]] * p, rel=1e-12)


def test_the_probes_find_overlap_where_the_loads_cannot_see_it():
    """Independent supports hold as many probes together as their loads predict; identical
    ones do not, at 1% (a union of 1% of the vector where independent ones' is 3.9%) or at
    10% (10% against 34%), nor, at 10%, ones that share half their pairs (24%) or disjoint
    ones (40%).  At 1% the last two differ from independent ones by fewer probes than
    sampling does, and are not asserted either way."""
    n, p = 1 << 20, 4
    for density in (0.01, 0.1):
        for kind, supports in kinds(np.random.default_rng(11), n, p, density).items():
            loads = [layout.chunk_counts(s, n, p) for s in supports]
            found = overlap.independent(table(supports, n), n, loads)
            if kind in ("independent", "uneven"):
                assert found, (kind, density)
            elif kind == "identical" or (kind != "clustered" and density == 0.1):
                assert not found, (kind, density)


def test_the_probed_positions_are_fixed_spread_and_one_per_stratum():
    """The same positions for the same n and p (every rank must probe alike), sorted and
    distinct, ``per_chunk(p)`` in each equal-length chunk, and on independent supports a
    probe is held as often as the density says."""
    n, p = 1_000_003, 3
    positions = overlap.positions(n, p)
    assert positions is overlap.positions(n, p) and not positions.flags.writeable
    assert (np.diff(positions) > 0).all()
    m = overlap.per_chunk(p)
    for lo, hi in equal_length(n, p):
        assert ((positions >= lo) & (positions < hi)).sum() == m
    rng = np.random.default_rng(2)
    held = [overlap.hits(np.sort(rng.choice(n, n // 5, replace=False)), n, p).mean()
            for _ in range(20)]
    assert np.mean(held) == pytest.approx(0.2, abs=0.01)
    assert not overlap.fits(10, 3) and overlap.fits(3 * m, 3)


def test_auto_on_identical_supports_runs_a_sparse_algorithm_where_the_loads_say_dense():
    """At 10% density on 16 M elements over 4 ranks, identical supports look from their
    loads like independent ones, whose union holds 34% of the vector: auto would run the
    dense path, more than 1.1x the best prediction from the real supports.  A call that
    long probes, and then runs the algorithm that the real supports predict within 5% of
    the best."""
    n, p = 1 << 24, 4
    supports = kinds(np.random.default_rng(3), n, p, 0.1)["identical"]
    counts = [len(s) for s in supports]
    loads = [layout.chunk_counts(s, n, p) for s in supports]
    facts = (n, counts, 4, DEFAULT_MODEL, SPARSE_ALGORITHMS)
    assert all(auto.worth_probing(n, k, p, 4, DEFAULT_MODEL, SPARSE_ALGORITHMS) for k in counts)
    real = {option: auto.predict(option[0], n, counts, 4, DEFAULT_MODEL, boundaries=option[1],
                                 supports=supports) for option in auto.options(SPARSE_ALGORITHMS)}
    best = min(real.values())
    assert auto.choose(*facts, loads=loads) == ("dense", "length")
    assert real["dense", "length"] > 1.1 * best
    chosen = auto.choose_for_supports(n, supports, 4, DEFAULT_MODEL, SPARSE_ALGORITHMS)
    assert chosen[0] != "dense" and real[chosen] <= 1.05 * best
    with pytest.raises(TypeError, match="needs the loads"):
        auto.choose(*facts, hits=table(supports, n))


def test_a_short_call_does_not_probe_and_a_long_one_probes_in_the_check(monkeypatch):
    """Under the reference model a call on 64 K elements does not probe; with
    ``PROBE_FROM`` at 0 every ``auto`` call does, on every rank alike, its hits riding in the
    check's one all-gather (no collective of its own), a named algorithm never does, and the
    sum is still exact (integers) and the same on every rank, for every kind of overlap."""
    n, p = 1 << 16, 4
    looked, gathers = [], []
    real_hits = overlap.hits

    def counted(indices, n, p):
        looked.append(1)
        return real_hits(indices, n, p)

    monkeypatch.setattr(overlap, "hits", counted)
    rng = np.random.default_rng(4)
    few = [(np.sort(rng.choice(n, 1000, replace=False)), np.ones(1000, np.int64))
           for _ in range(p)]
    assert not auto.worth_probing(n, 1000, p, 8, DEFAULT_MODEL, SPARSE_ALGORITHMS)
    run_threads(p, lambda c: sparse_allreduce(*few[c.rank], n, c))
    assert looked == []
    monkeypatch.setattr(auto, "PROBE_FROM", 0.0)
    run_threads(p, lambda c: sparse_allreduce(*few[c.rank], n, c, algorithm="sparse_ring"))
    assert looked == []

    for kind, supports in kinds(rng, n, p, 0.1).items():
        looked.clear()
        gathers.clear()
        vectors = [(s, rng.integers(-3, 4, len(s)).astype(np.int64)) for s in supports]
        results = run_threads(p, lambda c, v=vectors: sparse_allreduce(*v[c.rank], n, c))
        assert len(looked) == p, kind
        full = np.zeros(n, np.int64)
        for indices, values in vectors:
            full[indices] += values
        union = np.unique(np.concatenate(supports))
        for indices, values in results:
            assert (indices == union).all() and (values == full[union]).all(), kind
    # the probes add no collective: a call that probes gathers as often as one that does
    # not (its check, and the dense path's count of zero sums)
    monkeypatch.setattr(auto, "choose", lambda *a, **k: ("dense", "length"))
    for probe_from in (0.0, float("inf")):
        monkeypatch.setattr(auto, "PROBE_FROM", probe_from)
        looked.clear()
        gathers.clear()
        run_threads(p, lambda c: counting(c, gathers) and sparse_allreduce(*vectors[c.rank], n, c))
        assert len(looked) == (p if probe_from == 0 else 0)
        assert sorted(gathers) == sorted(2 * list(range(p))), probe_from


def test_the_probes_count_only_where_every_rank_looked(monkeypatch):
    """A rank whose own pairs would not make a long call does not look its probes up; then
    no rank's choice takes the probes (each rank's words carry a flag, and every rank sees
    the same table), and where every rank looked, every rank's choice takes the same ones."""
    n, p = 1 << 16, 4
    rng = np.random.default_rng(6)
    many, few = n // 5, 100
    seen = []
    real_choose = auto.choose
    monkeypatch.setattr(auto, "choose", lambda *a, hits=None, **k: seen.append(hits) or
                        real_choose(*a, hits=hits, **k))
    times = [min(auto._predictions(n, auto._rounded_loads([k] * p, None), 8, DEFAULT_MODEL,
                                   tuple(SPARSE_ALGORITHMS), False, None,
                                   auto._constants()).values()) for k in (few, many)]
    monkeypatch.setattr(auto, "PROBE_FROM", (times[0] + times[1]) / 2)  # the many look, few not
    facts = (n, p, 8, DEFAULT_MODEL, SPARSE_ALGORITHMS)
    assert auto.worth_probing(n, many, *facts[1:]) and not auto.worth_probing(n, few, *facts[1:])
    for sizes in ([many] * p, [few] + [many] * (p - 1)):
        seen.clear()
        vectors = [(np.sort(rng.choice(n, k, replace=False)), rng.integers(-3, 4, k))
                   for k in sizes]
        results = run_threads(p, lambda c, v=vectors: sparse_allreduce(*v[c.rank], n, c))
        if few in sizes:
            assert seen == [None] * p
        else:
            assert all(hits is not None and np.array_equal(hits, seen[0]) for hits in seen)
            assert seen[0].sum(axis=1).tolist() == [
                np.isin(overlap.positions(n, p), v[0]).sum() for v in vectors]
        full = np.zeros(n, np.int64)
        for indices, values in vectors:
            full[indices] += values
        union = np.unique(np.concatenate([v[0] for v in vectors]))
        for indices, values in results:
            assert np.array_equal(indices, union) and np.array_equal(values, full[union])
    assert overlap.unpack(np.zeros((p, overlap.WORDS), np.int64), 64) is None


@pytest.mark.parametrize("p", [2, 3, 5, 7, 14, 16])
def test_the_probes_travel_as_bits_behind_a_flag(p):
    """Every rank's hits come back bit for bit from the words the check carries, however
    many probes there are (not always whole words); a table without probe words, or with a
    rank that did not look, gives none."""
    n = 1 << 20
    rng = np.random.default_rng(p)
    hits = np.array([overlap.hits(np.sort(rng.choice(n, n // (r + 2), replace=False)), n, p)
                     for r in range(p)])
    assert hits.shape[1] == len(overlap.positions(n, p)) and overlap.carried(p)
    table = np.array([overlap.pack(row) for row in hits])
    assert table.shape == (p, overlap.WORDS) and (table[:, 0] == 1).all()
    assert np.array_equal(overlap.unpack(table, hits.shape[1]), hits)
    table[p // 2] = overlap.pack(None)
    assert overlap.unpack(table, hits.shape[1]) is None
    assert overlap.unpack(table[:, :0], hits.shape[1]) is None


def counting(comm, gathers):
    """Count ``comm``'s all-gathers of integers in ``gathers``; true."""
    real = comm.allgather_ints
    comm.allgather_ints = lambda *a: gathers.append(comm.rank) or real(*a)
    return True


def test_ranks_that_would_probe_differently_raise_together(monkeypatch):
    """``PROBE_FROM``, the probes' count and ``FEW_RANKS`` are in the constants whose
    digest the check compares across ranks (``test_ranks_whose_sparse_constants_differ_raise_together``
    in test_sparse.py: differing digests raise on every rank), and the words that carry the
    probes are as many whatever they are: a rank whose constants differ gets the check's
    error, as every other rank does, not an all-gather of rows of other lengths (where its
    probes no longer fit, it sends none)."""
    from allreduce.sparse import _model_bits

    bits = _model_bits(DEFAULT_MODEL)
    for module, name in ((auto, "PROBE_FROM"), (overlap, "PROBES"),
                         (overlap, "LEAST_PER_CHUNK"), (auto, "FEW_RANKS")):
        monkeypatch.setattr(module, name, getattr(module, name) * 2)
        assert _model_bits(DEFAULT_MODEL) != bits, name
        assert len(overlap.pack(None)) == overlap.WORDS, name
        monkeypatch.undo()
    assert _model_bits(DEFAULT_MODEL) == bits
    monkeypatch.setattr(overlap, "PROBES", 4 * overlap.PROBES)
    assert not overlap.carried(4)
    assert not auto.worth_probing(1 << 24, 1 << 22, 4, 4, DEFAULT_MODEL, SPARSE_ALGORITHMS)


def test_a_call_on_identical_supports_runs_what_the_probes_choose(monkeypatch):
    """Identical supports at 20% of 4 M int64, in a real call on 4 thread ranks with the
    committed model and constants (the dense allreduce of 32 MiB alone is predicted at
    about 20 ms, past ``PROBE_FROM``): every rank probes, and runs the sparse algorithm that
    ``choose_for_supports`` names, not the dense path the loads alone would pick; the sum
    is exact (integers)."""
    import importlib

    package = importlib.import_module("allreduce.sparse")
    ran = []
    for name, function in list(package._REGISTRY.items()):
        monkeypatch.setitem(package._REGISTRY, name, lambda *a, _name=name, _f=function, **k:
                            ran.append((_name, k.get("boundaries", "length"))) or _f(*a, **k))
    n, p = 1 << 22, 4
    supports = kinds(np.random.default_rng(3), n, p, 0.2)["identical"]
    assert all(auto.worth_probing(n, len(s), p, 8, DEFAULT_MODEL, SPARSE_ALGORITHMS)
               for s in supports)
    counts = [len(s) for s in supports]
    loads = [layout.chunk_counts(s, n, p) for s in supports]
    assert auto.choose(n, counts, 8, DEFAULT_MODEL, SPARSE_ALGORITHMS, loads=loads)[0] == "dense"
    vectors = [(s, np.arange(len(s), dtype=np.int64) % 7 - 3 + r) for r, s in enumerate(supports)]
    results = run_threads(p, lambda c: sparse_allreduce(*vectors[c.rank], n, c))
    expected = auto.choose_for_supports(n, supports, 8, DEFAULT_MODEL, SPARSE_ALGORITHMS)
    assert expected[0] != "dense" and ran == [expected] * p
    want = sum(v for _, v in vectors)
    for indices, values in results:
        assert np.array_equal(indices, supports[0]) and np.array_equal(values, want)
