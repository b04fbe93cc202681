"""Timing collectives the way the field does (nccl-tests, OSU): warm-up, barrier, time, and
check every result; a call's time is the slowest rank's (what the job waits for; nccl-tests
reports the ranks' average by default, its ``-a`` option); the calls of one size in
interleaved rounds (:func:`_interleaved`), so that a shared machine's drift hits them alike."""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

PEER = "MPI_Allreduce"


@dataclass(frozen=True)
class Timing:
    """``seconds``: time of one call on the slowest rank (:func:`_interleaved`); ``wrong``:
    elements of the last result that differ from MPI_Allreduce's (summed over ranks)."""

    seconds: float
    wrong: int


def _mean_time(call, barrier, iterations: int, warmup: int) -> float:
    """This rank's mean seconds per ``call()``: warm-up calls, a barrier, timed calls."""
    for _ in range(warmup):
        call()
    barrier()
    start = time.perf_counter()
    for _ in range(iterations):
        call()
    return (time.perf_counter() - start) / iterations


def _slowest(comm, seconds: float) -> float:
    from mpi4py import MPI

    return comm.allreduce(seconds, op=MPI.MAX)


def time_allreduces(comm, algorithms: list[str], count: int, *, dtype: str = "float32",
                    iterations: int = 10, warmup: int = 2) -> dict[str, Timing]:
    """Time each of ``algorithms`` (names in :data:`allreduce.ALGORITHMS`, or
    ``"MPI_Allreduce"``) on ``count`` elements per rank of ``comm`` (an ``mpi4py``
    communicator), in interleaved rounds (:func:`_interleaved`), and check each result."""
    import allreduce

    from ..testing import exact_input

    x = exact_input(comm.rank, count, dtype, "sum")  # small integers: exact in any order
    expected = np.empty_like(x)
    comm.Allreduce(x, expected)
    outs = {name: np.empty_like(x) for name in algorithms}

    def call_of(name: str):
        out = outs[name]
        if name == PEER:
            return lambda: comm.Allreduce(x, out)
        return lambda: allreduce.allreduce(x, comm, algorithm=name, out=out)

    seconds = _interleaved({name: call_of(name) for name in algorithms}, iterations, warmup,
                           barrier=comm.Barrier, slowest=lambda t: _slowest(comm, t))
    return {name: Timing(seconds[name], comm.allreduce(int(np.count_nonzero(outs[name] != expected))))
            for name in algorithms}


def time_allreduce(comm, algorithm: str, count: int, *, dtype: str = "float32",
                   iterations: int = 10, warmup: int = 2) -> Timing:
    """:func:`time_allreduces` for one algorithm."""
    return time_allreduces(comm, [algorithm], count, dtype=dtype, iterations=iterations,
                           warmup=warmup)[algorithm]


def time_sendrecv(comm, nbytes: int, *, iterations: int = 20, warmup: int = 3) -> float:
    """Seconds for one ring step: every rank sends ``nbytes`` to its right neighbour while
    receiving as many from its left (the message the α-β model prices at α + n·β)."""
    send = np.zeros(nbytes, dtype=np.uint8)
    recv = np.empty_like(send)
    right, left = (comm.rank + 1) % comm.size, (comm.rank - 1) % comm.size

    def step():
        comm.Sendrecv(send, right, 0, recv, left, 0)

    return _slowest(comm, _mean_time(step, comm.Barrier, iterations, warmup))


def time_pingpong(comm, nbytes: int, *, iterations: int = 20, warmup: int = 3) -> float:
    """Seconds for one message of ``nbytes`` from rank 0 to rank 1: half the round trip of
    a ping-pong (OSU's latency test).  The other ranks wait; every rank gets the time."""
    buf = np.zeros(nbytes, dtype=np.uint8)
    seconds = 0.0
    if comm.rank < 2 and comm.size >= 2:
        peer = 1 - comm.rank
        for i in range(warmup + iterations):
            if i == warmup:
                start = time.perf_counter()
            if comm.rank == 0:
                comm.Send(buf, peer, 1)
                comm.Recv(buf, peer, 1)
            else:
                comm.Recv(buf, peer, 1)
                comm.Send(buf, peer, 1)
        seconds = (time.perf_counter() - start) / iterations / 2
    return comm.bcast(seconds, root=0)


def time_reduce(nbytes: int, *, dtype: str = "float32", iterations: int = 20) -> float:
    """Seconds to add ``nbytes`` of ``dtype`` into a buffer in place (the γ term)."""
    a = np.ones(nbytes // np.dtype(dtype).itemsize, dtype=dtype)
    b = np.ones_like(a)
    np.add(a, b, out=a)
    start = time.perf_counter()
    for _ in range(iterations):
        np.add(a, b, out=a)
    return (time.perf_counter() - start) / iterations


#: How many rounds the timed iterations of one size are split into (see :func:`_interleaved`).
ROUNDS = 5


def blocks(iterations: int, rounds: int = ROUNDS) -> list[int]:
    """How many calls each round of :func:`_interleaved` times, in order: ``iterations`` in
    at most ``rounds`` blocks, as even as they come."""
    rounds = max(1, min(rounds, iterations))
    return [iterations // rounds + (index < iterations % rounds) for index in range(rounds)]


def enough(calls: dict, iterations: int, least_timed: float, most: int, *, barrier, slowest,
           probes: int = 1, warm: bool = False) -> dict[str, int]:
    """The timed iterations of each of ``calls`` (name → function): at least ``iterations``,
    and enough for the call to be timed for ``least_timed`` seconds in all, at most ``most``;
    the same on every rank.  A call's time is probed here: ``probes`` calls timed as one
    block after a barrier (the slowest rank's), after one untimed call when ``warm``.  A
    probe that runs cold can only overstate the time, and ask for fewer."""
    counts = {}
    for name, call in calls.items():
        probe = slowest(_mean_time(call, barrier, probes, int(warm)))
        wanted = int(np.ceil(least_timed / probe)) if probe > 0 else iterations
        counts[name] = max(iterations, min(most, wanted))
    return counts


def _interleaved(calls: dict, iterations, warmup: int, *, barrier, slowest,
                 rounds: int = ROUNDS, seed=(), rewarm: bool = False) -> dict:
    """Seconds per call of each of ``calls`` (name → function): the median, over rounds,
    of the slowest rank's mean time per call in that round.

    The iterations (a number, or one per name) are split into ``rounds`` blocks
    (:func:`blocks`), and the rounds take turns among
    the calls, in an order shuffled afresh each round (the same on every rank): on a shared
    machine whose speed drifts over seconds, every call then sees the same mix of fast and
    slow moments, whereas timing each call's iterations in one block credits the drift to
    whichever call ran at the time.  Shuffled rather than rotated, so that no call always
    follows the same one: the sparse benchmark, rotating, measured ``auto`` 29-36% slower
    than ``dense`` at 50% density in two runs although ``auto`` ran ``dense`` there; it
    always came after ``sparse_recursive_doubling``, which allocates and frees hundreds of
    megabytes.  The orders are drawn from ``seed`` and the round's index: the sparse
    benchmark seeds them with its point (supports and density), so that its points do not
    all repeat one order; the dense benchmark's sizes share one.  Each block is timed after a
    barrier, as a whole, on every rank; with ``rewarm``, after one untimed call of its own,
    so that a short block does not pay for the state (caches, freed memory) that the call
    before it left.
    The median of the rounds, rather than their mean, keeps one round that another
    process's burst slowed from deciding the result; it applies to the peers alike.
    ``barrier()`` synchronises the ranks and ``slowest(seconds)`` is the largest over them."""
    for call in calls.values():
        for _ in range(warmup):
            call()
    names = list(calls)
    if not names:
        return {}
    counts = iterations if isinstance(iterations, dict) else dict.fromkeys(names, iterations)
    plan = {name: blocks(counts[name], rounds) for name in names}
    per_call: dict[str, list[float]] = {name: [] for name in names}
    for index in range(max(map(len, plan.values()))):
        order = np.random.default_rng([*seed, index]).permutation(len(names))  # every rank's
        for name in (names[i] for i in order if index < len(plan[names[i]])):
            per_call[name].append(slowest(_mean_time(calls[name], barrier, plan[name][index],
                                                     int(rewarm))))
    return {name: float(np.median(times)) for name, times in per_call.items()}
