"""Student copies and grading: real sandboxes, real rank processes, real messages.

The slow tests grade hostile submissions end to end with ``allreduce-grade --jobs 2``: on
the ring lab (every attack the issue lists) and on the naive-allreduce lab (the cheats and
the limits), then every lab's key and untouched student copy.  Each hostile submission must
score 0 where it cheats, or its correct code's score where only a side effect was hostile,
leave no process behind and change nothing outside its run."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path

import nbformat
import pytest

from allreduce import grading
from allreduce.grading import notebooks, similarity
from allreduce.grading.sandbox import probe

RING = "labs/50_ring_allreduce.ipynb"
NAIVE = "labs/30_naive_allreduce.ipynb"
LABS = sorted(p.name for p in (Path(__file__).parent.parent / "labs").glob("*.ipynb"))
MARK = "allreduce-hostile-detached"  # in the command line of the process a submission leaves

_NO_SANDBOX = probe()  # None where bwrap can start a sandbox (as root, or with user namespaces)
needs_sandbox = pytest.mark.skipif(_NO_SANDBOX is not None, reason=f"no sandbox here: {_NO_SANDBOX}")


@pytest.fixture
def key(root):
    return nbformat.read(root / RING, as_version=4)


# -- marking up, student copies, what a run gets ------------------------------------------------

def test_stub_keeps_the_indentation_and_names_the_exercise():
    source = "def f():\n    for i in x:\n        ### BEGIN SOLUTION\n        y = 1\n        ### END SOLUTION\n    return 2"
    assert grading.stub_solutions(source, "ex") == (
        "def f():\n    for i in x:\n"
        '        raise NotImplementedError("exercise ex: replace this line with your solution")\n'
        "    return 2")
    with pytest.raises(ValueError, match="without"):
        grading.stub_solutions("### BEGIN SOLUTION\nx = 1", "ex")


def test_student_copy_has_no_solutions_shows_points_and_keeps_the_rest(key):
    student = grading.student_copy(key)
    assert grading.exercises(key) == ["reduce_scatter", "allgather"]
    points = [c for c in student.cells if grading.role(c) and grading.role(c)[1] == "points"]
    assert [c.source.split("**")[1] for c in points] == [
        "Exercise `reduce_scatter`: 3 points", "Exercise `allgather`: 2 points"]
    theirs = [c for c in student.cells if c not in points]
    for mine, copy in zip(key.cells, theirs, strict=True):
        if grading.role(mine) and grading.role(mine)[1] == "solution":
            assert grading.BEGIN in mine.source and grading.BEGIN not in copy.source
            assert "sendrecv" not in copy.source  # the solution's own lines are gone
            assert "NotImplementedError" in copy.source
        else:
            assert mine == copy  # outputs kept: the student sees what each cell prints
    assert nbformat.writes(grading.student_copy(key)) == nbformat.writes(student)  # stable


@pytest.mark.parametrize("name", LABS)
def test_every_lab_states_its_checks(root, name):
    """Each exercise's check cell names the function, the check, the pattern and points."""
    nb = nbformat.read(root / "labs" / name, as_version=4)
    specs = grading.specs(nb)
    assert [s.exercise for s in specs] == grading.exercises(nb)
    assert all(s.points > 0 for s in specs) and len({s.points for s in specs}) > 1 or len(specs) == 1
    for s in specs:
        assert s.kind in ("ranks", "local", "overlap")
        assert s.kind != "ranks" or s.pattern, s  # every algorithm exercise has a pattern


def test_a_run_gets_only_its_exercise_and_the_labs_imports(key):
    submission = grading.student_copy(key)
    spec = grading.spec(key, "allgather")
    code = grading.graded_code(key, submission, spec)
    assert "NotImplementedError" in code.solution[0]  # the student's allgather
    assert "sendrecv" not in code.setup + "".join(code.solution)  # no solution of the key
    assert "import numpy as np" in code.setup and "from allreduce import chunk_bounds" in code.setup
    assert {"world", "comm"} <= set(code.stubs)  # assigned by the lab: placeholders in a run
    del submission.cells[[grading.role(c) for c in submission.cells].index(
        ("allgather", "solution"))]
    with pytest.raises(LookupError, match="were cells deleted"):
        grading.graded_code(key, submission, spec)


def test_make_student_writes_the_copies(root, venv_bin, tmp_path):
    run = subprocess.run([venv_bin / "allreduce-student", root / RING, "--out", tmp_path / "s"],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    copy = nbformat.read(tmp_path / "s" / "50_ring_allreduce.ipynb", as_version=4)
    assert not any(grading.BEGIN in c.source for c in copy.cells)


def test_similarity_ignores_names_comments_and_layout():
    a = "def f(buf, comm):\n    x = 1  # mine\n    return comm.send(buf, x)\n"
    b = "def f(data,   c):\n\n    y = 1\n    return c.send(data, y)"
    assert similarity.normalise(a) == similarity.normalise(b)
    assert similarity.normalise(a) != similarity.normalise(a.replace("send", "recv"))


# -- hostile submissions ------------------------------------------------------------------------

def _variant(key, folder: Path, name: str, edits: dict | None) -> None:
    nb = grading.student_copy(key) if edits is None else nbformat.from_dict(key)
    for cell in nb.cells:
        mark = grading.role(cell)
        if edits and mark and mark[1] == "solution" and mark[0] in edits:
            cell.source = edits[mark[0]](cell.source)
    nbformat.write(nb, folder / f"{name}.ipynb")


def _body(source: str, code: str) -> str:
    """``source`` (a solution cell) with ``code`` run first in its function."""
    head, _, rest = source.partition(":\n")
    indent = " " * 4
    return head + ":\n" + "".join(indent + line + "\n" for line in code.splitlines()) + rest


def _top(source: str, code: str) -> str:
    """``source`` with ``code`` at the top of the cell, after its ``%%px`` line."""
    first, _, rest = source.partition("\n")
    return f"{first}\n{code}{rest}" if first.startswith("%%px") else code + source


def _stub(source: str, exercise: str) -> str:
    return notebooks.stub_solutions(source, exercise)


MPI_ALLREDUCE = """\
from mpi4py import MPI
total = buf.copy()
MPI.COMM_WORLD.Allreduce(buf, total)
buf[:] = total
return chunk_bounds(len(buf), comm.size, comm.rank)"""

LIBRARY = """\
allreduce.allreduce(buf, comm, algorithm="ring", out=buf)
return chunk_bounds(len(buf), comm.size, comm.rank)"""

LIBRARY_RING = """\
from allreduce.algorithms import ring
return ring.taught_reduce_scatter(buf, comm, op)"""

FAKE_CHECK = """\
import allreduce.lab
def _passes(view, function, *args, **kwargs):
    print(f"{function}: correct on 4 ranks for n = 1, 3, 4, 7, 12, 1001")
allreduce.lab.check = _passes
"""

PATCH_CHECKER = """\
import allreduce.lab.checks, allreduce.lab.patterns
allreduce.lab.checks.judge = lambda *args, **kwargs: None
allreduce.lab.checks.pattern_problem = lambda *args, **kwargs: None
allreduce.lab.patterns.compare = lambda *args, **kwargs: None
"""

READ_KEY = """\
import json, pathlib
import allreduce
root = pathlib.Path(allreduce.__file__).resolve().parents[2]
for path in [root / "labs" / "{lab}", root / "_build" / "html" / "_sources" / "labs" / "{lab}",
             pathlib.Path("{key}"), pathlib.Path.home() / "{lab}"]:
    try:
        nb = json.loads(path.read_text())
        break
    except OSError:
        continue
else:
    raise FileNotFoundError("the key is nowhere to be read")
source = next("".join(c["source"]) for c in nb["cells"]
              if c["metadata"].get("allreduce", {{}}).get("role") == "solution"
              and c["metadata"]["allreduce"]["exercise"] == "{exercise}")
space = dict(globals())
exec(source.replace("%%px --no-stream", ""), space)
return space["{exercise}"](buf, comm, op)"""

DETACH = f"""\
import subprocess, sys
subprocess.Popen([sys.executable, "-c", "import os, time; os.fork(); time.sleep(600)",
                  "{MARK}"], start_new_session=True, env={{}}, stdin=subprocess.DEVNULL,
                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)"""

WRITE_OUTSIDE = """\
import pathlib
for path in {paths}:
    try:
        pathlib.Path(path).write_text("vandalised")
    except OSError:
        pass
    try:
        pathlib.Path(path).unlink()
    except OSError:
        pass"""

FORK_BOMB = """\
import os
while True:
    os.fork()"""

HOG = """\
import numpy as np
hog = np.ones(30 * 2**30 // 8)  # 30 GiB"""

FLOOD = """\
import sys
if not hasattr(sys, "flooded"):  # once per rank: 200 MB of output, and a 256 MB file
    sys.flooded = True
    for _ in range(10):
        sys.stdout.write("x" * 10**7)
        sys.stderr.write("y" * 10**7)
    try:
        with open("flood.txt", "w") as f:
            for _ in range(256):
                f.write("z" * 2**20)
    except OSError:
        pass"""

NAIVE_WRONG_PATTERN = """\
p, rank, n = comm.size, comm.rank, len(buf)
others = np.empty((p, n), dtype=buf.dtype)
requests = []
for k in range(1, p):  # everyone's whole buffer to everyone: right sums, not a ring
    requests.append(comm.irecv(others[(rank - k) % p], (rank - k) % p))
    requests.append(comm.isend(buf, (rank + k) % p))
comm.waitall(requests)
for k in range(1, p):
    comm.reduce_local(op, buf, others[(rank - k) % p])
return chunk_bounds(n, p, rank)"""


def _grade(venv_bin, lab: Path, folder: Path, out: Path, *extra):
    run = subprocess.run([venv_bin / "allreduce-grade", lab, folder, "--out", out,
                          "--timeout", "20", "--jobs", "2", *extra],
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout + run.stderr
    rows = list(csv_rows(out))
    return {row["student"]: row for row in rows}, run


def csv_rows(path: Path):
    import csv

    with path.open() as f:
        yield from csv.DictReader(f)


def _leftovers() -> str:
    found = subprocess.run(["pgrep", "-af", f"{MARK}|allreduce.grading.rank"],
                           capture_output=True, text=True).stdout
    return "\n".join(line for line in found.splitlines() if "pgrep" not in line)


@needs_sandbox
def test_hostile_submissions_on_the_ring_lab(root, venv_bin, tmp_path, key):
    lab = tmp_path / "key.ipynb"  # a copy, so that the vandals below can aim at its path
    shutil.copy(root / RING, lab)
    digest = hashlib.sha256(lab.read_bytes()).hexdigest()
    home_file = Path.home() / "allreduce-grading-canary.txt"
    home_file.write_text("canary")
    folder = tmp_path / "submissions"
    folder.mkdir()
    out = tmp_path / "scores.csv"
    rs, ag = "reduce_scatter", "allgather"
    _variant(key, folder, "a_correct", {})
    _variant(key, folder, "b_off_by_one", {rs: lambda s: s.replace(
        "(rank - step - 2) % p", "(rank - step - 1) % p")})
    _variant(key, folder, "c_deadlock", {ag: lambda s: s.replace(
        "comm.sendrecv(buf[send_lo:send_hi], right, buf[recv_lo:recv_hi], left)",
        "comm.recv(buf[recv_lo:recv_hi], left)\n        comm.send(buf[send_lo:send_hi], right)")})
    _variant(key, folder, "d_kills_itself", {rs: lambda s: _body(
        _stub(s, rs), "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)")})
    _variant(key, folder, "e_untouched_student_copy", None)
    _variant(key, folder, "f_calls_mpi_allreduce", {rs: lambda s: _body(_stub(s, rs), MPI_ALLREDUCE)})
    _variant(key, folder, "g_calls_the_library", {rs: lambda s: _body(_stub(s, rs), LIBRARY),
                                                  ag: lambda s: _body(_stub(s, ag),
                                                  "from allreduce.algorithms import ring\n"
                                                  "return ring.allgather(buf, comm)")})
    _variant(key, folder, "h_library_ring_exact_pattern", {rs: lambda s: _body(_stub(s, rs), LIBRARY_RING)})
    _variant(key, folder, "i_fakes_the_check", {rs: lambda s: _top(_stub(s, rs), FAKE_CHECK),
                                                ag: lambda s: _top(_stub(s, ag), FAKE_CHECK)})
    _variant(key, folder, "j_patches_the_checker", {rs: lambda s: _top(_body(
        _stub(s, rs), "return chunk_bounds(len(buf), comm.size, comm.rank)"), PATCH_CHECKER)})
    _variant(key, folder, "k_reads_the_key", {rs: lambda s: _body(_stub(s, rs), READ_KEY.format(
        lab="50_ring_allreduce.ipynb", key=lab, exercise=rs))})
    _variant(key, folder, "l_leaves_a_detached_process", {rs: lambda s: _body(s, DETACH)})
    targets = [str(lab), str(out), str(home_file), str(folder / "a_correct.ipynb"),
               str(root / "README.md"), "/etc/hostname", str(Path.home() / "new-file")]
    _variant(key, folder, "m_writes_outside", {rs: lambda s: _body(s, WRITE_OUTSIDE.format(
        paths=targets))})
    _variant(key, folder, "n_fork_bomb", {rs: lambda s: _body(_stub(s, rs), FORK_BOMB)})
    _variant(key, folder, "o_allocates_30_gib", {rs: lambda s: _body(_stub(s, rs), HOG)})
    _variant(key, folder, "p_floods_its_output", {ag: lambda s: _body(s, FLOOD)})
    _variant(key, folder, "q_right_values_wrong_pattern", {rs: lambda s: _body(
        _stub(s, rs), NAIVE_WRONG_PATTERN)})
    before = {p.name: p.read_bytes() for p in folder.iterdir()}
    started = time.monotonic()
    rows, run = _grade(venv_bin, lab, folder, out)
    seconds = time.monotonic() - started

    def scores(name):
        return rows[name][rs], rows[name][ag]

    def says(name, *texts):
        for text in texts:
            assert re.search(text, rows[name]["messages"]), (name, rows[name]["messages"])

    assert scores("a_correct") == ("3", "2") and rows["a_correct"]["percent"] == "100"
    assert scores("b_off_by_one") == ("0", "2")
    says("b_off_by_one", "sender and receiver disagree on the chunk")
    assert scores("c_deadlock") == ("3", "0")
    says("c_deadlock", "deadlock: rank 0 waits for a message from rank 3")
    assert scores("d_kills_itself") == ("0", "2")
    says("d_kills_itself", "process ended without answering")
    assert scores("e_untouched_student_copy") == ("0", "0")
    says("e_untouched_student_copy", "NotImplementedError: exercise reduce_scatter",
         "NotImplementedError: exercise allgather")
    assert scores("f_calls_mpi_allreduce")[0] == "0"
    says("f_calls_mpi_allreduce", "mpi4py is not available .* only through the comm")
    assert scores("g_calls_the_library") == ("0", "0")
    says("g_calls_the_library", "called allreduce.allreduce", "library's allgather")
    assert scores("h_library_ring_exact_pattern")[0] == "0"
    says("h_library_ring_exact_pattern", "called the library's taught_reduce_scatter")
    assert scores("i_fakes_the_check") == ("0", "0")
    says("i_fakes_the_check", "NotImplementedError")
    assert scores("j_patches_the_checker")[0] == "0"
    says("j_patches_the_checker", "reduce_scatter is wrong for n = 1 on 4 ranks: rank 0")
    assert scores("k_reads_the_key")[0] == "0"
    says("k_reads_the_key", "the key is nowhere to be read")
    assert scores("l_leaves_a_detached_process") == ("3", "2")  # only the side effect was hostile
    assert scores("m_writes_outside") == ("3", "2")
    assert scores("n_fork_bomb")[0] == "0"
    says("n_fork_bomb", "Resource temporarily unavailable|ended without answering")
    assert scores("o_allocates_30_gib")[0] == "0"
    says("o_allocates_30_gib", "MemoryError")
    assert scores("p_floods_its_output") == ("3", "2")
    assert scores("q_right_values_wrong_pattern")[0] == "0"
    says("q_right_values_wrong_pattern",
         "reduce_scatter on rank 0 sent 3 messages .* to ranks 1, 2, 3 .*; the ring reduce-scatter "
         "sent .*; it must pass chunks around the ring")
    # nothing outside the runs changed, and nothing of them is left
    assert hashlib.sha256(lab.read_bytes()).hexdigest() == digest
    assert "changed while grading" not in run.stdout
    assert home_file.read_text() == "canary" and not (Path.home() / "new-file").exists()
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == before
    assert not _leftovers(), _leftovers()
    home_file.unlink()
    # the reports: feedback per student (with the failing cell), Gradescope, similarity
    feedback = (tmp_path / "scores-feedback" / "b_off_by_one.md").read_text()
    assert "**2 of 5 points (40%).**" in feedback and "(rank - step - 1) % p" in feedback
    results = json.loads((tmp_path / "scores-feedback" / "b_off_by_one.results.json").read_text())
    assert results["score"] == 2 and [t["max_score"] for t in results["tests"]] == [3, 2]
    similar = list(csv_rows(tmp_path / "scores-similarity.csv"))
    assert any({r["submission_a"], r["submission_b"]} == {"a_correct", "m_writes_outside"}
               for r in similar if r["exercise"] == "allgather")
    print(f"graded {len(before)} submissions x 2 exercises in {seconds:.0f} s")


@needs_sandbox
def test_hostile_submissions_on_the_naive_lab(root, venv_bin, tmp_path):
    lab = root / NAIVE
    key = nbformat.read(lab, as_version=4)
    folder = tmp_path / "submissions"
    folder.mkdir()
    na, rb = "naive_allreduce", "reduce_then_broadcast"
    _variant(key, folder, "a_correct", {})
    _variant(key, folder, "b_mpi", {na: lambda s: _body(_stub(s, na), "world.Allreduce(buf.copy(), buf)\nreturn")})
    _variant(key, folder, "c_library", {na: lambda s: _body(_stub(s, na),
                                        "allreduce.allreduce(buf, comm, algorithm='naive', out=buf)\n"
                                        "return"),
                                        rb: lambda s: _body(_stub(s, rb),
                                        "allreduce.algorithms.reduce_broadcast.reduce_broadcast(buf, comm, op)\n"
                                        "return")})
    _variant(key, folder, "d_fakes_the_check", {na: lambda s: _top(_stub(s, na), FAKE_CHECK)})
    _variant(key, folder, "e_reads_the_key", {na: lambda s: _body(_stub(s, na), READ_KEY.format(
        lab="30_naive_allreduce.ipynb", key=lab, exercise=na))})
    _variant(key, folder, "f_fork_bomb", {rb: lambda s: _body(_stub(s, rb), FORK_BOMB)})
    _variant(key, folder, "g_allocates_30_gib", {rb: lambda s: _body(_stub(s, rb), HOG)})
    _variant(key, folder, "h_detached", {na: lambda s: _body(s, DETACH)})
    _variant(key, folder, "i_ring_instead_of_naive", {na: lambda s: _body(_stub(s, na),
             "from allreduce.lab.patterns import _reference_function\n"
             "_reference_function('ring_reduce_scatter')(buf, comm, op)\n"
             "_reference_function('ring_allgather')(buf, comm, op)\nreturn")})
    rows, _ = _grade(venv_bin, lab, folder, tmp_path / "scores.csv")
    assert (rows["a_correct"][na], rows["a_correct"][rb]) == ("2", "3")
    for name in ("b_mpi", "c_library", "d_fakes_the_check", "e_reads_the_key"):
        assert rows[name][na] == "0", (name, rows[name]["messages"])
    assert re.search("`world` is a global of the lab notebook", rows["b_mpi"]["messages"])
    assert "called allreduce.allreduce" in rows["c_library"]["messages"]
    assert rows["c_library"][rb] == "0"
    assert "FileNotFoundError" in rows["e_reads_the_key"]["messages"]
    assert rows["f_fork_bomb"][rb] == "0" and rows["g_allocates_30_gib"][rb] == "0"
    assert "MemoryError" in rows["g_allocates_30_gib"]["messages"]
    assert rows["h_detached"][na] == "2"
    assert rows["i_ring_instead_of_naive"][na] == "0"
    assert "library's" in rows["i_ring_instead_of_naive"]["messages"]
    assert not _leftovers(), _leftovers()


# -- every lab: the key scores 100%, an untouched copy 0 -------------------------------------------

@needs_sandbox
@pytest.mark.parametrize("name", LABS)
def test_the_keys_solutions_score_everything_and_a_student_copy_nothing(root, tmp_path, name):
    lab = root / "labs" / name
    key = nbformat.read(lab, as_version=4)
    folder = tmp_path / "submissions"
    folder.mkdir()
    completed = grading.student_copy(key)  # the student copy, completed with the key's code
    solutions = iter(c.source for c in key.cells if (grading.role(c) or ("", ""))[1] == "solution")
    for cell in completed.cells:
        if (grading.role(cell) or ("", ""))[1] == "solution":
            cell.source = next(solutions)
    nbformat.write(completed, folder / "completed.ipynb")
    nbformat.write(grading.student_copy(key), folder / "student.ipynb")
    graded = grading.grade(lab, sorted(folder.iterdir()), jobs=2, progress=lambda *a, **k: None)
    done, untouched = graded
    assert done.total == 1.0, {e: r.message for e, r in done.results.items()}
    assert list(untouched.results) == grading.exercises(key)
    for exercise, result in untouched.results.items():
        assert result.score == 0.0
        assert f"NotImplementedError: exercise {exercise}" in result.message, result.message


# -- the grader itself ----------------------------------------------------------------------------

@needs_sandbox
def test_interrupting_a_parallel_grading_ends_its_runs(root, venv_bin, tmp_path, key):
    """Ctrl-C on `allreduce-grade --jobs 2` while both runs hang: the grader exits within
    seconds and leaves nothing behind."""
    folder = tmp_path / "submissions"
    folder.mkdir()
    hang = {"reduce_scatter": lambda s: _body(s, "import time\ntime.sleep(600)")}
    _variant(key, folder, "a_hangs", hang)
    _variant(key, folder, "b_hangs", hang)
    grader = subprocess.Popen([venv_bin / "allreduce-grade", root / RING, folder, "--out",
                               tmp_path / "scores.csv", "--jobs", "2"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(8)  # both runs are now in the sleeping call
    assert grader.poll() is None, grader.communicate()
    interrupted = time.monotonic()
    os.kill(grader.pid, signal.SIGINT)
    _, err = grader.communicate(timeout=60)
    assert grader.returncode != 0 and "KeyboardInterrupt" in err
    assert time.monotonic() - interrupted < 10, "the grader waited for its runs"
    time.sleep(1)
    assert not _leftovers(), _leftovers()


def test_a_file_that_is_not_a_notebook_scores_zero_with_the_reason(root, tmp_path):
    (tmp_path / "garbage.ipynb").write_text("not json")
    (graded,) = grading.grade(root / RING, [tmp_path / "garbage.ipynb"], jobs=2,
                              progress=lambda *a, **k: None)
    assert list(graded.results) == ["reduce_scatter", "allgather"]
    for result in graded.results.values():
        assert result.score == 0 and result.message.startswith("not a readable notebook")


def test_grading_refuses_without_a_sandbox_unless_told(root, tmp_path, key, monkeypatch, capsys):
    from allreduce.grading import cli

    folder = tmp_path / "submissions"
    folder.mkdir()
    _variant(key, folder, "a_correct", {})
    monkeypatch.setattr(cli, "probe", lambda: "setting up uid map: Permission denied")
    out = tmp_path / "scores.csv"
    assert cli.grade_main([str(root / RING), str(folder), "--out", str(out)]) == 2
    said = capsys.readouterr().err
    assert "cannot start here (setting up uid map" in said and "--no-sandbox" in said
    assert not out.exists()
    assert cli.grade_main([str(root / RING), str(folder), "--out", str(out), "--no-sandbox",
                           "--format", "canvas"]) == 0
    rows = out.read_text().splitlines()
    assert rows[0].startswith("Student,ID,SIS User ID,SIS Login ID,Section,")
    assert rows[1].endswith(",5") and rows[2] == "a_correct,,,a_correct,,5"


@needs_sandbox
def test_self_mode_checks_a_students_own_notebook(root, venv_bin, tmp_path, key):
    _variant(key, tmp_path, "mine", {"allgather": lambda s: _stub(s, "allgather")})
    run = subprocess.run([venv_bin / "allreduce-grade", "--self", tmp_path / "mine.ipynb",
                          "--gradescope", tmp_path / "results.json"],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "**3 of 5 points (60%).**" in run.stdout
    assert "NotImplementedError: exercise allgather" in run.stdout
    assert json.loads((tmp_path / "results.json").read_text())["score"] == 3
