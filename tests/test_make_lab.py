"""make lab: JupyterLab on the student copies (made when missing, never overwritten), the
instructor keys with KEYS=1, --allow-root only as root.  (tests/browser/test_jupyterlab.py
runs it for real, in a browser.)"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def _dry_run(root: Path, *args: str) -> str:
    venv = Path(sys.prefix)
    run = subprocess.run(["make", "-n", "--no-print-directory", "-o", f"{venv}/.installed",
                          f"VENV={venv}", "lab", *args], cwd=root, capture_output=True,
                         text=True, check=True)
    return run.stdout


def test_make_lab_opens_the_student_copies(root, tmp_path):
    student = tmp_path / "student"
    commands = _dry_run(root, f"STUDENT={student}")
    assert f"--ServerApp.root_dir={student}" in commands
    labs = sorted((root / "labs").glob("*.ipynb"))
    # every missing copy is made from its lab, one by one
    for lab in labs:
        assert f"allreduce-student labs/{lab.name} --out {student}" in commands
    assert "--MappingKernelManager.transport_encryption=auto" in commands
    assert ("--allow-root" in commands) == (os.geteuid() == 0)


def test_make_lab_never_overwrites_a_students_work(root, tmp_path):
    student = tmp_path / "student"
    student.mkdir()
    for lab in (root / "labs").glob("*.ipynb"):
        copy = student / lab.name
        copy.write_text("{}")  # a student's own notebook, older than its lab
        os.utime(copy, (0, 0))
    commands = _dry_run(root, f"STUDENT={student}")
    assert "allreduce-student" not in commands


def test_make_lab_keys_opens_the_instructor_labs(root, tmp_path):
    commands = _dry_run(root, "KEYS=1", f"STUDENT={tmp_path / 'student'}")
    assert "--ServerApp.root_dir=labs" in commands
    assert "allreduce-student" not in commands
