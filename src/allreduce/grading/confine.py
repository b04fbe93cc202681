"""What a graded run may load of the library, and the start of every rank process, which
holds it to that (see :mod:`allreduce.grading.run`).

Outside, :func:`plan` says which of the library's files a run gets: the rank's own modules
and the helpers its exercise needs, nothing that holds the library's algorithms or the
check's reference (but the ring, for the exercise whose pattern is made of the library's
phases: lab 65's ZeRO-2 step).  The sandbox (:mod:`allreduce.grading.sandbox`) binds only
those files, so the others' source is not there to read, import or execute; the judge, in
the grader's process, keeps the whole library.

Inside, each rank process starts as ``python -I .../allreduce/grading/confine.py CONFIG FD``
(a file, not ``-m``: nothing of the package is imported before the rules are in place).  It
limits itself, becomes the user id it was given when started as root, and then, before any
of the library is loaded:

* ``allreduce``, ``allreduce.algorithms``, ``allreduce.sparse``, ``allreduce.lab`` and
  ``allreduce.api`` become stand-ins, packages whose ``__init__`` never runs (it would import
  every algorithm).  The stand-in ``allreduce`` offers the helpers the labs give out
  (``chunk_bounds``, ``OPS``, ``Communicator``) and ``allreduce.allreduce``, which the judge
  computes; where the plan offers them, ``allreduce.reduce_scatter`` and ``allgather`` (the
  ring over the judge's communicator, :mod:`allreduce.grading.hub`), on ``allreduce.api``
  too;
* an import hook refuses mpi4py and every module of the library the plan does not list, with
  a message that says why (the file would be missing anyway);
* a name the plan removes (a check's reference in a module the run needs, such as
  ``allreduce.cost.crossover`` beside the ``Model`` the crossover exercise is given) is
  replaced by a stand-in that says why; the sandbox binds a copy of its module's file
  without its definition (:func:`without`), so running that source does not give it back.

Nothing here imports the library at module level: the grader imports this module to plan,
and the sandbox runs it as a script before anything else.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass

LIBRARY = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # .../allreduce

#: Every run: the rank itself.
_RANK = ("grading/__init__.py", "grading/confine.py", "grading/rank.py", "grading/wire.py")
#: A run on ranks: the judge's communicator, the check's call, and the helpers the labs'
#: algorithm exercises give out (chunk bounds, ops, the communicator interface, the sparse
#: vector's encode/decode/merge/split_at); no algorithm module (but :data:`PHASES_GIVEN`).
_RANKS = ("grading/hub.py", "lab/checks.py", "lab/patterns.py", "lab/guard.py",
          "algorithms/_schedule.py", "comm.py", "ops.py", "arrays.py", "cost.py", "topology.py",
          "sparse/vector.py")
#: The capstone's overlap: training (without its own hooks: removed) and what it imports.
_OVERLAP = ("grading/hub.py", "lab/overlap.py", "comm.py", "ops.py", "arrays.py",
            "training.py", "ddp_buckets.py", "transports/__init__.py")
#: A kernel check: the checks' calls (none of their verdicts' references is imported there).
_KERNEL = ("lab/local.py", "lab/exercises.py", "lab/sparse_exercises.py")
#: A kernel check whose call builds a cost model for the function.
_MODELS = ("cost.py", "topology.py")
_LOCAL = {"check_choice": _MODELS, "check_crossover": _MODELS}

STANDINS = ("allreduce", "allreduce.api", "allreduce.algorithms", "allreduce.sparse",
            "allreduce.lab")
#: What the stand-in ``allreduce`` offers: the helpers the labs import from it.
GIVEN = {"chunk_bounds": "allreduce.algorithms._schedule", "Communicator": "allreduce.comm",
         "OPS": "allreduce.ops", "OP_NAMES": "allreduce.ops", "DTYPES": "allreduce.ops"}
#: What it (and the stand-in ``allreduce.api``) offers a run whose exercise's pattern is
#: made of the library's phases (:data:`allreduce.lab.patterns.ENTRY_POINTS`: lab 65's
#: ZeRO-2 step): the phases, as the ring over the judge's communicator
#: (:mod:`allreduce.grading.hub`), whose file such a run gets with them.
PHASES_GIVEN = {"reduce_scatter": "allreduce.grading.hub", "allgather": "allreduce.grading.hub"}
_PHASES_RUN = ("algorithms/ring.py",)
NO_MPI = ("mpi4py is not available when the grader runs your function: it runs without MPI, "
          "so communicate only through the comm your function is given")


@dataclass(frozen=True)
class Plan:
    """What one run gets: ``files`` of the library (relative to its folder) and the dotted
    ``removed`` names, each a check's reference in a module the run needs."""

    files: tuple[str, ...]
    removed: tuple[str, ...] = ()
    phases: tuple[str, ...] = ()  # of PHASES_GIVEN, what the stand-ins offer

    @property
    def modules(self) -> tuple[str, ...]:
        """The library's modules the run may import (besides the stand-ins)."""
        names = []
        for file in self.files:
            parts = file[:-len(".py")].split("/")
            names.append(".".join(["allreduce", *(parts[:-1] if parts[-1] == "__init__"
                                                  else parts)]))
        return tuple(names)


def plan(kind: str, check: str = "", pattern: str = "") -> Plan:
    """The plan of a run of ``kind`` (``"ranks"``, with its exercise's ``pattern``;
    ``"overlap"``; ``"local"``, with its ``check``'s name): outside the sandbox, with the
    whole library at hand."""
    if kind == "ranks":
        from ..lab.patterns import ENTRY_POINTS

        phases = tuple(e for e in ENTRY_POINTS.get(pattern, ()) if e in PHASES_GIVEN)
        return Plan(_RANK + _RANKS + (_PHASES_RUN if phases else ()), phases=phases)
    if kind == "overlap":
        return Plan(_RANK + _OVERLAP, ("allreduce.training.attach_hooks",))
    from ..lab.exercises import LOCAL_CHECKS

    files = _RANK + _KERNEL + _LOCAL.get(check, ())
    modules = Plan(files).modules
    removed = tuple(name for name in LOCAL_CHECKS[check].reference
                    if name.rpartition(".")[0] in modules)
    return Plan(files, removed)


def without(source: str, names) -> str:
    """``source`` with its top-level definitions of ``names`` each replaced by one line that
    raises (their other lines blank, so that line numbers stay): the file the sandbox binds
    for a module that loses a check's reference, so that running the module's source (its
    file is readable) does not give the reference back either."""
    import ast

    lines = source.splitlines(keepends=True)
    found = set()
    for node in ast.parse(source).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) \
                and node.name in names:
            first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
            lines[first - 1:node.end_lineno] = ["\n"] * (node.end_lineno - first + 1)
            lines[first - 1] = (f"def {node.name}(*args, **kwargs): raise NotImplementedError("
                                f"{node.name!r})  # removed for a graded run\n")
            found.add(node.name)
    if set(names) - found:
        raise ValueError(f"no top-level definition of {sorted(set(names) - found)} to remove")
    return "".join(lines)


# -- inside: the rules ----------------------------------------------------------------------------

class Rules:
    """The import hook (first on ``sys.meta_path``): mpi4py, and the library's modules the
    plan does not list, are refused with the reason."""

    def __init__(self, allowed, function: str):
        self.allowed, self.function = set(allowed), function

    def find_spec(self, name, path=None, target=None):
        if name == "mpi4py" or name.startswith("mpi4py."):
            raise ImportError(NO_MPI)
        if name.startswith("allreduce.") and name not in self.allowed:
            raise ImportError(refused(name, self.function))


def refused(name: str, function: str) -> str:
    return (f"{name} is not available when the grader runs your {function}: a graded run has "
            "only the helpers the lab gives out (chunk_bounds, the ops, the comm it is given; "
            "the library's allreduce, reduce_scatter and allgather where the exercise uses "
            "them), not the library's own algorithms or the check's reference, so write it "
            "yourself")


def _standin(name: str, folder: str, doc: str, attributes: dict) -> None:
    import importlib.machinery
    import types

    module = types.ModuleType(name, doc)
    spec = importlib.machinery.ModuleSpec(name, None, is_package=True)
    spec.submodule_search_locations = [folder]
    module.__spec__, module.__path__, module.__package__ = spec, [folder], name
    module.__file__ = os.path.join(folder, "__init__.py")  # where it is outside a run
    module.__dict__.update(attributes)
    sys.modules[name] = module
    parent, _, child = name.rpartition(".")
    if parent:
        setattr(sys.modules[parent], child, module)


def install(modules, removed, function: str, phases=()) -> None:
    """The rules above, for a run that may import ``modules``, loses ``removed`` and is
    offered ``phases`` (:data:`PHASES_GIVEN`)."""
    import importlib

    allowed = set(modules)

    def judges_it(*args, **kwargs):
        raise RuntimeError("allreduce.allreduce is computed by the grader's judge in a run")

    def top(attribute: str):
        if GIVEN.get(attribute) in allowed:
            return getattr(importlib.import_module(GIVEN[attribute]), attribute)
        if attribute in phases:
            return getattr(importlib.import_module(PHASES_GIVEN[attribute]), attribute)
        if f"allreduce.{attribute}" in sys.modules:
            return sys.modules[f"allreduce.{attribute}"]
        raise AttributeError(f"allreduce.{attribute}: {refused('it', function)}")

    def api(attribute: str):
        if attribute in phases:
            return getattr(importlib.import_module(PHASES_GIVEN[attribute]), attribute)
        raise AttributeError(f"allreduce.api.{attribute}: {refused('it', function)}")

    doc = "a stand-in: the grader's run loads none of the library's algorithms"
    for name in STANDINS:
        folder = os.path.join(LIBRARY, *name.split(".")[1:])
        attributes = {"allreduce": {"__getattr__": top, "allreduce": judges_it},
                      "allreduce.api": {"__getattr__": api, "allreduce": judges_it}}
        _standin(name, folder, doc, attributes.get(name, {}))
    sys.meta_path.insert(0, Rules(allowed, function))
    from allreduce.grading.rank import NotHere  # the library's own, now that the rules hold

    for dotted in removed:
        module, _, attribute = dotted.rpartition(".")
        setattr(importlib.import_module(module), attribute, NotHere(
            dotted, f"is what the check compares your {function} with: it is not available "
                    "when the grader runs your function; write it yourself"))


# -- inside: the process --------------------------------------------------------------------------

def limit(config: dict) -> None:
    """The sandbox's limits (before any student code), then the user id, if root."""
    import resource

    limits = {"nproc": resource.RLIMIT_NPROC, "data": resource.RLIMIT_DATA,
              "cpu": resource.RLIMIT_CPU, "fsize": resource.RLIMIT_FSIZE,
              "nofile": resource.RLIMIT_NOFILE, "core": resource.RLIMIT_CORE}
    for name, value in config["limits"].items():
        resource.setrlimit(limits[name], (value, value))
    if os.getuid() == 0 and config.get("uid"):  # root's processes are not counted: leave it
        os.setgroups([])
        os.setgid(config["uid"])
        os.setuid(config["uid"])


def main(argv: list[str]) -> None:
    config = json.loads(argv[0])
    limit(config)
    install(config["modules"], config.get("removed", ()), config.get("function", "function"),
            config.get("phases", ()))
    if config.get("probe"):  # what grading needs works here: say so, and end
        import importlib

        for name in ("allreduce.grading.rank", "allreduce.grading.hub", "allreduce.lab.checks",
                     "allreduce.lab.guard"):
            importlib.import_module(name)

        print(f"confined as uid {os.getuid()}", flush=True)
        os._exit(0)
    from allreduce.grading.rank import serve

    code = 1
    try:
        serve(config, int(argv[1]))
        code = 0
    except BaseException:  # noqa: BLE001 - said on stderr, which the grader keeps
        import traceback

        traceback.print_exc()
        sys.stderr.flush()
    finally:
        os._exit(code)  # not waiting for threads the student's code may have left


if __name__ == "__main__":
    main(sys.argv[1:])
