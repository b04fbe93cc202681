"""The set-up promises: pyproject.toml and environment.yml describe the same environment,
and the README gives the two commands that CI runs."""

from __future__ import annotations

import os
import platform
import re
import shutil
import subprocess
import tomllib

import yaml


def normalise(requirement: str) -> str:
    return re.sub(r"\s+", "", requirement.split("#")[0]).lower()


def test_environment_yml_matches_pyproject(root):
    project = tomllib.loads((root / "pyproject.toml").read_text())["project"]
    wanted = {normalise(r) for r in project["dependencies"]}
    for requirements in project["optional-dependencies"].values():
        wanted |= {normalise(r) for r in requirements if not r.startswith("allreduce[")}
    environment = yaml.safe_load((root / "environment.yml").read_text())
    pip = next(d["pip"] for d in environment["dependencies"] if isinstance(d, dict))
    assert {normalise(r) for r in pip} == wanted
    assert "python=3.11" in environment["dependencies"]
    assert project["requires-python"] == ">=3.11,<3.12"


def test_every_extra_is_in_all(root):
    extras = tomllib.loads((root / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    named = set(re.search(r"\[(.*)\]", extras["all"][0]).group(1).split(","))
    assert named == set(extras) - {"all"}


def _torch_pin(root) -> str:
    return tomllib.loads((root / "pyproject.toml").read_text())["project"][
        "optional-dependencies"]["torch"][0]


def test_torch_is_pinned(root):
    assert _torch_pin(root) == "torch==2.13.0"  # the version the labs' outputs were made with


def test_make_installs_the_cpu_torch_where_there_is_no_gpu(root, tmp_path):
    """PyPI's torch for Linux is the CUDA build (several GB): `make` on Linux without
    nvidia-smi and without a folder of wheels installs the CPU build from PyTorch's index
    first; with the folder, from there; ``TORCH_INDEX=`` keeps PyPI's build, and so does a
    machine with a GPU, folder or not."""
    # not the settings of a make that runs this test (make test TORCH_INDEX=...)
    env = {key: value for key, value in os.environ.items()
           if key not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "TORCH_INDEX", "WHEEL_DIR")}

    def installs(*settings) -> list[str]:
        run = subprocess.run(["make", "-n", "-B", ".venv/.installed", *settings], cwd=root,
                             capture_output=True, text=True, timeout=60, env=env)
        assert run.returncode == 0, run.stderr
        return [line for line in run.stdout.splitlines() if "pip install" in line]

    cpu_first = f'--no-deps --index-url https://download.pytorch.org/whl/cpu "{_torch_pin(root)}"'
    none = f"WHEEL_DIR={tmp_path / 'none'}"
    this_machine = shutil.which("nvidia-smi") is None and platform.system() == "Linux"
    assert any(cpu_first in line for line in installs(none)) == this_machine
    for no_gpu in (True, False):  # as make finds it on a Linux machine without, and with, a GPU
        bare = installs(none, f"NO_GPU={'Linux' if no_gpu else ''}")
        assert any(cpu_first in line for line in bare) == no_gpu, bare
        assert bare[-1].endswith('-e ".[all]"') and "--find-links" not in bare[-1]
    kept = installs(f"WHEEL_DIR={tmp_path}", "NO_GPU=Linux")
    assert not any("--index-url" in line for line in kept), kept
    assert f"--find-links {tmp_path}" in kept[-1]
    gpu = installs(f"WHEEL_DIR={tmp_path}", "NO_GPU=")  # the folder's wheels are CPU builds
    assert gpu[-1].endswith('-e ".[all]"') and "--find-links" not in gpu[-1], gpu
    assert not any("--index-url" in line for line in gpu), gpu
    pypi = installs(none, "NO_GPU=Linux", "TORCH_INDEX=")
    assert not any("--index-url" in line for line in pypi), pypi


def test_readme_gives_the_two_commands_and_ci_runs_one(root):
    readme = (root / "README.md").read_text()
    assert "make book" in readme and "make test" in readme
    assert "make test" in (root / ".ci" / "run").read_text()


def test_nbval_covers_every_notebook(root):
    """make test runs pytest --nbval on testpaths: every tracked notebook must lie in one."""
    config = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]
    assert "--nbval" in config["addopts"] and "--nbval-lax" not in config["addopts"]
    tracked = subprocess.run(["git", "ls-files", "*.ipynb"], cwd=root, capture_output=True,
                             text=True, check=True).stdout.split()
    assert tracked, "no notebooks found"
    for notebook in tracked:
        assert any(notebook.startswith(path + "/") for path in config["testpaths"]), notebook


def test_every_lab_has_exercises_with_checks(root):
    import nbformat

    from allreduce import grading

    for lab in sorted((root / "labs").glob("*.ipynb")):
        nb = nbformat.read(lab, as_version=4)
        names = grading.exercises(nb)
        assert names, f"{lab.name} has no check cells"
        for name in names:
            solutions = [c for c in nb.cells if grading.role(c) == (name, "solution")]
            assert solutions and all(grading.BEGIN in c.source for c in solutions), (lab, name)
