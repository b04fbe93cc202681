"""The sparse benchmark's committed record (``chapters/data/sparse_bench_reference.json``)
is whole, and the appendix "The reference benchmark" (chapter 95) shows it as it is: its
tables and its targets, each as met or missed, computed from the record by
``allreduce.bench.sparse_record`` when the book is built."""

from __future__ import annotations

from pathlib import Path

import pytest

from allreduce.bench.sparse import GLOO
from allreduce.bench.sparse_record import load, markdown, report, share, targets

ROOT = Path(__file__).resolve().parent.parent
RECORD = ROOT / "chapters" / "data" / "sparse_bench_reference.json"


@pytest.fixture(scope="module")
def rows():
    return load(RECORD)


def test_the_record_covers_what_the_issue_asks(rows):
    have = {(row.supports, row.density) for row in rows}
    for supports in ("uniform", "gradients"):
        densities = sorted(d for s, d in have if s == supports)
        assert densities[0] <= 0.0001 and densities[-1] >= 0.5, (supports, densities)
        assert any(row.name == GLOO and row.supports == supports for row in rows)
    assert {"identical", "disjoint"} <= {s for s, _ in have}
    assert all(row.wrong == 0 for row in rows), "a wrong element in the record"
    assert all(row.n >= 4_000_000 for row in rows if row.supports == "gradients")
    assert all(row.n == 1 << 24 for row in rows if row.supports == "uniform")


def test_the_runs_are_three_the_last_the_record(rows):
    """Chapter 95 reads the targets over three runs as well (median and spread), the last
    of which is the record; every run covers the same points."""
    import json

    from allreduce.bench.sparse import SparseRow
    from allreduce.bench.sparse_record import over_runs

    runs = [[SparseRow(**row) for row in run] for run in
            json.loads((RECORD.parent / "sparse_bench_runs.json").read_text())]
    assert len(runs) >= 3 and runs[-1] == rows
    keys = [sorted((r.supports, r.density, r.name) for r in run) for run in runs]
    assert all(key == keys[0] for key in keys)
    shown = over_runs(runs)
    assert [what for what, _, _ in shown] == [what.rsplit(" (", 1)[0]
                                              for what, _ in targets(rows)]
    # point by point, one reading a run, whose worst in each run is the target's reading
    from allreduce.bench.sparse_record import auto_by_point, measures

    by_point = auto_by_point(runs)
    assert len(by_point) == sum(row.name == "auto" for row in rows)
    assert all(len(readings) == len(runs) for readings in by_point.values())
    for index, run in enumerate(runs):
        within = next(m for m in measures(run) if "of the fastest" in m.what)
        assert min(readings[index] for readings in by_point.values()) == within.value


def test_the_report_shows_every_table_and_target(rows):
    shown = report(rows)
    for supports in dict.fromkeys(row.supports for row in rows):
        assert markdown(rows, supports) in shown, supports
    for what, met in targets(rows):
        assert f"* {what}: {'met' if met else '**missed**'}" in shown, what


def test_the_appendix_shows_the_record_built_from_it():
    """Chapter 95 displays ``report`` of the committed record (executed at build time, so
    its tables and targets are the record's), and the README keeps none of them."""
    chapter = (ROOT / "chapters" / "95_benchmark_record.md").read_text()
    assert 'sparse_rows = sparse_record.load("data/sparse_bench_reference.json")' in chapter
    assert "MarkdownTable(sparse_record.report(sparse_rows))" in chapter
    readme = (ROOT / "README.md").read_text()
    assert "| density | dense ring (ms)" not in readme
    assert not any(what in readme for what, _ in targets(load(RECORD)))


def test_the_built_appendix_shows_the_targets(built_book, rows):
    import html
    import re

    page = (built_book.html / "chapters" / "95_benchmark_record.html").read_text()
    text = html.unescape(re.sub(r"<[^>]+>", "", page)).replace("\u2019", "'")  # smart quotes
    for what, met in targets(rows):
        plain = what.replace("`", "")
        assert f"{plain}: {'met' if met else 'missed'}" in text, plain


def test_one_formatter_prints_every_density_apart(rows):
    """Densities below 0.1% read as themselves, not "0.0%" (issue 22 §3), in chapter 95's
    tables and chapter 75's, which both use ``share``."""
    densities = sorted({row.density for row in rows})
    shown = [share(d) for d in densities]
    assert len(set(shown)) == len(shown), shown
    assert all(float(s.rstrip("%")) > 0 for s in shown), shown
    assert share(0.0001) == "0.01%" and share(0.001) == "0.1%" and share(0.5) == "50%"
    chapter = (ROOT / "chapters" / "75_sparse.md").read_text()
    assert "import share" in chapter and "def share" not in chapter


def test_the_fit_recovers_known_constants():
    """``sparse_record.fit`` (how ``auto.LOCAL`` and ``auto.OVERHEADS`` were found) gives
    back the constants that made the times it is fitted to: rows timed by the model itself
    under chosen constants, on the benchmark's seeded supports at small n (dense-form
    messages at 30%, pair-form ones below; merges that sort and merges that sum densely),
    every algorithm with each boundaries."""
    from allreduce.bench.sparse import SparseRow
    from allreduce.bench.sparse_inputs import inputs
    from allreduce.bench.sparse_record import fit
    from allreduce.cost import Model
    from allreduce.sparse import SPARSE_CHOICES, auto

    model = Model(alpha=20e-6, beta=1 / 3e9, gamma=1 / 5e9, overhead=30e-6)
    chosen = {"LOCAL": {"code": 4e-9, "code_dense": 9e-9, "code_call": 3e-6, "merge": 2e-9,
                        "merge_dense": 6e-9, "merge_call": 20e-6, "densify": 5e-9,
                        "gather": 10e-9, "check": 1e-9, "merge_out": 7e-9},
              "OVERHEADS": {"call": 400e-6, "message": 25e-6, "dense_call": 3e-3}}
    saved = dict(auto.LOCAL), dict(auto.OVERHEADS)
    rows = []
    try:
        auto.LOCAL.update(chosen["LOCAL"])
        auto.OVERHEADS.update(chosen["OVERHEADS"])
        for supports, n in (("uniform", 1 << 16), ("identical", 1 << 15), ("disjoint", 1 << 17)):
            for density in (0.001, 0.01, 0.1, 0.3):
                indices = [inputs(supports, r, 4, n, density)[0] for r in range(4)]
                counts = [len(i) for i in indices]
                for name in SPARSE_CHOICES:
                    algorithm, boundaries = auto.parse(name)
                    seconds = auto.predict(algorithm, n, counts, 4, model,
                                           boundaries=boundaries, supports=indices)
                    rows.append(SparseRow(n, density, name, seconds, 4, max(counts), 0, 0,
                                          None, supports))
    finally:
        auto.LOCAL.update(saved[0])
        auto.OVERHEADS.update(saved[1])
    found = fit(rows, model)
    assert set(found["LOCAL"]) == set(chosen["LOCAL"])  # every constant is checked
    for table in ("LOCAL", "OVERHEADS"):
        for name, value in chosen[table].items():
            assert found[table][name] == pytest.approx(value, rel=0.02, abs=1e-12), (table, name)
    assert auto.LOCAL == saved[0] and auto.OVERHEADS == saved[1]  # the fit leaves them be


def test_the_record_was_taken_with_the_constants_in_the_library(rows):
    """Every prediction and choice in the record is what the library's model gives now
    (its ``LOCAL``, ``OVERHEADS`` and ``DEFAULT_MODEL``), so a refit without a new record
    (CONTRIBUTING.md, steps 3 and 4 in that order) fails here rather than leaving chapter
    95 to judge the new constants by the old ones' predictions.  The points of at most 0.1%
    density, whose supports rebuild in seconds."""
    from allreduce.algorithms.auto import DEFAULT_MODEL
    from allreduce.bench.sparse_inputs import inputs
    from allreduce.sparse import SPARSE_ALGORITHMS, SPARSE_CHOICES, auto

    checked = 0
    points = {(row.supports, row.density, row.n) for row in rows
              if row.density <= 0.001 and row.predicted is not None}
    for supports, density, n in sorted(points):
        indices = [inputs(supports, r, 4, n, density)[0] for r in range(4)]
        counts = [len(i) for i in indices]
        for row in rows:
            if (row.supports, row.density, row.n) != (supports, density, n):
                continue
            if row.name in SPARSE_CHOICES:
                algorithm, boundaries = auto.parse(row.name)
                assert auto.predict(algorithm, n, counts, 4, DEFAULT_MODEL,
                                    boundaries=boundaries, supports=indices) == pytest.approx(
                    row.predicted, rel=1e-9), (supports, density, row.name)
                checked += 1
            elif row.name == "auto":
                assert auto.label(*auto.choose_for_supports(
                    n, indices, 4, DEFAULT_MODEL, SPARSE_ALGORITHMS)) == row.chosen, (
                    supports, density)
                checked += 1
    assert checked >= 8 * len(points) > 0
