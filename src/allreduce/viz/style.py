"""The book's figures: legible where the page shows them, in colours a colour-blind reader
tells apart, and each saved image carrying the record a test checks them by.

Every page of the book that draws calls :func:`use_book_style` in its first (hidden) cell,
and every lab in its imports cell.  It sets

* **sizes**: text no smaller than :data:`SMALLEST_PT` points (tick labels, legends, the step
  figures' labels), figures no wider than :data:`PAGE_WIDTH_IN` inches, so that a figure shown
  at its own size in the page's column (676 CSS px at a 1,280 px window, where 1 in is 96 CSS
  px and 1 pt is 4/3 px) shows 9 pt text at 12 px;
* **colours**: the line colours cycle through Okabe & Ito's palette
  (:data:`OKABE_ITO`), which readers with any common colour-blindness
  tell apart, and the trace figures colour each rank by it too;
* **vector output** where it helps: the book's pages show SVG (sharp at any zoom, text as
  outlines, so no font is fetched); the labs keep PNG (``svg=False``), because nbval compares
  every output of a notebook but PNG images, and an SVG's ids change from run to run;
* **the record**: every PNG or SVG that matplotlib saves in that process says, in its own
  metadata, the size of the smallest text drawn in it (points) and the resolution it was saved
  at.  With the image's width (PNG pixels, SVG points) and the width the browser draws it at,
  a test (``tests/browser/test_figures.py``) computes every figure's smallest text in CSS
  pixels, for every image of the built book, and wants at least 10.

A PNG carries the record as a text chunk, ``allreduce:smallest-text``; an SVG in its
Dublin Core description.  Both hold JSON: ``{"smallest_pt": 9.0, "dpi": 96.0, "text": "..."}``
(``text`` is the smallest piece of text, to name it when a check fails).  An image drawn
otherwise (by hand, by another program) needs the same record to pass the check.
"""

from __future__ import annotations

import contextlib
import html
import json
import os
import re
import struct
import zlib
from typing import Any

#: Okabe & Ito's colours, which readers with colour-blindness tell apart.
OKABE_ITO = ("#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#F0E442",
             "#000000")

__all__ = ["OKABE_ITO", "PAGE_WIDTH_IN", "RECORD_KEY", "SMALLEST_PT", "figure_record", "read_record",
           "smallest_text", "use_book_style"]

#: The widest figure that the page shows at its own size (676 CSS px at a 1,280 px window).
PAGE_WIDTH_IN = 7.0
#: The smallest text the book's figures draw, in points (12 CSS px at the figure's own size).
SMALLEST_PT = 9.0
#: Where a saved image keeps its record (a PNG text chunk's keyword; in SVG, a prefix).
RECORD_KEY = "allreduce:smallest-text"

RC: dict[str, Any] = {
    "figure.dpi": 96,               # 1 px of a PNG is 1 CSS px at the figure's own size
    "savefig.dpi": "figure",
    "figure.figsize": (6.5, 4.0),
    "figure.constrained_layout.use": True,
    "font.size": 10,
    "axes.titlesize": 11,
    "axes.labelsize": 10,
    "xtick.labelsize": SMALLEST_PT,
    "ytick.labelsize": SMALLEST_PT,
    "legend.fontsize": SMALLEST_PT,
    "legend.title_fontsize": 10,
    "figure.titlesize": 11,
    "axes.prop_cycle": None,        # set from OKABE_ITO below
    "image.cmap": "viridis",        # perceptually uniform and colour-blind safe
    "svg.fonttype": "path",         # text as outlines: an SVG needs no font
    "svg.hashsalt": "allreduce",    # the same figure gives the same file
    "animation.embed_limit": 40.0,  # MB, for the pages' animations
}


def _cycle():
    from cycler import cycler

    # black (the last of the eight) is kept for reference lines, yellow is hard to see on white
    return cycler(color=[c for c in OKABE_ITO if c not in ("#000000", "#F0E442")])


# --- the record ---------------------------------------------------------------------------


@contextlib.contextmanager
def _recording_text():
    """While active, every :class:`matplotlib.text.Text` that draws itself (visible, not
    empty) is listed: ``(size in points, text)``."""
    from matplotlib.text import Text

    drawn: list[tuple[float, str]] = []
    original = Text.draw

    def draw(self, renderer):
        text = self.get_text()
        if self.get_visible() and text and text.strip():
            drawn.append((float(self.get_fontsize()), text))
        return original(self, renderer)

    Text.draw = draw
    try:
        yield drawn
    finally:
        Text.draw = original


def smallest_text(figure) -> tuple[float, str] | None:
    """The smallest text ``figure`` draws, ``(points, text)``, or None if it draws none.
    Draws the figure without rendering it (layout, ticks and legends as when it is saved)."""
    with _recording_text() as drawn:
        figure.draw_without_rendering()
    return min(drawn, default=None)


def figure_record(figure, dpi: float | None = None) -> dict[str, Any]:
    """The record an image of ``figure`` saved at ``dpi`` carries."""
    found = smallest_text(figure)
    return {"smallest_pt": found[0] if found else None,
            "dpi": float(dpi if dpi not in (None, "figure") else figure.dpi),
            "text": found[1][:60] if found else ""}


def _print_figure_with_record(original):
    def print_figure(self, filename, dpi=None, *args, **kwargs):
        fmt = kwargs.get("format")
        if fmt is None and isinstance(filename, (str, os.PathLike)):
            fmt = os.path.splitext(os.fspath(filename))[1][1:]
        fmt = (fmt or self.get_default_filetype()).lower()
        if fmt in ("png", "svg"):
            from matplotlib import rcParams

            saved_dpi = dpi if dpi is not None else rcParams["savefig.dpi"]
            record = json.dumps(figure_record(self.figure, saved_dpi))
            metadata = dict(kwargs.get("metadata") or {})
            if fmt == "png":
                metadata[RECORD_KEY] = record
            else:
                metadata["Description"] = f"{RECORD_KEY} {record}"
                metadata.setdefault("Date", None)  # the same figure gives the same file
            kwargs["metadata"] = metadata
        return original(self, filename, dpi, *args, **kwargs)

    print_figure._allreduce_record = True
    return print_figure


def _install_record() -> None:
    from matplotlib.backend_bases import FigureCanvasBase

    if not getattr(FigureCanvasBase.print_figure, "_allreduce_record", False):
        FigureCanvasBase.print_figure = _print_figure_with_record(FigureCanvasBase.print_figure)


def read_record(data: bytes) -> dict[str, Any] | None:
    """The record in a PNG's or SVG's bytes, with the image's own width added:
    ``width_px`` for a PNG, ``width_pt`` (its viewBox) for an SVG; None if it has none."""
    if data.startswith(b"\x89PNG\r\n\x1a\n"):
        record, width, at = None, None, 8
        while at + 8 <= len(data):
            length, kind = struct.unpack(">I4s", data[at:at + 8])
            body = data[at + 8:at + 8 + length]
            if kind == b"IHDR":
                width = struct.unpack(">I", body[:4])[0]
            elif kind in (b"tEXt", b"zTXt", b"iTXt"):
                key, _, value = body.partition(b"\0")
                if key.decode("latin-1") == RECORD_KEY:
                    if kind == b"zTXt":
                        value = zlib.decompress(value[1:])
                    elif kind == b"iTXt":  # flags, method, language\0, translated keyword\0
                        value = value[2:].split(b"\0", 2)[2]
                    record = json.loads(value.decode("utf-8"))
            elif kind == b"IEND":
                break
            at += 12 + length
        return None if record is None else {**record, "width_px": width}
    text = data.decode("utf-8", errors="replace")
    if "<svg" not in text[:2000]:
        return None
    found = re.search(re.escape(RECORD_KEY) + r"\s+(\{.*?\})\s*</dc:description>", text,
                      re.DOTALL)
    box = re.search(r"<svg\b[^>]*\bviewBox=\"([-\d.\s]+)\"", text)
    if not found or not box:
        return None
    record = json.loads(html.unescape(found.group(1)))
    return {**record, "width_pt": float(box.group(1).split()[2])}


def smallest_css_px(record: dict[str, Any], rendered_width_css: float) -> float | None:
    """The smallest text of an image with ``record`` (:func:`read_record`) drawn
    ``rendered_width_css`` CSS pixels wide, in CSS pixels."""
    if record.get("smallest_pt") is None:
        return None
    if "width_pt" in record:  # SVG: user units are points
        return record["smallest_pt"] * rendered_width_css / record["width_pt"]
    return record["smallest_pt"] * record["dpi"] / 72 * rendered_width_css / record["width_px"]


# --- the style ------------------------------------------------------------------------------


def use_book_style(svg: bool = True) -> None:
    """The book's figure style in this process (see the module's docstring): rcParams, the
    Okabe–Ito cycle, the record in every saved PNG and SVG, and in an IPython kernel with
    the inline backend, SVG output (``svg=True``, the book's pages) or PNG (the labs)."""
    import matplotlib
    import matplotlib.pyplot as plt  # noqa: F401  (activates the inline backend first)

    rc = dict(RC, **{"axes.prop_cycle": _cycle()})
    matplotlib.rcParams.update(rc)
    _install_record()
    try:
        from IPython import get_ipython
    except ImportError:  # pragma: no cover - IPython is a dependency of the book
        return
    shell = get_ipython()
    if shell is not None and "inline" in matplotlib.get_backend():
        from matplotlib_inline.backend_inline import set_matplotlib_formats

        set_matplotlib_formats("svg" if svg else "png")
