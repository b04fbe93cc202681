"""The README stays short and true: at most about 200 lines, the two commands and the four
ways to use the course, and every cheap command it gives still works: each ``make`` line
under ``make -n``, each entry point's ``--help``.  No page a reader sees names an issue of
the tracker (a reader cannot see it)."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"


def _commands(text: str) -> list[str]:
    """The command lines of the README's bash blocks, comments and continuations joined."""
    lines, joined = [], ""
    for block in re.findall(r"```bash\n(.*?)```", text, re.DOTALL):
        for line in block.splitlines():
            line = line.split(" #")[0].rstrip() if not line.startswith("#") else ""
            joined += line.removesuffix("\\")
            if line and not line.endswith("\\"):
                lines.append(" ".join(joined.split()))
                joined = ""
    return lines


def _make_dry(*args: str) -> subprocess.CompletedProcess:
    venv = Path(sys.prefix)
    return subprocess.run(["make", "-n", "--no-print-directory", "-o", f"{venv}/.installed",
                           f"VENV={venv}", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=120, check=False)


def test_the_readme_fits_on_a_few_screens():
    text = README.read_text()
    assert len(text.splitlines()) <= 200
    for heading in ("## Two commands", "## Four ways to use it", "## Where to read more"):
        assert heading in text
    for who in ("**Reader**", "**Student**", "**Instructor**", "**Self-learner**"):
        assert who in text
    assert "make book" in text and "make test" in text


def test_every_make_command_in_the_readme_runs_under_make_n():
    commands = [c for c in _commands(README.read_text()) if c.startswith("make ")]
    assert {c.split()[1] for c in commands} >= {"book", "test", "lab", "grade"}
    for command in commands:
        made = _make_dry(*command.split()[1:])
        assert made.returncode == 0, (command, made.stdout + made.stderr)
        assert made.stdout.strip(), command


def _targets() -> list[str]:
    phony = re.search(r"^\.PHONY:(.*)$", (ROOT / "Makefile").read_text(), re.MULTILINE).group(1)
    return phony.split()


@pytest.mark.parametrize("target", _targets())
def test_every_make_target_runs_under_make_n(target):
    made = _make_dry(target, "LAB=labs/50_ring_allreduce.ipynb", "SUBMISSIONS=submissions/")
    assert made.returncode == 0, made.stdout + made.stderr


def _scripts() -> list[str]:
    return list(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"])


@pytest.mark.parametrize("script", _scripts())
def test_every_entry_point_answers_help(venv_bin, script):
    shown = subprocess.run([venv_bin / script, "--help"], capture_output=True, text=True,
                           timeout=120, check=False)
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.startswith(f"usage: {script}")
    assert f"`{script}`" in README.read_text(), f"the README does not name {script}"


def test_the_readmes_entry_point_commands_name_real_options(venv_bin):
    """A `.venv/bin/allreduce-*` line of the README parses: its options exist (checked by
    appending --help, which argparse answers only when everything before it parses)."""
    lines = [c for c in _commands(README.read_text()) if c.startswith(".venv/bin/allreduce-")]
    assert lines
    for line in lines:
        script, *args = line.split()
        shown = subprocess.run([ROOT / script, *args, "--help"], capture_output=True,
                               text=True, timeout=120, check=False)
        assert shown.returncode == 0, (line, shown.stderr)


ISSUE = re.compile(r"\b(issue|issues|bug|ticket)\s*#?\d+|(?<![\w&])(?<!PR )#\d+\b",
                   re.IGNORECASE)  # an upstream project's "PR #2468" is a citation


def _reader_pages() -> list[Path]:
    return [README, ROOT / "CONTRIBUTING.md", *sorted((ROOT / "studyguide").glob("*.md")),
            *sorted((ROOT / "chapters").glob("*.md")), *sorted((ROOT / "labs").glob("*.ipynb"))]


def test_the_readmes_library_example_runs_as_it_says(venv_bin, tmp_path):
    """The example under "Using the library", saved and launched as its first line says, on
    4 ranks: every rank prints the mean, 1.5, on a line of its own.  Unbuffered (the
    launcher's environment sets PYTHONUNBUFFERED, as some machines do) and several times:
    a print that made several writes interleaved the ranks' lines there."""
    from conftest import run_launcher

    example = re.search(r"## Using the library\n\n```python\n(.*?)```", README.read_text(),
                        re.DOTALL).group(1)
    launch = re.match(r"# save as (\S+), run with: (.*)\n", example)
    assert launch, "the example's first line says how to save and run it"
    script = tmp_path / launch.group(1)
    script.write_text(example)
    command = launch.group(2).split()
    assert command == [".venv/bin/mpiexec", "-n", "4", ".venv/bin/python", "-m", "mpi4py",
                       script.name], command
    command = [str(venv_bin / "mpiexec"), "-n", "4", sys.executable, "-m", "mpi4py", str(script)]
    want = sorted(f"rank {rank}: [1.5 1.5 1.5]" for rank in range(4))
    for _ in range(5):
        run = run_launcher(command, timeout=120)
        assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
        assert sorted(run.stdout.splitlines()) == want, run.stdout


def test_no_page_a_reader_sees_names_an_issue():
    found = [f"{page.relative_to(ROOT)}:{number}: {line.strip()}"
             for page in _reader_pages()
             for number, line in enumerate(page.read_text().splitlines(), 1)
             if ISSUE.search(line)]
    assert not found, "\n".join(found)


def test_the_issue_pattern_finds_what_it_must():
    assert ISSUE.search("every hostile one issue 15 lists") and ISSUE.search("see #23")
    assert not ISSUE.search("`#wrong` was 0") and not ISSUE.search("1,024 ranks")
    assert not ISSUE.search("since v0.21, PR #2468")
