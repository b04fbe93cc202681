"""Pipelined ring allreduce: the ring, with each chunk cut into segments whose transfers
overlap the reduction of the segments before them.

Taught in the chapter "Choosing an algorithm".  Each reduce-scatter step of the ring
(:mod:`~allreduce.algorithms.ring`) sends one chunk and receives another, then reduces it.
Here the step posts the receives and sends of all ``S`` segments of its chunks at once
(non-blocking), and reduces segment ``k`` as soon as it has arrived, while segments
``k + 1, ...`` are still in flight.  The all-gather has nothing to overlap and is the ring's.
A chunk is cut into segments of at most :data:`SEGMENT_BYTES`; a small message has one
segment and is exactly the ring.

Cost in the α-β-γ model (:data:`COST`): (p−1)(S+1)·α + 2·(p−1)/p·n·β + (p−1)/p·n·γ, with
S = ⌈n/(p·SEGMENT_BYTES)⌉: more messages than the ring and the same bytes.  The model adds
the terms, so it can only rank this below the ring; what pipelining buys, overlapping
transfer and reduction, is exactly what an additive model leaves out.  It pays where the
data moves without the CPU (a network card, a GPU's copy engines); with MPI over shared
memory and more processes than cores, as on the course's machine, there is nothing idle to
overlap with, and the benchmark shows it.
"""

from __future__ import annotations

from ..arrays import nbytes
from ..comm import Communicator
from ..cost import Formula
from ..ops import Op
from ._schedule import chunk_bounds, left, right
from .ring import allgather

#: The largest segment, in bytes.
SEGMENT_BYTES = 256 * 1024

#: S = ⌈n/(p·B)⌉ segments per reduce-scatter step, one message each; the ring's bytes.
COST = Formula(steps="(p - 1)*(ceiling(n/(p*B)) + 1)", bytes="2*(p - 1)/p*n",
               reduced="(p - 1)/p*n", constants=(("B", SEGMENT_BYTES),))


def segments(chunk_bytes: int) -> int:
    """How many segments a chunk of ``chunk_bytes`` bytes is cut into."""
    return max(1, -(-chunk_bytes // SEGMENT_BYTES))


def pipelined_ring(buf, comm: Communicator, op: Op, *, source=None) -> None:
    """Pipelined ring allreduce in place (of ``source`` into ``buf`` when ``source`` is
    given, as :func:`~allreduce.algorithms.ring.ring` does)."""
    p, rank, n = comm.size, comm.rank, len(buf)
    mine = buf if source is None else source
    if p == 1:
        if source is not None:
            comm.copy(buf, source)
        return
    itemsize = nbytes(buf) // n if n else 1
    parts = segments(-(-n // p) * itemsize)
    incoming = comm.scratch(-(-n // p), like=buf)  # the largest chunk
    for step in range(p - 1):
        send_lo, send_hi = chunk_bounds(n, p, (rank - step - 1) % p)
        recv_lo, recv_hi = chunk_bounds(n, p, (rank - step - 2) % p)
        sent = (mine if step == 0 else buf)[send_lo:send_hi]
        pieces = [chunk_bounds(recv_hi - recv_lo, parts, k) for k in range(parts)]
        receives = [comm.irecv(incoming[lo:hi], left(comm), tag=k)
                    for k, (lo, hi) in enumerate(pieces)]
        sends = [comm.isend(sent[slice(*chunk_bounds(send_hi - send_lo, parts, k))], right(comm),
                            tag=k) for k in range(parts)]
        for (lo, hi), receive in zip(pieces, receives):
            comm.wait(receive)  # segment k is here; k + 1, ... may still be arriving
            comm.reduce_local(op, buf[recv_lo + lo:recv_lo + hi], incoming[lo:hi],
                              source=mine[recv_lo + lo:recv_lo + hi])
        comm.waitall(sends)
    allgather(buf, comm)


# -- the segment size that overlap would choose (chapter "Beyond one flat ring") -------------

#: One reduce-scatter step with ``S`` segments when the transfers overlap the reductions:
#: each segment's message costs α, the chunk's n/p bytes stream once, and only the last
#: segment's reduction, n/(pS) bytes, waits after the last transfer.
OVERLAPPED_STEP = "S*alpha + n/p*beta + n/(p*S)*gamma"


def overlapped_step(n: float, p: int, segments: int, alpha: float, beta: float,
                    gamma: float) -> float:
    """Seconds of one reduce-scatter step on ``segments`` segments (:data:`OVERLAPPED_STEP`)."""
    return eval(OVERLAPPED_STEP, {"__builtins__": {}},
                {"S": segments, "n": n, "p": p, "alpha": alpha, "beta": beta, "gamma": gamma})


def best_segments(n: float, p: int, alpha: float, gamma: float) -> float:
    """The S that minimises :data:`OVERLAPPED_STEP`: its derivative α − n·γ/(p·S²) is zero at
    S* = √(n·γ/(p·α)); so segments of n/(p·S*) = √(n·α/(p·γ)) bytes."""
    return (n * gamma / (p * alpha)) ** 0.5
