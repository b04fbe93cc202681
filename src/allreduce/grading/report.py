"""What grading writes: the scores CSV (one row per student), a feedback file per student
(Markdown: each exercise's points, the check's message and the cell it was about),
Gradescope's ``results.json`` per student, and, with ``--format canvas``, a gradebook
column in Canvas's import layout.  Written by the grader, outside every sandbox."""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

from .batch import Submission
from .names import CANVAS_ROW
from .notebooks import role


def _number(value: float) -> str:
    return f"{value:g}"


def _safe(text: str) -> str:
    """A cell a spreadsheet will not run as a formula (OWASP's "CSV injection": a cell that
    starts with =, +, -, @, a tab or a carriage return, after any spaces, gets a quote)."""
    text = str(text)
    return "'" + text if text.lstrip(" ")[:1] in ("=", "+", "-", "@", "\t", "\r") else text


def _markdown(text: str) -> str:
    """Untrusted text (a check's message quotes what a rank sent; a file's name) shown as
    itself in Markdown, on one line: every character that starts inline markup (emphasis,
    code, links and images, HTML, entities, strikethrough, table cells) is escaped."""
    return re.sub(r"([\\`*_\[\]<>!|~&])", r"\\\1", " ".join(str(text).splitlines()))


def _fenced(source: str, language: str = "python") -> list[str]:
    """``source`` in a code fence longer than any run of backticks in it (which would
    otherwise close the fence and turn the rest into Markdown), its line ends as newlines
    and its other control characters (terminal escapes, which ``cat`` would obey) and
    bidirectional overrides as spaces: a submission's cell is untrusted text."""
    source = re.sub(r"\r\n?", "\n", source)
    source = re.sub(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u200e\u200f\u2028-\u202e\u2066-\u2069]",
                    " ", source)
    longest = max((len(run) for run in re.findall(r"`+", source)), default=0)
    fence = "`" * max(3, longest + 1)
    return [fence + language, source.rstrip(), fence]


def header(names: list[str], canvas_column: str | None = None) -> list[str]:
    """The first row of the scores file: :func:`write_scores`'s for the exercises
    ``names``, or :func:`write_canvas`'s for its assignment column."""
    if canvas_column is not None:
        return ["Student", "ID", "SIS User ID", "SIS Login ID", "Section", canvas_column]
    return ["student", *names, "total", "possible", "percent", "messages"]


def write_scores(graded: list[Submission], names: list[str], path: Path) -> None:
    """One row per student: the points of each exercise, the total, the most there is, the
    percentage, and the messages of the exercises that lost points."""
    with path.open("w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(header(names))
        for s in graded:
            messages = "; ".join(f"{e}: {s.results[e].message}" for e in names
                                 if s.results[e].score < 1 and s.results[e].message)
            writer.writerow([_safe(s.name), *(_number(s.results[e].score * s.points[e]) for e in names),
                             _number(s.earned), _number(s.possible), f"{100 * s.total:.0f}",
                             _safe(messages)])


def save_elsewhere(graded: list[Submission], names: list[str]) -> Path:
    """The scores CSV in a new folder of the system's temporary directory (or the current
    one), for when the place asked for could not be written after grading."""
    import tempfile

    for where in (None, "."):
        try:
            path = Path(tempfile.mkdtemp(prefix="allreduce-grades-", dir=where)) / "scores.csv"
            write_scores(graded, names, path)
            return path
        except OSError:
            continue
    raise OSError("no folder could take the scores")


def write_canvas(graded: list[Submission], column: str, path: Path) -> None:
    """Canvas's gradebook import: ``Student,ID,SIS User ID,SIS Login ID,Section`` and one
    assignment column, with the points possible in the second row.  The submission's file
    name stands as the SIS login (name the files by login)."""
    with path.open("w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(header([], column))
        possible = graded[0].possible if graded else 0
        writer.writerow([CANVAS_ROW, "", "", "", "", _number(possible)])
        for s in graded:
            writer.writerow([_safe(s.name), "", "", _safe(s.name), "", _number(s.earned)])


def summary(graded: list[Submission], names: list[str]) -> str:
    """The score table as text."""
    width = max([len("student"), *(len(s.name) for s in graded)])
    cols = [max(len(e), 7) for e in names]
    head = f"{'student':<{width}}  " + "  ".join(f"{e:>{c}}" for e, c in zip(names, cols)) \
        + "    total"
    rows = [head, "-" * len(head)]
    for s in graded:
        cells = "  ".join(f"{_number(s.results[e].score * s.points[e]) + '/' + _number(s.points[e]):>{c}}"
                          for e, c in zip(names, cols))
        rows.append(f"{s.name:<{width}}  {cells}  {100 * s.total:>6.0f}%")
    return "\n".join(rows)


def _cell(submission: Submission, exercise: str, number: int | None = None
          ) -> tuple[int | None, str]:
    """The position in the notebook (counting from 1, as every message numbers cells) and
    the source of cell ``number``, or of the submission's first solution cell of
    ``exercise``."""
    nb = submission.notebook
    if nb is None:
        return None, ""
    for index, cell in enumerate(nb.cells, 1):
        if index == number if number else role(cell) == (exercise, "solution"):
            return index, cell.source
    return None, ""


def feedback(submission: Submission, lab: str, *, plain: bool = False) -> str:
    """The feedback file of one submission, in Markdown; ``plain``: for a terminal (what
    ``--self`` prints), the messages as they are, without Markdown's escapes."""
    show = (lambda text: " ".join(str(text).splitlines())) if plain else _markdown
    lines = [f"# Feedback: {show(submission.name)} on {show(lab)}", "",
             (f"**{_number(submission.earned)} of {_number(submission.possible)} points "
              f"({100 * submission.total:.0f}%).**"), "",
             "| exercise | points | |", "|---|---|---|"]
    for exercise, result in submission.results.items():
        mark = "passed" if result.score == 1 else "not yet"
        lines.append(f"| `{exercise}` | {_number(result.score * submission.points[exercise])} / "
                     f"{_number(submission.points[exercise])} | {mark} |")
    for exercise, result in submission.results.items():
        lines += ["", (f"## `{exercise}`: {_number(result.score * submission.points[exercise])} "
                       f"of {_number(submission.points[exercise])} points"), ""]
        lines.append(("The check: " if result.score == 1 else "What the check found: ")
                     + (show(result.message) if result.message else "(no message)"))
        if result.warning:
            lines += ["", f"Note: {show(result.warning)}"]
        if result.score < 1:
            where = re.search(r"cell (\d+)(?: of your notebook)?, line (\d+)",
                              result.message + result.warning)
            number, source = _cell(submission, exercise, int(where.group(1)) if where else None)
            if number is not None:
                lines += ["", (f"Your cell {number}"
                               + (f" (the error is on line {where.group(2)})" if where else "")
                               + ":"), "", *_fenced(source)]
    return "\n".join(lines) + "\n"


def gradescope(submission: Submission) -> dict:
    """Gradescope's autograder ``results.json`` for one submission."""
    return {
        "score": submission.earned,
        "output": f"{_number(submission.earned)} of {_number(submission.possible)} points",
        "tests": [{"name": exercise, "score": result.score * submission.points[exercise],
                   "max_score": submission.points[exercise], "output": result.message,
                   "visibility": "visible"}
                  for exercise, result in submission.results.items()],
    }


#: The list of the files :func:`write_feedback` wrote in its folder, kept there.
WRITTEN = ".written"


def write_feedback(graded: list[Submission], lab: str, folder: Path) -> None:
    """``folder/NAME.md`` and ``folder/NAME.results.json`` for each submission.  A report
    that an earlier grading into the same folder wrote, and this one does not (a student
    since renamed or withdrawn, or a grading of one late notebook), is moved into
    ``folder/earlier-DATE/``, so that no stale score is read as current and none is lost;
    only the files listed in the folder's :data:`WRITTEN` are ever moved."""
    import time

    folder.mkdir(parents=True, exist_ok=True)
    names = [name for s in graded for name in (f"{s.name}.md", f"{s.name}.results.json")]
    listing = folder / WRITTEN
    try:
        before = set(listing.read_text(encoding="utf-8").splitlines())
    except (OSError, UnicodeDecodeError):
        before = set()
    stale = [name for name in sorted(before - set(names)) if "/" not in name
             and name.endswith((".md", ".results.json")) and (folder / name).is_file()]
    if stale:
        earlier = folder / time.strftime("earlier-%Y%m%d-%H%M%S")
        earlier.mkdir(exist_ok=True)
        for name in stale:
            (folder / name).replace(earlier / name)
    for s in graded:
        (folder / f"{s.name}.md").write_text(feedback(s, lab), encoding="utf-8")
        (folder / f"{s.name}.results.json").write_text(json.dumps(gradescope(s), indent=1) + "\n",
                                                         encoding="utf-8")
    listing.write_text("".join(f"{name}\n" for name in names), encoding="utf-8")
