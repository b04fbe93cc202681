"""Inside the sandbox: the process that runs a student's function as one rank (see
:mod:`allreduce.grading.run`).  Nothing here is trusted by the grader.

Each rank is a process of its own, in a sandbox of its own, started by
:mod:`allreduce.grading.confine` (limits, user id, and what of the library it may load).  It
receives the code to run from the judge, runs the lab's imports and the student's solution
cells, and answers the judge's cases.  Every message through ``comm``, every
``allreduce.allreduce`` and every result goes to the judge, which routes, records and judges
them (:mod:`allreduce.grading.hub`).
"""

from __future__ import annotations

import ast
import json
import re
import socket
import sys
import traceback

from . import wire


def serve(config: dict, fd: int) -> None:
    Rank(config["rank"], socket.socket(fileno=fd)).serve()


class NotHere:
    """Stands for a name a run does not have (a global of the notebook the grader does not
    create, a check's reference): any use says why."""

    def __init__(self, name: str, why: str):
        object.__setattr__(self, "_why", f"`{name}` {why}")

    def _fail(self, *args, **kwargs):
        raise RuntimeError(object.__getattribute__(self, "_why"))

    def __getattr__(self, name):
        self._fail()

    __call__ = __iter__ = __len__ = __getitem__ = __bool__ = __index__ = __int__ = _fail
    __float__ = __add__ = __radd__ = __mul__ = __rmul__ = __setattr__ = _fail

    def __repr__(self) -> str:
        return f"<{object.__getattribute__(self, '_why')}>"


class Rank:
    def __init__(self, rank: int, sock: socket.socket):
        self.rank, self.sock = rank, sock
        self.reader = wire.Reader()
        self.requests = 0

    # -- talking to the judge
    def send(self, header: dict, blobs=()) -> None:
        wire.send(self.sock, header, blobs)

    def receive(self) -> tuple[dict, list]:
        header, blobs = wire.receive(self.sock, self.reader)
        if header.get("op") == "fail":  # the judge ended the case: say why, here too
            raise RuntimeError(header.get("message", "the judge ended the case"))
        return header, blobs

    def ask(self, header: dict, blobs=()) -> tuple[dict, list]:
        self.send(header, blobs)
        return self.receive()

    # -- the run
    def serve(self) -> None:
        setup, _ = self.receive()
        self.spec = setup
        namespace, warning = self._load(setup)
        function = namespace.get(setup["function"])
        if not callable(function):
            missing = f"your solution ({_cells(setup)}) defines no function {setup['function']}"
            self.send({"op": "error", "message": f"{warning.rstrip(' ;.')}; so {missing}"
                       if warning else missing})
            return
        self.send({"op": "ready", "warning": warning})
        while True:
            header, blobs = self.receive()
            if header.get("op") != "case":
                return
            try:
                result, result_blobs = self._case(function, header, blobs)
            except BaseException as error:  # noqa: BLE001 - reported to the judge
                self.send({"op": "error", "message": self._raised(error, header),
                           "where": self._where(error)})
                continue
            self.send(dict(result, op="result"), result_blobs)

    def _load(self, setup: dict) -> tuple[dict, str | None]:
        namespace: dict = {"__name__": "__main__"}
        not_engines = ("is a global of the lab notebook that the grader does not create: it "
                       f"runs your {setup['function']} alone, without the notebook's engines "
                       "or MPI, so use only what your function is given")
        for name in setup["stubs"]:
            namespace[name] = NotHere(name, not_engines)
        for statement in _one_name_each(ast.parse(setup["setup"]).body):
            try:
                module = ast.fix_missing_locations(ast.Module([statement], []))
                exec(compile(module, "<the lab's imports>", "exec"), namespace)  # noqa: S102
            except ImportError as error:
                for alias in getattr(statement, "names", []):
                    name = (alias.asname or alias.name).split(".")[0]
                    namespace[name] = NotHere(name, str(error))
        self._patch()
        namespace[NOT_IMPORTED] = not_imported_in(namespace)
        warning = None
        numbers = list(setup.get("cells") or []) + list(range(1, len(setup["solution"]) + 1))
        for number, source in zip(numbers, setup["solution"]):
            try:
                # the student's code, in this sandboxed rank: what it is here to run
                exec(_compiled(source, f"<cell {number}>"), namespace)  # noqa: S102
            except SyntaxError as error:
                warning = (f"your solution does not parse: {error.msg} (cell {number}, line "
                           f"{error.lineno}: {(error.text or '').strip()[:120]}). ")
            except BaseException as error:  # noqa: BLE001 - the function may still be defined
                warning = (f"running your solution raised {type(error).__name__}: "
                           f"{str(error)[:300]} ({self._where(error)}); ")
        self._patch()
        return namespace, warning

    def _patch(self) -> None:
        """Every ``allreduce.allreduce`` goes to the judge, which counts and computes it."""
        if self.spec["kind"] == "local":
            return
        from .hub import judged_allreduce

        function = judged_allreduce(self)
        sys.modules["allreduce"].allreduce = sys.modules["allreduce.api"].allreduce = function
        if "allreduce.training" in sys.modules:
            sys.modules["allreduce.training"].allreduce = function

    def _case(self, function, header: dict, blobs: list):
        kind, out = self.spec["kind"], []
        if kind == "local":
            from ..lab.exercises import LOCAL_CHECKS
            from ..lab.local import _plain

            check, given = LOCAL_CHECKS[self.spec["check"]], header.get("given")
            results = []
            for index, case in enumerate(header["cases"]):
                self.case_index = index
                results.append(_plain(check.call(function, case, given)))
            return {"results": wire.encode(results, out)}, out
        from .hub import HubCommunicator

        comm = HubCommunicator(self, self.rank, header["size"])
        if kind == "overlap":
            from ..lab.overlap import SubmitLog
            from ..training import train

            log = SubmitLog(function)
            run = train(comm, average="overlap", attach=log, steps=header["steps"])
            return {"got": wire.encode({"weights": run.weights, "late": log.late}, out)}, out
        from ..lab import checks
        from ..lab.guard import Guard
        from ..lab.patterns import ENTRY_POINTS

        given = {k: v.copy() for k, v in wire.decode(header["given"], blobs).items()}
        guard = Guard(self.spec["function"],
                      allowed=ENTRY_POINTS.get(self.spec["pattern"], ()))
        with guard:
            got = checks.run(self.spec["phase"], function, checks.facade(comm, guard.trusted), given)
        return {"got": wire.encode(got, out), "violation": guard.violation}, out

    def _raised(self, error: BaseException, header: dict) -> str:
        name = self.spec["function"]
        what = f"{type(error).__name__}: {str(error)[:300]}"
        if isinstance(error, NameError):
            what += (" (a graded run has the lab's imports and your solution cells of this "
                     "exercise only: define helpers in a solution cell)")
        if self.spec["kind"] == "local":
            case = header["cases"][getattr(self, "case_index", 0)]
            shown = json.dumps(case)
            shown = shown if len(shown) < 120 else shown[:117] + "..."
            return f"{name} raised for the arguments {shown}: {what}"
        if self.spec["kind"] == "overlap":
            return f"training with your {name} raised on rank {self.rank}: {what}"
        return (f"{name} raised on rank {self.rank} for n = {header.get('n')} on "
                f"{header.get('size')} ranks: {what}")

    @staticmethod
    def _where(error: BaseException) -> str:
        frames = [f for f in traceback.extract_tb(error.__traceback__)
                  if re.fullmatch(r"<cell \d+>", f.filename)]
        if not frames:
            return ""
        frame = frames[-1]
        return f"{frame.filename[1:-1]} of your notebook, line {frame.lineno}"


#: ``NAME = !command`` or ``NAME = %magic ...``: IPython's assignment of a magic's result.
_ASSIGNED_MAGIC = re.compile(r"([A-Za-z_][\w.]*(?:\s*,\s*[A-Za-z_][\w.]*)*)\s*=\s*[!%]")


def without_line_magics(source: str) -> str:
    """``source`` with IPython's line magics and shell escapes as Python, each line where it
    was: ``%time STATEMENT`` runs the statement (``x = %time f()`` assigns its value);
    ``x = !ls`` or ``t = %timeit -o f()`` assigns ``None``; any other
    (``%matplotlib inline``, ``!ls``), which does nothing a check looks at, becomes
    ``pass``."""
    lines = source.split("\n")
    for index, line in enumerate(lines):
        code = line.lstrip()
        indent = line[: len(line) - len(code)]
        if assigned := _ASSIGNED_MAGIC.match(code):
            targets = " = ".join(t.strip() for t in assigned.group(1).split(","))
            magic = code[assigned.end() - 1:]
            value = magic[len("%time "):] if magic.startswith("%time ") else "None"
            lines[index] = f"{indent}{targets} = {value}"
        elif code.startswith("%time "):
            lines[index] = indent + code[len("%time "):]
        elif code.startswith(("%", "!")) and not code.startswith("!="):
            lines[index] = indent + "pass"
    return "\n".join(lines)


def _compiled(source: str, name: str):
    """A solution cell compiled as Python, or, when it does not parse as it is (a line
    starting with ``%`` may also continue an expression), with its line magics read as
    IPython would (:func:`without_line_magics`); its imports forgiven
    (:func:`_forgiving_imports`)."""
    try:
        tree = ast.parse(source, name)
    except SyntaxError as error:
        try:
            tree = ast.parse(without_line_magics(source), name)
        except SyntaxError:
            raise error from None  # the cell's own error, not the rewritten one's
    return compile(_forgiving_imports(tree), name, "exec")


#: The name under which :func:`_forgiving_imports`'s stand-ins are made in a run's namespace.
NOT_IMPORTED = "__allreduce_not_imported__"


def not_imported_in(namespace: dict):
    """What :func:`_forgiving_imports`'s handlers call, inside ``except ImportError``: the
    name's binding in ``namespace`` if it has one (Python leaves a name as it was when its
    import fails: ``import allreduce.trace``, refused here, must not take the lab's
    ``allreduce`` away), else a stand-in that says why."""
    def stand_in(name: str):
        if name in namespace:
            return namespace[name]
        return NotHere(name, f"could not be imported where your code is graded "
                             f"({sys.exc_info()[1]}): a graded run gives your function only "
                             "what the lab passes it")
    return stand_in


def _forgiving_imports(tree: ast.Module) -> ast.Module:
    """``tree`` with each import at its top level, one name at a time, in ``try``: a name
    that cannot be imported in a graded run (``mpi4py``, the lab's engines) becomes a
    stand-in that says so when used, as the lab's own imports do, and the rest of the cell
    still runs.  An import left unused cost a correct solution all its points: its
    ImportError stopped the cell before the function was defined."""
    body = []
    for statement in _one_name_each(tree.body):
        if not isinstance(statement, (ast.Import, ast.ImportFrom)) or (
                isinstance(statement, ast.ImportFrom) and statement.module == "__future__"):
            body.append(statement)
            continue
        for alias in statement.names:
            bound = (alias.asname or alias.name).split(".")[0]
            one = (ast.Import([alias]) if isinstance(statement, ast.Import)
                   else ast.ImportFrom(statement.module, [alias], statement.level))
            handler = "pass" if bound == "*" else f"{bound} = {NOT_IMPORTED}({bound!r})"
            guarded = ast.parse(f"try:\n    pass\nexcept ImportError:\n    {handler}\n").body[0]
            guarded.body = [one]
            for node in ast.walk(guarded):
                ast.copy_location(node, statement)
            body.append(guarded)
    tree.body = body
    return tree


def _cells(setup: dict) -> str:
    """"cell 13" or "cells 13, 15": where the solution is in the student's notebook."""
    numbers = setup.get("cells") or []
    if not numbers:
        return "its solution cells"
    return f"cell{'s' * (len(numbers) > 1)} {', '.join(map(str, numbers))} of your notebook"


def _one_name_each(statements):
    """The lab's imports with ``from m import a, b`` split into one statement per name, so
    that a name the run refuses does not take the others with it."""
    for statement in statements:
        if isinstance(statement, ast.ImportFrom) and len(statement.names) > 1:
            for alias in statement.names:
                yield ast.copy_location(ast.ImportFrom(statement.module, [alias],
                                                       statement.level), statement)
        else:
            yield statement
