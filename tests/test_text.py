"""What the text of the book must be, whatever renders it: no control characters (a ``\\a``
in ``"\\alpha"`` written through a non-raw string becomes a BEL byte, and Sphinx ``-W`` does
not notice), and no cost formula typed by hand where the library's should be printed."""

from __future__ import annotations

import re
import subprocess

import pytest

from allreduce import cost

CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


def tracked(root, *patterns):
    listed = subprocess.run(["git", "ls-files", *patterns], cwd=root, capture_output=True,
                            text=True, check=True).stdout.split()
    return [root / name for name in listed]


def test_no_control_characters_in_any_page_notebook_or_source(root):
    files = tracked(root, "*.md", "*.ipynb", "*.py", "*.yml", "*.toml", "*.bib", "*.cfg")
    assert len(files) > 30
    found = []
    for path in files:
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if CONTROL.search(line):
                found.append(f"{path.relative_to(root)}:{number}: {line!r}"[:160])
    assert not found, "control characters:\n" + "\n".join(found)


def test_the_check_finds_a_bel_byte(tmp_path):
    """The pattern above catches what it must (a test that cannot fail proves nothing)."""
    assert CONTROL.search("cost $8{,}190\\,\x07lpha$") and not CONTROL.search("\\alpha\t\n")


@pytest.mark.parametrize("chapter", ["20_parameter_server", "30_naive_allreduce",
                                     "40_tree_allreduce", "50_ring_allreduce", "65_beyond_ring"])
def test_chapters_print_the_library_formulas_not_typed_ones(root, chapter):
    """A displayed cost T_name = … comes from viz.formula (the algorithm's cost.Formula,
    which the tests check against the replayed trace), never from a hand-typed $$…$$."""
    text = (root / "chapters" / f"{chapter}.md").read_text()
    typed = re.findall(r"\$\$\s*T_\\text\{[^}]*\}\s*=", text)
    assert not typed, f"{chapter} types a cost formula by hand: {typed}"
    shown = re.findall(r'viz\.formula\("(\w+)"', text)
    assert shown and all(name in cost.FORMULAS for name in shown), shown
