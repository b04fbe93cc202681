"""Every figure of the built book, as a reader at a 1,280 px-wide window sees it: its text
no smaller than 10 CSS px, and a description (alt text) for a reader who cannot see it.

Each image the book shows was saved by matplotlib under :func:`allreduce.viz.use_book_style`,
which writes into the image the size of the smallest text drawn in it (points) and the
resolution it was saved at (:mod:`allreduce.viz.style`).  The browser says how wide it draws
each image; from the two, the smallest text in CSS px is
``points × dpi/72 × drawn width / the PNG's pixel width`` (an SVG's user unit is a point:
``points × drawn width / its viewBox width``).  Every image of every page is checked, the
frames of the animations too (each frame is an image of its own), so a figure added later
is checked as it appears; an image with no record fails, with the way to give it one.
"""

from __future__ import annotations

import base64
import re
from pathlib import Path
from urllib.parse import unquote, urljoin, urlparse

import pytest

from allreduce.viz.style import read_record, smallest_css_px

from .conftest import WINDOW, toc_pages

SMALLEST_CSS_PX = 10.0

# after the page has loaded: every image, decoded, with what the reader sees of it
IMAGES = """
const done = arguments[arguments.length - 1];
const images = Array.from(document.images);
Promise.all(images.map(img => { img.loading = 'eager';
                                return img.decode ? img.decode().catch(() => null) : null; }))
  .then(() => done(images.map(img => ({
    src: img.currentSrc || img.src, alt: img.getAttribute('alt'), id: img.id,
    width: img.getBoundingClientRect().width, natural: img.naturalWidth,
    figure: !!img.closest('article'), animation: !!img.closest('div.animation')}))));
"""

_DATA = re.compile(r"data:image/(png|svg\+xml);base64,((?:[A-Za-z0-9+/=]|\\\n)+)")


def _data_uri(uri: str) -> bytes:
    return base64.b64decode(uri.split(",", 1)[1].replace("\\\n", ""))


def _animation_frames(page_html: str, image_id: str) -> list[bytes]:
    """Every frame of the animation whose frame image has ``image_id`` (matplotlib's
    to_jshtml names it in the script that holds the frames)."""
    for script in re.findall(r"<script[^>]*>(.*?)</script>", page_html, re.DOTALL):
        if f'"{image_id}"' in script:
            return [base64.b64decode(m.group(2).replace("\\\n", ""))
                    for m in _DATA.finditer(script)]
    return []


def _image_bytes(src: str, html_folder: Path) -> bytes:
    if src.startswith("data:"):
        return _data_uri(src)
    path = html_folder / unquote(urlparse(src).path).lstrip("/")
    return path.read_bytes()


def _is_file_name(alt: str, src: str) -> bool:
    """Sphinx's default alt is the image's path: that describes nothing."""
    name = Path(unquote(urlparse(src).path)).name  # "" for an animation's frame image whose
    # first frame its script has not set yet (every alt ends with "": CI failed on that race)
    return (bool(name) and alt.strip().endswith(name)) or \
        bool(re.search(r"\.(png|svg|jpe?g|gif)$", alt.strip()))


@pytest.fixture(scope="module")
def pages_with_images(book_site) -> list[str]:
    _, folder = book_site
    return [page for page in toc_pages()
            if (folder / f"{page}.html").exists() and "<img" in (folder / f"{page}.html").read_text()]


def test_every_figure_is_legible_and_described(chromium, book_site, pages_with_images):
    root, folder = book_site
    assert chromium.get_window_size()["width"] == WINDOW[0]
    problems, measured = [], []
    for page in pages_with_images:
        chromium.get(urljoin(root, f"{page}.html"))
        images = chromium.execute_async_script(IMAGES)
        page_html = (folder / f"{page}.html").read_text()
        for number, image in enumerate(images, start=1):
            where = f"{page}, image {number} ({image['src'][:70]})"
            alt = (image["alt"] or "").strip()
            if not alt or _is_file_name(alt, image["src"]):
                problems.append(f"{where}: no alt text (give the cell `mystnb: image: alt:` "
                                f"metadata, or the image an alt); it has {alt!r}")
            if not image["figure"]:
                continue  # the theme's own icons (the launch buttons' logos)
            if image["width"] <= 0:
                problems.append(f"{where}: not shown, so its size cannot be checked")
                continue
            frames = (_animation_frames(page_html, image["id"]) if image["animation"]
                      else [_image_bytes(image["src"], folder)])
            if not frames:
                problems.append(f"{where}: the animation's frames were not found")
            for frame, data in enumerate(frames):
                name = f"{where}, frame {frame}" if image["animation"] else where
                record = read_record(data)
                if record is None:
                    problems.append(f"{name}: no record of its text sizes: draw it with "
                                    "matplotlib after allreduce.viz.use_book_style() (the page's "
                                    "first cell), or give it the record (allreduce.viz.style)")
                    continue
                px = smallest_css_px(record, image["width"])
                if px is None:
                    continue  # an image without text
                measured.append((px, name, record["text"]))
                if px < SMALLEST_CSS_PX:
                    problems.append(f"{name}: its smallest text, {record['text']!r} at "
                                    f"{record['smallest_pt']:g} pt, is {px:.1f} CSS px where "
                                    f"the page draws it {image['width']:.0f} px wide")
    assert measured, "no figure was measured"
    smallest = min(measured)
    print(f"\n{len(measured)} figures and frames on {len(pages_with_images)} pages; smallest "
          f"text {smallest[0]:.1f} CSS px ({smallest[1]}, {smallest[2]!r})")
    assert not problems, f"{len(problems)} problems:\n" + "\n".join(problems)
