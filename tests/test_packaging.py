"""The set-up promises: pyproject.toml and environment.yml describe the same environment,
and the README gives the two commands that CI runs."""

from __future__ import annotations

import re
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


def test_torch_is_pinned_to_the_cpu_wheel(root):
    torch = tomllib.loads((root / "pyproject.toml").read_text())["project"]["optional-dependencies"]["torch"]
    assert torch == ["torch==2.13.0"]  # an unpinned torch pulls a multi-GB CUDA build


def test_readme_gives_the_two_commands_and_ci_runs_one(root):
    readme = (root / "README.md").read_text()
    assert "make book" in readme and "make test" in readme
    assert "make test" in (root / ".ci" / "run").read_text()
