"""The built book as a reader sees it: every page opened in headless Chromium, with the
network blocked, over HTTP from 127.0.0.1 (and a few over file://).

Each page: every formula typeset by MathJax (no raw ``\\(``, ``\\[`` or ``$$`` left in its
text), no Markdown table left as the text of a paragraph, no error in the console, no broken
image, no request that left this machine, no local resource missing; and a full-page
screenshot saved under ``_build/screenshots/`` (with an ``index.html`` to flip through them in
reading order).  Then: every internal link resolves (file and anchor), each trace animation
plays, its controls work and each shows an icon (not an empty box), and the search page finds
"Rabenseifner" with nothing but the build.
"""

from __future__ import annotations

import base64
import contextlib
import html
import json
import time
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urljoin, urlparse

import pytest
from selenium.common.exceptions import WebDriverException
from test_book import markdown_table_lines

from .conftest import SCREENSHOTS, requests_that_left, toc_pages, write_screenshot_index

PAGES = toc_pages()

# wait for the page, then for MathJax's first typesetting, when the page loads MathJax
WAIT_FOR_MATH = """
const done = arguments[arguments.length - 1];
const settle = () => {
  if (window.MathJax && MathJax.startup && MathJax.startup.promise) {
    MathJax.startup.promise.then(() => done('typeset'), (e) => done('error: ' + e));
  } else { done('no mathjax'); }
};
if (document.readyState === 'complete') settle(); else window.addEventListener('load', settle);
"""

# what the page shows of its math: every element Sphinx marks as math holds MathJax's
# output; MathJax reported no error; and no TeX delimiter is left in the text outside code
MATH_REPORT = """
const math = Array.from(document.querySelectorAll('.math'));
const untypeset = math.filter(e => !e.querySelector('mjx-container'))
                      .map(e => e.textContent.trim().slice(0, 80));
const clone = document.body.cloneNode(true);
clone.querySelectorAll('pre, code, script, style, textarea, .highlight, mjx-assistive-mml')
     .forEach(e => e.remove());
const text = clone.textContent;
const raw = [];
for (const delimiter of ['\\\\(', '\\\\)', '\\\\[', '\\\\]', '$$']) {
  const at = text.indexOf(delimiter);
  if (at >= 0) raw.push(text.slice(Math.max(0, at - 40), at + 60));
}
return {math: math.length, containers: document.querySelectorAll('mjx-container').length,
        errors: document.querySelectorAll('mjx-merror').length, untypeset, raw};
"""

# every image loaded, lazily loaded ones included
BROKEN_IMAGES = """
const done = arguments[arguments.length - 1];
const images = Array.from(document.images);
Promise.all(images.map(img => {
  img.loading = 'eager';
  if (img.complete) return Promise.resolve();
  return new Promise(resolve => { img.onload = img.onerror = resolve; });
})).then(() => done({
  count: images.length,
  broken: images.filter(img => !(img.complete && img.naturalWidth > 0))
                .map(img => (img.getAttribute('src') || '(no src)').slice(0, 100))}));
"""


# the text of every paragraph as the page shows it, code and MathJax's hidden MathML left out
PARAGRAPHS = """
return Array.from(document.querySelectorAll('p')).filter(p => !p.closest('pre')).map(p => {
  const clone = p.cloneNode(true);
  clone.querySelectorAll('code, mjx-assistive-mml').forEach(e => e.remove());
  return clone.textContent;
});
"""


def tables_as_text(driver) -> list[str]:
    """The paragraphs of the open page that show a Markdown table as text (markdown_table_lines
    of tests/test_book.py, which scans the built files the same way)."""
    return [" / ".join(lines[:3]) for lines in
            map(markdown_table_lines, driver.execute_script(PARAGRAPHS)) if lines]


def _events(performance_log: list[dict], method: str) -> list[dict]:
    return [m["params"] for m in (json.loads(e["message"])["message"] for e in performance_log)
            if m["method"] == method]


def open_page(driver, url: str) -> str:
    driver.get_log("browser")  # drop what earlier pages left
    driver.get_log("performance")
    driver.get(url)
    return driver.execute_async_script(WAIT_FOR_MATH)


def console_errors(driver) -> list[str]:
    return [entry["message"] for entry in driver.get_log("browser") if entry["level"] == "SEVERE"]


def save_screenshot(driver, name: str) -> Path:
    """The whole page, not only the window, as a PNG under _build/screenshots/."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    metrics = driver.execute_cdp_cmd("Page.getLayoutMetrics", {})
    size = metrics["cssContentSize"]
    shot = driver.execute_cdp_cmd("Page.captureScreenshot", {
        "format": "png", "captureBeyondViewport": True,
        "clip": {"x": 0, "y": 0, "width": size["width"], "height": min(size["height"], 30000),
                 "scale": 1}})
    path = SCREENSHOTS / f"{name.replace('/', '__')}.png"
    path.write_bytes(base64.b64decode(shot["data"]))
    write_screenshot_index()
    return path


@pytest.mark.parametrize("page", PAGES)
def test_page_as_a_reader_sees_it(chromium, book_site, page):
    root, html_folder = book_site
    assert (html_folder / f"{page}.html").exists(), f"{page}.html was not built"
    mathjax = open_page(chromium, urljoin(root, f"{page}.html"))
    assert not mathjax.startswith("error"), mathjax
    math = chromium.execute_script(MATH_REPORT)
    images = chromium.execute_async_script(BROKEN_IMAGES)
    tables = tables_as_text(chromium)
    errors = console_errors(chromium)
    log = chromium.get_log("performance")
    save_screenshot(chromium, page)

    if math["math"]:
        assert mathjax == "typeset", f"{page} has math but MathJax did not run: {mathjax}"
    assert not math["untypeset"], f"{page}: math left as TeX: {math['untypeset'][:5]}"
    assert math["containers"] >= math["math"], math
    assert math["errors"] == 0, f"{page}: MathJax reported {math['errors']} TeX errors"
    assert not math["raw"], f"{page}: raw TeX delimiters in the text: {math['raw']}"
    assert not tables, f"{page}: Markdown tables shown as text:\n" + "\n".join(tables)
    assert not errors, f"{page}: console errors:\n" + "\n".join(errors)
    assert not images["broken"], f"{page}: broken images: {images['broken']}"
    assert not requests_that_left(log), f"{page} fetched from the network: {requests_that_left(log)}"
    failed = [(p["response"]["url"], p["response"]["status"])
              for p in _events(log, "Network.responseReceived") if p["response"]["status"] >= 400]
    failed += [(p.get("requestId"), p["errorText"]) for p in _events(log, "Network.loadingFailed")
               if p.get("errorText") != "net::ERR_ABORTED"]
    assert not failed, f"{page}: resources that did not load: {failed}"


def test_chapters_typeset_their_formulas(chromium, book_site):
    """The math check is not vacuous: the ring and tree chapters hold many formulas."""
    root, _ = book_site
    counts = {}
    for page in ["chapters/50_ring_allreduce", "chapters/40_tree_allreduce"]:
        assert open_page(chromium, urljoin(root, f"{page}.html")) == "typeset"
        counts[page] = chromium.execute_script(MATH_REPORT)["containers"]
    assert all(n >= 20 for n in counts.values()), counts


class _Anchors(HTMLParser):
    def __init__(self):
        super().__init__()
        self.links: list[str] = []
        self.ids: set[str] = set()

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        for key in ("id", "name"):
            if attrs.get(key):
                self.ids.add(attrs[key])
        if tag == "a" and attrs.get("href"):
            self.links.append(html.unescape(attrs["href"]))


def test_every_internal_link_resolves(book_site):
    """Every link of every page that stays in the book reaches a file of the build, and its
    #anchor an element of that page."""
    _, folder = book_site
    pages = {}
    for path in folder.rglob("*.html"):
        parser = _Anchors()
        parser.feed(path.read_text(errors="replace"))
        pages[path] = parser
    broken, checked = [], 0
    for path, parser in pages.items():
        base = "file://" + str(path)
        for link in parser.links:
            url = urlparse(urljoin(base, link))
            if url.scheme != "file" or link.startswith(("mailto:", "javascript:")):
                continue
            target = Path(unquote(url.path))
            if target.is_dir():
                target = target / "index.html"
            checked += 1
            if not target.resolve().is_relative_to(folder.resolve()) or not target.exists():
                broken.append(f"{path.relative_to(folder)}: {link} (no such file)")
            elif url.fragment and target.suffix == ".html" and target in pages and \
                    unquote(url.fragment) not in pages[target].ids:
                broken.append(f"{path.relative_to(folder)}: {link} (no such anchor)")
    assert checked > 500, checked  # the check reached the toc, the pages and their anchors
    assert not broken, f"{len(broken)} broken internal links:\n" + "\n".join(broken[:30])


ANIMATION_STATE = """
const box = arguments[0];
const slider = box.querySelector('input.anim-slider');
const img = box.querySelector('img');
return {frame: parseInt(slider.value), last: parseInt(slider.max), src: img.src};
"""


def _press(driver, box, title: str) -> None:
    box.find_element("css selector", f'button[title="{title}"]').click()


def _wait_for(predicate, timeout: float = 10.0, step: float = 0.05):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(step)
    return predicate()


def animation_pages(folder: Path) -> list[str]:
    return [page for page in PAGES if (folder / f"{page}.html").exists()
            and 'class="animation"' in (folder / f"{page}.html").read_text()]


def check_animation(driver, box, where: str) -> None:
    """Play moves the frames (the frame counter, the picture's source and the picture on
    screen all change), Pause holds them, and the first, next, last and previous frame
    buttons and the slider go where they say."""
    driver.execute_script("arguments[0].scrollIntoView({block: 'center'})", box)

    def state():
        return driver.execute_script(ANIMATION_STATE, box)

    def picture():
        return box.find_element("css selector", "img").screenshot_as_png

    start, before = state(), picture()
    assert start["last"] >= 2, f"{where}: {start['last'] + 1} frames"
    _press(driver, box, "Play")
    moved = _wait_for(lambda: state()["frame"] != start["frame"] and state())
    assert moved, f"{where}: Play did not move the frame"
    assert moved["src"] != start["src"], f"{where}: the frame counter moved, not the picture"
    assert _wait_for(lambda: picture() != before), f"{where}: the picture on screen did not change"
    _press(driver, box, "Pause")
    held = state()["frame"]
    time.sleep(0.6)
    assert state()["frame"] == held, f"{where}: Pause did not stop the animation"
    _press(driver, box, "First frame")
    first = state()
    assert first["frame"] == 0, where
    _press(driver, box, "Next frame")
    assert state()["frame"] == 1 and state()["src"] != first["src"], where
    _press(driver, box, "Last frame")
    assert state()["frame"] == start["last"], where
    _press(driver, box, "Previous frame")
    assert state()["frame"] == start["last"] - 1, where
    driver.execute_script("const s = arguments[0].querySelector('input.anim-slider');"
                          "s.value = 1; s.dispatchEvent(new Event('input'));", box)
    assert state()["frame"] == 1, f"{where}: the slider did not set the frame"


def test_each_trace_animation_plays(chromium, book_site):
    """Every animation in the book plays, and its controls work (check_animation)."""
    root, folder = book_site
    pages = animation_pages(folder)
    assert pages, "no page of the book has an animation"
    played = 0
    for page in pages:
        open_page(chromium, urljoin(root, f"{page}.html"))
        boxes = chromium.find_elements("css selector", "div.animation")
        assert boxes, page
        for number, box in enumerate(boxes):
            check_animation(chromium, box, f"{page}, animation {number + 1}")
            played += 1
        assert not console_errors(chromium), page
    assert played >= len(pages)


# each control of an animation as the page draws it: its name, the box of what it holds, and
# for each character of its text whether the button's font draws it (a canvas drawing of the
# character differs from that of U+10FFFD, a private-use code point no font has: the
# "missing glyph" box), and whether it draws any ink at all
CONTROLS = """
const box = arguments[0];
const canvas = document.createElement('canvas');
canvas.width = canvas.height = 96;
const context = canvas.getContext('2d', {willReadFrequently: true});
const drawn = (text, font) => {
  context.clearRect(0, 0, 96, 96);
  context.font = font; context.textBaseline = 'middle'; context.fillStyle = '#000';
  context.fillText(text, 16, 48);
  return context.getImageData(0, 0, 96, 96).data.filter((v, i) => i % 4 === 3);
};
const same = (a, b) => a.length === b.length && a.every((v, i) => v === b[i]);
return Array.from(box.querySelectorAll('button')).map(button => {
  const style = getComputedStyle(button);
  const font = `${style.fontStyle} ${style.fontWeight} ${style.fontSize} ${style.fontFamily}`;
  const missing = drawn(String.fromCodePoint(0x10FFFD), font);
  const range = document.createRange();
  range.selectNodeContents(button);
  const content = range.getBoundingClientRect();
  const glyphs = Array.from(button.textContent.replace(/\\s/g, '')).map(ch => {
    const ink = drawn(ch, font);
    return {ch: 'U+' + ch.codePointAt(0).toString(16).toUpperCase().padStart(4, '0'),
            missing: same(ink, missing), ink: ink.some(v => v > 0)};
  });
  return {name: button.getAttribute('aria-label') || button.getAttribute('title') || '',
          width: content.width, height: content.height, glyphs,
          svgs: Array.from(button.querySelectorAll('svg')).map(svg => {
            const b = svg.getBBox(); return [b.width, b.height]; })};
});
"""

# hide what a control holds (its text and its child elements), or show it again
HIDE_ICON = """
const [button, hide] = arguments;
button.style.color = hide ? 'transparent' : '';
button.querySelectorAll('*').forEach(e => { e.style.visibility = hide ? 'hidden' : ''; });
"""

SMALLEST_ICON_PX = 8
LEAST_INK_PX = 12  # the thinnest icon, the minus of "Decrease speed", is 10 × 2 px


def _ink(driver, button) -> int:
    """The pixels of the control that its icon draws: a screenshot of it against one with
    its icon hidden."""
    from io import BytesIO

    from PIL import Image, ImageChops

    shown = Image.open(BytesIO(button.screenshot_as_png)).convert("RGB")
    driver.execute_script(HIDE_ICON, button, True)
    try:
        hidden = Image.open(BytesIO(button.screenshot_as_png)).convert("RGB")
    finally:
        driver.execute_script(HIDE_ICON, button, False)
    if shown.size != hidden.size:
        return shown.size[0] * shown.size[1]  # hiding it moved the button: it drew something
    difference = ImageChops.difference(shown, hidden).convert("L")
    # Pillow 12.1 renamed getdata (deprecated, gone in 14) to get_flattened_data
    values = getattr(difference, "get_flattened_data", difference.getdata)()
    return sum(1 for value in values if value > 40)


def drawn_controls(driver, box, where: str) -> list[str]:
    """What is wrong with how an animation's controls are drawn: a control with no name for
    a screen reader, one whose icon is smaller than SMALLEST_ICON_PX, an SVG icon with no
    shape in it, a character no font of the page has (drawn as an empty box, as U+23EE was
    with DejaVu and Liberation), or an icon that puts almost no ink on the screen."""
    driver.execute_script("arguments[0].scrollIntoView({block: 'center'})", box)
    controls = driver.execute_script(CONTROLS, box)
    buttons = box.find_elements("css selector", "button")
    problems = [] if len(controls) >= 8 else [f"{where}: only {len(controls)} controls"]
    for control, button in zip(controls, buttons, strict=True):
        name = f"{where}, control {control['name']!r}"
        if not control["name"].strip():
            problems.append(f"{name}: no aria-label or title")
        if min(control["width"], control["height"]) < SMALLEST_ICON_PX:
            problems.append(f"{name}: its icon is {control['width']:.0f} × "
                            f"{control['height']:.0f} px")
        problems += [f"{name}: an SVG icon with no shape ({w:.0f} × {h:.0f})"
                     for w, h in control["svgs"] if min(w, h) <= 0]
        problems += [f"{name}: {g['ch']} is in no font of the page (drawn as an empty box)"
                     for g in control["glyphs"] if g["missing"]]
        problems += [f"{name}: {g['ch']} draws nothing"
                     for g in control["glyphs"] if not g["ink"] and not g["missing"]]
        if not control["glyphs"] and not control["svgs"]:
            problems.append(f"{name}: holds neither text nor an SVG icon")
        ink = _ink(driver, button)
        if ink < LEAST_INK_PX:
            problems.append(f"{name}: its icon draws {ink} px on the screen")
    return problems


def test_animation_controls_are_drawn(chromium, book_site):
    """Every control of every animation shows an icon a reader can see (drawn_controls):
    the buttons of matplotlib's player once drew as empty boxes on Linux."""
    root, folder = book_site
    problems, checked = [], 0
    for page in animation_pages(folder):
        open_page(chromium, urljoin(root, f"{page}.html"))
        for number, box in enumerate(chromium.find_elements("css selector", "div.animation")):
            problems += drawn_controls(chromium, box, f"{page}, animation {number + 1}")
            checked += 1
    assert checked, "no animation was checked"
    assert not problems, f"{len(problems)} controls not drawn:\n" + "\n".join(problems[:30])


def _search(driver, url: str) -> list[str]:
    open_page(driver, url)
    # Sphinx adds the hits one at a time (a timer apart) and writes its summary ("Search
    # finished, found ...", or "did not match") after the last: wait for the summary, not
    # the first hit, or the list read may be partial (CI saw two hits of three).
    found = _wait_for(lambda: driver.execute_script(
        "const r = document.querySelectorAll('#search-results li a, ul.search li a');"
        "const s = document.querySelector('#search-results p.search-summary, p.search-summary');"
        "return (s && /finished|did not match/i.test(s.textContent)) ?"
        "  Array.from(r).map(a => a.getAttribute('href')) : null;"), timeout=20)
    return found or []


def test_search_finds_rabenseifner_offline(chromium, book_site):
    root, _ = book_site
    hits = _search(chromium, urljoin(root, "search.html?q=Rabenseifner"))
    assert any("40_tree_allreduce" in hit for hit in hits), hits
    assert not console_errors(chromium)
    assert not requests_that_left(chromium.get_log("performance"))


def test_the_book_read_from_files(chromium, book_site):
    """Opened from the disk (file://), as a reader who downloads the build would: the math
    is typeset, the console is clean, and search still works."""
    _, folder = book_site
    page = (folder / "chapters" / "50_ring_allreduce.html").as_uri()
    assert open_page(chromium, page) == "typeset"
    math = chromium.execute_script(MATH_REPORT)
    assert math["containers"] >= 20 and not math["untypeset"] and not math["raw"], math
    assert not console_errors(chromium)
    hits = _search(chromium, (folder / "search.html").as_uri() + "?q=Rabenseifner")
    assert any("40_tree_allreduce" in hit for hit in hits), hits


def test_the_network_is_blocked(chromium):
    """The browser cannot reach another host (so the checks above prove the book needs none)."""
    chromium.get_log("performance")
    with contextlib.suppress(WebDriverException):  # an error page or an error: blocked
        chromium.get("http://example.com/")
    log = chromium.get_log("performance")
    failures = [p["errorText"] for p in _events(log, "Network.loadingFailed")]
    assert failures, "a request to example.com did not fail"
    assert not [p for p in _events(log, "Network.responseReceived")
                if "example.com" in p["response"]["url"] and p["response"]["status"] < 400]


def test_selenium_manager_never_ran(chromium, selenium_manager_tripwire):
    """Selenium was given the driver, so it never looked one up (nor downloaded one)."""
    assert chromium.session_id
    assert not selenium_manager_tripwire.exists(), selenium_manager_tripwire.read_text()
