"""``allreduce.bench.runs``: a target is read from the median over runs, with the spread
beside it, so one run's luck neither meets nor misses it."""

from __future__ import annotations

import json
import re

import pytest

from allreduce.bench import runs


def _run(mpi: float, auto: float) -> list[dict]:
    return [{"nbytes": n, "name": name, "seconds": seconds}
            for n in {size for _, sizes, _ in runs.TARGETS for size in sizes}
            for name, seconds in (("MPI_Allreduce", mpi), ("auto", auto), ("ring", auto))]


def test_a_target_is_met_by_the_median_not_by_the_best_run():
    # auto 2x, 0.5x and 0.9x MPI: met in one run of three, missed by the median (0.9)
    three = [_run(1.0, 0.5), _run(1.0, 2.0), _run(1.0, 1 / 0.9)]
    found = {what: (shown, met) for what, shown, met in runs.targets(three)}
    shown, met = found["`auto` ≥ 1.0× `MPI_Allreduce` at 256 KiB"]
    assert shown == "0.90× [0.50–2.00]" and not met
    shown, met = found["`auto` ≥ 0.6× `MPI_Allreduce` at 1 KiB"]
    assert met


def test_the_command_reads_json_files(tmp_path, capsys):
    paths = []
    for i, auto in enumerate((0.5, 0.4, 0.45)):
        path = tmp_path / f"run{i}.json"
        path.write_text(json.dumps(_run(1.0, auto)))
        paths.append(str(path))
    assert runs.main(paths) == 0
    out = capsys.readouterr().out
    assert "3 runs" in out and "`ring` ≥ 1.2× `MPI_Allreduce` at 64 MiB: 2.22× [2.00–2.50], met" in out


@pytest.mark.parametrize("argv, code, says", [
    ([], 2, "required: RUN.json"), (["--help"], 0, "usage: python -m allreduce.bench.runs"),
    (["missing.json"], 2, "cannot read the runs: .*missing.json"),
    (["list.json"], 2, "not what allreduce-bench --json writes"),
    (["dict.json"], 2, "not what allreduce-bench --json writes")])
def test_the_command_says_how_to_call_it(argv, code, says, tmp_path, monkeypatch, capsys):
    """``--help`` was read as a file's name, and a missing file or JSON of another shape
    ended in a traceback."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "list.json").write_text("[]")
    (tmp_path / "dict.json").write_text('{"a": 1}')
    with pytest.raises(SystemExit) as ended:
        runs.main(argv)
    assert ended.value.code == code
    said = capsys.readouterr()
    assert re.search(says, said.out + said.err)
