"""The labs' check cells for the algorithms: the student's function runs on the engines
through a checking communicator, against the sum the check computes itself, and must also
follow the exercise's communication pattern (:mod:`allreduce.lab.patterns`).

A check has three parts, kept apart so that the grader can run them in different places
(:mod:`allreduce.grading`): :func:`inputs` makes every rank's data and the expected result,
:func:`run` calls the student's function on one rank, and :func:`judge` says what is wrong
with one rank's result.  :func:`check` runs all three on the engines, for a lab's check cell.
"""

from __future__ import annotations

import time

import numpy as np

from ..algorithms._schedule import chunk_bounds
from ..comm import Communicator
from .patterns import DEFAULT_PATTERN, PATTERNS, Guard, compare

# A lab's check cell calls check(view, name, phase) with the name of the student's function
# on the engines and what it should do (a key of PHASES).  It runs there on a duplicate of
# MPI.COMM_WORLD, for several sizes including ones p does not divide, and prints one
# deterministic line.  A wrong answer raises AssertionError naming the size, the rank, the
# chunk and the expected and actual values; a wrong pattern names what was sent.  Inputs are
# contribution bit sets (rank r adds 2**r) above which each element carries a number only
# that rank knows, so "actual" says exactly which ranks' data a chunk holds, and no rank can
# produce the sum without receiving the others' data.

CHECK_COUNTS = (1, 3, 4, 7, 12, 1001)
PHASES = ("reduce_scatter", "allgather", "reduce_to_root", "allreduce", "average_gradients",
          "sparse_reduce_scatter")


def _ranks(bits: int, size: int) -> str:
    bits &= (1 << size) - 1
    if bits == (1 << size) - 1:
        return f"all {size} ranks"
    names = [rank for rank in range(size) if bits >> rank & 1]
    return ("ranks " + "+".join(map(str, names))) if names else "nothing"


def inputs(phase: str, n: int, size: int, rng: np.random.Generator):
    """Every rank's data for one case, and what the result must be: ``(given, expected)``,
    ``given[rank]`` a dict of named arrays."""
    if phase == "sparse_reduce_scatter":  # the supports fix the pattern; the values are secret
        supports = sparse_supports(n, size)
        values = [rng.integers(1, 1 << 20, len(s)).astype(np.int64) for s in supports]
        expected = np.zeros(n, np.int64)
        for indices, mine in zip(supports, values):
            expected[indices] += mine
        return [{"indices": i, "values": v, "n": np.array([n])}
                for i, v in zip(supports, values)], expected
    if phase == "average_gradients":
        shapes = [(n,), (2, n), (n, 3, 1)]
        grads = [[rng.integers(-8, 9, shape).astype(np.float64) for shape in shapes]
                 for _ in range(size)]
        means = [sum(g[i] for g in grads) / size for i in range(len(shapes))]
        return [{f"g{i}": g for i, g in enumerate(mine)} for mine in grads], means
    secret = rng.integers(0, 1 << 20, (size, n))
    mine = [(1 << rank) + (secret[rank] << size) for rank in range(size)]
    expected = np.sum(mine, axis=0, dtype=np.int64)
    if phase == "allgather":  # each rank starts with only its own chunk, finished
        given = []
        for rank in range(size):
            buf = np.zeros(n, dtype=np.int64)
            lo, hi = chunk_bounds(n, size, rank)
            buf[lo:hi] = expected[lo:hi]
            given.append({"buf": buf})
        return given, expected
    return [{"buf": m.astype(np.int64)} for m in mine], expected


def run(phase: str, function, comm, given: dict) -> dict:
    """Call the student's ``function`` on one rank as ``phase`` says; what it left behind."""
    from ..ops import OPS

    if phase == "average_gradients":
        grads = [given[f"g{i}"].copy() for i in range(len(given))]
        return {"result": function(grads, comm)}
    if phase == "sparse_reduce_scatter":
        result = function(given["indices"].copy(), given["values"].copy(), int(given["n"][0]),
                          comm)
        try:
            indices, values = result
            return {"indices": np.asarray(indices), "values": np.asarray(values)}
        except (TypeError, ValueError):
            return {"returned": repr(result)[:80]}
    buf = given["buf"].copy()
    if phase == "reduce_scatter":
        return {"buf": buf, "returned": function(buf, comm, OPS["sum"])}
    if phase == "allgather":
        function(buf, comm)
    elif phase == "reduce_to_root":
        function(buf, comm, OPS["sum"], np.empty_like(buf))
    else:
        function(buf, comm, OPS["sum"])
    return {"buf": buf}


def _first_wrong(name: str, n: int, rank: int, size: int, buf, expected, chunk: int) -> str | None:
    lo, hi = chunk_bounds(n, size, chunk)
    if getattr(buf, "shape", None) != expected.shape:
        return f"{name}: rank {rank}'s buffer has shape {getattr(buf, 'shape', None)}, expected {expected.shape}"
    bad = np.flatnonzero(buf[lo:hi] != expected[lo:hi])
    if not len(bad):
        return None
    i = lo + int(bad[0])
    got = int(buf[i])
    what = _ranks(got, size)
    if got & ((1 << size) - 1) == int(expected[i]) & ((1 << size) - 1):
        what += " (but not their data: was it computed without receiving it?)"
    return (f"{name} is wrong for n = {n} on {size} ranks: rank {rank}, chunk {chunk} "
            f"(elements {lo}..{hi - 1}), element {i}: expected the data of "
            f"{_ranks(int(expected[i]), size)}, got {what} (value {got})")


def _all_chunks_wrong(name, n, rank, size, buf, expected) -> str | None:
    return next((problem for c in range(size)
                 if (problem := _first_wrong(name, n, rank, size, buf, expected, c))), None)


def judge(phase: str, name: str, n: int, rank: int, size: int, got: dict, expected) -> str | None:
    """What is wrong with what ``run`` left on ``rank`` (``None``: nothing)."""
    if phase == "average_gradients":
        result = got.get("result")
        if not isinstance(result, (list, tuple)) or len(result) != len(expected):
            return (f"{name} returned {type(result).__name__} on rank {rank} for n = {n}; it "
                    f"should return a list of {len(expected)} arrays")
        for index, (mine, want) in enumerate(zip(result, expected)):
            mine = np.asarray(mine)
            if mine.shape != want.shape:
                return (f"{name}: gradient {index} has shape {mine.shape} on rank {rank} for "
                        f"n = {n}, expected {want.shape}")
            bad = np.argwhere(mine != want)
            if len(bad):
                where = tuple(int(i) for i in bad[0])
                return (f"{name} is wrong for n = {n} on rank {rank}: gradient {index}, element "
                        f"{where}: expected the mean {want[where]}, got {mine[where]}")
        return None
    if phase == "sparse_reduce_scatter":
        return _sparse_chunk_wrong(name, n, rank, size, got, expected)
    buf = got.get("buf")
    if phase == "reduce_scatter":
        returned, bounds = got.get("returned"), chunk_bounds(n, size, rank)
        try:
            right = returned is not None and tuple(int(b) for b in returned) == bounds
        except (TypeError, ValueError):
            right = False
        if not right:
            return (f"{name} returned {returned} on rank {rank} for n = {n}; it should return "
                    f"the bounds of chunk {rank}, {bounds}")
        return _first_wrong(name, n, rank, size, buf, expected, rank)
    if phase == "reduce_to_root" and rank:
        return None  # only the root's result is defined
    return _all_chunks_wrong(name, n, rank, size, buf, expected)


def sparse_supports(n: int, size: int) -> list[np.ndarray]:
    """Every rank's indices for the sparse checks: a fixed draw (so that the library's own
    trace, the pattern, has the same messages) that overlaps and clusters in the low
    indices, as Top-k gradients do; about a third of n on each rank, none on rank 1."""
    rng = np.random.default_rng([n, size])
    weights = np.exp(-np.arange(n) / max(n / 4, 1))
    supports = []
    for rank in range(size):
        k = 0 if rank == 1 else min(n, max(1, n // 3))
        chosen = rng.choice(n, size=k, replace=False, p=weights / weights.sum()) if n else []
        supports.append(np.sort(np.asarray(chosen, np.int64)))
    return supports


def _sparse_chunk_wrong(name, n, rank, size, got, expected) -> str | None:
    lo, hi = chunk_bounds(n, size, rank)
    if "indices" not in got:
        return (f"{name} returned {got.get('returned')} on rank {rank} for n = {n}; it should "
                f"return the pair (indices, values) of chunk {rank}, elements {lo}..{hi - 1}")
    indices, values = got["indices"], got["values"]
    want = np.flatnonzero(expected[lo:hi]) + lo  # every value is positive: no sum is zero
    if indices.shape != want.shape or not np.array_equal(indices, want):
        return (f"{name} is wrong for n = {n} on {size} ranks: rank {rank} returned indices "
                f"{_short(indices)} for chunk {rank} (elements {lo}..{hi - 1}); the union of "
                f"the ranks' supports there is {_short(want)}")
    bad = np.flatnonzero(values != expected[want]) if values.shape == want.shape else [0]
    if len(bad):
        i = int(bad[0])
        shown = values[i] if values.shape == want.shape else f"{len(values)} values"
        return (f"{name} is wrong for n = {n} on {size} ranks: rank {rank}, index {want[i]}: "
                f"expected the sum {expected[want[i]]}, got {shown}")
    return None


def _short(array) -> str:
    items = [int(v) for v in np.asarray(array).ravel()[:6]]
    return str(items)[:-1] + (", ...]" if np.size(array) > 6 else "]")


# -- the checking communicator ------------------------------------------------------------------

def facade(target: Communicator, trusted) -> Communicator:
    """A communicator that does what ``target`` does and offers nothing else: no attribute
    leads to ``target`` or to a raw MPI communicator (the student's function gets this).
    Its calls run inside ``trusted()`` (see :class:`~allreduce.lab.patterns.Guard`)."""

    class CheckingCommunicator(Communicator):
        __slots__ = ()
        rank, size = target.rank, target.size
        receives_any_length = False

        def isend(self, buf, dest: int, tag: int = 0):
            with trusted():
                return target.isend(buf, dest, tag)

        def irecv(self, buf, source: int, tag: int = 0):
            with trusted():
                return target.irecv(buf, source, tag)

        def waitall(self, requests) -> None:
            with trusted():
                target.waitall(list(requests))

        def barrier(self) -> None:
            with trusted():
                target.barrier()

        def reduce_local(self, op, inout, incoming, *, incoming_first=False, source=None):
            with trusted():
                target.reduce_local(op, inout, incoming, incoming_first=incoming_first,
                                    source=source)

        def native(self, array):
            return target.native(array)

        def allgather_ints(self, values):
            with trusted():
                return target.allgather_ints(values)

        def allgather_object(self, obj):
            with trusted():
                return target.allgather_object(obj)

        def split(self, colors):  # a group of these ranks, checked the same way
            with trusted():
                return facade(target.split(colors), trusted)

        def nodes(self):
            with trusted():
                return target.nodes()

    return CheckingCommunicator()


def _mpi_communicator(world, patience: float) -> Communicator:
    """The library's MPI communicator, except that every wait gives up after ``patience``
    seconds without completing: a student's deadlock becomes an error on every rank
    instead of stuck engines."""
    from mpi4py import MPI

    from ..transports.mpi import MPICommunicator

    class Patient(MPICommunicator):
        # the non-blocking forms and waitall below, instead of MPI's blocking calls
        send, recv, sendrecv = Communicator.send, Communicator.recv, Communicator.sendrecv
        wait = Communicator.wait
        receives_any_length = False

        def waitall(self, requests):
            requests = list(requests)
            statuses = [MPI.Status() for _ in requests]
            deadline = time.monotonic() + patience
            while not self._testall(requests, statuses):
                if time.monotonic() > deadline:
                    for request in requests:
                        if request != MPI.REQUEST_NULL:
                            request.Cancel()
                    raise TimeoutError(f"rank {self.rank} waited {patience:.0f} s for a message "
                                       "that never came: a deadlock?")
                time.sleep(0.0005)

        @staticmethod
        def _testall(requests, statuses) -> bool:
            try:
                return MPI.Request.Testall(requests, statuses)
            except MPI.Exception:  # the reason is in the statuses
                errors = [s.Get_error() for s in statuses if s.Get_error() != MPI.SUCCESS]
                if MPI.ERR_TRUNCATE in [MPI.Get_error_class(e) for e in errors]:
                    raise RuntimeError("a message was longer than its receive buffer: sender "
                                       "and receiver disagree on the chunk") from None
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
    for n in counts:
        private = world.Dup()  # the student's messages cannot meet anyone else's
        given, expected = inputs(phase, n, size, np.random.default_rng(n))
        guard = Guard(name, allow_allreduce=pattern == "one_allreduce")
        tracer = TracingCommunicator(_mpi_communicator(private, patience))
        try:
            with guard:
                got = run(phase, function, facade(tracer, guard.trusted), given[rank])
            problem = guard.violation or judge(phase, name, n, rank, size, got, expected)
        except Exception as error:  # noqa: BLE001 - reported: the other ranks must get here too
            problem = guard.violation or (f"{name} raised on rank {rank} for n = {n}: "
                                          f"{type(error).__name__}: {error}")
        private.Free()
        if not world.allreduce(bool(problem), op=MPI.LOR):
            problem = pattern_problem(name, pattern, n, size, world.allgather(tracer.events),
                                      world.allgather(guard.allreduce_calls))
            problem = problem if rank == 0 else None
        if problem:
            problems.append((n, rank, problem))
        if world.allreduce(bool(problem), op=MPI.LOR):
            break
    return problems


def pattern_problem(name: str, pattern: str, n: int, size: int, events, allreduce_calls,
                    allreduce_counts=None) -> str | None:
    """The pattern check for one case, from every rank's events (sends, receives, waits)
    and the number of ``allreduce.allreduce`` calls each rank made (and, when known, how many
    elements each call reduced)."""
    from ..trace import Trace

    if pattern == "one_allreduce":
        for rank, calls in enumerate(allreduce_calls):
            if calls != 1:
                return (f"your {name} called allreduce.allreduce {calls} times on rank {rank} "
                        f"for n = {n}; it must {PATTERNS[pattern].does}")
        total = 6 * n  # three gradients of n, 2n and 3n elements
        for rank, counts in enumerate(allreduce_counts or []):
            if counts and counts != [total]:
                return (f"your {name} reduced {counts[0]} elements in its allreduce on rank "
                        f"{rank} for n = {n}, not all {total} elements of the gradients; it must "
                        f"{PATTERNS[pattern].does}")
        return None
    return compare(name, pattern, Trace(list(events), itemsize=8), n)


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
    print(f"{function}: correct on {len(view)} ranks for n = {', '.join(map(str, counts))}")
