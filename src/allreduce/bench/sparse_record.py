"""The sparse benchmark's record read back: the issue's targets, each computed as met or
missed, and the tables that appendix "The reference benchmark" and the chapter "Sparse
allreduce" show
(``python -m allreduce.bench.sparse_record chapters/data/sparse_bench_reference.json``
prints them as Markdown)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import NamedTuple

from .sparse import GLOO, SparseRow


def load(path: Path | str) -> list[SparseRow]:
    return [SparseRow(**row) for row in json.loads(Path(path).read_text())]


def _pick(rows, supports: str, density: float, name: str) -> SparseRow:
    return next(row for row in rows
                if (row.supports, row.density, row.name) == (supports, density, name))


def share(x: float) -> str:
    """A density or a fraction as a percentage, with as many decimals as it needs to read
    apart from its neighbours (0.01%, 0.1%, 1.0%, 50%): the one formatter of the record's
    tables, the README's and the chapter "Sparse allreduce"'s."""
    return f"{x:.2%}" if x < 0.001 else f"{x:.1%}" if x < 0.1 else f"{x:.0%}"


def fastest_exact(rows: list[SparseRow], row: SparseRow) -> SparseRow:
    """The fastest exact choice (an algorithm with its boundaries) at ``row``'s supports and
    density."""
    from ..sparse import SPARSE_CHOICES

    return min((other for other in rows if other.name in SPARSE_CHOICES
                and (other.supports, other.density) == (row.supports, row.density)),
               key=lambda other: other.seconds)


#: How a target's value is compared with its goal.
_MEETS = {">=": lambda value, goal: value >= goal, ">": lambda value, goal: value > goal,
          "<=": lambda value, goal: value <= goal}


class Measure(NamedTuple):
    """One target read from one run: met when ``value compare goal``; ``unit`` is ``"x"``
    for a ratio, ``"share"`` for a fraction of rows; ``aside`` says how the value reads."""

    what: str
    aside: str
    value: float
    goal: float
    compare: str
    unit: str

    @property
    def met(self) -> bool:
        return _MEETS[self.compare](self.value, self.goal)


def measures(rows: list[SparseRow]) -> list[Measure]:
    """The targets of the sparse allreduce, from one run's rows, as numbers."""
    from ..sparse import SPARSE_CHOICES

    found = []
    have = {(row.supports, row.density) for row in rows}
    for source in ("gradients", "uniform"):
        for density, factor in ((0.001, 5), (0.01, 2)):
            if (source, density) in have:
                found.append((f"{source}: `auto` at least {factor}x the dense ring at "
                              f"{share(density)}", "",
                              _pick(rows, source, density, "auto").vs_ring, factor, ">=", "x"))
    for source in ("gradients", "identical"):
        densities = [d for d in (0.001, 0.01) if (source, d) in have]
        if densities:
            worst = min(_pick(rows, source, d, "allgather").seconds
                        / _pick(rows, source, d, "sparse_ring").seconds for d in densities)
            found.append((f"{source}: `sparse_ring` beats `allgather` at "
                          f"{' and '.join(map(share, densities))}", "at worst", worst, 1,
                          ">", "x"))
    disjoint = sorted(d for s, d in have if s == "disjoint")
    if disjoint:
        ratio = (_pick(rows, "disjoint", disjoint[0], "sparse_ring").seconds
                 / _pick(rows, "disjoint", disjoint[0], "allgather").seconds)
        found.append((f"disjoint: `allgather` beats `sparse_ring` at {share(disjoint[0])}", "by",
                      ratio, 1, ">", "x"))
    autos = [row for row in rows if row.name == "auto"]
    worst = max(row.seconds / _pick(rows, row.supports, row.density, "dense").seconds
                for row in autos)
    found.append(("`auto` never slower than 1.1x `dense`", "at worst", worst, 1.1, "<=", "x"))
    gloo = [row for row in rows if row.name == GLOO]
    if gloo:
        worst = min(row.seconds / _pick(rows, row.supports, row.density, "auto").seconds
                    for row in gloo)
        found.append(("`auto` at least 2x torch gloo's sparse `all_reduce` at every density",
                      "at worst", worst, 2, ">=", "x"))
    ratios = [fastest_exact(rows, row).seconds / row.seconds for row in autos]
    found.append(("`auto` within 10% of the fastest exact algorithm's speed at every density",
                  "at worst", min(ratios), 0.9, ">=", "x"))
    exact = [row for row in rows if row.name in SPARSE_CHOICES and row.n >= 1 << 20]
    if exact:
        within = sum(abs(row.predicted / row.seconds - 1) <= 0.3 for row in exact)
        found.append(("the model within 30% on at least 7 in 8 of the exact algorithms' rows "
                      "at n of 1 M and more", f"{within} of {len(exact)}", within / len(exact),
                      0.875, ">=", "share"))
    return [Measure(*target) for target in found]


def _shown(value: float, unit: str) -> str:
    return f"{value:.2f}x" if unit == "x" else f"{value:.0%}"


def targets(rows: list[SparseRow]) -> list[tuple[str, bool]]:
    """The targets of the sparse allreduce, from one run's rows: ``(what, met)``, ``what``
    ending in the value."""
    return [(f"{m.what} ({_reading(m.aside, m.value, m.unit)})", m.met)
            for m in measures(rows)]


def _reading(aside: str, value: float, unit: str) -> str:
    if unit == "share":  # the rows counted, then the share
        return f"{aside}: {_shown(value, unit)}"
    return f"{aside} {_shown(value, unit)}" if aside else _shown(value, unit)


def over_runs(runs: list[list[SparseRow]]) -> list[tuple[str, str, bool]]:
    """Each target over several runs: ``(what, median [lowest–highest], met)``, met when
    the median over the runs meets it (as :func:`allreduce.bench.runs.targets` reads the
    dense runs)."""
    import statistics

    read = [measures(rows) for rows in runs]
    if any([m.what for m in run] != [m.what for m in read[0]] for run in read):
        raise ValueError("the runs measure different targets (not the same supports and "
                         "densities?)")
    found = []
    for per_run in zip(*read):
        first, values = per_run[0], [m.value for m in per_run]
        median = statistics.median(values)
        found.append((first.what, f"{_shown(median, first.unit)} [{_shown(min(values), first.unit)}"
                      f"–{_shown(max(values), first.unit)}]",
                      first._replace(value=median).met))
    return found


def auto_by_point(runs: list[list[SparseRow]]) -> dict[tuple[str, float], list[float]]:
    """Each point's (supports, density) speed of ``auto`` against the fastest exact
    algorithm's, the fastest's time over ``auto``'s, one reading per run: what the target
    "within 10% of the fastest" reads at its worst point of each run."""
    found: dict[tuple[str, float], list[float]] = {}
    for rows in runs:
        for row in rows:
            if row.name == "auto":
                found.setdefault((row.supports, row.density), []).append(
                    fastest_exact(rows, row).seconds / row.seconds)
    return found


def fit(rows: list[SparseRow], model=None) -> dict[str, dict[str, float]]:
    """The constants of :data:`allreduce.sparse.auto.LOCAL` and
    :data:`~allreduce.sparse.auto.OVERHEADS` that best predict the rows' whole calls under
    the dense ``model`` (default: ``auto``'s): non-negative least squares on relative
    error, each row's supports rebuilt from the benchmark's seeded inputs.  How the
    reference machine's constants were found; returns ``{"LOCAL": …, "OVERHEADS": …}``."""
    import numpy as np
    from scipy.optimize import nnls

    from ..algorithms.auto import model as dense_model
    from ..sparse import SPARSE_CHOICES, auto
    from .sparse_inputs import inputs

    model = model or dense_model()
    names = [*auto.LOCAL, *auto.OVERHEADS]
    saved = dict(auto.LOCAL), dict(auto.OVERHEADS)

    def predicted_with(constants: dict[str, float], row, counts, supports) -> float:
        for table in (auto.LOCAL, auto.OVERHEADS):
            table.update({key: constants.get(key, 0.0) for key in table})
        algorithm, boundaries = auto.parse(row.name)
        return auto.predict(algorithm, row.n, counts, 4, model, boundaries=boundaries,
                            supports=supports)

    matrix, measured = [], []
    try:
        for row in rows:
            if row.name not in SPARSE_CHOICES:
                continue
            supports = [inputs(row.supports, r, row.ranks, row.n, row.density)[0]
                        for r in range(row.ranks)]
            counts = [len(support) for support in supports]
            fixed = predicted_with({}, row, counts, supports)  # wire and overhead alone
            # each column is the prediction's growth per second of one constant, the others
            # at 0: linear in most, but "message" adds to α on the critical path and the
            # local work is a maximum (the busiest rank's, or the ranks' mean times
            # RANKS_PER_CORE), so the fit solves the model linearised there
            matrix.append([(predicted_with({name: 1e-6}, row, counts, supports) - fixed) / 1e-6
                           / row.seconds for name in names])
            measured.append((row.seconds - fixed) / row.seconds)
    finally:
        auto.LOCAL.update(saved[0])
        auto.OVERHEADS.update(saved[1])
    solution, _ = nnls(np.array(matrix), np.array(measured))
    found = dict(zip(names, (float(value) for value in solution)))
    return {"LOCAL": {name: found[name] for name in auto.LOCAL},
            "OVERHEADS": {name: found[name] for name in auto.OVERHEADS}}


def markdown(rows: list[SparseRow], supports: str) -> str:
    """One kind of support as a table: each algorithm's time against the dense ring's, and
    its local share, density by density."""
    from ..sparse import SPARSE_CHOICES

    mine = [row for row in rows if row.supports == supports]
    densities = sorted({row.density for row in mine})
    names = ["MPI_Allreduce", *SPARSE_CHOICES, "auto", GLOO]
    names = [name for name in names if any(row.name == name for row in mine)]
    lines = ["| density | dense ring (ms) | " + " | ".join(names) + " | Top-k selection (ms) |",
             "|---" * (len(names) + 3) + "|"]
    for density in densities:
        ring = _pick(mine, supports, density, "ring (densified)")
        cells = []
        for name in names:
            row = _pick(mine, supports, density, name)
            cell = f"{row.vs_ring:.2f}x"
            if row.local is not None:
                cell += f" ({row.local / row.seconds:.0%} local)"
            cells.append(cell)
        topk = _pick(mine, supports, density, "Top-k selection").seconds
        lines.append(f"| {share(density)} | {ring.seconds * 1e3:.1f} | " + " | ".join(cells)
                     + f" | {topk * 1e3:.0f} |")
    return "\n".join(lines)


SUPPORTS = {
    "uniform": "Uniformly random supports, a support of its own on each rank",
    "gradients": "The course transformer's Top-k gradients (4 shards of the recorded step)",
    "identical": "Identical supports on every rank (the sparse ring's best case)",
    "disjoint": "Disjoint supports (the sparse ring's worst case)",
}


def report(rows: list[SparseRow]) -> str:
    """The record as Markdown: a table per kind of support, then the targets, each met or
    missed (what appendix "The reference benchmark" shows, and ``main`` prints)."""
    parts = []
    for supports in dict.fromkeys(row.supports for row in rows):
        n = next(row.n for row in rows if row.supports == supports)
        parts.append(f"{SUPPORTS.get(supports, supports)}, n = {n:,}:\n\n"
                     f"{markdown(rows, supports)}")
    parts.append("The targets, each computed from the record:\n\n" + "\n".join(
        f"* {what}: {'met' if met else '**missed**'}" for what, met in targets(rows)))
    return "\n\n".join(parts)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1 or args[0].startswith("-"):
        print("usage: python -m allreduce.bench.sparse_record RECORD.json (the rows of "
              "allreduce-bench --sparse --json, one run's runs concatenated into one list)",
              file=sys.stderr)
        return 0 if args in (["-h"], ["--help"]) else 2
    print(report(load(args[0])))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
