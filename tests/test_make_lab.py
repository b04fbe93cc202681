"""make lab and make student: both write the student copies through allreduce-student, which
writes only the missing ones, so a student's work is never overwritten (make student FORCE=1
replaces them, after moving the old ones to student/.old/); make lab opens JupyterLab on the
student copies, the instructor keys with KEYS=1, --allow-root only as root.
(tests/browser/test_jupyterlab.py starts the server for real, in a browser; here JUPYTER_LAB
is replaced by echo, so the commands run and no server starts.)"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import nbformat

MARKER = "my own answer, which make must never overwrite"


def _make(root: Path, target: str, *args: str, dry: bool = False, env=None) -> str:
    venv = Path(sys.prefix)
    run = subprocess.run(["make", *(["-n"] if dry else []), "--no-print-directory",
                          "-o", f"{venv}/.installed", f"VENV={venv}", target,
                          "JUPYTER_LAB=echo would start jupyter lab", *args],
                         cwd=root, capture_output=True, text=True, timeout=300, env=env,
                         check=False)
    assert run.returncode == 0, run.stdout + run.stderr
    return run.stdout


def _started(out: str) -> list[str]:
    """The lines the stand-in for JupyterLab printed: the server make would have started."""
    return [line for line in out.splitlines() if line.startswith("would start")]


def _labs(root: Path) -> list[Path]:
    return sorted((root / "labs").glob("*.ipynb"))


def test_make_lab_writes_the_copies_and_opens_them(root, tmp_path):
    student = tmp_path / "student"
    out = _make(root, "lab", f"STUDENT={student}")
    assert sorted(p.name for p in student.glob("*.ipynb")) == [p.name for p in _labs(root)]
    (started,) = _started(out)
    assert f"--ServerApp.root_dir={student}" in started
    assert "--MappingKernelManager.transport_encryption=auto" in started
    assert ("--allow-root" in started) == (os.geteuid() == 0)


def test_neither_make_student_nor_make_lab_overwrites_a_students_work(root, tmp_path):
    student = tmp_path / "student"
    ring, work = _student_work(root, student)

    for target in ("student", "lab"):
        out = _make(root, target, f"STUDENT={student}")
        assert ring.read_bytes() == work, f"make {target} overwrote the student's work"
        assert f"kept {len(_labs(root))} copies already in {student}/" in out, out
        assert "to start one afresh, delete it" in out and "make student FORCE=1" in out
    assert not (student / ".old").exists()

    # a deleted copy is written again; the others stay
    (student / "10_data_parallel.ipynb").unlink()
    out = _make(root, "student", f"STUDENT={student}")
    assert f"wrote {student / '10_data_parallel.ipynb'}" in out
    assert ring.read_bytes() == work


def test_make_student_force_moves_the_old_copies_aside_first(root, tmp_path):
    student = tmp_path / "student"
    ring, work = _student_work(root, student)
    out = _make(root, "student", f"STUDENT={student}", "FORCE=1")
    (stamp,) = (student / ".old").iterdir()
    assert (stamp / ring.name).read_bytes() == work  # the student's copy, moved aside
    assert MARKER not in ring.read_text()  # a fresh copy in its place
    assert f"replaced {ring} (your copy was moved to {stamp / ring.name})" in out
    assert len(list(stamp.glob("*.ipynb"))) == len(_labs(root))


def test_make_lab_keys_opens_the_instructor_labs(root, tmp_path):
    student = tmp_path / "student"
    out = _make(root, "lab", "KEYS=1", f"STUDENT={student}")
    assert "--ServerApp.root_dir=labs" in out
    assert not student.exists()


def test_allreduce_student_refuses_a_missing_lab_before_writing(venv_bin, tmp_path):
    run = subprocess.run([venv_bin / "allreduce-student", "labs/99_none.ipynb", "--out",
                          tmp_path / "s"], capture_output=True, text=True, timeout=60,
                         check=False)
    assert run.returncode == 2 and "no such lab: labs/99_none.ipynb" in run.stderr
    assert not (tmp_path / "s").exists()


def _server_file(runtime: Path, root_dir: Path, pid: int) -> None:
    """What a running Jupyter server keeps in the runtime directory (jupyter_server's
    ServerApp.write_server_info_file: jpserver-PID.json)."""
    import json

    runtime.mkdir(parents=True, exist_ok=True)
    info = {"pid": pid, "port": 8899, "url": "http://127.0.0.1:8899/", "token": "t0ken",
            "root_dir": str(root_dir), "base_url": "/", "hostname": "127.0.0.1",
            "secure": False, "sock": "", "password": False, "version": "2"}
    (runtime / f"jpserver-{pid}.json").write_text(json.dumps(info))


def test_make_lab_names_a_server_already_running_on_the_folder(root, tmp_path):
    student, runtime = tmp_path / "student", tmp_path / "runtime"
    env = dict(os.environ, JUPYTER_RUNTIME_DIR=str(runtime))
    _server_file(runtime, student, os.getpid())  # a live process: this test's own
    out = _make(root, "lab", f"STUDENT={student}", env=env)
    assert not _started(out), out
    assert f"JupyterLab is already running on {student}/ (process {os.getpid()})" in out
    assert "http://127.0.0.1:8899/lab?token=t0ken" in out
    assert "server stop 8899" in out


def test_make_lab_starts_a_server_when_the_running_ones_serve_elsewhere(root, tmp_path):
    student, runtime = tmp_path / "student", tmp_path / "runtime"
    env = dict(os.environ, JUPYTER_RUNTIME_DIR=str(runtime))
    _server_file(runtime, tmp_path / "elsewhere", os.getpid())
    ended = subprocess.Popen(["true"])
    ended.wait()
    _server_file(runtime, student, ended.pid)  # a server on the folder whose process ended
    out = _make(root, "lab", f"STUDENT={student}", env=env)
    assert "JupyterLab is already running" not in out
    assert _started(out), out


def _student_work(root, student):
    """``make student``, then a student's work written into the ring lab's copy: the copy
    and its bytes."""
    _make(root, "student", f"STUDENT={student}")
    ring = student / "50_ring_allreduce.ipynb"
    nb = nbformat.read(ring, as_version=4)
    nb.cells[0].source += "\n\n" + MARKER
    nbformat.write(nb, ring)
    return ring, ring.read_bytes()
