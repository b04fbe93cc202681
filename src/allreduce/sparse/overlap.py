"""How much the ranks' supports overlap, measured on a sample of positions (chapter
"Sparse allreduce"): what ``auto`` looks at before a long call, where its estimate from
each rank's pairs per chunk alone, which takes the supports as independent, can be far
off.  Top-k gradients are not independent: the ranks' largest entries fall on many of the
same parameters, so their union is smaller than independent supports' would be, and an
algorithm whose messages grow with the union is cheaper than predicted.

Every rank looks up the same :func:`positions` (``m`` in each of the ``p`` equal-length
chunks, one in each of ``m`` equal strata of it, at an offset that a multiplicative hash
of its number picks, so that no stride of a tensor's layout lines up with them) in its
sorted indices, a binary search each, before the call's check; the hits, as bits
(:func:`pack`), ride in the check's own all-gather, so every rank gets the same ``p × K``
matrix without a round of its own (:func:`unpack`).  The share of a set of ranks' probes that
are distinct, times their pairs together, estimates the union of their supports, and the
same for each chunk (:func:`_united`; scaled by ``n/K`` only where a cut of equal nonzeros
must estimate a chunk's pairs), which is what :func:`unions` and :func:`held` give
:mod:`allreduce.sparse.auto` in place of the independent estimate."""

from __future__ import annotations

import functools

import numpy as np

from .chunks import balanced, bin_starts, equal_length
from .layout import Layout, _absent, histogram_round_bytes
from .vector import timed

#: Probes in all, at least :data:`LEAST_PER_CHUNK` per chunk: 1,024 probes count a union
#: that holds a quarter of the elements within about 5% (one standard deviation,
#: ``√((1 − u)/(u·K))``), and the ratio estimate built on that count is exact for one rank
#: and for disjoint or identical supports; a rank looks them up in about 0.3 ms at 1.7 M
#: pairs (four times as many took 1.1 ms, 4 MPI ranks on the reference machine's 2 cores).
PROBES = 1024
LEAST_PER_CHUNK = 16
_GOLDEN = 2654435761  # a prime near 2³²/φ: the multiplier of Knuth's multiplicative hashing


def per_chunk(p: int) -> int:
    """Probes in each of the ``p`` equal-length chunks."""
    return max(LEAST_PER_CHUNK, -(-PROBES // p))


def fits(n: int, p: int) -> bool:
    """Whether every chunk of ``n`` elements has room for its probes, one element each."""
    return n // p >= per_chunk(p)


def positions(n: int, p: int) -> np.ndarray:
    """The probed positions, sorted, the same on every rank (integer arithmetic only):
    ``m`` per equal-length chunk (:func:`per_chunk`), probe ``t`` of a chunk in its
    ``t``-th of ``m`` equal strata.  Needs :func:`fits`."""
    return _positions(n, p, per_chunk(p))


@functools.lru_cache(maxsize=32)
def _positions(n: int, p: int, m: int) -> np.ndarray:  # kept per m too: PROBES may change
    t = np.arange(m + 1, dtype=np.int64)
    probes = []
    for lo, hi in equal_length(n, p):
        whole, part = divmod(hi - lo, m)  # t·(hi − lo) could pass 2⁶³; t·part cannot
        starts = lo + t * whole + t * part // m  # m strata, each at least one element wide
        widths = np.diff(starts)
        offsets = (t[:-1] * _GOLDEN) % (1 << 32) % widths
        probes.append(starts[:-1] + offsets)
    found = np.concatenate(probes)
    found.flags.writeable = False  # kept and handed to every call
    return found


@timed
def hits(indices: np.ndarray, n: int, p: int) -> np.ndarray:
    """Which of the probed :func:`positions` this rank's sorted ``indices`` hold, as bools."""
    probes = positions(n, p)
    if not len(indices):
        return np.zeros(len(probes), bool)
    at = np.minimum(np.searchsorted(indices, probes), len(indices) - 1)
    return indices[at] == probes


#: The int64 words that carry a rank's probes in the check's row (:func:`pack`): a flag,
#: then its hits as bits, room for 1,088 (on up to 16 ranks :data:`PROBES` take at most
#: 1,036: ``p`` times :func:`per_chunk`).  A fixed count, so that every rank's row is as long
#: whatever its constants: a rank whose constants differ is then told so by the check (they
#: are in the digest it compares), not left in an all-gather of rows of other lengths.
WORDS = 18


def carried(p: int) -> bool:
    """Whether ``p`` ranks' probes fit the :data:`WORDS` that carry them."""
    return p * per_chunk(p) <= 64 * (WORDS - 1)


def pack(mine: np.ndarray | None) -> np.ndarray:
    """This rank's :func:`hits` as :data:`WORDS` int64 words for the check's all-gather to
    carry: the flag 1 and the bits, or all zeros for a rank that did not look (``None``)."""
    row = np.zeros(WORDS, np.int64)
    if mine is not None:
        bits = np.packbits(mine)
        row[0] = 1
        row[1:].view(np.uint8)[:len(bits)] = bits
    return row


def unpack(table: np.ndarray, probes: int) -> np.ndarray | None:
    """Every rank's hits, ``[rank, probe]``, from the ranks' :func:`pack` ed words; ``None``
    unless every rank looked its probes up."""
    table = np.ascontiguousarray(table, np.int64)
    if not table.size or not table[:, 0].all():
        return None
    return from_bits(table[:, 1:].view(np.uint8), probes)


def from_bits(packed: np.ndarray, probes: int) -> np.ndarray:
    """``[rank, probe]`` as bools from each rank's hits packed into bytes (``np.packbits``
    along a row), the first ``probes`` of each row."""
    return np.unpackbits(packed, axis=1)[:, :probes].astype(bool)


def unions(table: np.ndarray, n: int, counts) -> list[float]:
    """``u[s]``, as :func:`~allreduce.sparse.layout.measured_unions` gives them from the
    real supports (the mean over the ``p`` windows of ``s`` consecutive ranks), estimated
    from the probes the ranks hold (``table`` from :func:`unpack`) and their ``counts`` of
    pairs (:func:`_united`)."""
    p = len(table)
    counts = np.asarray(counts, float)
    totals = np.zeros(p + 1)
    for r in range(p):  # the windows ending at r: ranks r, r − 1, ..., r − p + 1
        order = (r - np.arange(p)) % p
        totals[1:] += _united(table[order], counts[order], n)
    return [float(total / p) for total in totals]


def _united(rows: np.ndarray, pairs: np.ndarray, width: float) -> np.ndarray:
    """``[s]``: the union of the first ``s + 1`` of ``rows``' supports, which hold ``pairs``
    pairs in ``width`` elements: their pairs together times the share of their probes that
    are distinct (a ratio estimate, exact for one rank and for disjoint or identical
    supports), or, where they hold no probe at all, what independent supports would hold."""
    distinct = np.logical_or.accumulate(rows, axis=0).sum(axis=1)
    held, together = np.cumsum(rows.sum(axis=1)), np.cumsum(pairs)
    independent = width * (1 - np.cumprod(1 - np.clip(pairs / width, 0, 1)))
    return np.where(held > 0, together * distinct / np.maximum(held, 1), independent)


def held(table: np.ndarray, n: int, boundaries: str, loads) -> Layout:
    """What the chunked algorithms' messages hold, as
    :func:`~allreduce.sparse.layout.from_supports` gives it from the real supports,
    estimated from the probes: the probes' own layout (``m`` of them to an equal-length
    chunk, so that equal lengths cut the probes where the real chunks are cut; equal
    nonzeros cut where the probes' histogram reaches each ``c/p`` of them) scaled by
    ``n/K``.  With equal lengths each rank's pairs per chunk are the ``loads`` the check
    gathered, exactly, and the unions grow from them (:func:`_united`)."""
    p, probes = table.shape
    scale = n / probes
    if boundaries == "length":
        cuts = [c * probes // p for c in range(p + 1)]
    else:
        per_bin = np.add.reduceat(table.sum(axis=0), bin_starts(probes, p)[:-1])
        cuts = [lo for lo, _ in balanced(per_bin, probes, p)] + [probes]
    if boundaries == "length":  # each rank's pairs per chunk: the loads, exactly
        pieces = np.asarray(loads, float)
    else:
        pieces = np.stack([table[:, cuts[c]:cuts[c + 1]].sum(axis=1) * scale
                           for c in range(p)], axis=1)
    ring, finished = np.zeros((max(p - 1, 0), p)), np.zeros(p)
    for c in range(p):  # chunk c takes in ranks c + 1, c + 2, ... in turn
        order = (c + 1 + np.arange(p)) % p
        width = max(1, round((cuts[c + 1] - cuts[c]) * scale))
        grown = _united(table[order, cuts[c]:cuts[c + 1]], pieces[order, c], width)
        ring[np.arange(p - 1), order[:-1]] = grown[:-1]
        finished[c] = grown[-1]
    if boundaries == "length":
        return Layout(equal_length(n, p), pieces, ring, finished)
    at = [min(n, round(cut * scale)) for cut in cuts]
    return Layout([(at[c], at[c + 1]) for c in range(p)], pieces, ring, finished,
                  histogram_round_bytes(n, p))


def independent(table: np.ndarray, n: int, loads) -> bool:
    """Whether the probes the ranks hold together are as many as independent supports with
    the ``loads`` (uniform inside each chunk) would hold, within three standard deviations
    of that count or 5% of it: then the estimate from the loads stands."""
    p, probes = table.shape
    widths = np.array([hi - lo for lo, hi in equal_length(n, p)], float)
    # [c]: the chance that independent supports hold a probe of chunk c
    union = 1 - np.prod(_absent(np.asarray(loads, float), widths), axis=0)
    m = probes // p
    expected, spread = m * union.sum(), np.sqrt(m * (union * (1 - union)).sum())
    return abs(int(table.any(axis=0).sum()) - expected) <= max(3 * spread, 0.05 * expected)
