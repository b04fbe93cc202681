"""Student copies of the labs, and grading of submissions with nbval.

How the labs are marked up (see any lab in ``labs/``):

* a **solution cell** has ``metadata.allreduce = {"exercise": NAME, "role": "solution"}``
  and contains one or more regions between ``### BEGIN SOLUTION`` and ``### END SOLUTION``
  (nbgrader's markers);
* a **check cell** has ``{"exercise": NAME, "role": "check"}``; its committed output, in
  the instructor's lab, is the expected verdict.

``allreduce-student`` (``make student``) replaces every solution region by a stub that raises
``NotImplementedError`` and keeps everything else, outputs included, so a student sees what
each cell should print.

``allreduce-grade LAB SUBMISSIONS/`` (``make grade``) grades every notebook in the folder,
one exercise at a time.  For exercise E it takes the instructor's lab (the key), puts in the
student's solution cells for E (the key's own solutions for every other exercise), cuts the
notebook after E's last check cell, and runs it with ``pytest --nbval`` in a fresh temporary
folder, with a timeout per cell and for the whole run.  E scores the fraction of its check
cells that pass.  So a submission that hangs, deadlocks the engines, kills its kernel or
deletes files loses that exercise only; it never sees the key's path; and every process it
started is killed afterwards (they are found by a token in their environment).  The key is
read once, and checked unchanged after every run.  ``--jobs N`` runs N exercises side by
side, each in its own folder, with its own engines and token.
"""

from __future__ import annotations

import argparse
import copy
import csv
import hashlib
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from xml.etree import ElementTree

BEGIN, END = "### BEGIN SOLUTION", "### END SOLUTION"
TOKEN_VARIABLE = "ALLREDUCE_GRADING_RUN"


def _nbformat():
    import nbformat

    return nbformat


def role(cell) -> tuple[str, str] | None:
    """``(exercise, role)`` of a marked cell, else ``None``."""
    mark = cell.get("metadata", {}).get("allreduce")
    return (mark["exercise"], mark["role"]) if mark else None


def exercises(nb) -> list[str]:
    """The lab's exercises, in the order their check cells appear."""
    names: list[str] = []
    for cell in nb.cells:
        mark = role(cell)
        if mark and mark[1] == "check" and mark[0] not in names:
            names.append(mark[0])
    return names


def stub_solutions(source: str, exercise: str) -> str:
    """``source`` with each solution region replaced by a ``NotImplementedError`` stub at
    the region's indentation."""
    out, inside = [], False
    for line in source.splitlines():
        if BEGIN in line:
            if inside:
                raise ValueError(f"exercise {exercise!r}: {BEGIN} inside a solution region")
            inside = True
            indent = line[: len(line) - len(line.lstrip())]
            out.append(f'{indent}raise NotImplementedError("exercise {exercise}: replace this '
                       f'line with your solution")')
        elif END in line:
            if not inside:
                raise ValueError(f"exercise {exercise!r}: {END} without {BEGIN}")
            inside = False
        elif not inside:
            out.append(line)
    if inside:
        raise ValueError(f"exercise {exercise!r}: {BEGIN} without {END}")
    return "\n".join(out)


def student_copy(nb):
    """A copy of the instructor lab ``nb`` with every solution region stubbed out."""
    student = copy.deepcopy(nb)
    for cell in student.cells:
        mark = role(cell)
        if mark and mark[1] == "solution":
            if BEGIN not in cell.source:
                raise ValueError(f"solution cell of exercise {mark[0]!r} has no {BEGIN}")
            cell.source = stub_solutions(cell.source, mark[0])
            cell.outputs, cell.execution_count = [], None
    return student


def write_student_copies(labs: list[Path], folder: Path) -> list[Path]:
    """Write the student copy of each lab into ``folder``; return the paths written."""
    nbformat = _nbformat()
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for lab in labs:
        nb = nbformat.read(lab, as_version=4)
        if not exercises(nb):
            raise ValueError(f"{lab} has no exercises (no check cells)")
        target = folder / lab.name
        nbformat.write(student_copy(nb), target)
        written.append(target)
    return written


def graded_notebook(key, submission, exercise: str):
    """The notebook that grades ``exercise`` of ``submission`` against ``key``, and the
    code-cell numbers (as nbval counts them) of its check cells."""
    graded = copy.deepcopy(key)
    wanted = (exercise, "solution")
    places = [i for i, cell in enumerate(graded.cells) if role(cell) == wanted]
    theirs = [cell for cell in submission.cells if role(cell) == wanted]
    if len(theirs) != len(places):
        raise LookupError(f"the submission has {len(theirs)} solution cells for exercise "
                          f"{exercise!r}, the lab has {len(places)} (were cells deleted?)")
    for place, cell in zip(places, theirs):
        graded.cells[place].source = cell.source
    last_check = max(i for i, cell in enumerate(graded.cells)
                     if role(cell) == (exercise, "check"))
    graded.cells = graded.cells[: last_check + 1]
    code = [i for i, cell in enumerate(graded.cells) if cell.cell_type == "code"]
    checks = [code.index(i) for i in code if role(graded.cells[i]) == (exercise, "check")]
    return graded, checks


@dataclass
class Result:
    """One exercise of one submission: ``score`` in [0, 1] and why points were lost."""

    score: float
    message: str = ""
    seconds: float = 0.0


@dataclass
class Submission:
    name: str
    results: dict[str, Result] = field(default_factory=dict)

    @property
    def total(self) -> float:
        return sum(r.score for r in self.results.values()) / max(len(self.results), 1)


def sanitize_file() -> Path:
    """The nbval sanitizer that the test suite and the grader share."""
    return Path(str(resources.files("allreduce") / "nbval_sanitize.cfg"))


def _kill_tagged(token: str) -> None:
    """Kill every process whose environment carries ``token`` (the run's kernel, its
    engines, their mpiexec), wherever they sit in the process tree."""
    needle = f"{TOKEN_VARIABLE}={token}".encode()
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            if needle in (proc / "environ").read_bytes().split(b"\0"):
                os.kill(int(proc.name), signal.SIGKILL)
        except (OSError, ValueError):
            continue


_COLOUR = re.compile(r"(?:\x1b|#x1B)\[[0-9;]*m")  # ANSI colours, raw or as junit escapes them


def _reason(text: str) -> str:
    """The most telling line of an nbval failure report: the last exception line."""
    lines = [_COLOUR.sub("", line).strip() for line in text.splitlines()]
    lines = [line for line in lines if line]
    for pattern in (r"^(\[\d+:\w+\]: )?[\w.]*(Error|Exception|Interrupt|Exit): ",
                    r"Timeout|timed out|[Kk]ernel"):
        found = [line for line in lines if re.search(pattern, line)]
        if found:
            return found[-1][:400]
    return lines[-1][:400] if lines else "failed"


_in_flight: set[str] = set()  # the tokens of the runs going on now, in any thread


def run_exercise(graded, checks: list[int], *, cell_timeout: float, run_timeout: float) -> Result:
    """Run one graded notebook with nbval in a fresh folder; score its check cells."""
    nbformat = _nbformat()
    token = uuid.uuid4().hex
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="allreduce-grade-") as folder:
        work = Path(folder)
        nbformat.write(graded, work / "graded.ipynb")
        shutil.copy(sanitize_file(), work / "sanitize.cfg")
        command = [sys.executable, "-m", "pytest", "graded.ipynb", "--nbval",
                   "--nbval-current-env", "--nbval-sanitize-with", "sanitize.cfg",
                   "--nbval-cell-timeout", str(cell_timeout), "--junitxml", "report.xml",
                   "-p", "no:cacheprovider", "-o", "addopts=", "--rootdir", str(work), "-q"]
        env = dict(os.environ, **{TOKEN_VARIABLE: token}, PYTHONDONTWRITEBYTECODE="1")
        _in_flight.add(token)
        try:
            subprocess.run(command, cwd=work, env=env, timeout=run_timeout,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                           start_new_session=True)
        except subprocess.TimeoutExpired:
            return Result(0.0, f"the run took longer than {run_timeout:.0f} s",
                          time.monotonic() - started)
        finally:
            _kill_tagged(token)
            _in_flight.discard(token)
        report = work / "report.xml"
        if not report.exists():
            return Result(0.0, "nbval wrote no report", time.monotonic() - started)
        cases = {case.get("name"): case for case in ElementTree.parse(report).iter("testcase")}
    def failure(number: int) -> str | None:
        case = cases.get(f"Cell {number}")
        if case is None:
            return "never ran"
        details = [*case.iter("failure"), *case.iter("error"), *case.iter("skipped")]
        if not details:
            return None
        return _reason((details[0].text or "") + "\n" + (details[0].get("message") or ""))

    passed, message = 0, ""
    for number in checks:
        reason = failure(number)
        if reason is None:
            passed += 1
        elif not message:
            # a check cell fails because of itself or because an earlier cell stopped the run
            first = next(n for n in range(number + 1) if failure(n) is not None)
            message = failure(first)
            if not message.startswith(f"Cell {first}"):
                message = f"Cell {first}: {message}"
            if "Timeout of" in message:  # nbval's own cell timeout: say what it can mean
                message += " (an endless loop, or a kernel that died)"
    return Result(passed / len(checks), message, time.monotonic() - started)


def grade(lab: Path, submissions: list[Path], *, cell_timeout: float = 60, jobs: int = 1,
          progress=print) -> list[Submission]:
    """Grade each submission against the instructor ``lab`` (see the module docstring),
    running up to ``jobs`` exercises at a time.  Each run has its own folder, engines and
    kill token, so runs side by side are as isolated as runs in turn.  The key is checked
    after every run; if it changed, it is put back and the submissions whose runs were in
    flight are named."""
    nbformat = _nbformat()
    key_bytes = lab.read_bytes()
    key_digest = hashlib.sha256(key_bytes).hexdigest()
    key = nbformat.reads(key_bytes.decode(), as_version=4)
    names = exercises(key)
    students = {}  # read now, once: nobody can delete them later
    for path in submissions:
        try:
            students[path] = nbformat.reads(path.read_bytes().decode(), as_version=4)
        except Exception as error:  # not a notebook at all
            students[path] = Result(0.0, f"not a readable notebook: {type(error).__name__}")
    graded = [Submission(path.stem) for path in submissions]
    lock = threading.Lock()
    running: list[str] = []  # the submissions whose runs are in flight, once per run

    def result_of(path: Path, exercise: str) -> Result:
        student = students[path]
        if isinstance(student, Result):
            return student
        try:
            notebook, checks = graded_notebook(key, student, exercise)
        except LookupError as error:
            return Result(0.0, str(error))
        code_cells = sum(c.cell_type == "code" for c in notebook.cells)
        return run_exercise(notebook, checks, cell_timeout=cell_timeout,
                            run_timeout=cell_timeout * code_cells + 60)

    def run(number: int, path: Path, exercise: str) -> None:
        with lock:
            running.append(path.name)
        try:
            result = result_of(path, exercise)
        finally:
            with lock:
                suspects = sorted(set(running))
                running.remove(path.name)
        with lock:
            graded[number - 1].results[exercise] = result
            progress(f"[{number}/{len(submissions)}] {path.name}: {exercise} "
                     f"{result.score:.0%} ({result.seconds:.0f} s)"
                     + (f": {result.message}" if result.message else ""), flush=True)
            if not lab.exists() or hashlib.sha256(lab.read_bytes()).hexdigest() != key_digest:
                lab.write_bytes(key_bytes)  # put the key back and say so
                progress(f"warning: the key {lab} changed while grading "
                         f"{' or '.join(suspects)}; restored", flush=True)

    pool = ThreadPoolExecutor(max_workers=max(1, jobs))
    try:
        runs = [pool.submit(run, number, path, exercise)
                for number, path in enumerate(submissions, 1) for exercise in names]
        for finished in runs:
            finished.result()
    except BaseException:  # Ctrl-C, say: start nothing more, and end the runs in flight now
        pool.shutdown(wait=False, cancel_futures=True)
        for token in list(_in_flight):
            _kill_tagged(token)
        raise
    finally:
        pool.shutdown(wait=True)
    for submission in graded:  # the lab's order, whatever order the runs finished in
        submission.results = {name: submission.results[name] for name in names}
    return graded


def write_scores(graded: list[Submission], exercise_names: list[str], path: Path) -> None:
    """One row per student: each exercise's score, the total, and the failure messages."""
    with path.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["student", *exercise_names, "total", "messages"])
        for s in graded:
            messages = "; ".join(f"{e}: {s.results[e].message}" for e in exercise_names
                                 if s.results[e].message)
            writer.writerow([s.name, *(f"{s.results[e].score:.2f}" for e in exercise_names),
                             f"{s.total:.2f}", messages])


def summary(graded: list[Submission], exercise_names: list[str]) -> str:
    """The score table as text."""
    width = max([len("student"), *(len(s.name) for s in graded)])
    head = f"{'student':<{width}}  " + "  ".join(f"{e:>14}" for e in exercise_names) + "   total"
    rows = [head, "-" * len(head)]
    for s in graded:
        rows.append(f"{s.name:<{width}}  " + "  ".join(f"{s.results[e].score:>14.0%}"
                                                       for e in exercise_names)
                    + f"  {s.total:>6.0%}")
    return "\n".join(rows)


def grade_main(argv: list[str] | None = None) -> int:
    """``allreduce-grade LAB SUBMISSIONS [--out scores.csv] [--cell-timeout S] [--jobs N]``."""
    parser = argparse.ArgumentParser(
        prog="allreduce-grade",
        description="Grade student notebooks against the instructor lab with nbval.")
    parser.add_argument("lab", type=Path, help="the instructor lab (the key), e.g. labs/50_ring_allreduce.ipynb")
    parser.add_argument("submissions", type=Path, help="a folder of student notebooks (*.ipynb)")
    parser.add_argument("--out", type=Path, default=Path("scores.csv"), help="CSV to write")
    parser.add_argument("--cell-timeout", type=float, default=60,
                        help="seconds one cell may run (default 60)")
    parser.add_argument("--jobs", "-j", type=int, default=1,
                        help="exercises graded at a time (default 1); each run starts its own "
                             "engines, so allow their cores")
    args = parser.parse_args(argv)
    if not args.lab.is_file():
        parser.error(f"no such lab: {args.lab}")
    if not args.submissions.is_dir():
        parser.error(f"no such folder: {args.submissions}")
    submissions = sorted(p for p in args.submissions.glob("*.ipynb") if p.resolve() != args.lab.resolve())
    if not submissions:
        parser.error(f"no notebooks (*.ipynb) in {args.submissions}")
    graded = grade(args.lab, submissions, cell_timeout=args.cell_timeout, jobs=args.jobs)
    names = exercises(_nbformat().read(args.lab, as_version=4))
    write_scores(graded, names, args.out)
    print(summary(graded, names))
    print(f"scores written to {args.out}")
    return 0


def student_main(argv: list[str] | None = None) -> int:
    """``allreduce-student LAB... --out FOLDER``: write student copies."""
    parser = argparse.ArgumentParser(
        prog="allreduce-student",
        description="Write student copies of labs: solution regions become stubs.")
    parser.add_argument("labs", type=Path, nargs="+", help="instructor lab notebooks")
    parser.add_argument("--out", type=Path, default=Path("student"), help="folder to write")
    args = parser.parse_args(argv)
    for path in write_student_copies(args.labs, args.out):
        print(f"wrote {path}")
    return 0
