"""Who did the work: :class:`Guard` watches, while a student's function runs, for calls
that hand the work to somebody else: into mpi4py, or into the library's algorithms and entry
points (or, for a check in the kernel, into the check's own reference), except through the
checking communicator (:func:`allreduce.lab.checks.facade`).  The labs' check cells use it
(:mod:`allreduce.lab.engines`, :mod:`allreduce.lab.local`); in the grader's runs the
reference is not there at all (:mod:`allreduce.grading.confine`), so there it is a second
line, not the only one.
"""

from __future__ import annotations

import sys
import threading
from pathlib import Path

_PACKAGE = Path(__file__).resolve().parent.parent
#: the library's files a student's function may call directly: the helpers the labs give out
_ALLOWED = {_PACKAGE / "algorithms" / "_schedule.py", _PACKAGE / "ops.py",
            _PACKAGE / "arrays.py", _PACKAGE / "comm.py", _PACKAGE / "cost.py",
            _PACKAGE / "ddp_buckets.py", _PACKAGE / "sparse" / "vector.py"}
_FORBIDDEN_DIRS = (_PACKAGE / "algorithms", _PACKAGE / "transports", _PACKAGE / "sparse")
_FORBIDDEN_FILES = {_PACKAGE / "api.py", _PACKAGE / "validation.py", _PACKAGE / "training.py",
                    _PACKAGE / "ddp_hook.py"}


def _forbidden(filename: str) -> bool:
    path = Path(filename)
    if path in _ALLOWED:
        return False
    return path in _FORBIDDEN_FILES or any(d in path.parents for d in _FORBIDDEN_DIRS)


def _resolve(references) -> tuple[set, set, tuple]:
    """Dotted names (modules, packages, functions) as what :class:`Guard` compares a call
    with: code objects, files and folders."""
    import importlib

    codes, files, folders = set(), set(), []
    for name in references:
        try:
            module = importlib.import_module(name)
        except ImportError:
            owner, _, attribute = name.rpartition(".")
            codes.add(getattr(importlib.import_module(owner), attribute).__code__)
            continue
        if hasattr(module, "__path__"):
            folders += [Path(p).resolve() for p in module.__path__]
        else:
            files.add(Path(module.__file__).resolve())
    return codes, files, tuple(folders)


def _referenced(code, codes, files, folders) -> bool:
    if code in codes:
        return True
    path = Path(code.co_filename)
    return path in files or any(folder in path.parents for folder in folders)


def _entry_code(name: str):
    """The code of ``allreduce.<name>`` as this process has it (the library's, or in a
    graded run the judge's or the ring's: :mod:`allreduce.grading.hub`)."""
    for module in ("allreduce.api", "allreduce"):
        code = getattr(getattr(sys.modules.get(module), name, None), "__code__", None)
        if code is not None:
            return code
    return None


class Guard:
    """Watch a call for work handed to the library or to mpi4py (``sys.setprofile``, on
    every thread the call starts too).  mpi4py's methods are Cython, which the profiler
    does not report: a function that uses MPI instead of ``comm`` is caught by its trace
    instead (it sent nothing through ``comm``), and the grader's ranks have no mpi4py.  Calls made by the checking communicator itself are
    not watched: it marks them with :meth:`trusted`.  ``allowed`` names the library's entry
    points the function may call, ``"allreduce"`` for ``allreduce.allreduce``,
    ``"reduce_scatter"`` for ``allreduce.reduce_scatter``, ... (the exercises that teach
    using them); :attr:`calls` counts each one's calls.
    After the call, :attr:`violation` names the first forbidden call, if any."""

    def __init__(self, name: str, *, allowed: tuple[str, ...] = (), new_threads: bool = True,
                 references=None):
        self.name, self.new_threads = name, new_threads
        self.violation: str | None = None
        self.calls = dict.fromkeys(allowed, 0)
        self._inside = threading.local()
        self._references = None if references is None else _resolve(references)
        # the entry points whose calls are counted (a grader's run has its own instead)
        self._entries = {code: entry for entry in allowed if (code := _entry_code(entry))}

    def trusted(self):
        """A context in which calls are not watched (the checking communicator's own)."""
        guard = self

        class _Trusted:
            def __enter__(self):
                guard._inside.depth = getattr(guard._inside, "depth", 0) + 1

            def __exit__(self, *exc):
                guard._inside.depth -= 1

        return _Trusted()

    def _profile(self, frame, event, arg):
        if self.violation or getattr(self._inside, "depth", 0):
            return
        if event == "call":
            code = frame.f_code
            if code in self._entries:
                self.calls[self._entries[code]] += 1
                self._inside.depth = getattr(self._inside, "depth", 0) + 1
                self._inside.leave = frame
                return
            if self._references is not None:
                if _referenced(code, *self._references):
                    where = Path(code.co_filename).relative_to(_PACKAGE.parent)
                    self.violation = (f"your {self.name} called the library's {code.co_name} "
                                      f"({where}), which is what the check compares it with: "
                                      "the exercise is to write it yourself")
            elif _forbidden(code.co_filename):
                where = Path(code.co_filename).relative_to(_PACKAGE.parent)
                may = " and ".join(f"allreduce.{entry}" for entry in self.calls)
                did = "imported the library's module" if code.co_name == "<module>" else \
                    f"called the library's {code.co_name}"
                advice = f"of the library it may call {may} only" if may else \
                    "the exercise is to write it yourself with comm's sends and receives"
                self.violation = f"your {self.name} {did} ({where}): {advice}"
        elif event == "c_call":
            module = getattr(arg, "__module__", None) or type(getattr(arg, "__self__", None)).__module__
            if module and module.startswith("mpi4py"):
                self.violation = (f"your {self.name} called MPI ({getattr(arg, '__qualname__', arg)}"
                                  ") directly: it must communicate only through the comm it is "
                                  "given")

    def _profile_outer(self, frame, event, arg):
        leave = getattr(self._inside, "leave", None)
        if leave is not None and event == "return" and frame is leave:
            self._inside.leave = None
            self._inside.depth -= 1
            return
        self._profile(frame, event, arg)

    def __enter__(self):
        self._previous = sys.getprofile(), threading.getprofile()
        sys.setprofile(self._profile_outer)
        if self.new_threads:  # threads that the function starts are watched too
            threading.setprofile(self._profile_outer)
        return self

    def __exit__(self, *exc):
        sys.setprofile(self._previous[0])
        if self.new_threads:
            threading.setprofile(self._previous[1])
        return False
