"""The review questions of the book, gathered from its pages (the study guide's review pages).

A review question is a ``{exercise}`` block with a ``:label:`` in any page of the table of
contents (``_toc.yml``); a key-facts box is a ``(name-key-facts)=`` label in front of an
admonition of class ``key-facts``.  Both are found by reading the pages' sources, so a
chapter added to a part of ``_toc.yml`` appears in that part's review page with nothing else
to do.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

import yaml

__all__ = ["Exercise", "Page", "chapters", "exercises", "key_facts_labels", "part_pages", "parts",
           "source_text", "title"]

# ```{exercise} Title      (three or more backticks or colons, the same to close)
# :label: ring-q-steps
# body
# ```
_EXERCISE = re.compile(
    r"^(?P<fence>`{3,}|:{3,})\{exercise\}[ \t]*(?P<title>[^\n]*)\n"
    r"(?P<options>(?:[ \t]*:[\w-]+:[^\n]*\n)*)"
    r"(?P<body>.*?)^(?P=fence)[ \t]*$", re.MULTILINE | re.DOTALL)
_LABEL = re.compile(r"^[ \t]*:label:[ \t]*(\S+)", re.MULTILINE)
_KEY_FACTS = re.compile(r"^\(([\w-]+-key-facts)\)=[ \t]*$", re.MULTILINE)
_HEADING = re.compile(r"^#[ \t]+(.+?)[ \t]*$", re.MULTILINE)


@dataclass(frozen=True)
class Exercise:
    """One labelled ``{exercise}``: its label, its title (may be empty) and its body
    (MyST Markdown)."""

    label: str
    title: str
    body: str


@dataclass(frozen=True)
class Page:
    """A page of the table of contents: its docname and its source file."""

    docname: str
    path: Path


def source_text(path: Path) -> str:
    """A page's MyST text: a Markdown file as it is, a notebook's Markdown cells joined."""
    text = path.read_text(encoding="utf-8")
    if path.suffix != ".ipynb":
        return text
    cells = json.loads(text).get("cells", [])
    return "\n\n".join("".join(c["source"]) if isinstance(c["source"], list) else c["source"]
                       for c in cells if c.get("cell_type") == "markdown")


def exercises(text: str) -> list[Exercise]:
    """The labelled exercises of a page's text, in order."""
    found = []
    for match in _EXERCISE.finditer(text):
        label = _LABEL.search(match.group("options"))
        if label:
            found.append(Exercise(label.group(1), match.group("title").strip(),
                                  match.group("body").strip()))
    return found


def key_facts_labels(text: str) -> list[str]:
    """The ``*-key-facts`` labels of a page's text."""
    return _KEY_FACTS.findall(text)


def title(text: str) -> str:
    """A page's title: its first level-one heading."""
    found = _HEADING.search(text)
    return found.group(1) if found else ""


def _source(root: Path, docname: str) -> Path:
    for suffix in (".md", ".ipynb", ".rst"):
        if (root / f"{docname}{suffix}").exists():
            return root / f"{docname}{suffix}"
    return root / docname  # a file named with its suffix in the toc


def parts(root: Path) -> dict[str, list[Page]]:
    """Every part of the book's ``_toc.yml`` (by caption) and its pages, chapters and their
    sections in reading order."""
    toc = yaml.safe_load((Path(root) / "_toc.yml").read_text(encoding="utf-8"))
    found: dict[str, list[Page]] = {}

    def walk(entries, into):
        for entry in entries or []:
            if "file" in entry:
                docname = re.sub(r"\.(md|ipynb|rst)$", "", entry["file"])
                into.append(Page(docname, _source(Path(root), docname)))
            walk(entry.get("sections"), into)
            walk(entry.get("chapters"), into)

    for part in toc.get("parts", []):
        walk(part.get("chapters"), found.setdefault(part.get("caption", ""), []))
    return found


def chapters(root: Path) -> dict[str, list[tuple[Page, list[Page]]]]:
    """Every part of ``_toc.yml`` (by caption) and its chapters, each with the pages under
    it (a chapter's lab), in reading order."""
    toc = yaml.safe_load((Path(root) / "_toc.yml").read_text(encoding="utf-8"))

    def page(entry) -> Page:
        docname = re.sub(r"\.(md|ipynb|rst)$", "", entry["file"])
        return Page(docname, _source(Path(root), docname))

    def below(entry) -> list[Page]:
        found = []
        for sub in [*(entry.get("sections") or []), *(entry.get("chapters") or [])]:
            if "file" in sub:
                found.append(page(sub))
            found += below(sub)
        return found

    return {part.get("caption", ""): [(page(entry), below(entry))
                                      for entry in part.get("chapters") or [] if "file" in entry]
            for part in toc.get("parts", [])}


def part_pages(root: Path, caption: str) -> list[Page]:
    """The pages of the part called ``caption``; a ValueError names the parts if none is."""
    found = parts(root)
    if caption not in found:
        raise ValueError(f"_toc.yml has no part {caption!r}; its parts: {list(found)}")
    return found[caption]
