"""The book builds strictly (warnings are errors) and its computed pages execute, so CI
catches a chapter that no longer runs."""

from __future__ import annotations

import subprocess

from conftest import child_env


def test_book_builds_without_warnings(venv_bin, root, tmp_path):
    run = subprocess.run(
        [str(venv_bin / "jupyter-book"), "build", str(root), "--path-output", str(tmp_path),
         "-W", "-n", "--keep-going"],
        capture_output=True, text=True, timeout=600, env=child_env(),
    )
    assert run.returncode == 0, run.stdout[-5000:] + run.stderr[-3000:]
    library = (tmp_path / "_build" / "html" / "chapters" / "90_library.html").read_text()
    assert "<table" in library and "sharded_parameter_server" in library
    assert (tmp_path / "_build" / "html" / "index.html").exists()
