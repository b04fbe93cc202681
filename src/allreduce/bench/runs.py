"""Several runs of ``allreduce-bench`` read together: each algorithm's speed against
``MPI_Allreduce`` as the median and spread over the runs, and the performance targets, each
met or missed by its median (appendix "The reference benchmark").  A ratio of one run moves
by tens of percent on a shared machine; the median over several runs moves less, and the
spread beside it says by how much.

``python -m allreduce.bench.runs A.json B.json C.json`` prints the targets of the runs that
``allreduce-bench --json`` wrote."""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

#: The dense targets (4 ranks, against ``MPI_Allreduce`` in the same run): the algorithm,
#: the sizes and the ratio its median must reach at each.
TARGETS = (("auto", (1 << 10, 16 << 10), 0.6), ("auto", (256 << 10,), 1.0),
           ("auto", (1 << 20, 4 << 20), 1.1), ("auto", (64 << 20,), 1.2),
           ("ring", (64 << 20,), 1.2))


def load(paths) -> list[list[dict]]:
    """The runs' rows, one list per ``--json`` file."""
    return [json.loads(Path(path).read_text()) for path in paths]


def ratios(runs: list[list[dict]], name: str, nbytes: int, peer: str = "MPI_Allreduce"
           ) -> list[float]:
    """``peer``'s time over ``name``'s at ``nbytes``, one per run (above 1: faster)."""
    found = []
    for run in runs:
        seconds = {row["name"]: row["seconds"] for row in run if row["nbytes"] == nbytes}
        found.append(seconds[peer] / seconds[name])
    return found


def spread(values: list[float]) -> str:
    """``median [lowest–highest]``, as the appendix writes a ratio over runs."""
    return f"{statistics.median(values):.2f}× [{min(values):.2f}–{max(values):.2f}]"


def size(nbytes: int) -> str:
    return f"{nbytes // 1024:,} KiB" if nbytes < 1 << 20 else f"{nbytes >> 20} MiB"


def targets(runs: list[list[dict]]) -> list[tuple[str, str, bool]]:
    """Each target at each of its sizes: ``(what, median and spread, met)``, met when the
    median over the runs reaches it."""
    found = []
    for name, sizes, goal in TARGETS:
        for nbytes in sizes:
            values = ratios(runs, name, nbytes)
            found.append((f"`{name}` ≥ {goal}× `MPI_Allreduce` at {size(nbytes)}",
                          spread(values), statistics.median(values) >= goal))
    return found


def report(runs: list[list[dict]]) -> str:
    lines = [f"{len(runs)} runs; each ratio the median [lowest–highest] over them:", ""]
    lines += [f"* {what}: {shown}, {'met' if met else 'missed'}"
              for what, shown, met in targets(runs)]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m allreduce.bench.runs",
        description="The dense performance targets over several benchmark runs: each ratio "
                    "to MPI_Allreduce as the median [lowest-highest] over the runs.")
    parser.add_argument("runs", nargs="+", metavar="RUN.json",
                        help="a file that allreduce-bench --json wrote (one per run)")
    paths = parser.parse_args(sys.argv[1:] if argv is None else argv).runs
    try:
        shown = report(load(paths))
    except OSError as error:
        parser.error(f"cannot read the runs: {error}")
    except (ValueError, KeyError, TypeError, AttributeError, IndexError) as error:
        parser.error(f"cannot read the runs: not what allreduce-bench --json writes "
                     f"({type(error).__name__}: {error})")
    print(shown)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
