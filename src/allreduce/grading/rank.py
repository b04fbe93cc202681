"""Inside the sandbox: the processes that run a student's function (see
:mod:`allreduce.grading.run`).  Nothing here is trusted by the grader.

``python -I -m allreduce.grading.rank CONFIG FD...`` first limits itself (processes, memory,
CPU time, file size), then, when started as root, becomes a user id of its own, so that the
process limit binds; then it forks one rank per socket.  Each rank receives the code to run
from the judge, runs the lab's imports and the student's solution cells, and answers the
judge's cases.  Every message through ``comm``, every ``allreduce.allreduce`` and every
result goes to the judge, which routes, records and judges them; mpi4py cannot be imported.
"""

from __future__ import annotations

import json
import os
import resource
import socket
import sys
import traceback

LIMITS = {"nproc": resource.RLIMIT_NPROC, "data": resource.RLIMIT_DATA,
          "cpu": resource.RLIMIT_CPU, "fsize": resource.RLIMIT_FSIZE,
          "nofile": resource.RLIMIT_NOFILE, "core": resource.RLIMIT_CORE}


def main(argv: list[str]) -> None:
    config, fds = json.loads(argv[0]), [int(fd) for fd in argv[1:]]
    for name, value in config["limits"].items():
        resource.setrlimit(LIMITS[name], (value, value))
    if os.getuid() == 0 and config.get("uid"):  # root's processes are not counted: leave it
        os.setgroups([])
        os.setgid(config["uid"])
        os.setuid(config["uid"])
    _preload(config.get("preload", []))
    children = []
    for rank, fd in enumerate(fds):
        pid = os.fork()
        if pid == 0:
            for other in fds:
                if other != fd:
                    os.close(other)
            code = 1
            try:
                Rank(rank, socket.socket(fileno=fd)).serve()
                code = 0
            finally:
                os._exit(code)
        children.append(pid)
    for fd in fds:
        os.close(fd)
    for pid in children:
        os.waitpid(pid, 0)


def _preload(modules: list[str]) -> None:
    """Import what every rank will import, once, before forking them (torch takes seconds;
    it starts no thread on import, so forking after it is safe)."""
    import importlib

    for name in ["numpy", "allreduce", "allreduce.lab", *modules]:
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001, S112 - the rank will report it where it matters
            continue
    if "allreduce.training" in modules:
        sys.modules["allreduce.training"].digits()  # the data set, read once for every rank


# -- one rank -----------------------------------------------------------------------------------

class _NoMPI:
    """Makes ``import mpi4py`` fail with a reason (a meta-path finder)."""

    MESSAGE = ("mpi4py is not available when the grader runs your function: it runs without MPI, "
               "so communicate only through the comm your function is given")

    def find_spec(self, name, path=None, target=None):
        if name == "mpi4py" or name.startswith("mpi4py."):
            raise ImportError(self.MESSAGE)


class NotHere:
    """Stands for a global of the notebook that the grader does not create (``world``,
    ``comm``, ``view``...): any use says why."""

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
        from . import wire

        self.rank, self.sock, self.wire = rank, sock, wire
        self.reader = wire.Reader()
        self.requests = 0

    # -- talking to the judge
    def send(self, header: dict, blobs=()) -> None:
        self.wire.send(self.sock, header, blobs)

    def receive(self) -> tuple[dict, list]:
        header, blobs = self.wire.receive(self.sock, self.reader)
        if header.get("op") == "fail":  # the judge ended the case: say why, here too
            raise RuntimeError(header.get("message", "the judge ended the case"))
        return header, blobs

    def ask(self, header: dict, blobs=()) -> tuple[dict, list]:
        self.send(header, blobs)
        return self.receive()

    # -- the run
    def serve(self) -> None:
        sys.meta_path.insert(0, _NoMPI())
        for name in [m for m in sys.modules if m == "mpi4py" or m.startswith("mpi4py.")]:
            del sys.modules[name]
        setup, _ = self.receive()
        self.spec = setup
        namespace, warning = self._load(setup)
        function = namespace.get(setup["function"])
        if not callable(function):
            self.send({"op": "error", "message": (warning or "") + f"your solution cell "
                       f"defines no function {setup['function']}"})
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
        import allreduce

        namespace: dict = {"__name__": "__main__"}
        not_engines = ("is a global of the lab notebook that the grader does not create: it "
                       f"runs your {setup['function']} alone, without the notebook's engines "
                       "or MPI, so use only what your function is given")
        for name in setup["stubs"]:
            namespace[name] = NotHere(name, not_engines)
        import ast

        for statement in ast.parse(setup["setup"]).body:
            try:
                exec(compile(ast.Module([statement], []), "<the lab's imports>", "exec"),  # noqa: S102
                     namespace)
            except ImportError as error:
                for alias in getattr(statement, "names", []):
                    name = (alias.asname or alias.name).split(".")[0]
                    namespace[name] = NotHere(name, str(error))
        self._patch(allreduce)
        warning = None
        for index, source in enumerate(setup["solution"]):
            try:
                # the student's code, in this sandboxed rank: what it is here to run
                exec(compile(source, f"<your solution cell {index + 1}>", "exec"), namespace)  # noqa: S102
            except SyntaxError as error:
                warning = (f"your solution cell does not parse: {error.msg} (line {error.lineno}"
                           f": {(error.text or '').strip()[:120]}). ")
            except BaseException as error:  # noqa: BLE001 - the function may still be defined
                warning = (f"running your solution cell raised {type(error).__name__}: "
                           f"{str(error)[:300]} ({self._where(error)}); ")
        self._patch(allreduce)
        return namespace, warning

    def _patch(self, allreduce) -> None:
        """Every ``allreduce.allreduce`` goes to the judge, which counts and computes it."""
        import allreduce.api

        allreduce.allreduce = allreduce.api.allreduce = self.allreduce
        if "allreduce.training" in sys.modules:
            sys.modules["allreduce.training"].allreduce = self.allreduce

    def _case(self, function, header: dict, blobs: list):
        from ..lab import LOCAL_CHECKS, checks
        from ..lab.exercises import SubmitLog, _plain
        from ..lab.patterns import Guard

        kind, out = self.spec["kind"], []
        if kind == "local":
            check = LOCAL_CHECKS[self.spec["check"]]
            results = []
            for index, case in enumerate(header["cases"]):
                self.case_index = index
                results.append(_plain(check.call(function, case)))
            return {"results": self.wire.encode(results, out)}, out
        comm = HubCommunicator(self, self.rank, header["size"])
        if kind == "overlap":
            from ..training import train

            log = SubmitLog(function)
            run = train(comm, average="overlap", attach=log, steps=header["steps"])
            return {"got": self.wire.encode({"weights": run.weights, "late": log.late}, out)}, out
        given = {k: v.copy() for k, v in self.wire.decode(header["given"], blobs).items()}
        guard = Guard(self.spec["function"], allow_allreduce=self.spec["pattern"] == "one_allreduce")
        with guard:
            got = checks.run(self.spec["phase"], function, checks.facade(comm, guard.trusted), given)
        return {"got": self.wire.encode(got, out), "violation": guard.violation}, out

    def _raised(self, error: BaseException, header: dict) -> str:
        name = self.spec["function"]
        what = f"{type(error).__name__}: {str(error)[:300]}"
        if self.spec["kind"] == "local":
            case = header["cases"][getattr(self, "case_index", 0)]
            shown = json.dumps(case)
            shown = shown if len(shown) < 120 else shown[:117] + "..."
            return f"{name} raised for the arguments {shown}: {what}"
        if self.spec["kind"] == "overlap":
            return f"training with your {name} raised on rank {self.rank}: {what}"
        return f"{name} raised on rank {self.rank} for n = {header.get('n')}: {what}"

    @staticmethod
    def _where(error: BaseException) -> str:
        frames = [f for f in traceback.extract_tb(error.__traceback__)
                  if f.filename.startswith("<your solution cell")]
        if not frames:
            return ""
        frame = frames[-1]
        return f"{frame.filename[1:-1]}, line {frame.lineno}"

    # -- allreduce.allreduce, computed by the judge
    def allreduce(self, x, comm=None, algorithm: str = "auto", op: str = "sum", out=None, *,
                  servers=None):
        import numpy as np

        is_torch = type(x).__module__.startswith("torch")
        data = np.ascontiguousarray(x.detach().cpu().numpy() if is_torch else np.asarray(x))
        _, blobs = self.ask({"op": "allreduce", "dtype": data.dtype.name,
                                 "count": int(data.size), "reduce": str(op)}, [data.tobytes()])
        result = np.frombuffer(blobs[0], dtype=data.dtype).reshape(data.shape)
        if out is None:
            if is_torch:
                import torch

                return torch.from_numpy(result.copy()).to(x.device)
            return result.copy()
        if type(out).__module__.startswith("torch"):
            import torch

            out.copy_(torch.from_numpy(result.copy()).view_as(out))
        else:
            out[...] = result
        return out


class HubCommunicator:
    """The rank's side of the judge's communicator: each send and receive is a message to
    the judge, which matches them as MPI does and hands the data over."""

    def __new__(cls, owner: Rank, rank: int, size: int):
        from ..comm import Communicator

        class Hub(Communicator):
            def __init__(self):
                self.rank, self.size = rank, size

            def isend(self, buf, dest, tag=0):
                data = self.native(buf)
                owner.requests += 1
                owner.send({"op": "isend", "id": owner.requests, "peer": int(dest),
                            "tag": int(tag), "dtype": data.dtype.name, "count": int(data.size)},
                           [data.tobytes()])
                return owner.requests, None

            def irecv(self, buf, source, tag=0):
                data = self.native(buf)
                owner.requests += 1
                owner.send({"op": "irecv", "id": owner.requests, "peer": int(source),
                            "tag": int(tag), "dtype": data.dtype.name, "count": int(data.size)})
                return owner.requests, data

            def waitall(self, requests):
                import numpy as np

                requests = list(requests)
                _, blobs = owner.ask({"op": "wait", "ids": [r[0] for r in requests]})
                received = [r for r in requests if r[1] is not None]
                for (_, buf), blob in zip(received, blobs, strict=True):
                    buf[...] = np.frombuffer(blob, dtype=buf.dtype).reshape(buf.shape)

            def barrier(self):
                owner.ask({"op": "barrier"})

            def native(self, array):
                import numpy as np

                if type(array).__module__.startswith("torch"):
                    array = array.detach().numpy()
                if not isinstance(array, np.ndarray) or not array.flags.c_contiguous:
                    raise TypeError("comm moves contiguous numpy arrays (a slice buf[lo:hi] "
                                    "of a 1-D array is one)")
                return array

            def allgather_ints(self, values):
                import numpy as np

                reply, _ = owner.ask({"op": "allgather", "value": [int(v) for v in values]})
                return np.array(reply["values"], dtype=np.int64)

            def allgather_object(self, obj):
                reply, _ = owner.ask({"op": "allgather", "value": obj})
                # JSON has no tuples: a value equal to this rank's own comes back as it was
                plain = json.loads(json.dumps(obj))
                return [obj if value == plain else value for value in reply["values"]]

        return Hub()


if __name__ == "__main__":
    main(sys.argv[1:])
