"""The communication pattern an exercise teaches, and the check that a student's function
follows it (chapters "Ring allreduce", "Tree allreduce", "Naive allreduce", "Parameter
server").

Right values are not enough: a ``reduce_scatter`` that calls ``MPI_Allreduce``, or the
library's own ``allreduce``, computes the right chunk without passing anything around a
ring.  So every check also compares what the function sent through the ``comm`` it was given
with what the library's own algorithm sends, recorded by the tracing communicator
(:mod:`allreduce.trace`) on thread ranks: per rank, the non-empty messages sent and
received (peer and length, in any order) and the number of steps on the critical path.

:class:`Guard` watches, while the student's function runs, for calls that hand the work to
somebody else: into mpi4py, or into the library's algorithms and entry points, except
through the checking communicator.  Both the labs' check cells (:mod:`allreduce.lab.checks`,
on the engines) and the grader (:mod:`allreduce.grading`, from the messages it routed
itself) use these.
"""

from __future__ import annotations

import functools
import sys
import threading
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import numpy as np


@dataclass(frozen=True)
class Pattern:
    """The library function whose trace is the reference, and how to say what it does."""

    algorithm: str  # the library's name for it, as a student reads it in the chapter
    does: str  # "it must ..." in a failure message


PATTERNS: dict[str, Pattern] = {
    "ring_reduce_scatter": Pattern(
        "the ring reduce-scatter",
        "pass chunks around the ring: p - 1 steps, each one comm.sendrecv of one chunk to "
        "the right neighbour and from the left one"),
    "ring_allgather": Pattern(
        "the ring all-gather",
        "pass the finished chunks around the ring: p - 1 steps, each one comm.sendrecv of "
        "one chunk to the right neighbour and from the left one"),
    "binomial_reduce": Pattern(
        "the binomial-tree reduce",
        "send up a binomial tree: at the level of bit `mask`, a rank with that bit set sends "
        "its buffer to rank - mask and stops; the others receive from rank | mask"),
    "naive": Pattern(
        "the naive all-to-all allreduce",
        "send the whole buffer to every other rank and receive every other rank's, "
        "p - 1 messages each way"),
    "reduce_broadcast": Pattern(
        "reduce then broadcast",
        "have every rank send its buffer to rank 0, which adds them and sends the result "
        "back to each rank"),
    "sharded_parameter_server": Pattern(
        "the sharded parameter server",
        "push each shard to the rank that serves it and pull every other shard back from "
        "its server: p - 1 messages each way in each phase"),
    "recursive_doubling": Pattern(
        "recursive doubling",
        "exchange the whole buffer with partner rank ^ mask at each of log2(p) steps"),
    "sparse_ring_reduce_scatter": Pattern(
        "the sparse ring's reduce-scatter",
        "pass each chunk's partial sum around the ring: p - 1 steps, each one comm.sendrecv "
        "of the packet's length, then one of the packet (encode's bytes), to the right "
        "neighbour and from the left one"),
    "one_allreduce": Pattern(
        "one allreduce",
        "concatenate the gradients and call allreduce.allreduce once on the whole buffer"),
}

#: The pattern each value check has unless the check cell names one.
DEFAULT_PATTERN = {"reduce_scatter": "ring_reduce_scatter", "allgather": "ring_allgather",
                   "reduce_to_root": "binomial_reduce", "average_gradients": "one_allreduce",
                   "sparse_reduce_scatter": "sparse_ring_reduce_scatter"}


def _reference_function(pattern: str):
    from ..algorithms import (naive, parameter_server, recursive_doubling, reduce_broadcast,
                              ring, tree)

    return {
        "ring_reduce_scatter": lambda buf, comm, op: ring.taught_reduce_scatter(buf, comm, op),
        "ring_allgather": lambda buf, comm, op: ring.allgather(buf, comm),
        "binomial_reduce": lambda buf, comm, op: tree.binomial_reduce(buf, comm, op,
                                                                      np.empty_like(buf)),
        "naive": naive.naive,
        "reduce_broadcast": reduce_broadcast.reduce_broadcast,
        "sharded_parameter_server": parameter_server.sharded_parameter_server,
        "recursive_doubling": recursive_doubling.recursive_doubling,
    }[pattern]


@functools.lru_cache(maxsize=256)
def reference(pattern: str, n: int, size: int):
    """The library's own trace of ``pattern`` for ``n`` int64 elements on ``size`` thread
    ranks (an :class:`allreduce.trace.Trace`)."""
    from ..ops import OPS
    from ..trace import Trace, TracingCommunicator
    from ..transports.threads import run_threads

    if pattern.startswith("sparse"):  # the messages depend on the supports: the check's own
        from ..sparse.sparse_ring import taught_reduce_scatter
        from .checks import sparse_supports

        supports = sparse_supports(n, size)

        def body(comm):
            tracer = TracingCommunicator(comm)
            mine = supports[comm.rank]
            taught_reduce_scatter(mine, np.ones(len(mine), np.int64), n, tracer)
            return tracer.events

        return Trace(run_threads(size, body, timeout=30), itemsize=1)
    function = _reference_function(pattern)

    def body(comm):
        tracer = TracingCommunicator(comm)
        function(np.full(n, 1 << comm.rank, dtype=np.int64), tracer, OPS["sum"])
        return tracer.events

    return Trace(run_threads(size, body, timeout=30), itemsize=8)


def _messages(trace, rank: int, kind: str) -> Counter:
    return Counter((e.peer, e.count) for e in trace.events[rank] if e.kind == kind and e.count)


def _listing(messages: Counter, towards: str) -> str:
    if not messages:
        return "no message"
    count, elements = sum(messages.values()), sum(c * k for (_, c), k in messages.items())
    peers = sorted({peer for peer, _ in messages})
    return (f"{count} message{'s' * (count != 1)} ({elements} elements) {towards} "
            f"rank{'s' * (len(peers) != 1)} {', '.join(map(str, peers))}")


def compare(name: str, pattern: str, trace, n: int) -> str | None:
    """Why ``trace`` (what ``name`` sent through its ``comm`` for ``n`` elements) is not the
    pattern ``pattern``, in words a student can act on; ``None`` when it is."""
    want = PATTERNS[pattern]
    size = trace.size
    ref = reference(pattern, n, size)
    advice = f"; it must {want.does}"
    sent = sum(trace.messages_sent(r) for r in range(size))
    if sent == 0 and sum(ref.messages_sent(r) for r in range(size)):
        return (f"your {name} sent 0 messages through comm for n = {n} on {size} ranks (did it "
                f"hand the work to MPI or to the library?){advice}")
    for kind, verb, towards in (("send", "sent", "to"), ("recv", "received", "from")):
        for rank in range(size):
            mine, theirs = _messages(trace, rank, kind), _messages(ref, rank, kind)
            if mine != theirs:
                return (f"{name} on rank {rank} {verb} {_listing(mine, towards)} for n = {n} on "
                        f"{size} ranks; {want.algorithm} {verb} {_listing(theirs, towards)}"
                        f"{advice}")
    steps, wanted = trace.steps(), ref.steps()
    if steps != wanted:
        return (f"{name} takes {steps} steps on the critical path for n = {n} on {size} ranks, "
                f"{want.algorithm} takes {wanted} (are messages that could travel at the same "
                f"time sent one after another?){advice}")
    return None


# -- who did the work ---------------------------------------------------------------------------

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


class Guard:
    """Watch a call for work handed to the library or to mpi4py (``sys.setprofile``, on
    every thread the call starts too).  mpi4py's methods are Cython, which the profiler
    does not report: a function that uses MPI instead of ``comm`` is caught by its trace
    instead (it sent nothing through ``comm``), and the grader's ranks have no mpi4py.  Calls made by the checking communicator itself are
    not watched: it marks them with :meth:`trusted`.  ``allow_allreduce`` lets the
    function call ``allreduce.allreduce`` (the exercises that teach using it), and counts
    the calls.  After the call, :attr:`violation` names the first forbidden call, if any."""

    def __init__(self, name: str, *, allow_allreduce: bool = False, new_threads: bool = True):
        self.name, self.allow_allreduce, self.new_threads = name, allow_allreduce, new_threads
        self.violation: str | None = None
        self.allreduce_calls = 0
        self._inside = threading.local()
        from .. import api

        self._allreduce_code = api.allreduce.__code__

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
            if self.allow_allreduce and code is self._allreduce_code:
                self.allreduce_calls += 1
                self._inside.depth = getattr(self._inside, "depth", 0) + 1
                self._inside.leave = frame
                return
            if _forbidden(code.co_filename):
                where = Path(code.co_filename).relative_to(_PACKAGE.parent)
                self.violation = (f"your {self.name} called the library's {code.co_name} "
                                  f"({where}): the exercise is to write it yourself with "
                                  "comm's sends and receives")
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
