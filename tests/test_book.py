"""The book builds strictly (warnings are errors) and its computed pages execute, so CI
catches a chapter that no longer runs; and a built page loads nothing from the network."""

from __future__ import annotations

import re
from html.parser import HTMLParser
from pathlib import Path

# what a page loads (scripts, stylesheets, images, fonts, frames, media), as opposed to links
LOADED = re.compile(
    r"<(?:script|img|iframe|source|embed|audio|video|track|input)\b[^>]*?"
    r"\b(?:src|poster)\s*=\s*[\"']?([^\"'\s>]+)"
    r"|<link\b[^>]*\bhref\s*=\s*[\"']?([^\"'\s>]+)"
    r"|<object\b[^>]*\bdata\s*=\s*[\"']?([^\"'\s>]+)", re.IGNORECASE)
SRCSET = re.compile(r"\bsrcset\s*=\s*[\"']([^\"']+)", re.IGNORECASE)
# in stylesheets, <style> blocks and style= attributes: url(...) and @import "..."
CSS_URL = re.compile(r"url\(\s*[\"']?([^\"')\s]+)|@import\s+[\"']([^\"']+)", re.IGNORECASE)
REMOTE = re.compile(r"^(?:[a-z][a-z0-9+.-]*:)?//", re.IGNORECASE)


def remote_resources(html_root: Path) -> list[str]:
    """Every resource a built page or stylesheet would fetch from another host."""
    found = []
    for path in [*html_root.rglob("*.html"), *html_root.rglob("*.css")]:
        text = path.read_text(errors="replace")
        targets = [next(filter(None, m.groups())) for m in CSS_URL.finditer(text)]
        if path.suffix == ".html":  # pages also carry <style> blocks and style= attributes
            targets += [next(filter(None, m.groups())) for m in LOADED.finditer(text)]
            targets += [part.split()[0] for m in SRCSET.finditer(text)
                        for part in m.group(1).split(",") if part.strip()]
        found += [f"{path.relative_to(html_root)}: {t}" for t in targets if REMOTE.match(t)]
    return found


def test_the_remote_check_finds_what_it_must(tmp_path):
    """The scanner above flags a CDN script, stylesheet, font and image, and not links."""
    (tmp_path / "a.html").write_text(
        '<script src="https://cdn.example/x.js"></script><link rel="stylesheet" '
        'href="//cdn.example/y.css"><img src="http://e/z.png"><a href="https://ok">ok</a>'
        '<script src="_static/local.js"></script><img srcset="local.png 1x, https://e/2.png 2x">'
        '<video poster="https://e/p.jpg"></video><object data="https://e/o.svg"></object>'
        '<style>@import "https://e/i.css"; p { background: url(https://e/b.png) }</style>'
        '<p style="background: url(\'//e/s.png\')">x</p>')
    (tmp_path / "s.css").write_text("@font-face { src: url('https://fonts.example/f.woff2') }"
                                    "@import url(local.css);")
    found = remote_resources(tmp_path)
    assert len(found) == 10, found


def test_book_builds_without_warnings(built_book):
    # the session's one build (tests/conftest.py), which the browser tests also read
    assert built_book.returncode == 0, built_book.output[-8000:]
    html = built_book.html
    library = (html / "chapters" / "90_library.html").read_text()
    assert "<table" in library and "sharded_parameter_server" in library
    assert (html / "index.html").exists()
    assert not remote_resources(html), "pages load from the network:\n" + "\n".join(
        remote_resources(html)[:20])
    # MathJax is served from the build itself
    assert (html / "_static" / "mathjax" / "tex-chtml.js").exists()
    assert "_static/mathjax/tex-chtml.js" in library


# A Markdown table that did not become a table: its lines are left as the text of a paragraph
# (a pipe in a cell, such as |c_r| in a header's math, breaks it).  A row is a line that starts
# and ends with a pipe and holds one more; a rule is a line of pipes and dashes (Sphinx's
# smart quotes turn --- into an em dash and -- into an en dash).
TABLE_ROW = re.compile(r"^\s*\|.*\|.*\|\s*$")
TABLE_RULE = re.compile(r"^\s*\|?(\s*:?[-\u2013\u2014]+:?\s*\|)+\s*(:?[-\u2013\u2014]+:?)?\s*$")


def markdown_table_lines(text: str) -> list[str]:
    """The lines of ``text`` that are a Markdown table left as text (a rule, or two rows),
    or none."""
    lines = text.splitlines()
    rules = [line.strip() for line in lines if TABLE_RULE.match(line)]
    rows = [line.strip() for line in lines if TABLE_ROW.match(line) and not TABLE_RULE.match(line)]
    return rules + rows if rules or len(rows) >= 2 else []


class _Paragraphs(HTMLParser):
    """The text of every <p> of a page (code inside it left out)."""

    def __init__(self):
        super().__init__()
        self.paragraphs: list[str] = []
        self.depth = self.code = 0

    def handle_starttag(self, tag, attrs):
        if tag == "p":
            self.depth += 1
            self.paragraphs.append("")
        elif tag in ("code", "pre"):
            self.code += 1

    def handle_endtag(self, tag):
        if tag == "p" and self.depth:
            self.depth -= 1
        elif tag in ("code", "pre") and self.code:
            self.code -= 1

    def handle_data(self, data):
        if self.depth and not self.code:
            self.paragraphs[-1] += data


def tables_left_as_text(html_root: Path) -> list[str]:
    """Every paragraph of the built pages that holds a Markdown table as text."""
    found = []
    for path in sorted(html_root.rglob("*.html")):
        parser = _Paragraphs()
        parser.feed(path.read_text(errors="replace"))
        found += [f"{path.relative_to(html_root)}: " + " / ".join(lines[:3])
                  for lines in map(markdown_table_lines, parser.paragraphs) if lines]
    return found


def test_the_table_scan_finds_what_it_must(tmp_path):
    """A table left as text is found, whether its rule kept its dashes or smart quotes made
    them em dashes; a real table, a pipe in prose and |x| in math are not."""
    (tmp_path / "a.html").write_text(
        "<p>| rank | sent |\n|\u2014|\u2014|\n| 0 | 14 |</p>"
        "<p>| a | b |\n|---|:--:|</p>"
        "<p>| 1 | 2 |\n| 3 | 4 |</p>"
        "<p>prose with a | pipe, and \\(|x| + |y|\\)\n| only one row |</p>"
        "<table><tr><td>| a | b |</td></tr></table>"
        "<p><code>| not | text |\n|---|---|</code></p>"
        "<pre>| a | b |\n|---|---|</pre>")
    found = tables_left_as_text(tmp_path)
    assert len(found) == 3, found
    assert found[0] == "a.html: |\u2014|\u2014| / | rank | sent | / | 0 | 14 |", found


def test_no_table_is_left_as_text(built_book):
    """No page of the book shows a Markdown table as the raw text of a paragraph (the
    browser tests check the same of the pages as Chromium shows them)."""
    assert built_book.returncode == 0, built_book.output[-3000:]
    leaked = tables_left_as_text(built_book.html)
    assert not leaked, "tables rendered as text:\n" + "\n".join(leaked)
