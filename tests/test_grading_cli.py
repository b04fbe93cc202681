"""What the grader tells a student or an instructor, and where it writes: it checks --out
before grading and never loses finished scores; it names the lab a notebook belongs to, one
cell numbering (the cell's position in the notebook, from 1), the lowest failing rank, and
every file of the submissions folder it does not grade.  Runs here are not sandboxed (no
bwrap needed): what is tested is what the grader says, not what the sandbox holds."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from allreduce import grading
from allreduce.grading import cli, report
from allreduce.grading.batch import Submission
from allreduce.grading.run import Result

RING = "labs/50_ring_allreduce.ipynb"
TREE = "labs/40_tree_allreduce.ipynb"


@pytest.fixture
def key(root):
    return nbformat.read(root / RING, as_version=4)


@pytest.fixture
def no_sandbox_probe(monkeypatch):
    monkeypatch.setattr(cli, "probe", lambda: None)  # as if bwrap could start here


def _folder(tmp_path: Path, key) -> Path:
    folder = tmp_path / "submissions"
    folder.mkdir()
    nbformat.write(grading.student_copy(key), folder / "alice.ipynb")
    return folder


def _fake_grade(calls: list, out: Path | None = None):
    """Stands for the sandboxed grading: records that it ran (and whether --out's folder was
    there by then) and returns a score per submission."""
    def grade(lab, submissions, **_):
        calls.append(out is None or out.parent.is_dir())
        names = grading.exercises(nbformat.read(lab, as_version=4))
        return [Submission(p.stem, {e: Result(1.0, "ok") for e in names},
                           {e: 2.0 for e in names}) for p in submissions]
    return grade


# -- --out: checked first, never lost ---------------------------------------------------------

def test_an_interrupted_grading_keeps_the_students_it_finished(root, tmp_path, key,
                                                                monkeypatch, no_sandbox_probe):
    """SIGHUP or Ctrl-C after most of a class was graded kept nothing; a closed pipe on the
    grader's output (``allreduce-grade … | head``) stopped the grading."""
    from allreduce.grading.batch import Interrupted

    for name in ("alice", "bob"):
        nbformat.write(grading.student_copy(key), tmp_path / f"{name}.ipynb")
    paths = [tmp_path / "alice.ipynb", tmp_path / "bob.ipynb"]
    said: list = []

    def progress(*args, **kwargs):  # Ctrl-C while bob's first exercise is reported
        said.append(args)
        if len(said) == 3:
            raise KeyboardInterrupt
    with pytest.raises(Interrupted) as stopped:
        grading.grade(root / RING, paths, sandboxed=False, progress=progress)
    assert [s.name for s in stopped.value.graded] == ["alice"]
    assert list(stopped.value.graded[0].results) == ["reduce_scatter", "allgather"]

    def closed(*args, **kwargs):
        raise BrokenPipeError(32, "Broken pipe")
    graded = grading.grade(root / RING, paths, sandboxed=False, progress=closed)
    assert [len(s.results) for s in graded] == [2, 2]

    def interrupted(lab, submissions, **_):  # the command line writes what was finished
        raise Interrupted([Submission("alice", {"reduce_scatter": Result(1.0, "ok")},
                                      {"reduce_scatter": 3.0})])
    monkeypatch.setattr(cli, "grade", interrupted)
    out = tmp_path / "grades" / "scores.csv"
    assert cli.grade_main([str(root / RING), str(_folder(tmp_path, key)), "--out", str(out)]) \
        == 130
    assert out.with_name("scores.partial.csv").read_text().splitlines()[1].startswith("alice,3")
    monkeypatch.setattr(cli, "grade", _fake_grade([]))  # a whole grading: the partial goes
    assert cli.grade_main([str(root / RING), str(tmp_path / "submissions"), "--out",
                           str(out)]) == 0
    assert out.exists() and not out.with_name("scores.partial.csv").exists()


def test_the_folder_of_out_is_made_before_grading(root, tmp_path, key, monkeypatch,
                                                  no_sandbox_probe, capsys):
    out = tmp_path / "new" / "deeper" / "scores.csv"
    calls: list = []
    monkeypatch.setattr(cli, "grade", _fake_grade(calls, out))
    assert cli.grade_main([str(root / RING), str(_folder(tmp_path, key)), "--out", str(out)]) == 0
    assert calls == [True]  # the folder was there when grading began
    assert out.read_text().splitlines()[1].startswith("alice,2,2,4,4,100")
    assert (out.parent / "scores-feedback" / "alice.md").exists()
    assert (out.parent / "scores-similarity.csv").exists()


@pytest.mark.parametrize("where", ["a_file", "a_folder"])
def test_an_out_that_cannot_be_written_is_refused_before_grading(root, tmp_path, key,
                                                                 monkeypatch, no_sandbox_probe,
                                                                 capsys, where):
    blocker = tmp_path / "taken"
    if where == "a_file":
        blocker.write_text("a file where the folder should be")
        out, said = blocker / "term1" / "scores.csv", f"{blocker} is a file, not a folder"
    else:
        blocker.mkdir()
        out, said = blocker, "it is a folder; give a file name"
    calls: list = []
    monkeypatch.setattr(cli, "grade", _fake_grade(calls))
    with pytest.raises(SystemExit) as exited:
        cli.grade_main([str(root / RING), str(_folder(tmp_path, key)), "--out", str(out)])
    assert exited.value.code == 2 and calls == []  # refused at once: nothing was graded
    assert said in capsys.readouterr().err


def test_scores_survive_a_report_that_fails_after_grading(root, tmp_path, key, monkeypatch,
                                                          no_sandbox_probe, capsys):
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()

    def full(*_):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(cli, "grade", _fake_grade([]))
    monkeypatch.setattr(report, "write_feedback", full)
    out = tmp_path / "grades" / "scores.csv"
    assert cli.grade_main([str(root / RING), str(_folder(tmp_path, key)), "--out", str(out)]) == 1
    err = capsys.readouterr().err
    saved = Path(re.search(r"the scores are saved in (\S+)", err).group(1))
    assert "No space left on device" in err
    assert saved.parent.parent == tmp_path / "tmp"
    assert saved.read_text().splitlines()[1].startswith("alice,2,2,4,4,100")


def test_grades_go_to_a_folder_git_ignores(root, tmp_path):
    assert cli._parser().get_default("out") == Path("grades") / "scores.csv"
    paths = ["grades/scores.csv", "grades/scores-feedback/alice.md"]
    ignored = subprocess.run(["git", "check-ignore", *paths], cwd=root, capture_output=True,
                             text=True, check=False)
    assert ignored.stdout.split() == paths, "grades/ is not in .gitignore"
    venv = Path(sys.prefix)
    made = subprocess.run(["make", "-n", "--no-print-directory", "-o", f"{venv}/.installed",
                           f"VENV={venv}", "grade", f"LAB={RING}", "SUBMISSIONS=s/"],
                          cwd=root, capture_output=True, text=True, check=True).stdout
    assert '--out "grades/scores.csv"' in made


# -- messages ----------------------------------------------------------------------------------

def test_self_on_a_notebook_without_exercises_asks_if_it_is_the_right_file(
        tmp_path, no_sandbox_probe, monkeypatch, capsys):
    mine = tmp_path / "50_ring_allreduce.ipynb"
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x = 1")]), mine)
    monkeypatch.setattr(cli, "grade", lambda *a, **k: pytest.fail("graded a notebook "
                                                                   "with no exercises"))
    assert cli.grade_main(["--self", str(mine)]) == 2
    err = capsys.readouterr().err
    assert "has no exercises of lab 50: is it the right file?" in err
    assert "0 of 0" not in err


def test_a_submission_of_another_lab_is_named_as_such(root, tmp_path, key):
    tree = grading.student_copy(nbformat.read(root / TREE, as_version=4))
    nbformat.write(tree, tmp_path / "tree.ipynb")
    plain = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("my notes")])
    nbformat.write(plain, tmp_path / "notes.ipynb")
    other, notes = grading.grade(root / RING, [tmp_path / "tree.ipynb", tmp_path / "notes.ipynb"],
                                 sandboxed=False, progress=lambda *a, **k: None)
    for result in other.results.values():
        assert result.score == 0 and result.message.startswith(
            "this looks like lab 40 (40_tree_allreduce.ipynb), not lab 50 "
            "(50_ring_allreduce.ipynb)"), result.message
        assert "were cells deleted" not in result.message
    for result in notes.results.values():
        assert result.message == ("this notebook has no exercises of lab 50 "
                                  "(50_ring_allreduce.ipynb): is it the right file?")


def _solution_cell(nb, exercise: str) -> int:
    return next(i for i, c in enumerate(nb.cells, 1) if grading.role(c) == (exercise, "solution"))


def test_a_stub_is_named_by_its_cell_in_the_notebook_and_by_rank_0(root, tmp_path, key):
    copy = grading.student_copy(key)
    nbformat.write(copy, tmp_path / "alice.ipynb")
    number = _solution_cell(copy, "reduce_scatter")
    stub = next(i for i, line in enumerate(copy.cells[number - 1].source.splitlines(), 1)
                if "NotImplementedError" in line)
    (graded,) = grading.grade(root / RING, [tmp_path / "alice.ipynb"], sandboxed=False,
                              progress=lambda *a, **k: None)
    message = graded.results["reduce_scatter"].message
    assert "raised on rank 0 for n = " in message, message
    assert message.endswith(f"(cell {number} of your notebook, line {stub})"), message
    text = report.feedback(graded, "50_ring_allreduce.ipynb")
    assert f"Your cell {number} (the error is on line {stub}):" in text
    assert "solution cell 1" not in text and "solution cell 1" not in message


def _body(source: str, code: str) -> str:
    """``source`` (a solution cell) with ``code`` run first in its function."""
    head, _, rest = source.partition(":\n")
    return head + ":\n" + "".join("    " + line + "\n" for line in code.splitlines()) + rest


def test_the_lowest_failing_rank_is_named_every_time(root, tmp_path, key):
    """Ranks 1 and 3 raise, 0 and 2 wait for them: rank 1 is named, run after run (the
    first error to arrive named whichever rank's frame came first)."""
    mine = nbformat.from_dict(key)
    for cell in mine.cells:
        if grading.role(cell) == ("reduce_scatter", "solution"):
            cell.source = _body(cell.source, 'if comm.rank in (1, 3):\n'
                                             '    raise ValueError(f"rank {comm.rank} gives up")')
    nbformat.write(mine, tmp_path / "bob.ipynb")
    for _ in range(3):
        (graded,) = grading.grade(root / RING, [tmp_path / "bob.ipynb"], sandboxed=False,
                                  progress=lambda *a, **k: None)
        message = graded.results["reduce_scatter"].message
        assert "raised on rank 1 for n = 1 on 4 ranks: ValueError: rank 1 gives up" in message, message


def test_the_lowest_rank_whose_process_ended_is_named(root, tmp_path, key):
    """Ranks 3 and then 1 end their processes, 0 and 2 wait for them: rank 1 is named (the
    judge named whichever rank's socket closed first), with what it printed last (the first
    rank's that printed anything was shown)."""
    mine = nbformat.from_dict(key)
    for cell in mine.cells:
        if grading.role(cell) == ("reduce_scatter", "solution"):
            cell.source = _body(cell.source, 'import os, time\n'
                                             'import sys\n'
                                             'print(f"last words of rank {comm.rank}", '
                                             'file=sys.stderr, flush=True)\n'
                                             'if comm.rank in (1, 3):\n'
                                             '    time.sleep(0.5 if comm.rank == 1 else 0)\n'
                                             '    os._exit(3)')
    nbformat.write(mine, tmp_path / "bob.ipynb")
    (graded,) = grading.grade(root / RING, [tmp_path / "bob.ipynb"], sandboxed=False,
                              progress=lambda *a, **k: None)
    message = graded.results["reduce_scatter"].message
    assert "reduce_scatter for n = 1 on 4 ranks: rank 1's process ended without answering" \
        in message, message  # which case too: the first, where rank 1 ended
    assert message.endswith("[it printed: last words of rank 1]"), message  # not rank 0's


def test_a_rank_lost_while_loading_is_said_to_be_lost_while_loading(root, tmp_path, key):
    """Every rank's process ends as its solution cells load: the lowest is named, and when."""
    mine = nbformat.from_dict(key)
    for cell in mine.cells:
        if grading.role(cell) == ("reduce_scatter", "solution"):
            cell.source = "import os\nos._exit(3)\n" + cell.source
    nbformat.write(mine, tmp_path / "bob.ipynb")
    (graded,) = grading.grade(root / RING, [tmp_path / "bob.ipynb"], sandboxed=False,
                              progress=lambda *a, **k: None)
    message = graded.results["reduce_scatter"].message
    assert message.startswith("while loading your code: rank 0's process ended"), message


class _Quiet:
    def __init__(self, size):
        self.size = size

    def send(self, rank, header, blobs=()):
        pass


def test_the_case_reports_the_lowest_rank_whatever_order_errors_arrive():
    from allreduce.grading.matching import Case, Failure

    case = Case(_Quiet(4))
    case.handle(3, {"op": "error", "message": "rank 3 failed"}, [])
    case.handle(1, {"op": "error", "message": "rank 1 failed"}, [])
    case.handle(0, {"op": "result"}, [])
    with pytest.raises(Failure, match="rank 1 failed"):
        case.handle(2, {"op": "error", "message": "rank 2 failed"}, [])


def test_every_file_not_graded_gets_a_line_and_the_reason(root, tmp_path, key, monkeypatch,
                                                          no_sandbox_probe, capsys):
    folder = _folder(tmp_path, key)
    (folder / "README.txt").write_text("hand-in instructions")
    (folder / ".ipynb_checkpoints").mkdir()
    (folder / "bob.py").write_text("print('my solution')")
    monkeypatch.setattr(cli, "grade", _fake_grade([]))
    assert cli.grade_main([str(root / RING), str(folder), "--out",
                           str(tmp_path / "g" / "scores.csv")]) == 0
    said = capsys.readouterr().out
    assert "not graded: README.txt: not a notebook (only *.ipynb files are graded)" in said
    assert "not graded: bob.py: not a notebook" in said
    assert "not graded: .ipynb_checkpoints: a folder" in said
    assert "alice" in said and "not graded: alice" not in said


# -- what a submissions folder unpacked from students' archives may hold ------------------------

def test_links_pipes_and_hidden_notebooks_are_named_never_read(root, tmp_path, key):
    """A link (to another copy of the key, to /dev/zero, to itself) or a pipe named
    *.ipynb is listed as not graded and never opened: read, it would score another's work,
    never end, or stop the grader before it grades anyone."""
    import os

    folder = _folder(tmp_path, key)
    (folder / "mallory.ipynb").symlink_to(root / RING)
    (folder / "zero.ipynb").symlink_to("/dev/zero")
    (folder / "loop.ipynb").symlink_to("loop.ipynb")
    os.mkfifo(folder / "pipe.ipynb")
    nbformat.write(grading.student_copy(key), folder / ".ipynb")
    graded, lines = cli.entries(folder, root / RING)
    assert [path.name for path in graded] == ["alice.ipynb"]
    said = "\n".join(lines)
    for name in ("mallory.ipynb", "zero.ipynb", "loop.ipynb"):
        assert f"not graded: {name}: a link" in said
    assert "not graded: pipe.ipynb: not a regular file" in said
    assert "not graded: .ipynb: a hidden file" in said
    # the grading itself opens no link and no pipe either (--self, or a caller's own list)
    from allreduce.grading.batch import read_notebook

    for name, why in (("mallory.ipynb", "a link is not graded"),
                      ("pipe.ipynb", "not a regular file")):
        result = read_notebook(folder / name)
        assert isinstance(result, Result) and why in result.message, result


def test_names_and_messages_a_submission_controls_are_stored_safely(tmp_path):
    """A lone surrogate, terminal escapes or a bidirectional override in what a rank sends,
    and a file name that is not UTF-8 or is 250 bytes long, reach the reports as printable
    UTF-8 that every writer takes: one such submission once stopped a whole class's run."""
    import json
    import os

    from allreduce.grading.names import student_name

    result = Result(0.0, "got \ud800 \x1b[2J\x1b[1;1H3/3 \u202e!", warning="\x9b31m")
    assert result.message == "got \\ud800  [2J [1;1H3/3  !" and result.warning == "31m"
    result.message.encode("utf-8")
    odd = Path(os.fsdecode(b"b_j\xf6rg.ipynb"))
    assert student_name(odd) == "b_j\\udcf6rg"
    long = [student_name(Path("a" * 240 + tail + ".ipynb")) for tail in "xy"]
    assert long[0] != long[1] and all(len(name.encode()) <= 100 for name in long)
    from allreduce.grading.names import student_names

    alike = [Path("alice.ipynb"), Path("alice .ipynb"), Path("alice\x1b.ipynb"), Path(" .ipynb")]
    told = student_names(alike)
    assert told[0] == "alice" and len(set(told)) == 4 and all(told), told
    graded = [Submission(name, {"e": Result(0.0, "\ud800")}, {"e": 1.0})
              for name in (student_name(odd), *long)]
    report.write_scores(graded, ["e"], tmp_path / "scores.csv")
    report.write_feedback(graded, "lab.ipynb", tmp_path / "feedback")
    assert len(list((tmp_path / "feedback").glob("*.md"))) == 3
    assert json.loads((tmp_path / "feedback" / f"{long[0]}.results.json").read_text())


def _class_graded_twice(root, tmp_path, key, monkeypatch, other: str):
    """alice and ``other`` graded twice into one --out (the same class and lab: nothing is
    moved aside); the --out and the submissions folder."""
    out = tmp_path / "grades" / "scores.csv"
    monkeypatch.setattr(cli, "grade", _fake_grade([]))
    folder = _folder(tmp_path, key)
    nbformat.write(grading.student_copy(key), folder / f"{other}.ipynb")
    for _ in range(2):
        assert cli.grade_main([str(root / RING), str(folder), "--out", str(out)]) == 0
    assert not list(out.parent.glob("*.earlier-*"))
    return out, folder


def test_grading_one_late_notebook_keeps_the_class_scores(root, tmp_path, key, monkeypatch,
                                                          no_sandbox_probe):
    """Grading one late notebook into the class's --out overwrote every other student's
    score: an earlier file that names a student this grading does not is kept beside it."""
    out, folder = _class_graded_twice(root, tmp_path, key, monkeypatch, "bob")
    (folder / "alice.ipynb").unlink()
    assert cli.grade_main([str(root / RING), str(folder), "--out", str(out)]) == 0
    (earlier,) = out.parent.glob("scores.earlier-*.csv")
    assert [row.split(",")[0] for row in earlier.read_text().splitlines()[1:]] == ["alice", "bob"]
    assert [row.split(",")[0] for row in out.read_text().splitlines()[1:]] == ["bob"]


def test_grading_another_lab_into_the_same_out_keeps_the_first_labs_results(
        root, tmp_path, key, monkeypatch, no_sandbox_probe, capsys):
    """Grading lab 40 into the --out lab 50 was graded into overwrote lab 50's scores and
    the reports of the students both name: scores of other exercises move aside with their
    feedback folder and similarity list, and stderr says so.  A student whose name starts
    with '-' (quoted in the CSV) no longer moved the class's scores aside at every regrade."""
    out, folder = _class_graded_twice(root, tmp_path, key, monkeypatch, "-dash")
    ring_row = out.read_text().splitlines()[0]
    (out.parent / "scores.partial.csv").write_text(ring_row + "\n")  # an interrupted run's
    capsys.readouterr()
    assert cli.grade_main([str(root / TREE), str(folder), "--out", str(out)]) == 0
    assert "another lab's" in capsys.readouterr().err
    (scores,) = out.parent.glob("scores.earlier-*.csv")
    (reports,) = out.parent.glob("scores-feedback.earlier-*")
    assert scores.read_text().splitlines()[0] == ring_row != out.read_text().splitlines()[0]
    assert "## `reduce_scatter`" in (reports / "alice.md").read_text()  # lab 50's exercise
    (partial,) = out.parent.glob("scores.partial*")  # kept, not deleted as out of date
    assert partial.name.startswith("scores.partial.earlier-")
    assert "## `reduce_scatter`" not in (out.parent / "scores-feedback" / "alice.md").read_text()


def test_a_report_an_earlier_grading_wrote_goes_when_its_student_does(tmp_path):
    """Grading into the same folder again left alice.md (100%) beside her renamed report
    (0%), and a withdrawn student's: the reports the last grading wrote, and only those,
    move into an earlier-DATE folder (none is lost: a grading of one late notebook keeps
    the class's); the instructor's own notes in that folder stay."""
    folder = tmp_path / "feedback"
    report.write_feedback([Submission(name, {"e": Result(1.0, "ok")}, {"e": 1.0})
                           for name in ("alice", "bob")], "lab.ipynb", folder)
    (folder / "notes.md").write_text("mine")
    report.write_feedback([Submission("alice-a4ee46ae", {"e": Result(0.0, "no")}, {"e": 1.0})],
                          "lab.ipynb", folder)
    assert sorted(p.name for p in folder.glob("*.md")) == ["alice-a4ee46ae.md", "notes.md"]
    assert sorted(p.name for p in folder.glob("*.json")) == ["alice-a4ee46ae.results.json"]
    (earlier,) = folder.glob("earlier-*")
    assert sorted(p.name for p in earlier.iterdir()) == [
        "alice.md", "alice.results.json", "bob.md", "bob.results.json"]
    assert "1 of 1 points" in (earlier / "bob.md").read_text()


def test_a_submission_too_large_to_parse_safely_is_refused_unread(tmp_path):
    """50 MB of ``{}`` took 8.7 GiB of the grader's memory to parse, and two of them got a
    whole class's run killed: a notebook of too many JSON objects is refused before parsing,
    and what is read keeps no outputs."""
    from allreduce.grading.batch import MAX_CONTAINERS, read_notebook

    big = tmp_path / "big.ipynb"
    big.write_text('{"cells": [], "metadata": {"x": [' + "{}," * MAX_CONTAINERS + '{}]}, '
                   '"nbformat": 4, "nbformat_minor": 5}')
    result = read_notebook(big)
    assert isinstance(result, Result) and "JSON objects and lists" in result.message
    fine = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(
        "print(1)", outputs=[nbformat.v4.new_output("stream", text="1\n" * 1000)])])
    nbformat.write(fine, tmp_path / "fine.ipynb")
    fine.cells[0].metadata["allreduce"] = {"exercise": "e", "role": "solution",
                                           "pad": list(range(1000))}
    fine.cells[0].metadata["junk"], fine.metadata["junk"] = [0] * 1000, [0] * 1000
    nbformat.write(fine, tmp_path / "fine.ipynb")
    read = read_notebook(tmp_path / "fine.ipynb")
    assert read.cells == [{"cell_type": "code", "source": "print(1)",
                           "metadata": {"allreduce": {"exercise": "e", "role": "solution"}}}]
    assert read.metadata == {}
    # brackets in text are not lists: an output that printed 200,000 of them is read
    printed = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(
        "print([[i] for i in range(MAX)])", outputs=[nbformat.v4.new_output(
            "stream", text=str([[i] for i in range(MAX_CONTAINERS)]) + ' \\" [{')])])
    nbformat.write(printed, tmp_path / "printed.ipynb")
    assert not isinstance(read_notebook(tmp_path / "printed.ipynb"), Result)


def test_a_lone_surrogate_in_a_cell_reaches_every_report(root, tmp_path, key, capsys):
    """A solution cell holding ``"\\ud800"`` (a lone surrogate, legal in a notebook's JSON)
    stopped the feedback files and the similarity report of everyone graded after it, and
    crashed --self: what is read is made UTF-8 first."""
    import json

    from allreduce.grading.batch import read_notebook

    copy = grading.student_copy(key)
    index = [grading.role(c) for c in copy.cells].index(("reduce_scatter", "solution"))
    copy.cells[index].source = "# \ud800\n" + copy.cells[index].source
    path = tmp_path / "surrogate.ipynb"
    path.write_text(json.dumps(copy), encoding="utf-8")  # json escapes it as \ud800
    assert "\\ud800" in path.read_text()
    read = read_notebook(path)
    assert read.cells[index].source.startswith("# ?\n")
    said = report.feedback(Submission("s", {"reduce_scatter": Result(
        0.0, f"it raised (cell {index + 1} of your notebook, line 1)")},
        {"reduce_scatter": 1.0}, read), "lab")
    assert "# ?" in said.encode("utf-8").decode("utf-8")  # quoted, and writable as UTF-8


def test_self_mode_refuses_to_write_a_gradescope_score(tmp_path, key):
    """--self scores with the notebook's own check cells, whose points its author can edit:
    with --gradescope it wrote a forged 1000 of 1000; the instructor's lab is needed."""
    nbformat.write(grading.student_copy(key), tmp_path / "mine.ipynb")
    with pytest.raises(SystemExit):
        cli.grade_main(["--self", str(tmp_path / "mine.ipynb"), "--gradescope",
                        str(tmp_path / "results.json")])
    assert not (tmp_path / "results.json").exists()


def test_self_mode_explains_an_edited_check_cell(tmp_path, key, capsys):
    """--self reads the checks from the student's notebook: a check cell whose lab.check
    call was commented out ended in a traceback."""
    copy = grading.student_copy(key)
    for cell in copy.cells:
        if grading.role(cell) and grading.role(cell)[1] == "check":
            cell.source = "\n".join("# " + line for line in cell.source.splitlines())
            break
    nbformat.write(copy, tmp_path / "mine.ipynb")
    assert cli.grade_main(["--self", str(tmp_path / "mine.ipynb")]) == 2
    said = capsys.readouterr().err
    assert "a check cell is not as the lab wrote it" in said and "Traceback" not in said


def test_names_that_read_as_another_students_are_told_apart():
    """alice, alice with a zero-width space and alice with a Cyrillic а were three rows
    reading "alice"; Bob and bob are one file where case is ignored.  A name in one script
    (Łukasz, Иван) is kept as it is."""
    from allreduce.grading.names import student_names

    names = student_names([Path("alice.ipynb"), Path("alice\u200b.ipynb"),
                           Path("\u0430lice.ipynb"), Path("Bob.ipynb"), Path("bob.ipynb"),
                           Path("\u0141ukasz.ipynb"), Path("\u0418\u0432\u0430\u043d.ipynb"),
                           Path("\u5c71\u7530\u306f\u306a.ipynb"), Path("Ka\u02bbiulani.ipynb")])
    assert names[0] == "alice" and names[5:] == ["\u0141ukasz", "\u0418\u0432\u0430\u043d",
                                                 "\u5c71\u7530\u306f\u306a", "Ka\u02bbiulani"]
    assert all(re.fullmatch(r".+-[0-9a-f]{8}", name) for name in names[1:5]), names
    assert len({name.casefold() for name in names}) == len(names)
    # a name wholly in Cyrillic that reads as a Latin one (Unicode's confusables), and the
    # Latin capital I that reads as l: each pair is told apart; Иван and Ivan are not alike
    # and a Latin name in another case (Alice, all-Cyrillic), and Greek letters that NFKC
    # would turn into others (lunate sigma ϲ, read as c)
    alike = ["alice", "\u0430\u0406\u0456\u0441\u0435", "Alan", "AIan", "Ivan",
             "\u0418\u0432\u0430\u043d", "\u0391\u03bd\u03bd\u03b1", "Anna", "Bob",
             "\u0432\u043e\u0432", "cop", "\u03f2\u03bf\u03c1", "Mark",
             "\u041c\u0430\u0440\u043a"]
    names = student_names([Path(f"{name}.ipynb") for name in alike])
    digested = [bool(re.fullmatch(r".+-[0-9a-f]{8}", name)) for name in names]
    assert digested == [True] * 4 + [False] * 6 + [True] * 2 + [False] * 2, names
    assert [name for name, d in zip(names, digested) if not d] == [
        name for name, d in zip(alike, digested) if not d]
    assert student_names([Path("Alice.ipynb"), Path("\u0430\u0406\u0456\u0441\u0435.ipynb")]) \
        != ["Alice", "\u0430\u0406\u0456\u0441\u0435"]
    # a file named as a digest would name another: still one row and one report each
    decoy = student_names([Path("Alice.ipynb"), Path("alice.ipynb"),
                           Path("alice-a4ee46ae.ipynb")])
    assert len({name.casefold() for name in decoy}) == 3, decoy
    # Canvas's import reads a row named "Points Possible" as the assignment's points: no
    # student's row is named so, in any case
    canvas = student_names([Path("Points Possible.ipynb"), Path("points possible.ipynb")])
    assert all(re.fullmatch(r"(?i)points possible-[0-9a-f]{8}", name) for name in canvas), canvas
    assert len(set(canvas)) == 2


@pytest.mark.parametrize("flag, value", [("--timeout", "0"), ("--timeout", "-1"),
                                         ("--timeout", "inf"), ("--timeout", "nan"),
                                         ("--jobs", "0")])
def test_a_timeout_or_jobs_that_cannot_work_is_refused_before_grading(root, tmp_path, key,
                                                                      flag, value, capsys):
    """--timeout 0 (or -1) failed every case and exited 0; inf or nan crashed the grading
    after it had run; --jobs 0 is as meaningless: argparse refuses them with a message."""
    folder = _folder(tmp_path, key)
    with pytest.raises(SystemExit) as stop:
        cli.grade_main([str(root / RING), str(folder), flag, value])
    assert stop.value.code == 2 and flag in capsys.readouterr().err


def test_an_unreadable_notebook_says_what_to_do(tmp_path, key):
    """A notebook grown past the read limit by its outputs, and one saved with a byte-order
    mark, scored 0 with a message that did not say why or what to do."""
    from allreduce.grading.batch import MAX_NOTEBOOK_BYTES, read_notebook

    big = grading.student_copy(key)
    big.cells[0].outputs = [nbformat.v4.new_output("stream", text="x" * MAX_NOTEBOOK_BYTES)]
    big.cells[0].cell_type, big.cells[0].execution_count = "code", 1
    nbformat.write(big, tmp_path / "big.ipynb")
    assert "Clear Outputs of All Cells" in read_notebook(tmp_path / "big.ipynb").message
    (tmp_path / "bom.ipynb").write_bytes(b"\xef\xbb\xbf" + nbformat.writes(key).encode())
    assert "byte-order mark" in read_notebook(tmp_path / "bom.ipynb").message


def test_self_reads_the_labs_setup_from_the_labs_own_cells(root, tmp_path):
    """A helper in a cell the student added above a solution passed --self and failed the
    instructor's grading with a NameError (--self read the lab's imports and definitions from
    every cell of the student's notebook, the real grading from the key's): a student copy
    marks the lab's own code cells, and --self reads only those, as the key has them."""
    from allreduce.grading.batch import read_notebook
    from allreduce.grading.notebooks import setup_code

    key = nbformat.read(root / "labs" / "60_choosing.ipynb", as_version=4)
    exercise = grading.exercises(key)[0]
    mine = grading.student_copy(key)
    at = next(i for i, cell in enumerate(mine.cells)
              if (cell.metadata.get("allreduce") or {}).get("exercise") == exercise)
    mine.cells.insert(at, nbformat.v4.new_code_cell("import fractions\n\ndef my_helper():\n"
                                                     "    return 1\n"))
    nbformat.write(mine, tmp_path / "mine.ipynb")
    read = read_notebook(tmp_path / "mine.ipynb")  # as --self reads it
    for engines in (False, True):
        from_key, _ = setup_code(key, exercise, engines)
        from_mine, _ = setup_code(read, exercise, engines)
        assert "my_helper" not in from_mine and "fractions" not in from_mine
        assert from_mine == from_key, engines


def test_a_solution_cell_turned_into_markdown_is_not_run(key):
    """Solution cells changed to Markdown earned full points, though JupyterLab never runs
    them and the notebook's own check fails: such a cell is not run, and the message says
    to change it back."""
    from allreduce.grading.batch import graded_code
    from allreduce.grading.notebooks import specs

    spec = specs(key)[0]
    mine = nbformat.reads(nbformat.writes(key), as_version=4)  # the key's solutions
    for cell in mine.cells:
        if grading.role(cell) == (spec.exercise, "solution"):
            cell.cell_type = "markdown"
            del cell["outputs"], cell["execution_count"]
            break  # one of them is enough
    with pytest.raises(LookupError, match="is not a code cell .*back to Code"):
        graded_code(key, mine, spec)
    assert graded_code(key, key, spec).solution  # the key's own: code cells, run
