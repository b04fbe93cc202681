"""Student copies and grading with nbval, on the ring lab: real kernels, real MPI engines.

The slow test grades five submissions (about 3 minutes): a correct one, one with an
off-by-one chunk index, one that deadlocks, one that kills its kernel and tries to delete
the key, and an untouched student copy."""

from __future__ import annotations

import hashlib
import re
import shutil
import subprocess
from pathlib import Path

import nbformat
import pytest

from allreduce import grading

LAB = "labs/50_ring_allreduce.ipynb"


@pytest.fixture
def key(root):
    return nbformat.read(root / LAB, as_version=4)


def test_stub_keeps_the_indentation_and_names_the_exercise():
    source = "def f():\n    for i in x:\n        ### BEGIN SOLUTION\n        y = 1\n        ### END SOLUTION\n    return 2"
    assert grading.stub_solutions(source, "ex") == (
        "def f():\n    for i in x:\n"
        '        raise NotImplementedError("exercise ex: replace this line with your solution")\n'
        "    return 2")
    with pytest.raises(ValueError, match="without"):
        grading.stub_solutions("### BEGIN SOLUTION\nx = 1", "ex")


def test_student_copy_has_no_solutions_and_keeps_the_rest(key):
    student = grading.student_copy(key)
    assert grading.exercises(key) == ["reduce_scatter", "allgather"]
    for mine, theirs in zip(key.cells, student.cells):
        if grading.role(mine) and grading.role(mine)[1] == "solution":
            assert grading.BEGIN in mine.source and grading.BEGIN not in theirs.source
            assert "sendrecv" not in theirs.source  # the solution's own lines are gone
            assert "NotImplementedError" in theirs.source
        else:
            assert mine == theirs  # outputs kept: the student sees what each cell prints


def test_graded_notebook_takes_only_that_exercise_from_the_submission(key):
    submission = grading.student_copy(key)
    graded, checks = grading.graded_notebook(key, submission, "reduce_scatter")
    solutions = [c.source for c in graded.cells if grading.role(c)]
    assert "NotImplementedError" in solutions[0]  # the student's reduce_scatter
    assert all(grading.role(c) != ("allgather", "check") for c in graded.cells)  # cut after
    code = [c for c in graded.cells if c.cell_type == "code"]
    assert [grading.role(code[i]) for i in checks] == [("reduce_scatter", "check")]
    del submission.cells[[grading.role(c) for c in submission.cells].index(
        ("allgather", "solution"))]
    with pytest.raises(LookupError, match="were cells deleted"):
        grading.graded_notebook(key, submission, "allgather")


def test_make_student_writes_the_copies(root, venv_bin, tmp_path):
    run = subprocess.run([venv_bin / "allreduce-student", root / LAB, "--out", tmp_path / "s"],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    copy = nbformat.read(tmp_path / "s" / "50_ring_allreduce.ipynb", as_version=4)
    assert not any(grading.BEGIN in c.source for c in copy.cells)


def _variant(key, folder, name, edits):
    nb = grading.student_copy(key) if edits is None else nbformat.from_dict(key)
    for cell in nb.cells:
        mark = grading.role(cell)
        if edits and mark and mark[1] == "solution" and mark[0] in edits:
            cell.source = edits[mark[0]](cell.source)
    nbformat.write(nb, folder / f"{name}.ipynb")


def test_grading_five_submissions(root, venv_bin, tmp_path, key):
    lab = tmp_path / "key.ipynb"  # a copy, so that the vandal below can aim at its path
    shutil.copy(root / LAB, lab)
    digest = hashlib.sha256(lab.read_bytes()).hexdigest()
    folder = tmp_path / "submissions"
    folder.mkdir()
    _variant(key, folder, "a_correct", {})
    _variant(key, folder, "b_off_by_one", {"reduce_scatter": lambda s: s.replace(
        "(rank - step - 2) % p", "(rank - step - 1) % p")})
    _variant(key, folder, "c_deadlock", {"allgather": lambda s: s.replace(
        "comm.sendrecv(buf[send_lo:send_hi], right, buf[recv_lo:recv_hi], left)",
        "comm.recv(buf[recv_lo:recv_hi], left)\n        comm.send(buf[send_lo:send_hi], right)")})
    _variant(key, folder, "d_kills_kernel_deletes_files", {
        "reduce_scatter": lambda s: "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)",
        # runs on the engines, after a correct allgather: the exercise still scores
        "allgather": lambda s: s + "\nimport contextlib, os\nfor f in [*os.listdir('.'), "
                                   f"{str(lab)!r}]:\n    with contextlib.suppress(OSError):\n"
                                   "        os.remove(f)"})
    _variant(key, folder, "e_untouched_student_copy", None)
    scores = tmp_path / "scores.csv"
    run = subprocess.run([venv_bin / "allreduce-grade", lab, folder, "--out", scores,
                          "--cell-timeout", "30", "--jobs", "2"],  # two runs side by side
                         capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stdout + run.stderr
    rows = {row[0]: row for row in (line.split(",", 4) for line in
                                    scores.read_text().splitlines()[1:])}
    assert rows["a_correct"][1:4] == ["1.00", "1.00", "1.00"]
    assert rows["b_off_by_one"][1:4] == ["0.00", "1.00", "0.50"]
    assert "longer than its receive buffer" in rows["b_off_by_one"][4]
    assert rows["c_deadlock"][1:4] == ["1.00", "0.00", "0.50"]
    assert "a deadlock?" in rows["c_deadlock"][4]
    assert rows["d_kills_kernel_deletes_files"][1:4] == ["0.00", "1.00", "0.50"]
    assert "Timeout" in rows["d_kills_kernel_deletes_files"][4]  # its kernel never answered
    assert rows["e_untouched_student_copy"][1:4] == ["0.00", "0.00", "0.00"]
    assert "NotImplementedError: exercise reduce_scatter" in rows["e_untouched_student_copy"][4]
    assert "NotImplementedError: exercise allgather" in rows["e_untouched_student_copy"][4]
    # named among the submissions whose runs were in flight when the key was found changed
    assert re.search(r"changed while grading (\S+ or )*d_kills_kernel_deletes_files\.ipynb",
                     run.stdout), run.stdout
    assert hashlib.sha256(lab.read_bytes()).hexdigest() == digest  # the key is intact
    assert "[5/5]" in run.stdout and "a_correct" in run.stdout  # progress and summary
    leftover = subprocess.run(["pgrep", "-f", "ipengine"], capture_output=True, text=True)
    assert not leftover.stdout.strip(), "grading left engines running"


OTHER_LABS = sorted(p.name for p in (Path(__file__).parent.parent / "labs").glob("*.ipynb")
                    if p.name != Path(LAB).name)


@pytest.mark.parametrize("name", OTHER_LABS)
def test_student_copy_scores_zero_with_the_stub_message(root, tmp_path, name):
    """Every other lab grades like the ring lab: an untouched student copy gets 0 for each
    exercise, with the stub's message.  (That the key's own solutions pass its checks is
    what nbval checks on the lab itself; the grader's handling of right, wrong, hanging and
    crashing work is the five-submission test above.)"""
    lab = root / "labs" / name
    key = nbformat.read(lab, as_version=4)
    folder = tmp_path / "submissions"
    folder.mkdir()
    nbformat.write(grading.student_copy(key), folder / "student.ipynb")
    (graded,) = grading.grade(lab, [folder / "student.ipynb"], cell_timeout=60, jobs=2,
                              progress=lambda *a, **k: None)
    assert list(graded.results) == grading.exercises(key)
    for exercise, result in graded.results.items():
        assert result.score == 0.0
        assert f"NotImplementedError: exercise {exercise}" in result.message, result.message


def test_interrupting_a_parallel_grading_ends_its_runs(root, venv_bin, tmp_path, key):
    """Ctrl-C on `allreduce-grade --jobs 2` while both runs hang: the grader exits within
    seconds (it does not wait out the cell timeouts) and leaves no engines behind."""
    import os
    import signal
    import time

    folder = tmp_path / "submissions"
    folder.mkdir()
    hang = {"reduce_scatter": lambda s: "import time\ntime.sleep(600)"}
    _variant(key, folder, "a_hangs", hang)
    _variant(key, folder, "b_hangs", hang)
    grader = subprocess.Popen([venv_bin / "allreduce-grade", root / LAB, folder, "--out",
                               tmp_path / "scores.csv", "--jobs", "2"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(15)  # both runs are now in the sleeping cell (engines take about 7 s)
    assert grader.poll() is None, grader.communicate()
    interrupted = time.monotonic()
    os.kill(grader.pid, signal.SIGINT)
    _, err = grader.communicate(timeout=60)
    assert grader.returncode != 0 and "KeyboardInterrupt" in err
    assert time.monotonic() - interrupted < 20, "the grader waited for its runs"
    time.sleep(1)
    leftover = subprocess.run(["pgrep", "-f", "ipengine"], capture_output=True, text=True)
    assert not leftover.stdout.strip(), "interrupted grading left engines running"


def test_a_file_that_is_not_a_notebook_scores_zero_with_the_reason(root, tmp_path):
    (tmp_path / "garbage.ipynb").write_text("not json")
    (graded,) = grading.grade(root / LAB, [tmp_path / "garbage.ipynb"], jobs=2,
                              progress=lambda *a, **k: None)
    assert list(graded.results) == ["reduce_scatter", "allgather"]
    for result in graded.results.values():
        assert result.score == 0 and result.message.startswith("not a readable notebook")
