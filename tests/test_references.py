"""references.bib: the sparse chapter's main source is cited as what its public record
says it is, a master's thesis of the University of California, Irvine, with no author named
(the record names none, so none is invented), and the book's bibliography style lists such
an entry instead of failing the build."""

from __future__ import annotations

from pathlib import Path

import pybtex.plugin
import pytest
from pybtex.database import parse_file
from pybtex.style.template import FieldIsMissing

from allreduce.bibstyle import Style

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def bib():
    return parse_file(str(ROOT / "references.bib"))


def test_the_sparse_thesis_is_a_masters_thesis_with_no_invented_author(bib):
    entry = bib.entries["uci2026sparse"]
    assert entry.type == "mastersthesis"
    assert "author" not in entry.persons and "editor" not in entry.persons
    assert entry.fields["school"] == "University of California, Irvine"
    assert entry.fields["year"] == "2026"
    assert entry.fields["isbn"] == "9798270248345"
    note = entry.fields["note"]
    for fact in ("ProQuest document 3286136717", "Levorato", "Venkatasubramanian",
                 "names no author"):
        assert fact in note


def test_the_book_style_lists_every_entry(bib):
    with pytest.raises(FieldIsMissing):  # the stock style cannot list an authorless thesis
        list(pybtex.plugin.find_plugin("pybtex.style.formatting", "alpha")()
             .format_entries([bib.entries["uci2026sparse"]]))
    listed = {e.key: e.text.render_as("text") for e in Style().format_entries(bib.entries.values())}
    assert set(listed) == set(bib.entries)
    assert listed["uci2026sparse"].startswith("Optimizing ring AllReduce for sparse data. "
                                              "Master's thesis, University of California, "
                                              "Irvine, 2026.")


def test_the_book_uses_that_style(root):
    config = (root / "_config.yml").read_text()
    assert "bibtex_default_style: allreduce" in config
