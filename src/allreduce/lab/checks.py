"""The labs' check cells for the algorithms: the student's function runs on the engines
through a checking communicator, against MPI's own Allreduce (see :mod:`allreduce.lab`)."""

from __future__ import annotations

import time

import numpy as np

from ..algorithms._schedule import chunk_bounds

# A lab's check cell calls check(view, name, phase) with the name of the student's function
# on the engines and what it should do (a key of PHASES).  It runs there on a duplicate of
# MPI.COMM_WORLD, against MPI's own Allreduce, for several sizes including ones p does not divide, and
# prints one deterministic line.  A wrong answer raises AssertionError naming the size, the
# rank, the chunk and the expected and actual values.  Inputs are contribution bit sets
# (rank r adds 2**r), so "actual" says exactly which ranks' data a chunk holds.

CHECK_COUNTS = (1, 3, 4, 7, 12, 1001)


def _ranks(bits: int, size: int) -> str:
    from ..viz import contributors

    if bits == (1 << size) - 1:
        return f"all {size} ranks"
    names = contributors(bits)
    return ("ranks " + "+".join(map(str, names))) if names else "nothing"


def _first_wrong(name: str, n: int, rank: int, size: int, buf, expected, chunk: int) -> str | None:
    lo, hi = chunk_bounds(n, size, chunk)
    bad = np.flatnonzero(buf[lo:hi] != expected[lo:hi])
    if not len(bad):
        return None
    i = lo + int(bad[0])
    return (f"{name} is wrong for n = {n} on {size} ranks: rank {rank}, chunk {chunk} "
            f"(elements {lo}..{hi - 1}), element {i}: expected the data of "
            f"{_ranks(expected[i], size)}, got {_ranks(buf[i], size)} (value {int(buf[i])})")


def _checking_communicator(world, patience: float):
    """The library's MPI communicator, except that every wait gives up after ``patience``
    seconds without completing: a student's deadlock becomes an error on every rank
    instead of stuck engines."""
    from mpi4py import MPI

    from ..comm import Communicator
    from ..transports.mpi import MPICommunicator

    class CheckingCommunicator(MPICommunicator):
        # the non-blocking forms and waitall below, instead of MPI's blocking calls
        send, recv, sendrecv = Communicator.send, Communicator.recv, Communicator.sendrecv
        wait = Communicator.wait
        receives_any_length = False  # checks by all-gather, not by MPI's blocking Sendrecv

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

    return CheckingCommunicator(world)


def _all_chunks_wrong(name, n, rank, size, buf, expected) -> str | None:
    return next((problem for c in range(size)
                 if (problem := _first_wrong(name, n, rank, size, buf, expected, c))), None)


def _try_reduce_scatter(function, comm, n, mine, expected) -> str | None:
    """Ring reduce-scatter: chunk ``rank`` complete, and its bounds returned."""
    from ..ops import OPS

    rank, size = comm.rank, comm.size
    buf = mine.copy()
    returned = function(buf, comm, OPS["sum"])
    if returned is None or tuple(returned) != chunk_bounds(n, size, rank):
        return (f"reduce_scatter returned {returned} on rank {rank} for n = {n}; it should "
                f"return the bounds of chunk {rank}, {chunk_bounds(n, size, rank)}")
    return _first_wrong("reduce_scatter", n, rank, size, buf, expected, rank)


def _try_allgather(function, comm, n, mine, expected) -> str | None:
    """Ring all-gather: from only chunk ``rank`` finished to every chunk everywhere."""
    rank, size = comm.rank, comm.size
    buf = np.zeros(n, dtype=mine.dtype)
    lo, hi = chunk_bounds(n, size, rank)
    buf[lo:hi] = expected[lo:hi]
    function(buf, comm)
    return _all_chunks_wrong("allgather", n, rank, size, buf, expected)


def _try_reduce_to_root(function, comm, n, mine, expected) -> str | None:
    """A reduce to rank 0, called as ``function(buf, comm, op, scratch)``."""
    from ..ops import OPS

    buf, scratch = mine.copy(), np.empty_like(mine)
    function(buf, comm, OPS["sum"], scratch)
    if comm.rank:
        return None  # only the root's result is defined
    return _all_chunks_wrong("the reduce", n, 0, comm.size, buf, expected)


def _try_allreduce(function, comm, n, mine, expected) -> str | None:
    """A whole allreduce, called as ``function(buf, comm, op)``, in place."""
    from ..ops import OPS

    buf = mine.copy()
    function(buf, comm, OPS["sum"])
    return _all_chunks_wrong("the allreduce", n, comm.rank, comm.size, buf, expected)


def _try_average_gradients(function, comm, n, mine, expected) -> str | None:
    """``function(grads, comm)`` must return the element-wise mean over ranks of a list of
    gradient arrays of different shapes (small integers: the mean is exact)."""
    from mpi4py import MPI

    shapes = [(n,), (2, n), (n, 3, 1)]
    rng = np.random.default_rng([n, comm.rank])
    grads = [rng.integers(-8, 9, shape).astype(np.float64) for shape in shapes]
    means = []
    for g in grads:
        total = np.empty_like(g)
        comm.comm.Allreduce(g, total, op=MPI.SUM)
        means.append(total / comm.size)
    result = function([g.copy() for g in grads], comm)
    if not isinstance(result, (list, tuple)) or len(result) != len(grads):
        return (f"average_gradients returned {type(result).__name__} on rank {comm.rank} for "
                f"n = {n}; it should return a list of {len(grads)} arrays")
    for index, (got, want) in enumerate(zip(result, means)):
        got = np.asarray(got)
        if got.shape != want.shape:
            return (f"average_gradients: gradient {index} has shape {got.shape} on rank "
                    f"{comm.rank} for n = {n}, expected {want.shape}")
        bad = np.argwhere(got != want)
        if len(bad):
            where = tuple(int(i) for i in bad[0])
            return (f"average_gradients is wrong for n = {n} on rank {comm.rank}: gradient "
                    f"{index}, element {where}: expected the mean {want[where]}, got {got[where]}")
    return None


PHASES = {"reduce_scatter": _try_reduce_scatter, "allgather": _try_allgather,
          "reduce_to_root": _try_reduce_to_root, "allreduce": _try_allreduce,
          "average_gradients": _try_average_gradients}


def _run_check(function, phase: str, counts, patience: float) -> list[tuple[int, int, str]]:
    """On each engine: run the student's ``function`` for every count, against MPI's own
    Allreduce; return the problems as ``(n, rank, message)``.  The ranks stop together at
    the first count where any of them found a problem."""
    from mpi4py import MPI

    world = MPI.COMM_WORLD
    rank = world.rank
    problems: list[tuple[int, int, str]] = []
    for n in counts:
        private = world.Dup()  # the student's messages cannot meet anyone else's
        mine = np.full(n, 1 << rank, dtype=np.int64)
        expected = np.empty_like(mine)
        world.Allreduce(mine, expected)  # MPI's own answer, the reference
        try:
            comm = _checking_communicator(private, patience)
            problem = PHASES[phase](function, comm, n, mine, expected)
        except Exception as error:  # reported, not raised: the other ranks must get here too
            problem = f"{phase} raised on rank {rank} for n = {n}: {type(error).__name__}: {error}"
        private.Free()
        if problem:
            problems.append((n, rank, problem))
        if world.allreduce(bool(problem), op=MPI.LOR):
            break
    return problems


def check(view, function: str, phase: str, *, counts=CHECK_COUNTS, timeout: float = 30,
          patience: float = 5) -> None:
    """A lab's check cell: run the engines' ``function`` as ``phase`` (a key of
    :data:`PHASES`) for each count in ``counts`` and print one deterministic line, or raise
    ``AssertionError`` with the first problem (smallest count, then lowest rank).  A wait
    that makes no progress for ``patience`` seconds is reported as a deadlock."""
    import ipyparallel as ipp

    if phase not in PHASES:
        raise ValueError(f"unknown phase {phase!r}; known: {', '.join(PHASES)}")
    result = view.apply_async(_run_check, ipp.Reference(function), phase, list(counts),
                              patience)
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
