"""What the published book gives a reader, read from the session's one build
(``built_book``, tests/conftest.py): a quiet build; each lab as its student copy, with no
solution code anywhere in the site (pages, search index, ``_sources/``, downloads); a launch
link on each lab page that names the lab; ``make publish`` into a local bare repository;
the licence and the citation file."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
import tomllib
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import parse_qs, urlparse

import nbformat
import pytest
import yaml
from conftest import BIN, ROOT, child_env

from allreduce import book, grading

LABS = sorted((ROOT / "labs").glob("*.ipynb"))

# a line that warns: "WARNING", "Warning:", "warning:", "DeprecationWarning", ...; not the
# option names in the configuration myst prints (suppress_warnings=[])
WARNING_LINE = re.compile(r"(?i:\bwarning\b)|\w+Warning\b")


def test_the_book_build_prints_no_warnings(built_book):
    """make book is quiet: nothing a reader must puzzle over (it printed ipykernel's "Kernel
    is running over TCP without encryption" once per executed page)."""
    assert built_book.returncode == 0, built_book.output[-5000:]
    warnings = [line for line in built_book.output.splitlines() if WARNING_LINE.search(line)]
    installed = Path(sys.prefix) / "etc" / "ipython" / "ipython_kernel_config.py"
    hint = ("" if installed.exists() else
            f"\n({installed} is missing: make venv installs it from etc/ipython/)")
    assert not warnings, "the build warns:\n" + "\n".join(warnings[:20]) + hint


def test_the_warning_pattern_finds_warnings():
    assert WARNING_LINE.search("[IPKernelApp] WARNING | Kernel is running over TCP")
    assert WARNING_LINE.search("x.py:3: DeprecationWarning: old")
    assert WARNING_LINE.search("/a/b.md:12: warning: undefined label")
    assert not WARNING_LINE.search("MdParserConfig(suppress_warnings=[], x=1)")


def test_the_environment_has_the_course_kernel_config():
    """make venv installs etc/ipython/ipython_kernel_config.py where the kernels read it."""
    installed = Path(sys.prefix) / "etc" / "ipython" / "ipython_kernel_config.py"
    assert installed.read_text() == (ROOT / "etc" / "ipython" / "ipython_kernel_config.py").read_text()


def _kernel_stderr(tmp_path: Path, ip: str) -> str:
    """Start an IPython kernel listening on ``ip`` and return what it logged up to its
    sockets being bound (log level DEBUG, so the binding itself is logged)."""
    from jupyter_client.connect import write_connection_file

    connection, _ = write_connection_file(str(tmp_path / f"kernel-{ip}.json"), ip=ip)
    kernel = subprocess.Popen(
        [sys.executable, "-m", "ipykernel_launcher", "-f", connection,
         "--IPKernelApp.log_level=DEBUG"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=child_env(),
        cwd=tmp_path)
    lines: list[str] = []
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            line = kernel.stderr.readline()
            if not line:
                break
            lines.append(line)
            if "iopub PUB Channel on port" in line:  # the last socket init_sockets binds
                break
    finally:
        kernel.kill()
        kernel.wait(10)
    assert any("ROUTER Channel on port" in line for line in lines), "".join(lines)[-3000:]
    return "".join(lines)


def test_the_kernel_config_quiets_loopback_only(tmp_path):
    """The course's kernel configuration drops the unencrypted-TCP warning for a kernel on
    a loopback address, and only there: a kernel listening on every interface still warns."""
    assert "without encryption" not in _kernel_stderr(tmp_path, "127.0.0.1")
    assert "without encryption" in _kernel_stderr(tmp_path, "0.0.0.0")


# --- the solutions policy ------------------------------------------------------------------


def _norm(line: str) -> str:
    return " ".join(line.split())


def _solution_regions(nb) -> list[str]:
    lines, inside = [], False
    for cell in nb.cells:
        for line in cell.source.splitlines():
            if grading.BEGIN in line:
                inside = True
            elif grading.END in line:
                inside = False
            elif inside:
                lines.append(_norm(line))
    return lines


def key_only_lines() -> dict[str, set[str]]:
    """For each lab, the lines of its solution regions that a reader may not see: every
    such line of 12 characters or more that appears nowhere in what is published on
    purpose (any lab's student copy, with its hints and outputs; the chapters, which show
    the library's code; the library itself)."""
    public = []
    for lab in LABS:
        for cell in grading.student_copy(nbformat.read(lab, as_version=4)).cells:
            public += [cell.source, json.dumps(cell.get("outputs", []))]
    for path in [*(ROOT / "chapters").glob("*.md"), *(ROOT / "src" / "allreduce").rglob("*.py")]:
        public.append(path.read_text())
    public_text = "\n".join(_norm(line) for text in public for line in text.splitlines())
    return {lab.name: {line for line in _solution_regions(nbformat.read(lab, as_version=4))
                       if len(line) >= 12 and line not in public_text} for lab in LABS}


class _Text(HTMLParser):
    def __init__(self):
        super().__init__()
        self.parts: list[str] = []

    def handle_data(self, data):
        self.parts.append(data)


BINARY = {".png", ".jpg", ".jpeg", ".gif", ".ico", ".svg", ".woff", ".woff2", ".ttf", ".eot",
          ".otf", ".pickle", ".inv", ".gz", ".zip", ".pdf"}


def published_texts(html_root: Path):
    """``(path, text)`` for every file of a built site, as a reader would read it: a page's
    text without its markup (Pygments splits code into spans), a notebook's cells (sources
    and outputs), any other text file as it is; whitespace normalised per line."""
    for path in sorted(html_root.rglob("*")):
        if not path.is_file() or path.suffix.lower() in BINARY:
            continue
        text = path.read_text(errors="replace")
        if path.suffix == ".html":
            parser = _Text()
            parser.feed(text)
            text = "".join(parser.parts)
        elif path.suffix == ".ipynb":
            nb = json.loads(text)
            text = "\n".join(
                "".join(c["source"]) + "\n" + json.dumps(c.get("outputs", []), indent=1)
                for c in nb["cells"])
        yield path, "\n".join(_norm(line) for line in text.splitlines())


def solution_leaks(html_root: Path) -> list[str]:
    keys = {line for lines in key_only_lines().values() for line in lines}
    leaks = []
    for path, text in published_texts(html_root):
        found = sorted(line for line in keys if line in text)
        found += [m for m in (grading.BEGIN, grading.END) if m in text]
        leaks += [f"{path.relative_to(html_root)}: {line}" for line in found]
    return leaks


def test_every_lab_has_key_only_lines_to_look_for():
    """The leak check has something to find in every lab (else it would pass vacuously)."""
    lines = key_only_lines()
    assert set(lines) == {lab.name for lab in LABS}
    assert all(lines.values()), {name: len(v) for name, v in lines.items()}


def test_the_leak_check_finds_a_leak(tmp_path):
    """Pages, notebooks under _sources/ and the search index are all read, markup and
    all: the instructor's lab, rendered as Pygments would, is found."""
    lab = LABS[0]
    line = min(key_only_lines()[lab.name])
    marked = "".join(f'<span class="n">{word}</span> ' for word in line.split())
    (tmp_path / "page.html").write_text(f"<html><pre>{marked}</pre></html>")
    (tmp_path / "_sources").mkdir()
    (tmp_path / "_sources" / lab.name).write_text(lab.read_text())
    (tmp_path / "searchindex.js").write_text(f'Search.setIndex("{grading.BEGIN}")')
    leaks = solution_leaks(tmp_path)
    assert any(x.startswith("page.html") for x in leaks), leaks
    assert any(x.startswith(f"_sources/{lab.name}") for x in leaks), leaks
    assert any(x.startswith("searchindex.js") for x in leaks), leaks


def test_the_book_publishes_no_solution_code(built_book):
    """No line of any lab's key is anywhere in the built site: not in the pages, the search
    index, _sources/ or the download button's notebooks."""
    assert built_book.returncode == 0, built_book.output[-3000:]
    leaks = solution_leaks(built_book.html)
    assert not leaks, "the built book holds solution code:\n" + "\n".join(leaks[:20])


def test_each_lab_page_and_download_is_the_student_copy(built_book):
    html = built_book.html
    for lab in LABS:
        name = f"labs/{lab.stem}"
        page = (html / f"{name}.html").read_text()
        assert "NotImplementedError" in page, name  # the stubs are shown
        download = html / "_sources" / f"{name}.ipynb"
        assert f'href="../_sources/{name}.ipynb"' in page, name  # the download button
        published = nbformat.read(download, as_version=4)
        expected = book.published_notebook(nbformat.read(lab, as_version=4))
        assert [c.source for c in published.cells] == [c.source for c in expected.cells], name
        # the committed outputs of the cells that are not solutions stay (nbval's key)
        assert sum(len(c.get("outputs", [])) for c in published.cells) > 0, name


def _launch_links(page: str) -> list[str]:
    return re.findall(r'href="(https://mybinder\.org/[^"]+)"', page) + re.findall(
        r'href="([^"]+/hub/user-redirect/git-pull\?[^"]+)"', page)


def test_each_lab_page_launches_its_student_copy_in_jupyterlab(built_book):
    """The launch button of a lab page opens that lab, in JupyterLab, from the branch that
    make publish fills with student copies; chapters have no launch button; and while
    repository.url is the placeholder no page has one (it would lead to no repository)."""
    config = yaml.safe_load((ROOT / "_config.yml").read_text())
    repository, branch = config["repository"]["url"], config["repository"]["branch"]
    org_repo = urlparse(repository).path.strip("/")
    assert branch == "student"
    if repository == book.PLACEHOLDER_REPOSITORY:
        for page in built_book.html.rglob("*.html"):
            assert not _launch_links(page.read_text()), page
        return
    for lab in LABS:
        page = (built_book.html / "labs" / f"{lab.stem}.html").read_text()
        links = [link.replace("&amp;", "&") for link in _launch_links(page)]
        assert links, f"no launch link on labs/{lab.stem}.html"
        for link in links:
            url = urlparse(link)
            query = parse_qs(url.query)
            assert url.path == f"/v2/gh/{org_repo}/{branch}", link
            assert query["urlpath"] == [f"lab/tree/labs/{lab.name}"], link
    for chapter in (built_book.html / "chapters").glob("*.html"):
        assert not _launch_links(chapter.read_text()), chapter.name


@pytest.mark.parametrize("url, lab, kept", [
    ("https://example.org/course", True, True), ("https://example.org/course", False, False),
    (book.PLACEHOLDER_REPOSITORY, True, False)])
def test_launch_buttons_stay_on_lab_pages_of_a_real_repository(monkeypatch, url, lab, kept):
    """The hook behind the test above, for a course's own repository.url too (the built book
    has the placeholder, whose pages have no launch button)."""
    class App:
        class config:  # noqa: N801 - as Sphinx names it
            html_theme_options = {"repository_url": url}

    monkeypatch.setattr(book, "_lab_notebook", lambda app, name: object() if lab else None)
    buttons = [{"label": "launch-buttons"}, {"label": "download-buttons"}]
    book._launch_on_labs_only(App(), "labs/50_ring_allreduce", "page.html",
                              {"header_buttons": buttons}, None)
    assert [b["label"] for b in buttons] == ["launch-buttons"] * kept + ["download-buttons"]


def test_book_extension_refuses_a_stray_solution_marker():
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(f"{grading.BEGIN}\nx = 1")])

    class Env:
        @staticmethod
        def doc2path(docname):
            return f"/x/{docname}.ipynb"

    class App:
        env = Env()

    source = [nbformat.writes(nb)]
    with pytest.raises(ValueError, match="outside a solution cell"):
        book._source_read(App(), "labs/stray", source)


# --- publishing -------------------------------------------------------------------------------


def _git(*args, cwd=None) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True,
                          text=True).stdout


def test_publish_pushes_the_book_and_the_student_branch(built_book, tmp_path):
    """make publish's command, against a local bare repository: gh-pages holds the site
    (with .nojekyll), student holds the repository with every lab a student copy, and a
    second publish adds a commit on top of each branch instead of replacing it."""
    remote = tmp_path / "course.git"
    _git("init", "-q", "--bare", str(remote))
    command = [str(BIN / "python"), "-m", "allreduce.book", "--html", str(built_book.html),
               "--remote", str(remote), "--repo", str(ROOT)]
    for _ in range(2):
        run = subprocess.run(command, check=False, capture_output=True, text=True, timeout=300,
                             env=child_env(), cwd=ROOT)
        assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    pages = _git("ls-tree", "-r", "--name-only", "gh-pages", cwd=remote).split()
    assert {"index.html", ".nojekyll", "labs/50_ring_allreduce.html",
            "_sources/labs/50_ring_allreduce.ipynb", "search.html"} <= set(pages)
    assert _git("rev-list", "--count", "gh-pages", cwd=remote).strip() == "2"
    student = _git("ls-tree", "-r", "--name-only", "student", cwd=remote).split()
    assert "pyproject.toml" in student and "src/allreduce/__init__.py" in student
    for lab in LABS:
        text = _git("show", f"student:labs/{lab.name}", cwd=remote)
        assert grading.BEGIN not in text and "NotImplementedError" in text, lab.name
    assert _git("rev-list", "--count", "student", cwd=remote).strip() == "2"
    # the checkout's own branches are untouched
    assert "gh-pages" not in _git("branch", "--list", "gh-pages", cwd=ROOT)


def test_publish_refuses_a_site_with_solution_regions(tmp_path):
    (tmp_path / "index.html").write_text(f"<pre>{grading.BEGIN}</pre>")
    with pytest.raises(RuntimeError, match="solution regions"):
        book.publish(tmp_path, str(tmp_path / "nowhere.git"), repo=ROOT, labs=LABS)


def test_make_publish_checks_its_remote_before_it_builds_the_book(root):
    """A missing REMOTE, or the placeholder repository with a URL, was reported only after
    a whole build of the book: the recipe checks first (``--check``), then builds."""
    makefile = (root / "Makefile").read_text()
    recipe = makefile.split("\npublish:", 1)[1].split("\n\n", 1)[0]
    assert recipe.index('test -n "$(REMOTE)"') < recipe.index("--check") \
        < recipe.index("$(MAKE) book") < recipe.index("-m allreduce.book --html _build/html")
    run = subprocess.run([str(BIN / "python"), "-m", "allreduce.book", "--remote",
                          "https://example.org/course.git", "--repo", str(ROOT), "--check"],
                         capture_output=True, text=True, timeout=60, env=child_env(), cwd=ROOT)
    if book._repository_url(ROOT) == book.PLACEHOLDER_REPOSITORY:
        assert run.returncode == 2 and "still the placeholder" in run.stderr, run.stderr
    else:
        assert run.returncode == 0, run.stderr


# --- licence and citation --------------------------------------------------------------------


def test_licence_covers_code_and_text(root):
    licence = (root / "LICENSE").read_text()
    assert "MIT License" in licence and "Permission is hereby granted" in licence
    assert "CC BY 4.0" in licence and "LICENSE-CC-BY-4.0.txt" in licence
    cc = (root / "LICENSE-CC-BY-4.0.txt").read_text()
    assert "Creative Commons Attribution 4.0 International Public License" in cc
    assert tomllib.loads((root / "pyproject.toml").read_text())["project"]["license"] == "MIT"


def test_citation_cff_is_valid_cff_1_2(root):
    """CITATION.cff validates against CFF 1.2.0's JSON schema (tests/data/, the schema
    published by the citation-file-format project, CC-BY-4.0, as bundled by cffconvert
    2.0.0) and agrees with pyproject.toml's version and _config.yml's repository."""
    import jsonschema

    schema = json.loads((root / "tests" / "data" / "cff-schema-1.2.0.json").read_text())
    citation = yaml.safe_load((root / "CITATION.cff").read_text())
    jsonschema.Draft7Validator(schema).validate(citation)
    assert citation["cff-version"] == "1.2.0"
    project = tomllib.loads((root / "pyproject.toml").read_text())["project"]
    assert citation["version"] == project["version"]
    config = yaml.safe_load((root / "_config.yml").read_text())
    # no repository address until the course has a real one (_config.yml's is a placeholder)
    assert "repository-code" not in citation and "url" not in citation
    assert config["repository"]["url"] == book.PLACEHOLDER_REPOSITORY
    assert citation["title"] == config["title"]
    assert set(citation["license"]) == {"MIT", "CC-BY-4.0"}
    # and the schema does reject a broken file
    broken = {k: v for k, v in citation.items() if k != "authors"}
    assert not jsonschema.Draft7Validator(schema).is_valid(broken)


def test_publishing_refuses_the_placeholder_repository_address(root, capsys):
    """_config.yml's repository.url is a placeholder until a course sets its own; make
    publish refuses to push to a real remote while it is, since the launch links would lead
    nowhere (a local path, a rehearsal, is allowed with a warning: see the publish test)."""
    import pytest

    with pytest.raises(SystemExit):
        book.main(["--repo", str(root), "--remote", "https://example.invalid/course.git"])
    assert "placeholder" in capsys.readouterr().err
