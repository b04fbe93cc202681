"""The book's bibliography style: pybtex's ``alpha`` (sphinxcontrib-bibtex's default), except
that a master's thesis whose public record names no author is listed by its title, school
and year instead of failing the build.  The sparse chapter's main source is such a thesis:
its ProQuest record gives the title, the school, the committee and the year, and no author,
so ``references.bib`` names none rather than inventing one.  Registered by
:mod:`allreduce.book` and chosen in ``_config.yml`` (``bibtex_default_style: allreduce``)."""

from __future__ import annotations

import pybtex.plugin
from pybtex.style.formatting import toplevel
from pybtex.style.formatting.alpha import Style as Alpha
from pybtex.style.formatting.unsrt import date
from pybtex.style.template import field, optional_field, sentence


class Style(Alpha):
    def get_mastersthesis_template(self, e):
        if "author" in e.persons:
            return super().get_mastersthesis_template(e)
        return toplevel[
            self.format_title(e, "title"),
            sentence["Master's thesis", field("school"), optional_field("address"), date],
            sentence[optional_field("note")],
            self.format_web_refs(e),
        ]


def register() -> None:
    pybtex.plugin.register_plugin("pybtex.style.formatting", "allreduce", Style, force=True)
