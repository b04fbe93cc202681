"""The students' names in a grading's reports (the instructor's guide, "Grading"): each
from its file's name, made printable and told apart from every other, so that no report
overwrites another's and no two rows read alike."""

from __future__ import annotations

import hashlib
import os
import unicodedata
from collections import Counter
from pathlib import Path

from .judge import clean


def student_name(path: Path) -> str:
    """The student's name, from the notebook's file name, as the reports write it and name
    files after it: printable UTF-8 (a name from an archive made elsewhere may not be), and
    at most 100 characters (a longer name ends in a digest of the whole, so that two long
    names stay apart and a report's file name stays under the file system's limit)."""
    name = "".join(c for c in clean(path.stem, 10_000)  # and no invisible ones (U+200B)
                   if unicodedata.category(c) != "Cf")
    if len(name.encode()) > 100:
        digest = hashlib.sha256(os.fsencode(path.stem)).hexdigest()[:12]
        name = name.encode()[:80].decode("utf-8", "ignore") + "-" + digest
    return name


#: Scripts written together in one name (a Japanese name mixes kanji and kana).
_ONE_SCRIPT = {"HIRAGANA": "CJK", "KATAKANA": "CJK", "HANGUL": "CJK"}


def _scripts(name: str) -> set[str]:
    """The scripts of a name's letters (LATIN, CYRILLIC, GREEK, CJK, ...), by Unicode name;
    modifier letters (``ʻ``) belong to none."""
    words = (unicodedata.name(c, "?").split()[0] for c in name if c.isalpha())
    return {_ONE_SCRIPT.get(word, word) for word in words if word != "MODIFIER"}


def _folded(name: str) -> str:
    """What two names share if a file system that ignores case takes them for one file:
    compatibility forms and case folded (``Alice`` and ``alice``)."""
    return unicodedata.normalize("NFKC", name).casefold()


#: The Cyrillic and Greek letters that Unicode's confusables data (UTS #39, as the
#: ``confusable-homoglyphs`` 3.3.1 package ships it) lists as look-alikes of one Latin
#: letter, by that letter: enough that a name wholly in those scripts which reads as a
#: Latin one (all-Cyrillic ``аІісе``) is caught.  Latin ``I`` reads as ``l`` there too.
_LOOK_ALIKES = {
    "a": "αа", "b": "Ь", "c": "ϲс", "d": "ԁ", "e": "еҽ", "h": "һ", "i": "ιͺіꙇӏ",
    "j": "ϳј", "l": "IΙІӀ", "o": "οσо", "p": "ρϱр", "q": "ԛ", "r": "ᴦг", "s": "ѕ", "u": "υ",
    "v": "νѵ", "w": "ѡԝ", "x": "х", "y": "γуү",
    "A": "ΑА", "B": "ΒВ", "C": "ϹС", "E": "ΕЕ", "F": "Ϝ", "G": "Ԍ", "H": "ΗН", "J": "ͿЈ",
    "K": "ΚК", "M": "ΜϺМ", "N": "Ν", "O": "ΟО", "P": "ΡР", "S": "Ѕ", "T": "ΤТ", "V": "Ѵ",
    "W": "Ԝ", "X": "ΧХ", "Y": "ΥϒУҮ", "Z": "Ζ",
}
_AS_LATIN = str.maketrans({alike: latin for latin, alikes in _LOOK_ALIKES.items()
                           for alike in alikes})


def _looks(name: str) -> str:
    """What two names that look alike share: compatibility forms folded and the letters of
    :data:`_LOOK_ALIKES` read as Latin, before the folding (which turns some of them,
    ``ϲ``, into other letters) and after it.  Case is kept (``I`` and ``l`` look alike, ``i``
    and ``l`` do not); :func:`student_names` compares the result with case folded too."""
    return unicodedata.normalize("NFKC", name.translate(_AS_LATIN)).translate(_AS_LATIN)


#: The name of the second row of Canvas's gradebook import, which holds the points
#: possible (:func:`allreduce.grading.report.write_canvas`): no student takes it.
CANVAS_ROW = "Points Possible"


def student_names(paths: list[Path]) -> list[str]:
    """Each submission's :func:`student_name`, told apart: a name that cleaning changed (or
    emptied: ``alice\\x1b.ipynb`` beside ``alice.ipynb``), that mixes scripts (a Cyrillic
    ``а`` in ``аlice`` reads as ``alice``), or that reads as another's once case and
    compatibility forms are folded (:func:`_folded`) or look-alike letters read as Latin
    (:func:`_looks`: all-Cyrillic ``аІісе``), ends in a digest of its file's own name, so that
    no report overwrites another's and no two rows read alike.  A name a digest made that
    is still another's (a file named ``alice-a4ee46ae.ipynb`` beside ``alice.ipynb`` and
    ``Alice.ipynb``) takes further digests until it is no one else's.  Nor is any name
    Canvas's row of points possible (:data:`CANVAS_ROW`), in any case."""
    def digested(path: Path, name: str, again: int = 0) -> str:
        salt = f"{again}:".encode() if again else b""
        digest = hashlib.sha256(salt + os.fsencode(path.name)).hexdigest()[:8]
        return f"{name}-{digest}" if name else f"student-{digest}"

    def alike(name: str) -> tuple[str, str]:  # as a case-blind file system, as a reader
        return _folded(name), _looks(name).casefold()

    told = [name if name == path.stem and name and len(_scripts(name)) <= 1
            else digested(path, name)
            for path, name in ((path, student_name(path)) for path in paths)]
    counts = [Counter(keys) for keys in zip(*map(alike, told))] if told else []
    told = [digested(path, name) if any(count[key] > 1 for count, key in
                                        zip(counts, alike(name))) else name
            for path, name in zip(paths, told)]
    taken = set(alike(CANVAS_ROW))  # every key of every name given so far, and the row's
    final = []
    for path, name in zip(paths, told):
        given, again = name, 0
        while taken.intersection(alike(given)):
            again += 1
            given = digested(path, name, again)
        taken.update(alike(given))
        final.append(given)
    return final
