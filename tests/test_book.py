"""The book builds strictly (warnings are errors) and its computed pages execute, so CI
catches a chapter that no longer runs; and a built page loads nothing from the network."""

from __future__ import annotations

import re
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
