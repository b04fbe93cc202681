"""The browser tests' machinery: the system's Chromium, driven by Selenium through the
chromedriver we name (so Selenium Manager never runs and nothing is downloaded), with the
network blocked; the session's built book served on 127.0.0.1.

Where Chromium or chromedriver is missing, every browser test is skipped with a reason that
says so, and the terminal summary of the run (``make test``) ends with a banner saying the
browser tests did not run.  Debian: ``apt-get install chromium chromium-driver`` (.ci/run
does it when it runs as root).  ``ALLREDUCE_CHROMIUM`` and ``ALLREDUCE_CHROMEDRIVER`` name
other binaries.
"""

from __future__ import annotations

import functools
import html
import os
import shutil
import stat
import tempfile
import threading
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urlparse

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
SCREENSHOTS = ROOT / "_build" / "screenshots"
WINDOW = (1280, 900)
LOCAL_HOSTS = {"127.0.0.1", "localhost", "[::1]", "::1"}

# Chromium with nothing that reaches out: no background networking, updates, sync or QUIC;
# every host name but the loopback ones resolves to nothing, and any request that still
# tried a proxy would meet a closed port (loopback bypasses the proxy).
CHROMIUM_FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--disable-default-apps", "--disable-extensions", "--no-default-browser-check",
    "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE localhost, EXCLUDE 127.0.0.1",
    "--proxy-server=http://127.0.0.1:9",
    f"--window-size={WINDOW[0]},{WINDOW[1]}",
]

_skipped: list[str] = []


def toc_pages() -> list[str]:
    """Every page of the book, in reading order: the table of contents, then the index
    and search pages Sphinx adds."""
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    pages = [toc["root"]]

    def walk(entries):
        for entry in entries or []:
            if "file" in entry:
                pages.append(entry["file"])
            walk(entry.get("sections"))
            walk(entry.get("chapters"))

    for part in toc.get("parts", []):
        walk(part.get("chapters"))
    return [*pages, "genindex", "search"]


def write_screenshot_index() -> None:
    """_build/screenshots/index.html: the screenshots in reading order, then the others
    (the lab in JupyterLab), for a person to flip through."""
    order = [f"{page.replace('/', '__')}.png" for page in toc_pages()]
    shots = sorted(SCREENSHOTS.glob("*.png"),
                   key=lambda p: (order.index(p.name) if p.name in order else len(order), p.name))
    rows = [f'<h2 id="{html.escape(p.stem)}">{html.escape(p.stem.replace("__", "/"))}</h2>\n'
            f'<p><a href="{p.name}"><img src="{p.name}" width="640" '
            f'alt="screenshot of {html.escape(p.stem)}"></a></p>' for p in shots]
    (SCREENSHOTS / "index.html").write_text(
        "<!doctype html><meta charset='utf-8'><title>The book in Chromium</title>\n"
        "<h1>The book's pages, and a lab in JupyterLab, in headless Chromium</h1>\n"
        + "\n".join(rows) + "\n")


def find_browser() -> tuple[str, str] | str:
    """``(chromium, chromedriver)``, or the reason there is none."""
    chromium = os.environ.get("ALLREDUCE_CHROMIUM") or next(
        filter(None, map(shutil.which, ["chromium", "chromium-browser", "google-chrome"])), None)
    driver = os.environ.get("ALLREDUCE_CHROMEDRIVER") or shutil.which("chromedriver")
    missing = [name for name, path in [("chromium", chromium), ("chromedriver", driver)]
               if not path or not os.access(path, os.X_OK)]
    if missing:
        return (f"NO BROWSER: {' and '.join(missing)} not found, so the book was not checked "
                "in a browser (Debian: apt-get install chromium chromium-driver; .ci/run does "
                "it as root)")
    return chromium, driver


@pytest.fixture(scope="session")
def browser_paths() -> tuple[str, str]:
    found = find_browser()
    if isinstance(found, str):
        _skipped.append(found)
        pytest.skip(found)
    return found


def pytest_unconfigure(config):
    """And once more as the run's very last line, below the count of passes and skips."""
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if _skipped and reporter is not None:
        reporter.write_sep("!", "the browser tests did not run: no Chromium (see above)",
                           red=True, bold=True)


def pytest_terminal_summary(terminalreporter):
    """Say loudly, at the end of the run, that the browser tests did not run."""
    if not _skipped:
        return
    here = Path(__file__).parent.name
    skipped = [r for r in terminalreporter.stats.get("skipped", [])
               if f"/{here}/" in f"/{r.nodeid}" or r.nodeid.startswith(f"{here}/")]
    terminalreporter.write_sep("!", "BROWSER TESTS DID NOT RUN", red=True, bold=True)
    terminalreporter.write_line(_skipped[0], red=True, bold=True)
    terminalreporter.write_line(
        f"{len(skipped)} browser tests were skipped: the pages' math, console errors, images, "
        "links, animations and search, and the lab in JupyterLab, were NOT checked.", red=True)


@pytest.fixture(scope="session")
def selenium_manager_tripwire(tmp_path_factory) -> Path:
    """Point Selenium at a Selenium Manager that only leaves a mark: the tests then check
    that it never ran (the driver's path is given, so nothing is looked up or fetched)."""
    folder = tmp_path_factory.mktemp("selenium-manager")
    mark = folder / "ran"
    script = folder / "selenium-manager"
    script.write_text(f"#!/bin/sh\necho \"$@\" >> '{mark}'\nexit 1\n")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    previous = os.environ.get("SE_MANAGER_PATH")
    os.environ["SE_MANAGER_PATH"] = str(script)
    yield mark
    if previous is None:
        os.environ.pop("SE_MANAGER_PATH", None)
    else:
        os.environ["SE_MANAGER_PATH"] = previous


def start_chromium(paths: tuple[str, str], profile: Path):
    """A headless Chromium, with the console and network events logged, the network
    blocked, and a fresh profile."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    chromium, chromedriver = paths
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for flag in [*CHROMIUM_FLAGS, f"--user-data-dir={profile}"]:
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL", "performance": "ALL"})
    driver = webdriver.Chrome(service=Service(executable_path=chromedriver), options=options)
    driver.set_page_load_timeout(60)
    driver.set_script_timeout(60)
    return driver


@pytest.fixture(scope="session")
def chromium(browser_paths, selenium_manager_tripwire):
    """One browser for the session's book pages."""
    profile = Path(tempfile.mkdtemp(prefix="allreduce-chromium-"))
    driver = start_chromium(browser_paths, profile)
    yield driver
    driver.quit()
    shutil.rmtree(profile, ignore_errors=True)


class _QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, format, *args):
        pass


@pytest.fixture(scope="session")
def book_site(browser_paths, built_book):  # the browser first: no build where none exists
    """The session's built book served over HTTP on 127.0.0.1: ``(root URL, html folder)``."""
    if built_book.returncode != 0:
        pytest.fail("the book did not build (tests/test_book.py says why):\n"
                    + built_book.output[-2000:])
    handler = functools.partial(_QuietHandler, directory=str(built_book.html))
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/", built_book.html
    server.shutdown()
    server.server_close()


def requests_that_left(performance_log: list[dict]) -> list[str]:
    """The URLs of the requests in a performance log that went anywhere but this machine."""
    import json

    away = []
    for entry in performance_log:
        message = json.loads(entry["message"])["message"]
        if message["method"] != "Network.requestWillBeSent":
            continue
        url = message["params"]["request"]["url"]
        parsed = urlparse(url)
        # Chromium's own pages and resources, and in-page data, never leave the machine
        if parsed.scheme in {"data", "blob", "about", "file", "chrome", "chrome-untrusted",
                             "chrome-extension", "devtools"}:
            continue
        if parsed.hostname not in {h.strip("[]") for h in LOCAL_HOSTS}:
            away.append(url)
    return away
