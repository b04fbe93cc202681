"""The communication pattern an exercise teaches, and the check that a student's function
follows it (chapters "Ring allreduce", "Tree allreduce", "Naive allreduce", "Parameter
server").

Right values are not enough: a ``reduce_scatter`` that calls ``MPI_Allreduce``, or the
library's own ``allreduce``, computes the right chunk without passing anything around a
ring.  So every check also compares what the function sent through the ``comm`` it was given
with what the library's own algorithm sends, recorded by the tracing communicator
(:mod:`allreduce.trace`) on thread ranks: per rank, the non-empty messages sent and
received (peer and length, in any order) and the number of steps on the critical path.

:func:`pattern_problem` is that check for one case.  Both the labs' check cells
(:mod:`allreduce.lab.engines`) and the grader (:mod:`allreduce.grading`, from the messages it
routed itself) use it; who did the work is watched apart (:mod:`allreduce.lab.guard`).
"""

from __future__ import annotations

import functools
from collections import Counter
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Pattern:
    """The library function whose trace is the reference, and how to say what it does."""

    algorithm: str  # the library's name for it, as a student reads it in the chapter
    does: str  # "it must ..." in a failure message
    #: the numbers of ranks the grader runs it on, the labs' four engines first: a function
    #: right on four ranks only (a binomial reduce that skips the test `child < p`, a ring
    #: that takes `% 4`) fails on the others
    ranks: tuple[int, ...] = (4, 3, 5)
    #: what its messages must hold, said where one does not (empty: the generic advice);
    #: a pattern that has it is compared message by message in the labs' check cells too
    carries: str = ""


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
        "exchange the whole buffer with partner rank ^ mask at each of log2(p) steps",
        ranks=(4, 2, 8)),  # the exercise's is for a power of two
    "sparse_ring_reduce_scatter": Pattern(
        "the sparse ring's reduce-scatter",
        "pass each chunk's partial sum around the ring: p - 1 steps, each one comm.sendrecv "
        "of the packet's length, then one of the packet (encode's bytes), to the right "
        "neighbour and from the left one"),
    "one_allreduce": Pattern(
        "one allreduce",
        "concatenate the gradients and call allreduce.allreduce once on the whole buffer",
        ranks=(4, 2)),  # a power of two, so that every mean is exact
    "hierarchical": Pattern(
        "the hierarchical allreduce, 2 ranks to a node, a ring across",
        "reduce-scatter around the ring of your node (ranks 2i and 2i + 1), allreduce your "
        "half with a ring over the ranks of the same local rank on every node, then "
        "all-gather around your node's ring",
        ranks=(4, 6)),  # nodes of two; on 4 ranks the ring across has two, left = right
    "zero2": Pattern(
        "a ZeRO-2 step",
        "call allreduce.reduce_scatter on the gradients once, update the weights of the chunk "
        "it returns, then call allreduce.allgather on the weights once",
        carries="a ZeRO-2 step's reduce-scatter sends the gradients' partial sums, and its "
                "all-gather each rank's chunk of the weights after its update"),
}

#: The pattern each value check has unless the check cell names one.
DEFAULT_PATTERN = {"reduce_scatter": "ring_reduce_scatter", "allgather": "ring_allgather",
                   "reduce_to_root": "binomial_reduce", "average_gradients": "one_allreduce",
                   "sparse_reduce_scatter": "sparse_ring_reduce_scatter",
                   "zero2_step": "zero2"}
#: The library's entry points a pattern is made of, ``allreduce.<name>`` for each: the
#: student's function may call them (and one_allreduce's check counts its calls).
ENTRY_POINTS = {"one_allreduce": ("allreduce",), "zero2": ("reduce_scatter", "allgather")}


def _reference_function(pattern: str):
    from ..algorithms import (
        hierarchical,
        naive,
        parameter_server,
        recursive_doubling,
        reduce_broadcast,
        ring,
        tree,
    )

    return {
        "ring_reduce_scatter": lambda buf, comm, op: ring.taught_reduce_scatter(buf, comm, op),
        "ring_allgather": lambda buf, comm, op: ring.allgather(buf, comm),
        "binomial_reduce": lambda buf, comm, op: tree.binomial_reduce(buf, comm, op,
                                                                      np.empty_like(buf)),
        "naive": naive.naive,
        "reduce_broadcast": reduce_broadcast.reduce_broadcast,
        "sharded_parameter_server": parameter_server.sharded_parameter_server,
        "recursive_doubling": recursive_doubling.recursive_doubling,
        "hierarchical": lambda buf, comm, op: hierarchical.hierarchical(
            buf, comm, op, ranks_per_node=2, inner="ring"),
    }[pattern]


def _taught(pattern: str):
    """The library's own step of ``pattern`` as ``run(mine, comm)``, on one rank's inputs of
    a check's case (a dict, as :func:`allreduce.lab.checks.inputs` gives them)."""
    if pattern.startswith("sparse"):
        from ..sparse.sparse_ring import taught_reduce_scatter

        return lambda mine, comm: taught_reduce_scatter(
            mine["indices"].copy(), mine["values"].copy(), int(mine["n"][0]), comm)
    if pattern == "zero2":
        return lambda mine, comm: _taught_zero2(
            mine["weights"].copy(), mine["grads"].copy(), comm, float(mine["lr"][0]))
    return _on_buffer(_reference_function(pattern))


def _on_buffer(function):
    """A dense pattern's ``function(buf, comm, op)`` on a case's buffer, summed."""
    from ..ops import OPS

    return lambda mine, comm: function(mine["buf"].copy(), comm, OPS["sum"])


def _unit_inputs(pattern: str, n: int, size: int, dtype: str) -> list[dict]:
    """Inputs of ``pattern`` whose messages have the case's shape (which :func:`reference`
    counts), whatever their values: a sparse pattern's supports, since they fix its
    messages, with values of ``dtype`` (which sets its packets' lengths)."""
    if pattern.startswith("sparse"):
        return [{"indices": s, "values": np.ones(len(s), dtype), "n": np.array([n])}
                for s in sparse_supports(n, size)]
    bufs = [np.full(n, 1 << rank, dtype=np.int64) for rank in range(size)]
    if pattern == "zero2":
        return [{"weights": np.zeros(n), "grads": b.astype(np.float64), "lr": np.array([1.0])}
                for b in bufs]
    return [{"buf": b} for b in bufs]


@functools.lru_cache(maxsize=256)
def reference(pattern: str, n: int, size: int, dtype: str = "int64"):
    """The library's own trace of ``pattern`` for ``n`` int64 elements on ``size`` thread
    ranks (an :class:`allreduce.trace.Trace`); a sparse pattern's values of ``dtype``, which
    sets its packets' lengths (a dense pattern's messages are counted in elements)."""
    from ..trace import Trace, TracingCommunicator
    from ..transports.threads import run_threads

    run, given = _taught(pattern), _unit_inputs(pattern, n, size, dtype)

    def body(comm):
        tracer = TracingCommunicator(comm)
        run(given[comm.rank], tracer)
        return tracer.events

    return Trace(run_threads(size, body, timeout=30),
                 itemsize=1 if pattern.startswith("sparse") else 8)


def payloads(pattern: str, given: list[dict]) -> list[dict[tuple[int, int], list[bytes]]] | None:
    """What the library's own algorithm of ``pattern`` sends, given every rank's inputs of a
    check's case (:func:`allreduce.lab.checks.inputs`, integer-valued, so any order of
    adding gives the same bits): for each ``(source, dest)``, the bytes of each non-empty
    message, in the order they are sent; then the same for each other order of steps that
    is as right (:data:`ALSO_TAUGHT`), for the grader to take any one of them.  The grader
    compares what each rank sent with them (:mod:`allreduce.grading.matching`): a rank that
    sends zeros in the right pattern and takes the data another way fails, whatever way is
    left open.  ``None`` for ``one_allreduce``, whose data the judge itself adds up."""
    from ..trace import TracingCommunicator
    from ..transports.threads import run_threads

    if pattern == "one_allreduce":
        return None
    size = len(given)

    def sent_by(run) -> dict[tuple[int, int], list[bytes]]:  # run(inputs, communicator)
        def body(comm):
            tracer = TracingCommunicator(comm, payloads=True)
            run(given[comm.rank], tracer)
            return tracer.events

        return _sent(run_threads(size, body, timeout=30))

    others = [_on_buffer(other) for other, sizes in ALSO_TAUGHT.get(pattern, ()) if sizes(size)]
    return [sent_by(_taught(pattern)), *map(sent_by, others)]


def _sent(events) -> dict[tuple[int, int], list[bytes]]:
    """From every rank's events traced with their payloads: for each ``(source, dest)``, the
    bytes of each non-empty message, in the order they were sent."""
    sent: dict[tuple[int, int], list[bytes]] = {}
    for mine in events:
        for e in mine:
            if e.kind == "send" and e.count:
                sent.setdefault((e.rank, e.peer), []).append(
                    np.ascontiguousarray(e.payload).tobytes())
    return sent


def _taught_zero2(weights, grads, comm, lr: float) -> None:
    """Lab 65's ZeRO-2 step as the library's ring runs it (``allreduce.reduce_scatter`` and
    ``allreduce.allgather``, less their call check's header)."""
    from ..algorithms import ring
    from ..ops import OPS

    lo, hi = ring.taught_reduce_scatter(grads, comm, OPS["sum"])
    weights[lo:hi] -= lr * grads[lo:hi]
    ring.allgather(weights, comm)


def _far_first_doubling(buf, comm, op) -> None:
    """Recursive doubling with the far partner first (bit lg p − 1 down to bit 0): on a
    power of two the taught order's peers, sizes and steps, other contents, and as right."""
    scratch = np.empty_like(buf)
    mask = comm.size >> 1
    while mask:
        partner = comm.rank ^ mask
        comm.sendrecv(buf, partner, scratch, partner)
        comm.reduce_local(op, buf, scratch, incoming_first=partner < comm.rank)
        mask >>= 1


#: Other orders of a pattern's steps that are as right as the taught one, each with the
#: sizes it applies to: what a student may write (the grader takes any of them whole).
ALSO_TAUGHT = {"recursive_doubling": ((_far_first_doubling, lambda p: p & (p - 1) == 0),)}


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


def _messages(trace, rank: int, kind: str) -> Counter:
    return Counter((e.peer, e.count) for e in trace.events[rank] if e.kind == kind and e.count)


def _listing(messages: Counter, towards: str) -> str:
    if not messages:
        return "no message"
    count, elements = sum(messages.values()), sum(c * k for (_, c), k in messages.items())
    peers = sorted({peer for peer, _ in messages})
    return (f"{count} message{'s' * (count != 1)} ({elements} element{'s' * (elements != 1)}) "
            f"{towards} "
            f"rank{'s' * (len(peers) != 1)} {', '.join(map(str, peers))}")


def compare(name: str, pattern: str, trace, n: int, dtype: str = "int64") -> str | None:
    """Why ``trace`` (what ``name`` sent through its ``comm`` for ``n`` elements of
    ``dtype``) is not the pattern ``pattern``, in words a student can act on; ``None`` when
    it is."""
    want = PATTERNS[pattern]
    size = trace.size
    ref = reference(pattern, n, size, dtype if pattern.startswith("sparse") else "int64")
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


def content_problem(name: str, pattern: str, n: int, given: list[dict], events) -> str | None:
    """Where a pattern says what its messages carry (:attr:`Pattern.carries`), the labs'
    check compares them too, as the grader does: ``events`` are every rank's, traced with
    their payloads, for the case whose inputs are ``given``."""
    orders, sent = payloads(pattern, given), _sent(events)
    if any(sent == order for order in orders):
        return None
    taught = orders[0]
    for (source, dest), messages in sorted(taught.items()):
        theirs = sent.get((source, dest), [])
        for index, message in enumerate(messages):
            if index >= len(theirs) or theirs[index] != message:
                want = PATTERNS[pattern]
                return (f"{name} for n = {n} on {len(given)} ranks: rank {source}'s message "
                        f"{index + 1} to rank {dest} does not hold what {want.algorithm} "
                        f"sends there: {want.carries}")
    return (f"{name} for n = {n} on {len(given)} ranks sent messages that "
            f"{PATTERNS[pattern].algorithm} does not: {PATTERNS[pattern].carries}")


def pattern_problem(name: str, pattern: str, n: int, size: int, events, calls=None,
                    allreduce_counts=None, give_up=None, dtype: str = "int64") -> str | None:
    """The pattern check for one case of ``n`` elements of ``dtype``, from every rank's
    events (sends, receives, waits) and, for ``one_allreduce``, how many times each rank
    called each entry point (``calls``, a dict per rank) and, when known, how many elements
    each allreduce reduced.  Linear in the events; ``give_up`` as
    :class:`allreduce.trace.Trace` takes it (the grader's deadline)."""
    from ..trace import Trace

    if pattern == "one_allreduce":
        for rank, made in enumerate(calls or []):
            if made.get("allreduce") != 1:
                return (f"your {name} called allreduce.allreduce {made.get('allreduce')} times "
                        f"on rank {rank} for n = {n} on {size} ranks; it must "
                        f"{PATTERNS[pattern].does}")
        total = 6 * n  # three gradients of n, 2n and 3n elements
        for rank, counts in enumerate(allreduce_counts or []):
            if counts and counts != [total]:
                return (f"your {name} reduced {counts[0]} elements in its allreduce on rank "
                        f"{rank} for n = {n} on {size} ranks, not all {total} elements of the "
                        f"gradients; it must {PATTERNS[pattern].does}")
        return None
    return compare(name, pattern, Trace(list(events), itemsize=8, give_up=give_up), n, dtype)
