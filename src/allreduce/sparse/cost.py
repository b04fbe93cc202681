"""The sparse algorithms' cost on the critical path, computed from the supports themselves
(chapter "Sparse allreduce").

A sparse message's size depends on the data: a chunk's pairs after the merges so far (the
union of some ranks' supports there), or its dense form once that is smaller.  So the cost
is not one formula in ``p``, ``n`` and ``k``: :func:`schedule` lists, step by step, what
each rank sends to whom and how many bytes, from the ranks' indices, and
:func:`critical_path` runs the recurrence of a schedule in which every rank sends at most
one message and receives at most one per step:

    T_r(s) = max( T_r(s−1) + t(m_r(s)),  max(T_r(s−1), T_src(s−1)) + t(m_src(s)) ),
    t(m) = α + m·β,

a rank being done with a step when its own message has left and its source's has arrived.
When every rank's message in a step has the same size this is Σ_s t(m(s)); otherwise it lies
between that sum for the smallest and for the largest message of each step ("each step
waits for its largest message" is the upper bound).  A test checks :func:`terms` against the
tracing communicator's replay of the real code, for every algorithm here, on synthetic and
real supports.  The ``dense`` algorithm's cost is the dense allreduce's (chapter
{ref}`choosing`).  Merging is local work, modelled apart (:data:`allreduce.sparse.auto.LOCAL`).
"""

from __future__ import annotations

import numpy as np

from ..cost import Terms, largest_power_of_two
from .allgather import uses_bruck
from .exchange import OVERHEAD_BYTES
from .layout import Layout, from_supports
from .vector import index_dtype

#: What one rank does in one step: ``(dest, bytes sent, source)``, ``None`` for no send or
#: no receive.
Move = tuple[int | None, int, int | None]
IDLE: Move = (None, 0, None)


def message_bytes(pairs: int, lo: int, hi: int, itemsize: int) -> int:
    """Bytes of the message :func:`~allreduce.sparse.vector.encode` makes of ``pairs`` pairs
    in ``[lo, hi)``: its header and its pairs, or its dense form with a presence bitmap when
    the pairs would not be smaller."""
    pair_bytes = pairs * (index_dtype(hi).itemsize + itemsize)
    dense_bytes = (hi - lo) * itemsize + -(-(hi - lo) // 8)
    return OVERHEAD_BYTES + min(dense_bytes, pair_bytes)


def _present(supports, ranks, n: int) -> np.ndarray:
    """Where any of ``ranks`` has a pair, as a mask of length ``n`` (no sorting)."""
    present = np.zeros(n, bool)
    for r in ranks:
        present[supports[r]] = True
    return present


def _doubling(p: int, size_of) -> list[list[Move]]:
    """Recursive doubling with the fold, :class:`~allreduce.algorithms._schedule.PowerOfTwoFold`'s
    layout: ``size_of(group)`` is the bytes a rank sends whose data covers the real ranks
    ``group``."""
    q = largest_power_of_two(p)
    extra = p - q
    real = [2 * v + 1 if v < extra else v + extra for v in range(q)]  # virtual -> real rank
    covers = {v: ([real[v] - 1] if v < extra else []) + [real[v]] for v in range(q)}
    steps = []
    if extra:
        steps.append([(r + 1, size_of([r]), None) if r < 2 * extra and r % 2 == 0 else
                      (None, 0, r - 1) if r < 2 * extra else IDLE for r in range(p)])
    mask = 1
    while mask < q:
        step = [IDLE] * p
        for v in range(q):
            group = [r for w in range(q) if w // mask == v // mask for r in covers[w]]
            partner = real[v ^ mask]
            step[real[v]] = (partner, size_of(group), partner)
        steps.append(step)
        mask <<= 1
    if extra:
        steps.append([(r - 1, size_of(list(range(p))), None) if r < 2 * extra and r % 2 else
                      (None, 0, r + 1) if r < 2 * extra else IDLE for r in range(p)])
    return steps


def _bruck_allgather(p: int, block_bytes) -> list[list[Move]]:
    """Bruck's all-gather of every rank's block: in the step of distance d rank r sends the
    blocks of ranks r … r + d − 1 (at most p − d) to r − d."""
    steps, distance = [], 1
    while distance < p:
        count = min(distance, p - distance)
        steps.append([((r - distance) % p, sum(block_bytes((r + i) % p) for i in range(count)),
                       (r + distance) % p) for r in range(p)])
        distance *= 2
    return steps


def _ring_allgather(p: int, finished_bytes) -> list[list[Move]]:
    """The all-gather of finished chunks: in step s rank r forwards chunk r − s."""
    return [[((r + 1) % p, finished_bytes((r - s) % p), (r - 1) % p) for r in range(p)]
            for s in range(p - 1)]


def schedule(algorithm: str, supports: list[np.ndarray], n: int, itemsize: int,
             boundaries: str = "length") -> list[list[Move]]:
    """What each rank sends in each step when rank ``r`` holds the pairs at ``supports[r]``
    (sorted int indices) with values of ``itemsize`` bytes."""
    p = len(supports)
    if p == 1:
        return []
    if algorithm == "allgather":
        gather = _bruck_allgather if uses_bruck(p, n, itemsize, sum(map(len, supports))) \
            else _ring_allgather
        return gather(p, lambda r: message_bytes(len(supports[r]), 0, n, itemsize))
    if algorithm == "sparse_recursive_doubling":
        return _doubling(p, lambda group: message_bytes(
            int(np.count_nonzero(_present(supports, group, n))), 0, n, itemsize))
    return chunked_steps(algorithm, from_supports(supports, n, boundaries), itemsize)


def chunked_steps(algorithm: str, layout: Layout, itemsize: int) -> list[list[Move]]:
    """The steps of ``sparse_ring`` or ``sparse_direct`` for the messages of ``layout``
    (:mod:`allreduce.sparse.layout`: real or expected pairs)."""
    bounds, p = layout.bounds, len(layout.bounds)
    steps = _doubling(p, lambda group: layout.histogram_bytes) if layout.histogram_bytes else []

    def size(pairs: float, chunk: int) -> float:
        return message_bytes(pairs, *bounds[chunk], itemsize)

    ring, pieces, finished = layout.ring.tolist(), layout.pieces.tolist(), layout.finished.tolist()
    if algorithm == "sparse_ring":  # in step s rank r sends chunk r − s − 1
        for s in range(p - 1):
            steps.append([((r + 1) % p, size(ring[s][r], (r - s - 1) % p), (r - 1) % p)
                          for r in range(p)])
    elif algorithm == "sparse_direct":  # in step s rank r sends its own pairs of chunk r + s
        for s in range(1, p):
            steps.append([((r + s) % p, size(pieces[r][(r + s) % p], (r + s) % p),
                           (r - s) % p) for r in range(p)])
    else:
        raise ValueError(f"no schedule for sparse algorithm {algorithm!r}")
    return steps + _ring_allgather(p, lambda c: size(finished[c], c))


def critical_path(steps: list[list[Move]], alpha: float = 0.0, beta: float = 0.0) -> float:
    """When the last rank finishes ``steps`` (the recurrence in the module's docstring)."""
    if not steps:
        return 0.0
    finish = [0.0] * len(steps[0])
    for step in steps:
        sent = [alpha + nbytes * beta for _, nbytes, _ in step]
        finish = [max(finish[r] + (sent[r] if dest is not None else 0.0),
                      max(finish[r], finish[source]) + sent[source]
                      if source is not None else 0.0)
                  for r, (dest, _, source) in enumerate(step)]
    return max(finish)


def terms(algorithm: str, supports: list[np.ndarray], n: int, itemsize: int,
          boundaries: str = "length") -> Terms:
    """Steps and bytes on the critical path (no γ: merging is not an element-wise
    reduction)."""
    steps = schedule(algorithm, supports, n, itemsize, boundaries)
    return Terms(critical_path(steps, alpha=1), critical_path(steps, beta=1), 0)


def expected_terms(algorithm: str, n: int, p: int, k: float, itemsize: int,
                   unions, total: float | None = None) -> Terms:
    """Steps and bytes when every rank's message in a step has the expected size: ``k``
    pairs per rank, ``unions(s)`` the size of the union of ``s`` ranks' supports, chunks of
    equal length holding ``1/p`` of each (``total``: every rank's pairs together, which
    decides ``allgather``'s all-gather; by default ``p·k``).  What ``auto`` prices
    allgather's and recursive doubling's wire with (the chunked algorithms go through
    :func:`chunked_steps` of an expected :mod:`~allreduce.sparse.layout`), and what the
    chapter's simulation on thousands of ranks uses."""
    if p == 1:
        return Terms(0, 0, 0)
    chunk = n / p

    def message(pairs: float, width: float) -> float:  # encode's switch to the dense form
        return OVERHEAD_BYTES + min(pairs * (index_dtype(int(n)).itemsize + itemsize),
                                    width * itemsize + width / 8)

    gather = [message(unions(p) / p, chunk)] * (p - 1)
    if algorithm == "allgather" and uses_bruck(p, n, itemsize, p * k if total is None else total):
        distances = (1 << j for j in range((p - 1).bit_length()))  # Bruck's steps
        sizes = [min(d, p - d) * message(k, n) for d in distances]
    elif algorithm == "allgather":
        sizes = [message(k, n)] * (p - 1)
    elif algorithm == "sparse_ring":
        sizes = [message(unions(s) / p, chunk) for s in range(1, p)] + gather
    elif algorithm == "sparse_direct":
        sizes = [message(k / p, chunk)] * (p - 1) + gather
    elif algorithm == "sparse_recursive_doubling":
        q = largest_power_of_two(p)
        sizes = [message(unions(1 << j), n) for j in range(q.bit_length() - 1)]
        if q != p:
            sizes = [message(k, n), *sizes, message(unions(p), n)]
    else:
        raise ValueError(f"no expected terms for sparse algorithm {algorithm!r}")
    return Terms(len(sizes), sum(sizes), 0)


def step_bound(algorithm: str, supports: list[np.ndarray], n: int, itemsize: int,
               boundaries: str = "length") -> Terms:
    """The upper bound in which each step waits for its largest message."""
    steps = schedule(algorithm, supports, n, itemsize, boundaries)
    return Terms(len(steps), sum(max(nbytes for _, nbytes, _ in step) for step in steps), 0)
