"""Near-copies across submissions, for a person to look at: each exercise's solution cells,
normalised (comments, layout and the names a student chose do not count), compared pairwise.
It flags; it never changes a score.  Short exercises have few ways to be right, so two
correct one-line answers look alike: the report gives each pair's length to weigh that.

Two solutions of up to :data:`EXACT` tokens each are compared exactly (``difflib``, whose
time grows with the product of the lengths: two identical cells of 24,000 tokens took 35 s);
longer ones by winnowing (Schleimer, Wilkerson & Aiken 2003, "Winnowing: local algorithms
for document fingerprinting", the method of MOSS): the share of fingerprints, hashes of
token k-grams chosen as the least of each window, they have in common, in time linear in
their length."""

from __future__ import annotations

import builtins
import csv
import difflib
import io
import keyword
import tokenize
import zlib
from itertools import combinations
from pathlib import Path

from .batch import Submission
from .notebooks import role, stub_solutions
from .report import _safe

EXACT = 2000  # tokens: longer solutions are compared by their fingerprints
K, WINDOW = 5, 4  # winnowing: token k-grams, and the window each fingerprint is the least of

_SKIP = {tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT,
         tokenize.ENCODING, tokenize.ENDMARKER}
_KEEP = set(keyword.kwlist) | set(dir(builtins))


#: Lines longer than this are not tokenized as Python: Python's tokenizer takes time that
#: grows with the square of a line's length on some (64,000 characters of ``"a\\`` took
#: 69 s, outside every sandbox); such a line is compared by its words.
LONGEST_LINE = 1000


def normalise(source: str, names: dict[str, str] | None = None) -> list[str]:
    """``source`` as tokens, without comments and layout, each name the student chose
    replaced by its order of first appearance in ``names`` (shared by an exercise's cells;
    attributes such as ``comm.sendrecv`` kept).  Where the source stops being Python, the
    tokens read so far are kept and the rest is compared by its words (a cell holding only
    ``(`` once made a renamed copy's whole solution compare by its words, unflagged)."""
    names = {} if names is None else names
    tokens, previous = [], ""
    lines = source.split("\n")
    long = [line for line in lines if len(line) > LONGEST_LINE]
    if long:  # blanked where they are, and their words added at the end
        lines = ["" if len(line) > LONGEST_LINE else line for line in lines]
        source = "\n".join(lines)
    try:
        for token in tokenize.generate_tokens(io.StringIO(source).readline):
            if token.type in _SKIP:
                continue
            text = token.string
            if token.type == tokenize.NAME and text not in _KEEP and previous != ".":
                text = names.setdefault(text, f"v{len(names)}")
            tokens.append(text)
            previous = token.string
    except (tokenize.TokenError, IndentationError, SyntaxError) as error:
        line = error.args[1][0] if isinstance(error, tokenize.TokenError) else error.lineno
        tokens += "\n".join(lines[line - 1:] if line else []).split()  # from the bad line on
    return tokens + [word for line in long for word in line.split()]


def normalise_cells(sources: list[str]) -> list[str]:
    """An exercise's solution cells as one list of tokens, each cell read on its own (what
    is not Python in one does not spoil the others), with the names numbered across them."""
    names: dict[str, str] = {}
    return [token for source in sources for token in normalise(source, names)]


#: The characters of an exercise's solution compared: a lab's solution is a few kB, and a
#: submission padded with megabytes would otherwise cost the report a second per MB.
COMPARED_CHARACTERS = 200_000


def _solution(nb, exercise: str) -> list[str]:
    """The exercise's solution cells, cut to :data:`COMPARED_CHARACTERS` in all."""
    cells, left = [], COMPARED_CHARACTERS
    for cell in nb.cells:
        if role(cell) == (exercise, "solution") and left > 0:
            cells.append(cell.source[:left])
            left -= len(cells[-1])
    return cells


def pairs(graded: list[Submission], key, names: list[str], *, threshold: float = 0.9):
    """``(exercise, a, b, similarity, tokens)`` for every pair of submissions whose solution
    of an exercise are at least ``threshold`` alike, most alike first.  Untouched stubs and
    unreadable notebooks are left out."""
    found = []
    for exercise in names:
        stub = normalise_cells([stub_solutions(cell, exercise)
                                for cell in _solution(key, exercise)])
        mine = {s.name: normalise_cells(_solution(s.notebook, exercise)) for s in graded
                if s.notebook is not None}
        mine = {name: tokens for name, tokens in mine.items() if tokens and tokens != stub}
        prints: dict[str, set[int]] = {}
        for (a, ta), (b, tb) in combinations(sorted(mine.items()), 2):
            if max(len(ta), len(tb)) > EXACT:
                pa = prints.setdefault(a, fingerprints(ta))
                pb = prints.setdefault(b, fingerprints(tb))
                ratio = 2 * len(pa & pb) / (len(pa) + len(pb))
            else:
                matcher = difflib.SequenceMatcher(None, ta, tb, autojunk=False)
                if matcher.real_quick_ratio() < threshold or matcher.quick_ratio() < threshold:
                    continue
                ratio = matcher.ratio()
            if ratio >= threshold:
                found.append((exercise, a, b, ratio, min(len(ta), len(tb))))
    return sorted(found, key=lambda p: (-p[3], p[0], p[1], p[2]))


def fingerprints(tokens: list[str]) -> set[int]:
    """The winnowed fingerprints of ``tokens``: the least hash of every window of
    :data:`WINDOW` consecutive k-gram hashes (all of a solution shorter than one k-gram).
    The hash is CRC-32 of the k-gram's text, not Python's ``hash``, which is salted per
    process: two gradings of the same folder list the same pairs."""
    hashes = [zlib.crc32("\x00".join(tokens[i:i + K]).encode("utf-8", "backslashreplace"))
              for i in range(max(1, len(tokens) - K + 1))]
    return {min(hashes[i:i + WINDOW]) for i in range(max(1, len(hashes) - WINDOW + 1))}


def write(found, path: Path) -> None:
    with path.open("w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(["exercise", "submission_a", "submission_b", "similarity", "tokens"])
        for exercise, a, b, ratio, tokens in found:
            writer.writerow([_safe(exercise), _safe(a), _safe(b), f"{ratio:.2f}", tokens])
