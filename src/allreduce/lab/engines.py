"""The check cell of an algorithm exercise, on the lab's engines: :func:`check` runs the
student's function on every engine through the checking communicator
(:func:`allreduce.lab.checks.facade`) over a duplicate of ``MPI.COMM_WORLD``, for several
sizes including ones p does not divide, judges its values (:mod:`allreduce.lab.checks`) and
its communication pattern (:mod:`allreduce.lab.patterns`), and prints one deterministic
line, or raises ``AssertionError`` naming the size, the rank, the chunk and the expected and
actual values, or what was sent.  The engines share a machine (its ``/tmp``, its loopback),
so a student could pass data another way there: a check cell is practice, the grader's
verdict (:mod:`allreduce.grading`) is the grade.
"""

from __future__ import annotations

import time

import numpy as np

from ..comm import Communicator
from .checks import CHECK_COUNTS, PHASES, cases, described, facade, in_dtype, inputs, judge, run
from .guard import Guard
from .patterns import (DEFAULT_PATTERN, ENTRY_POINTS, PATTERNS, content_problem,
                       pattern_problem)


def patient(world, patience: float = 5.0) -> Communicator:
    """The library's communicator over the mpi4py communicator ``world``, except that every
    wait gives up after ``patience`` seconds without completing: a student's deadlock
    becomes an error on every rank that waits, instead of stuck engines (the check cells
    run on it; so can a lab's own cell that calls the student's functions)."""
    from mpi4py import MPI

    from ..transports.mpi import MPICommunicator

    class Patient(MPICommunicator):
        # the non-blocking forms and waitall below, instead of MPI's blocking calls
        send, recv, sendrecv = Communicator.send, Communicator.recv, Communicator.sendrecv
        wait = Communicator.wait
        receives_any_length = False

        def __init__(self, comm):
            super().__init__(comm)
            self._posted: dict[int, tuple] = {}  # a receive's request, source and buffer

        def irecv(self, buf, source: int, tag: int = 0):
            request = super().irecv(buf, source, tag)
            self._posted[id(request)] = (request, source, buf)  # (it keeps its id its own)
            return request

        def waitall(self, requests):
            requests = list(requests)
            statuses = [MPI.Status() for _ in requests]
            deadline = time.monotonic() + patience
            try:
                while not self._testall(requests, statuses):
                    if time.monotonic() > deadline:
                        for request in requests:
                            if request != MPI.REQUEST_NULL:
                                request.Cancel()
                        raise TimeoutError(f"rank {self.rank} waited {patience:.0f} s for a "
                                           "message that never came: a deadlock?")
                    time.sleep(0.0005)
            finally:
                for request in requests:
                    self._posted.pop(id(request), None)

        def _testall(self, requests, statuses) -> bool:
            try:
                return MPI.Request.Testall(requests, statuses)
            except MPI.Exception:  # the reason is in the statuses
                for request, status in zip(requests, statuses):
                    error = status.Get_error()
                    if error != MPI.SUCCESS and MPI.Get_error_class(error) == MPI.ERR_TRUNCATE:
                        _, source, buf = self._posted.get(id(request),
                                                          (None, status.Get_source(), None))
                        count = None if buf is None else int(np.prod(buf.shape))
                        posted = "" if buf is None else \
                            f" of {count} {buf.dtype} element{'s' * (count != 1)}"
                        raise RuntimeError(
                            f"rank {self.rank} posted a receive{posted} from rank {source}, "
                            f"and rank {source} sent a longer message: sender and receiver "
                            "disagree on the chunk") from None
                errors = [s.Get_error() for s in statuses if s.Get_error() != MPI.SUCCESS]
                raise RuntimeError("; ".join(MPI.Get_error_string(e) for e in errors)) from None

    return Patient(world)


def _run_check(function, name: str, phase: str, pattern: str, counts,
               patience: float) -> list[tuple[int, int, str]]:
    """On each engine: run the student's ``function`` for every count; return the problems
    as ``(n, rank, message)``.  The ranks stop together at the first count where any of
    them found a problem."""
    from mpi4py import MPI

    from ..trace import TracingCommunicator

    world = MPI.COMM_WORLD
    rank, size = world.rank, world.size
    problems: list[tuple[int, int, str]] = []
    for n, dtype in cases(phase, size, counts):
        private = world.Dup()  # the student's messages cannot meet anyone else's
        given, expected = inputs(phase, n, size, np.random.default_rng(n), dtype)
        guard = Guard(name, allowed=ENTRY_POINTS.get(pattern, ()))
        contents = bool(PATTERNS[pattern].carries)  # compared message by message, as graded
        tracer = TracingCommunicator(patient(private, patience), payloads=contents)
        try:
            with guard:
                got = run(phase, function, facade(tracer, guard.trusted), given[rank])
            problem = guard.violation or in_dtype(
                judge(phase, name, n, rank, size, got, expected), phase, dtype)
        except Exception as error:  # noqa: BLE001 - reported: the other ranks must get here too
            problem = guard.violation or in_dtype(
                f"{name} raised on rank {rank} for n = {n} on {size} ranks: "
                f"{type(error).__name__}: {error}", phase, dtype)
        private.Free()
        if not world.allreduce(bool(problem), op=MPI.LOR):
            events = world.allgather(tracer.events)
            problem = pattern_problem(name, pattern, n, size, events,
                                      world.allgather(guard.calls), dtype=dtype)
            if not problem and contents:
                problem = content_problem(name, pattern, n, given, events)
            problem = in_dtype(problem, phase, dtype) if rank == 0 else None
        if problem:
            problems.append((n, rank, problem))
        if world.allreduce(bool(problem), op=MPI.LOR):
            break
    return problems


def check(view, function: str, phase: str, *, pattern: str | None = None,
          counts=CHECK_COUNTS, timeout: float = 30, patience: float = 5) -> None:
    """A lab's check cell: run the engines' ``function`` as ``phase`` (one of
    :data:`PHASES`) for each count in ``counts``, check its values and its communication
    pattern (``pattern``, a key of :data:`allreduce.lab.patterns.PATTERNS`; by default the
    phase's own), and print one deterministic line, or raise ``AssertionError`` with the
    first problem (smallest count, then lowest rank).  A wait that makes no progress for
    ``patience`` seconds is reported as a deadlock."""
    import ipyparallel as ipp

    if phase not in PHASES:
        raise ValueError(f"unknown phase {phase!r}; known: {', '.join(PHASES)}")
    pattern = pattern or DEFAULT_PATTERN.get(phase)
    if pattern not in PATTERNS:
        raise ValueError(f"unknown pattern {pattern!r}; known: {', '.join(PATTERNS)}")
    result = view.apply_async(_run_check, ipp.Reference(function), function, phase, pattern,
                              list(counts), patience)
    try:
        problems = result.get(timeout=timeout)
    except ipp.error.CompositeError as error:  # the name is looked up on the engines first
        if any(name == "NameError" and repr(function) in str(value)
               for name, value, *_ in error.elist):
            raise NameError(f"the engines have no {function}: run the %%px cell that defines "
                            "it (your solution cell above), then this check") from None
        raise
    except ipp.error.TimeoutError:
        raise TimeoutError(
            f"{function} did not finish on all ranks within {timeout:.0f} s: a deadlock (a "
            "receive with no matching send) or an endless loop.  The engines are stuck; "
            "restart the kernel, which stops them, and run the notebook again.") from None
    found = sorted(problem for per_rank in problems for problem in per_rank)
    if found:  # the smallest size, then the lowest rank: the same report on every run
        # a rank that raised explains the others' time-outs, so it goes first
        found.sort(key=lambda p: (p[0], "TimeoutError" in p[2], p[1]))
        more = f"  ({len(found) - 1} more on other ranks)" if len(found) > 1 else ""
        raise AssertionError(found[0][2] + more)
    print(f"{function}: correct on {len(view)} ranks for {described(phase, len(view), counts)}")
