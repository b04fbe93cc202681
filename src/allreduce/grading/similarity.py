"""Near-copies across submissions, for a person to look at: each exercise's solution cells,
normalised (comments, layout and the names a student chose do not count), compared pairwise.
It flags; it never changes a score.  Short exercises have few ways to be right, so two
correct one-line answers look alike: the report gives each pair's length to weigh that."""

from __future__ import annotations

import builtins
import csv
import difflib
import io
import keyword
import tokenize
from itertools import combinations
from pathlib import Path

from .batch import Submission
from .notebooks import role, stub_solutions

_SKIP = {tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT,
         tokenize.ENCODING, tokenize.ENDMARKER}
_KEEP = set(keyword.kwlist) | set(dir(builtins))


def normalise(source: str) -> list[str]:
    """``source`` as tokens, without comments and layout, each name the student chose
    replaced by its order of first appearance (attributes such as ``comm.sendrecv`` kept)."""
    names: dict[str, str] = {}
    tokens, previous = [], ""
    try:
        for token in tokenize.generate_tokens(io.StringIO(source).readline):
            if token.type in _SKIP:
                continue
            text = token.string
            if token.type == tokenize.NAME and text not in _KEEP and previous != ".":
                text = names.setdefault(text, f"v{len(names)}")
            tokens.append(text)
            previous = token.string
    except (tokenize.TokenError, IndentationError, SyntaxError):
        tokens = source.split()
    return tokens


def _solution(nb, exercise: str) -> str:
    return "\n".join(cell.source for cell in nb.cells if role(cell) == (exercise, "solution"))


def pairs(graded: list[Submission], key, names: list[str], *, threshold: float = 0.9):
    """``(exercise, a, b, similarity, tokens)`` for every pair of submissions whose solution
    of an exercise are at least ``threshold`` alike, most alike first.  Untouched stubs and
    unreadable notebooks are left out."""
    found = []
    for exercise in names:
        stub = normalise(stub_solutions(_solution(key, exercise), exercise))
        mine = {s.name: normalise(_solution(s.notebook, exercise)) for s in graded
                if s.notebook is not None}
        mine = {name: tokens for name, tokens in mine.items() if tokens and tokens != stub}
        for (a, ta), (b, tb) in combinations(sorted(mine.items()), 2):
            matcher = difflib.SequenceMatcher(None, ta, tb, autojunk=False)
            if matcher.real_quick_ratio() < threshold or matcher.quick_ratio() < threshold:
                continue
            ratio = matcher.ratio()
            if ratio >= threshold:
                found.append((exercise, a, b, ratio, min(len(ta), len(tb))))
    return sorted(found, key=lambda p: (-p[3], p[0], p[1], p[2]))


def write(found, path: Path) -> None:
    with path.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["exercise", "submission_a", "submission_b", "similarity", "tokens"])
        for exercise, a, b, ratio, tokens in found:
            writer.writerow([exercise, a, b, f"{ratio:.2f}", tokens])
