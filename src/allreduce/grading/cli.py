"""The commands ``allreduce-grade`` and ``allreduce-student``."""

from __future__ import annotations

import argparse
import os
import shutil
import stat
import sys
import time
from pathlib import Path

from ..lab import checks
from . import report, similarity
from .batch import Interrupted, grade, never_stops, read_notebook
from .run import RANKS, Result
from .judge import clean
from .notebooks import exercises, nbformat, specs, write_student_copies
from .sandbox import Limits, probe

NO_SANDBOX = """\
allreduce-grade: the sandbox cannot start here ({why}).

Every rank of every exercise runs in a bubblewrap sandbox ({bwrap}), which needs user
namespaces when the grader does not run as root.  To allow them:
  * Ubuntu 23.10 and later: sudo sysctl -w kernel.apparmor_restrict_unprivileged_userns=0,
    or give one bwrap an AppArmor profile that grants `userns` (the grader prefers
    /usr/bin/bwrap, or the one ALLREDUCE_BWRAP names; Ubuntu 24.04's bubblewrap package
    ships no such profile);
  * Debian 10 and older: sudo sysctl -w kernel.unprivileged_userns_clone=1;
  * elsewhere: sudo sysctl -w user.max_user_namespaces=15000;
or run the grader as root (then no user namespace is needed).  To grade without the
sandbox, pass --no-sandbox: the submissions' code then runs with your permissions, can
read the key and change your files, and its processes are not limited.
"""


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="allreduce-grade",
        description="Grade student notebooks against the instructor lab: each exercise runs in "
                    "a sandbox, and is judged outside it on its values and its messages.")
    parser.add_argument("lab", type=Path, nargs="?",
                        help="the instructor lab (the key), e.g. labs/50_ring_allreduce.ipynb")
    parser.add_argument("submissions", type=Path, nargs="?",
                        help="a folder of student notebooks (*.ipynb)")
    parser.add_argument("--self", dest="own", type=Path, metavar="NOTEBOOK",
                        help="check your own notebook before handing it in (no key needed)")
    parser.add_argument("--out", type=Path, default=Path("grades") / "scores.csv",
                        help="the scores CSV, its folder made if missing; the feedback files "
                             "go into OUT's name + '-feedback/' beside it (default "
                             "grades/scores.csv)")
    parser.add_argument("--format", choices=("csv", "canvas"), default="csv",
                        help="csv: one row per student, a column per exercise (default); "
                             "canvas: Canvas's gradebook import layout, one column of points")
    parser.add_argument("--gradescope", type=Path, metavar="FILE",
                        help="also write Gradescope's results.json here (one submission; not with "
                             "--self, whose points its notebook sets)")
    parser.add_argument("--timeout", "--cell-timeout", type=_case_seconds, default=60,
                        help="seconds one check case may run (default 60)")
    parser.add_argument("--jobs", "-j", type=_at_least_one, default=1,
                        help="exercises graded at a time (default 1); each runs up to 8 processes (4, then the exercise's other rank counts)")
    parser.add_argument("--no-sandbox", action="store_true",
                        help="run submissions without the sandbox (see studyguide/instructor.md: they can "
                             "then read and change your files)")
    parser.add_argument("--similar", type=float, default=0.9, metavar="RATIO",
                        help="flag pairs of solutions at least this alike (default 0.9)")
    return parser


def _case_seconds(text: str) -> float:
    """--timeout: a finite number of seconds above 0 (0 or less failed every case, and
    inf or nan crashed the grading after it had run)."""
    import math

    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not (math.isfinite(value) and 0 < value <= 24 * 3600):
        raise argparse.ArgumentTypeError(f"give seconds above 0 and at most a day, not {text}")
    return value


def _at_least_one(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"at least 1, not {value}")
    return value


def grade_main(argv: list[str] | None = None) -> int:
    """``allreduce-grade``.  SIGTERM and SIGHUP (a killed job, a closed terminal) end a
    grading as Ctrl-C does: no new run starts, and the sandboxes in flight end and leave no
    cgroup behind."""
    import signal
    import threading

    def interrupt(number, frame):
        raise KeyboardInterrupt(f"signal {number}")

    for stream in (sys.stdout, sys.stderr):  # a message quotes what a student wrote: under a
        if hasattr(stream, "reconfigure"):  # locale that is not UTF-8 it must still print
            stream.reconfigure(errors="backslashreplace")
    if threading.current_thread() is not threading.main_thread():
        return _grade_main(argv)
    before = {number: signal.signal(number, interrupt)
              for number in (signal.SIGTERM, signal.SIGHUP)}
    try:
        return _grade_main(argv)
    finally:
        for number, handler in before.items():
            signal.signal(number, handler)


def _grade_main(argv: list[str] | None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    say = never_stops(print)  # `allreduce-grade … | head`: the grading and its reports go on
    if not args.no_sandbox and (why := probe()) is not None:
        from .sandbox import bwrap

        print(NO_SANDBOX.format(why=why, bwrap=bwrap() or "bwrap"), file=sys.stderr, end="")
        return 2
    unlimited = None if args.no_sandbox else _no_cgroup()
    if unlimited:
        print(unlimited, file=sys.stderr)
        if os.environ.get("ALLREDUCE_REQUIRE_SANDBOX") == "1":
            print("allreduce-grade: ALLREDUCE_REQUIRE_SANDBOX=1: stopping", file=sys.stderr)
            return 2
    if args.own:
        return _self(args, parser)
    if args.lab is None or args.submissions is None:
        parser.error("give LAB and SUBMISSIONS, or --self NOTEBOOK")
    if not args.lab.is_file():
        parser.error(f"no such lab: {args.lab}")
    if not args.submissions.is_dir():
        parser.error(f"no such folder: {args.submissions} (make it, and put the students' "
                     "notebooks, *.ipynb, in it)")
    submissions, skipped = entries(args.submissions, args.lab)
    for line in skipped:
        say(line)
    if not submissions:
        parser.error(f"no notebooks (*.ipynb) in {args.submissions}")
    if args.gradescope and len(submissions) != 1:
        parser.error("--gradescope writes one results.json: give a folder with one notebook")
    if (problem := writable(args.out)) is not None:
        parser.error(f"cannot write the scores to {args.out}: {problem}")
    try:
        graded = grade(args.lab, submissions, timeout=args.timeout, jobs=args.jobs,
                       sandboxed=not args.no_sandbox, limits=_limits(args.timeout))
    except Interrupted as stopped:  # keep the students graded in full, apart from OUT
        _keep_partial(stopped.graded, _partial(args.out), len(submissions))
        return 130  # as a shell reports a job that Ctrl-C stopped
    key = nbformat().read(args.lab, as_version=4)
    names = [s.exercise for s in specs(key)]
    try:
        written = _reports(args, graded, key, names)
    except (OSError, ValueError) as error:  # the grading is done: keep its scores anyway
        say(report.summary(graded, names))
        saved = report.save_elsewhere(graded, names)
        print(f"allreduce-grade: writing the reports failed ({error}); the scores are saved "
              f"in {saved}", file=sys.stderr)
        return 1
    folder, similar, found, compared = written
    _partial(args.out).unlink(missing_ok=True)  # an interrupted run's, now out of date
    say(report.summary(graded, names))
    say(f"scores written to {args.out}; feedback for each student in {folder}/")
    say(f"similarity: {len(found)} pair(s) of solutions at least {args.similar:.0%} alike, "
        f"listed in {similar} for a person to look at (they change no score; compared in "
        f"{compared:.1f} s)")
    if unlimited:
        say(unlimited)
    return 0


def _keep_earlier(out: Path, students: set[str], first_row: list[str]) -> None:
    """An earlier grading's scores at ``out`` move to ``NAME.earlier-DATE.csv`` beside it
    instead of being overwritten when they name a student this grading does not (a grading
    of one late notebook into the class's file), or when their first row is not this
    grading's (``first_row``: another lab's exercises); in that case its feedback folder,
    similarity list and an interrupted run's partial scores move too
    (``NAME-feedback.earlier-DATE``), since this grading would overwrite or delete them.
    Said on stderr."""
    import csv

    try:
        with out.open(newline="", encoding="utf-8") as f:
            rows = list(csv.reader(f))
    except (OSError, UnicodeDecodeError, csv.Error):
        return
    named = {row[0] for row in rows[1:] if row}
    another = bool(rows) and rows[0] != first_row
    if not another and not named - {report._safe(name) for name in students} - {
            report.CANVAS_ROW}:
        return
    stamp = time.strftime("%Y%m%d-%H%M%S")
    moved = []
    kept = [out] + ([out.with_name(out.stem + "-feedback"),
                     out.with_name(out.stem + "-similarity.csv"), _partial(out)]
                    if another else [])
    for path in kept:
        if path.exists():
            path.replace(path.with_name(f"{path.stem}.earlier-{stamp}{path.suffix}"))
            moved.append(path.name)
    why = ("another lab's or another format's" if another
           else "naming students this grading does not")
    print(f"allreduce-grade: the earlier scores at {out} ({why}) are kept: "
          f"{', '.join(moved)} moved to *.earlier-{stamp}*", file=sys.stderr)


def _partial(out: Path) -> Path:
    """Where an interrupted grading keeps what it finished: beside ``out``."""
    return out.with_name(out.stem + ".partial.csv")


def _keep_partial(graded: list, partial: Path, total: int) -> None:
    """The scores of the students an interrupted grading finished, in ``partial`` (or a
    folder of its own), said on stderr."""
    if not graded:
        print("allreduce-grade: interrupted before any student was graded in full",
              file=sys.stderr)
        return
    names = list(graded[0].results)
    try:
        try:
            report.write_scores(graded, names, partial)
        except OSError:
            partial = report.save_elsewhere(graded, names)
    except OSError as error:
        print(f"allreduce-grade: interrupted; the scores of the {len(graded)} students graded "
              f"in full could not be saved ({error})", file=sys.stderr)
        return
    print(f"allreduce-grade: interrupted; the {len(graded)} of {total} students graded in "
          f"full are in {partial} (run it again for all of them)", file=sys.stderr)


def writable(out: Path) -> str | None:
    """Why the scores cannot be written to ``out`` (its folder is made when missing), or
    ``None``: checked before grading, so that no finished grading is lost to a bad path."""
    import tempfile

    if out.is_dir():
        return "it is a folder; give a file name, e.g. grades/scores.csv"
    for folder in (out.parent, *out.parent.parents):
        if folder.exists() and not folder.is_dir():
            return f"{folder} is a file, not a folder"
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=out.parent):
            pass
    except OSError as error:
        return error.strerror or str(error)
    return None


def _reports(args, graded, key, names):
    """The scores (CSV or Canvas), the feedback folder and the similarity list."""
    column = f"{args.lab.stem} ({args.lab.stem})" if args.format == "canvas" else None
    _keep_earlier(args.out, {s.name for s in graded}, report.header(names, column))
    if args.format == "canvas":
        report.write_canvas(graded, column, args.out)
    else:
        report.write_scores(graded, names, args.out)
    folder = args.out.with_name(args.out.stem + "-feedback")
    report.write_feedback(graded, args.lab.name, folder)
    if args.gradescope:
        shutil.copy(folder / f"{graded[0].name}.results.json", args.gradescope)
    started = time.monotonic()
    found = similarity.pairs(graded, key, names, threshold=args.similar)
    compared = time.monotonic() - started
    similar = args.out.with_name(args.out.stem + "-similarity.csv")
    similarity.write(found, similar)
    return folder, similar, found, compared


def entries(folder: Path, lab: Path) -> tuple[list[Path], list[str]]:
    """The notebooks of the submissions folder to grade, and a line for every other entry
    saying why it is not graded.  Only regular files named ``*.ipynb`` directly in the
    folder are graded: a link, a pipe or a device (which an unpacked archive may hold) is
    named, never followed or read."""
    graded, lines = [], []
    try:
        key = lab.resolve(strict=True)
    except (OSError, RuntimeError):
        key = None
    for path in sorted(folder.iterdir()):
        shown = clean(path.name, 200)
        try:
            mode = path.lstat().st_mode
        except OSError as error:
            lines.append(f"not graded: {shown}: {error.strerror}")
            continue
        if stat.S_ISDIR(mode):
            why = "a folder (only the notebooks directly in the submissions folder are graded)"
        elif not path.name.endswith(".ipynb"):
            why = "not a notebook (only *.ipynb files are graded)"
        elif path.name.startswith("."):
            why = "a hidden file (only visible *.ipynb files are graded)"
        elif stat.S_ISLNK(mode):
            why = "a link (copy the notebook itself into the folder)"
        elif not stat.S_ISREG(mode):
            why = "not a regular file (a pipe or a device)"
        elif key is not None and path.resolve() == key:
            why = "it is the lab itself (the key)"
        else:
            graded.append(path)
            continue
        lines.append(f"not graded: {shown}: {why}")
    return graded, lines


def _no_cgroup() -> str | None:
    """What the sandboxes lack where they get no cgroup (``None`` where they get one)."""
    from .sandbox import cgroups_here

    why = cgroups_here()
    if why is None:
        return None
    return (f"allreduce-grade: warning: no cgroup for the sandboxes ({why}), so their memory "
            "is limited per process (RLIMIT_DATA), not in all: memory shared between "
            "processes (MAP_SHARED mappings) is not limited; run the grader as root for "
            "cgroup limits (see the instructor's guide)")


def _limits(timeout: float) -> Limits:
    """A rank's CPU seconds: every case of a run may take ``timeout`` of wall time in the
    one process (its start one more; a run has at most as many cases as one on the labs'
    four ranks), so an honest rank busy all along stays under it; each case's own deadline,
    not this, stops a rank that loops."""
    most = len(checks.cases("allreduce", RANKS))  # the float32 case included
    return Limits(cpu=max(Limits().cpu, int((most + 1) * timeout) + 1))


def _self(args, parser) -> int:
    """``--self``: the checks on the student's own notebook, with its own lab cells."""
    if not args.own.is_file():
        parser.error(f"no such notebook: {args.own}")
    if args.gradescope:  # the notebook's own check cells set the points: its author's to edit
        parser.error("--gradescope needs the instructor's lab: allreduce-grade LAB FOLDER "
                     "--gradescope FILE (--self scores with the notebook's own check cells)")
    own = read_notebook(args.own)
    if isinstance(own, Result):
        print(f"allreduce-grade: {args.own}: {own.message}", file=sys.stderr)
        return 2
    if not exercises(own):
        number = args.own.name.split("_", 1)[0]
        print(f"allreduce-grade: {args.own} has no exercises"
              + (f" of lab {number}" if number.isdigit() else " of any lab")
              + ": is it the right file?  --self checks a lab's student copy with your "
              "solutions in it, e.g. student/50_ring_allreduce.ipynb.", file=sys.stderr)
        return 2
    try:  # --self reads the checks from the notebook itself: its check cells must be intact
        specs(own)
    except (ValueError, TypeError) as error:
        print(f"allreduce-grade: {args.own}: a check cell is not as the lab wrote it "
              f"({clean(error, 300)}). --self runs the checks your notebook's check cells "
              "call; undo the edit, or take a fresh copy of the lab (make student FORCE=1 "
              "moves yours to student/.old/ first).", file=sys.stderr)
        return 2
    (graded,) = grade(args.own, [args.own], timeout=args.timeout, jobs=args.jobs,
                      sandboxed=not args.no_sandbox, limits=_limits(args.timeout), key=own,
                      progress=lambda *a, **k: None)
    print(report.feedback(graded, args.own.name, plain=True), end="")
    return 0


def student_main(argv: list[str] | None = None) -> int:
    """``allreduce-student LAB... --out FOLDER [--force]``: write the student copies that are
    missing; with ``--force``, replace the others after moving them aside."""
    parser = argparse.ArgumentParser(
        prog="allreduce-student",
        description="Write student copies of labs: solution regions become stubs, and each "
                    "exercise shows its points.  A copy that is already there is the "
                    "student's work: it is kept, unless --force is given.")
    parser.add_argument("labs", type=Path, nargs="+", help="instructor lab notebooks")
    parser.add_argument("--out", type=Path, default=Path("student"),
                        help="folder to write (default student)")
    parser.add_argument("--force", action="store_true",
                        help="replace the copies already there with fresh ones, after moving "
                             "each to OUT/.old/TIMESTAMP/ (default: keep them)")
    args = parser.parse_args(argv)
    for lab in args.labs:
        if not lab.is_file():
            parser.error(f"no such lab: {lab}")
    done = write_student_copies(args.labs, args.out, force=args.force)
    for item in done:
        if item.action == "wrote":
            print(f"wrote {item.path}")
        elif item.action == "replaced":
            print(f"replaced {item.path} (your copy was moved to {item.moved})")
    kept = [item.path for item in done if item.action == "kept"]
    if kept:
        print(f"kept {len(kept)} cop{'y' if len(kept) == 1 else 'ies'} already in {args.out}/ "
              f"(your work): {', '.join(p.name for p in kept)}")
        print("  to start one afresh, delete it and run this again; to replace them all, "
              f"make student FORCE=1 (or --force), which first moves them to {args.out}/.old/")
    return 0
