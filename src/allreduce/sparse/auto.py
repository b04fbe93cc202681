"""``auto`` for the sparse allreduce: the algorithm, and for a chunked one the boundaries
(equal lengths or equal nonzeros), with the smallest predicted time (chapter "Sparse
allreduce").

The fill-in is not known before the data moves, so ``auto`` predicts with an estimator that
every rank can compute from what the call's check already gathered, each rank's pairs in
each of ``p`` equal-length chunks: **independent supports** inside a chunk, the union of
``s`` ranks' supports of density ``d`` in a chunk of ``w`` elements being
``w·(1 − (1 − d)^s)`` (:mod:`allreduce.sparse.layout`), so a chunk that holds most pairs
shows, and so does what cutting equal nonzeros would save.  Every rank has the same counts
and (checked) the same model, so every rank chooses the same.  Where every rank's own
pairs would make a call of at least :data:`PROBE_FROM` (on at most :data:`FEW_RANKS`
ranks, :func:`worth_probing`), it also measures how the supports overlap on a sample of
positions (:mod:`allreduce.sparse.overlap`, carried in the check's all-gather), and where
they are not as independent as assumed (Top-k gradients share their largest entries)
predicts from what the probes measure instead.  Where the supports are known
(the benchmark, the chapter), the same prediction takes the real unions instead
(``supports=``) and the critical path of the real messages (:mod:`allreduce.sparse.cost`):
that is the model the benchmark checks.

A prediction is the per-call overhead and the wire time under the dense α-β model, plus the
local work, which in Python is much of a call from about 1% density: checking the indices,
encoding and decoding pairs, merging sorted runs (a stable sort, m·lg m, or a dense sum
over their range), densifying and reading the dense path's union back; plus two costs that
neither the dense model nor the local work sees, a sparse call's own (its check, one more
collective) and a sparse message's (:data:`OVERHEADS`).  The local work counted is the
busiest rank's, or, where the ranks share cores (:data:`RANKS_PER_CORE`), all the ranks'
work divided among the cores if that is longer: ``allgather`` has every rank merge the
same pairs at once, where ``sparse_direct`` on skewed supports leaves one rank to merge
alone.  :data:`LOCAL` and :data:`OVERHEADS` are fitted together to the whole calls' times on
the course's reference machine, so they also absorb whatever else a call spends waiting for
other ranks, as the dense model's α absorbs a step's Python.
"""

from __future__ import annotations

import functools
import hashlib
import math

import numpy as np

from ..algorithms.auto import describe_model, fastest, model_source
from ..algorithms.auto import model as dense_model
from ..cost import Model, largest_power_of_two
from . import cost, layout, overlap
from .chunks import BOUNDARIES, CHUNKED
from .dense import ZERO_COUNT_BYTES
from .layout import Layout, measured_unions
from .vector import DENSE_MERGE_SHARE, index_dtype

#: Seconds per pair encoded, or decoded (per element of the range for a message in the
#: dense form) and per encode or decode, per m·lg m of a merge of m pairs that sorts, per
#: element of the range and pair of a merge that sums densely, and per merge, per pair a
#: merge gives out (``"merge_out"``: gathering each index's sum; a merge of identical
#: supports gives out 1/p of its pairs, of disjoint ones all of them), per element of a
#: densified vector (and of the dense sum searched for its non-zeros), per pair read from
#: the dense sum (the result's, and each rank's own, checked for a sum of zero), and per
#: pair of the call's check of its indices:
#: fitted with :data:`OVERHEADS` by :func:`allreduce.bench.sparse_record.fit` to one run
#: on the idle reference machine (4 MPI ranks on 2 cores; ``chapters/data/sparse_bench_fit.json``:
#: uniform supports at n = 16 M, 0.01-50%, the course's gradients at 0.01-50%, identical
#: and disjoint supports at 0.01-10%), so that the committed record, three later runs
#: (``chapters/data/sparse_bench_runs.json``, the last also ``sparse_bench_reference.json``),
#: tests them.  A constant the fit found no use for is 0 (non-negative least squares).  They
#: are a core's rates, the sharing of cores apart (:data:`RANKS_PER_CORE`).  The fit splits
#: a merge's time among ``"merge_call"``, ``"merge"`` and ``"merge_out"``, so ``"merge"``
#: alone is below a whole merge's rate: merging the gradients' 4 × 4,000 pairs at 0.1% alone
#: in one process took 0.79 ns per m·lg m in all.
LOCAL = {"code": 2.05e-9, "code_dense": 2.66e-9, "code_call": 0.0, "merge": 0.472e-9,
         "merge_dense": 1.88e-9, "merge_call": 32.9e-6, "merge_out": 5.42e-9, "densify": 0.182e-9,
         "gather": 0.609e-9, "check": 8.69e-9}

#: Seconds that every sparse call costs beyond the dense model's overhead (``"call"``) and
#: that every sparse message on the critical path costs beyond the dense model's α
#: (``"message"``): what neither the wire nor the local work counts, such as the call's
#: check (one more collective), its Python outside the timed local work, and, on the
#: reference machine, ranks waiting for one another's work on shared cores.  And what the
#: dense path costs beyond its allreduce's prediction and its local work (``"dense_call"``):
#: its ranks wait for one another at its two collectives, the values' allreduce and the
#: gather of their counts of zero sums (at 10% of 4.1 M on 4 MPI ranks of the reference
#: machine, 3-5 ms waiting in that gather, and 11.5-13.3 ms in an allreduce of 16 MiB that
#: took 11 ms alone).  Fitted with :data:`LOCAL`; not measured apart.
OVERHEADS = {"call": 203e-6, "message": 78.7e-6, "dense_call": 8.79e-3}

#: A rank whose pairs would make a call at least this many seconds long (every rank holding
#: as many; on at most :data:`FEW_RANKS` ranks, each chunk with room for its probes: see
#: :func:`worth_probing`) looks up how its support meets a sample of positions
#: (:mod:`allreduce.sparse.overlap`: a binary search per probe, about :data:`PROBES` of
#: them, their bits carried in the check's all-gather), and where every rank did, ``auto``
#: chooses from the overlap they measure: on identical supports at 10% of 16 M the loads
#: alone picked the dense path, 1.4-1.5x slower there than ``sparse_direct``.  In an
#: all-gather of its own the probe cost 2.6 ms of a call that took 8.2 ms without it
#: (identical supports at 1% of 16 M, 4 MPI ranks on the reference machine's 2 cores),
#: most of it ranks waiting for one another; carried in the check's all-gather, which
#: every call waits in anyway, it costs the binary searches (25 µs at 10% of the course's
#: gradients, 4 M elements, in one process) and, once per new set of probes, the estimate
#: from them (0.6 ms there).  Below 10 ms even that would be a few percent of a call.
PROBE_FROM = 10e-3

#: Ranks to a core on the machine :data:`LOCAL` was fitted on (the reference machine: 4 ranks
#: on 2 cores), so that a rank's local work takes at least the ranks' mean times this
#: (:func:`_sharing_cores`).  Where each rank has a core of its own, set it to 1, on every
#: rank (every rank must choose alike).
RANKS_PER_CORE = 2.0


def _merging(m, width, runs=2, out=0.0):
    """Seconds to merge ``runs`` sorted runs (free below two: nothing to merge) of ``m``
    pairs in all in a range of ``width`` elements into ``out`` pairs: a stable sort
    (m·lg m), or a dense sum over the range once the pairs fill
    :data:`~allreduce.sparse.vector.DENSE_MERGE_SHARE` of ``width`` (the merge itself
    measures the runs' own span, at most ``width``), and the sums gathered out.
    Element-wise on arrays."""
    m, width = np.asarray(m, float), np.asarray(width, float)
    dense = LOCAL["merge_call"] + (width + m) * LOCAL["merge_dense"]
    sorting = LOCAL["merge_call"] + m * np.log2(np.maximum(m, 2.0)) * LOCAL["merge"]
    return np.where(np.asarray(runs) < 2, 0.0,
                    np.where(m >= DENSE_MERGE_SHARE * width, dense, sorting)
                    + np.asarray(out, float) * LOCAL["merge_out"])


def _coding(pairs, width, pair_size: int, itemsize: int):
    """Seconds to encode, or to decode, one message of ``pairs`` pairs of ``pair_size``
    bytes in a range of ``width`` elements: per pair, or per element of the range once
    :func:`~allreduce.sparse.vector.encode` switches to the dense form (values and a
    presence bitmap).  Element-wise on arrays."""
    pairs, width = np.asarray(pairs, float), np.asarray(width, float)
    return LOCAL["code_call"] + np.where(pairs * pair_size >= width * itemsize + width / 8,
                                         width * LOCAL["code_dense"], pairs * LOCAL["code"])


def local_work(algorithm: str, n: int, counts: list[int], unions: list[float],
               held: Layout | None = None, *, dense_output: bool = False,
               itemsize: int = 4) -> float:
    """Seconds of local work until the busiest rank is done, on shared cores
    (:func:`_sharing_cores`): ``unions[s]`` is the size of the union of ``s`` supports;
    ``held`` what a chunked algorithm's messages hold (required for one)."""
    p, k = len(counts), max(counts)
    checked = np.asarray(counts, float) * LOCAL["check"]  # every call's pass over its indices
    pair_size = index_dtype(int(n)).itemsize + itemsize

    def code(pairs, width):
        return _coding(pairs, width, pair_size, itemsize)

    if algorithm == "dense":  # and, for the union, each rank's sums at its own pairs
        return _sharing_cores(checked + n * LOCAL["densify"] + (
            0 if dense_output else (unions[p] + np.asarray(counts, float)) * LOCAL["gather"]))
    if algorithm == "allgather":  # encode its own block once, decode the others', merge all
        return _sharing_cores(checked + code(counts, n).sum() + _merging(
            sum(counts), n, sum(c > 0 for c in counts), unions[p]))
    if algorithm == "sparse_recursive_doubling":
        q = largest_power_of_two(p)
        rounds = [unions[1 << j] for j in range(q.bit_length() - 1)]
        if q != p:
            rounds = [k, *rounds, unions[p]]
        rounds = np.array(rounds, float)
        outs = np.append(rounds[1:], unions[p])
        each = 2 * code(rounds, n) + _merging(2 * rounds, n, 2 * (rounds > 0), outs)
        work = np.full(p, each.sum())  # q != p: the ranks that fold in and out, the busiest
        extra = p - q
        if extra:  # the others skip the fold's two rounds; the folded send k, decode the sum
            work[2 * extra:] -= each[0] + each[-1]
            work[:2 * extra:2] = code(k, n) + code(unions[p], n)
        return _sharing_cores(checked + work)
    if algorithm not in CHUNKED:
        raise ValueError(f"no prediction for sparse algorithm {algorithm!r}")
    widths, pieces = held.widths, held.pieces
    # the all-gather: each rank encodes its finished chunk once and decodes every other
    work = np.full(p, code(held.finished, widths).sum())
    if algorithm == "sparse_direct":  # its pieces out, the others' pieces of its chunk in
        coded = code(pieces, widths[None, :])  # [r, c]: rank r's piece of chunk c
        work += coded.sum(axis=1) + coded.sum(axis=0) - 2 * np.diag(coded)
        work += _merging(pieces.sum(axis=0), widths, (pieces > 0).sum(axis=0), held.finished)
    else:  # in step s rank r sends chunk r − s − 1 and merges chunk r − s − 2 from the left
        steps, ranks = np.meshgrid(np.arange(p - 1), np.arange(p), indexing="ij")
        sent, received = (ranks - steps - 1) % p, (ranks - steps - 2) % p
        incoming = held.ring[steps, (ranks - 1) % p]
        own = pieces[ranks, received]
        outs = np.vstack([held.ring[1:], held.finished[None, :]])  # what it sends next
        work += (code(held.ring, widths[sent]) + code(incoming, widths[received])
                 + _merging(incoming + own, widths[received],
                            (incoming > 0).astype(int) + (own > 0), outs)).sum(axis=0)
    return _sharing_cores(checked + work)


def _sharing_cores(work: np.ndarray) -> float:
    """Seconds until the busiest rank is done with ``work`` (seconds per rank) when the ranks
    work at once, :data:`RANKS_PER_CORE` of them to a core (at most all of them): its own
    work, or all the ranks' divided among their cores, whichever is longer."""
    return float(max(work.max(), work.mean() * min(RANKS_PER_CORE, len(work))))


def predict(algorithm: str, n: int, counts: list[int], itemsize: int, model: Model, *,
            boundaries: str = "length", loads=None, dense_output: bool = False,
            supports: list[np.ndarray] | None = None) -> float:
    """Seconds ``algorithm`` should take for ``counts[r]`` pairs on rank ``r``: expected from
    ``loads[r][c]``, rank ``r``'s pairs in equal-length chunk ``c`` (by default the pairs
    spread evenly), or from the real ``supports`` when given.  ``boundaries`` is how a
    chunked algorithm cuts the range.  (With ``dense_output``, ``dense`` needs no union:
    neither the count of zero sums nor the gather.)"""
    p = len(counts)
    if p == 1:
        return 0.0
    chunked = algorithm in CHUNKED
    if supports is not None:
        unions = measured_unions(supports)
        held = layout.from_supports(supports, n, boundaries) if chunked else None
    else:
        loads = [[count / p] * p for count in counts] if loads is None else loads
        unions = layout.window_unions(loads, n)
        held = layout.expected(loads, n, boundaries) if chunked else None
    return _predict(algorithm, n, counts, itemsize, model, unions, held, dense_output,
                    supports)


def _predict(algorithm, n, counts, itemsize, model, unions, held, dense_output,
             supports=None) -> float:
    local = local_work(algorithm, n, counts, unions, held, dense_output=dense_output,
                       itemsize=itemsize) + OVERHEADS["call"]
    if algorithm == "dense":
        return (_dense_wire(n, len(counts), itemsize, model, dense_output) + local
                + OVERHEADS["dense_call"])
    alpha = model.alpha + OVERHEADS["message"]  # a sparse message's α
    if held is not None:
        wire = cost.critical_path(cost.chunked_steps(algorithm, held, itemsize), alpha,
                                  model.beta)
    elif supports is not None:
        steps = cost.schedule(algorithm, supports, n, itemsize)
        wire = cost.critical_path(steps, alpha, model.beta)
    else:
        expected = cost.expected_terms(algorithm, n, len(counts), max(counts), itemsize,
                                       lambda s: unions[s], total=sum(counts))
        wire = expected.steps * alpha + expected.bytes * model.beta
    return model.overhead + wire + local


@functools.lru_cache(maxsize=256)
def _dense_wire(n: int, p: int, itemsize: int, model: Model, dense_output: bool) -> float:
    """The dense path's time on the wire: the values' allreduce, and, for the union, the
    gather of one integer a rank (priced as an allreduce of 8 bytes).  The presence mask's
    allreduce, which only a sum of exactly zero calls for (:mod:`allreduce.sparse.dense`),
    is left out."""
    dense_bytes = n * itemsize
    wire = model.time(fastest(dense_bytes, p, model), p, dense_bytes)
    if not dense_output:
        wire += model.time(fastest(ZERO_COUNT_BYTES, p, model), p, ZERO_COUNT_BYTES)
    return wire


def options(candidates, boundaries: str | None = None) -> list[tuple[str, str]]:
    """Each candidate with each way it may cut the range: both for a chunked algorithm,
    unless the caller named ``boundaries``."""
    return [(name, cut) for name in candidates
            for cut in (("length",) if name not in CHUNKED else (boundaries,) if boundaries
                        else BOUNDARIES)]


def choose(n: int, counts: list[int], itemsize: int, model: Model, candidates, *,
           dense_output: bool = False, loads=None, boundaries: str | None = None,
           hits: np.ndarray | None = None) -> tuple[str, str]:
    """The candidate, and the boundaries it cuts with, of the smallest :func:`predict`
    (ties to the one listed first, equal lengths first), from ``loads`` rounded to quarter
    powers of two (at most 9% off), and remembered, so that calls holding about the same
    pairs in the same chunks reuse it: a new choice is Python work that grows with p²
    (measured on the reference machine: under 1 ms on 4 ranks, about 50 ms on 64).  It is
    remembered per exact loads too, so that a call repeating another's loads skips even
    rounding them (p² logarithms in Python: 6.5 µs a call on 4 ranks).  The key holds the
    constants (:func:`_constants`), so a changed :data:`RANKS_PER_CORE` or refitted
    :data:`LOCAL` takes effect at the next call.  Given ``hits``, every rank's probes
    (:func:`allreduce.sparse.overlap.unpack`), it predicts from the overlap they measure
    instead, unless the probes find the supports as independent as the loads assume
    (:func:`allreduce.sparse.overlap.independent`); what they measure is rounded and the
    prediction remembered as the loads' are (:func:`_measured_predictions`; see
    :func:`worth_probing` for when a call probes)."""
    exact = None if loads is None else tuple(map(tuple, loads))
    if hits is not None:
        if loads is None:
            raise TypeError("choose(hits=...) needs the loads the probes were taken with")
        return _probed_choice(n, tuple(counts), exact, np.packbits(hits, axis=1).tobytes(),
                              hits.shape, itemsize, model, tuple(candidates), dense_output,
                              boundaries, _constants())
    args = (n, tuple(counts), exact, itemsize, model, tuple(candidates), dense_output,
            boundaries, _constants())
    return (_choice if len(counts) <= FEW_RANKS else _choice_of)(*args)


def worth_probing(n: int, pairs: int, p: int, itemsize: int, model: Model, candidates, *,
                  dense_output: bool = False, boundaries: str | None = None) -> bool:
    """Whether a rank holding ``pairs`` pairs looks its probes up before the check: when a
    call in which every rank held as many, spread evenly, is predicted to take at least
    :data:`PROBE_FROM` seconds, every chunk has room for its probes, they fit the words that
    carry them (:func:`allreduce.sparse.overlap.carried`), and there are at most
    :data:`FEW_RANKS` ranks (the windows' unions from the probes take p² passes over them).
    Each rank answers for itself; ``auto`` uses the probes only where every rank looked
    (:func:`allreduce.sparse.overlap.unpack`), which every rank sees alike."""
    if not 1 < p <= FEW_RANKS or not overlap.fits(n, p) or not overlap.carried(p):
        return False
    return _worth(n, _quarters(pairs / p), p, itemsize, model, tuple(candidates),
                  bool(dense_output), boundaries, _constants())


@functools.lru_cache(maxsize=256)  # rounding p² loads took 12 µs of every call; one, 1 µs
def _worth(n, per_chunk, p, itemsize, model, candidates, dense_output, boundaries, constants):
    times = _predictions(n, ((per_chunk,) * p,) * p, itemsize, model, candidates,
                         dense_output, boundaries, constants)
    return min(times.values()) >= PROBE_FROM  # the key holds it (constants), as it is now


def choose_for_supports(n: int, supports: list[np.ndarray], itemsize: int, model: Model,
                        candidates, *, dense_output: bool = False,
                        boundaries: str | None = None) -> tuple[str, str]:
    """What ``sparse_allreduce(..., algorithm="auto")`` chooses when rank ``r`` holds the
    sorted indices ``supports[r]``: from the loads the check gathers, and from the probes
    where :func:`worth_probing` (for a benchmark, which replays a call on one rank)."""
    p = len(supports)
    loads = [layout.chunk_counts(support, n, p) for support in supports]
    counts = [len(support) for support in supports]
    options = {"dense_output": dense_output, "loads": loads, "boundaries": boundaries}
    hits = None
    if all(worth_probing(n, len(support), p, itemsize, model, candidates,
                         dense_output=dense_output, boundaries=boundaries)
           for support in supports):
        hits = np.array([overlap.hits(support, n, p) for support in supports])
    return choose(n, counts, itemsize, model, candidates, hits=hits, **options)


@functools.lru_cache(maxsize=64)
def _probed_choice(n, counts, loads, bits, shape, itemsize, model, candidates, dense_output,
                   boundaries, constants) -> tuple[str, str]:
    """:func:`choose` given the probes (packed ``bits`` of a ``shape`` table), remembered
    per exact probes as per exact loads: the estimate from them took 0.6 ms in Python at
    10% of the course's gradients (4 ranks), a call that repeats its supports skips it."""
    hits = overlap.from_bits(np.frombuffer(bits, np.uint8).reshape(shape[0], -1), shape[1])
    if overlap.independent(hits, n, loads):
        return _choice_of(n, counts, loads, itemsize, model, candidates, dense_output,
                          boundaries, constants)
    times = _measured_predictions(n, list(counts), loads, hits, itemsize, model, candidates,
                                  dense_output, boundaries)
    return min(times, key=times.get)


def _measured_predictions(n, counts, loads, hits, itemsize, model, candidates, dense_output,
                          boundaries) -> dict:
    """Every option's predicted seconds, with the unions and the chunks' contents that the
    probes measure (:mod:`allreduce.sparse.overlap`) in place of independent supports',
    each rounded to a quarter power of two as :func:`choose` rounds the loads (but the
    bounds of a cut of equal nonzeros, exact), so that a call whose supports overlap as an
    earlier one's did reuses its prediction."""
    layouts = tuple((tuple(held.bounds), _quarters(held.pieces), _quarters(held.ring),
                     _quarters(held.finished), held.histogram_bytes)
                    for held in (overlap.held(hits, n, cut, loads) for cut in BOUNDARIES))
    return _measured(n, _quarters(counts), _quarters(overlap.unions(hits, n, counts)), layouts,
                     itemsize, model, tuple(candidates), dense_output, boundaries,
                     _constants())


def _quarters(values):
    """``values`` (a number or nested sequences of them) rounded to quarter powers of two,
    as nested tuples (0 stays 0)."""
    if isinstance(values, (list, tuple, np.ndarray)):
        return tuple(_quarters(value) for value in values)
    return 0.0 if values <= 0 else float(2 ** (round(4 * math.log2(values)) / 4))


def _predicted_from_measured(n, counts, unions, layouts, itemsize, model, candidates,
                             dense_output, boundaries, constants) -> dict:
    held = {cut: Layout(list(bounds), np.array(pieces), np.array(ring).reshape(-1, len(counts)),
                        np.array(finished), histogram)
            for cut, (bounds, pieces, ring, finished, histogram) in zip(BOUNDARIES, layouts)}
    return {option: _predict(option[0], n, list(counts), itemsize, model, list(unions),
                             held[option[1]] if option[0] in CHUNKED else None, dense_output)
            for option in options(candidates, boundaries)}


def _constants() -> tuple:
    """The module's constants as they are now, for the remembered choices' keys (and what
    the check compares across ranks: a rank that probed alone would wait forever)."""
    return (RANKS_PER_CORE, tuple(LOCAL.items()), tuple(OVERHEADS.items()), PROBE_FROM,
            overlap.PROBES, overlap.LEAST_PER_CHUNK, FEW_RANKS)


def constants_digest() -> int:
    """The module's constants as one int64, which the call's check compares across ranks
    (every rank must choose alike).  Kept per value of the constants: hashing them again
    cost about 9 µs of every sparse call."""
    return _digest(_constants())


@functools.lru_cache(maxsize=16)
def _digest(constants: tuple) -> int:
    digest = hashlib.blake2b(repr(constants).encode(), digest_size=8).digest()
    return int(np.frombuffer(digest, np.int64)[0])


def _choice_of(n, counts, loads, itemsize, model, candidates, dense_output, boundaries,
               constants):
    times = _predictions(n, _rounded_loads(counts, loads), itemsize, model, candidates,
                         dense_output, boundaries, constants)
    return min(times, key=times.get)


def _rounded_loads(counts: list[int], loads) -> tuple[tuple[float, ...], ...]:
    p = len(counts)
    return _quarters([[count / p] * p for count in counts] if loads is None else loads)


def _predicted(n, loads, itemsize, model, candidates, dense_output, boundaries,
               constants) -> dict:
    """Every option's predicted seconds (see :func:`choose`; ``constants`` only keys the
    remembered ones); all 0 on one rank."""
    if len(loads) == 1:
        return {option: 0.0 for option in options(candidates, boundaries)}
    counts = [sum(row) for row in loads]
    unions = layout.window_unions(loads, n)
    held = {cut: layout.expected(loads, n, cut) for cut in BOUNDARIES}
    return {option: _predict(option[0], n, counts, itemsize, model, unions,
                             held[option[1]] if option[0] in CHUNKED else None, dense_output)
            for option in options(candidates, boundaries)}


#: Up to this many ranks a remembered choice's key (p² loads) is small, and many are kept
#: (a few MB in all); beyond, only the last four (at 1,024 ranks a key holds a million
#: loads, tens of MB).
FEW_RANKS = 16
_choice = functools.lru_cache(maxsize=256)(_choice_of)
_few = functools.lru_cache(maxsize=1024)(_predicted)
_many = functools.lru_cache(maxsize=4)(_predicted)
_measured = functools.lru_cache(maxsize=256)(_predicted_from_measured)  # (FEW_RANKS at most)


def _predictions(n, loads, *rest) -> dict:
    return (_few if len(loads) <= FEW_RANKS else _many)(n, loads, *rest)


def explain(n: int, counts: list[int], itemsize: int = 4, *, dense_output: bool = False,
            candidates=None, loads=None) -> str:
    """What the sparse ``auto`` would choose from the loads alone for ``counts[r]`` pairs on
    rank ``r`` of a vector of length ``n`` (``loads[r][c]`` of them in equal-length chunk
    ``c``, by default spread evenly): each exact algorithm's predicted time with each
    boundaries, as :func:`choose` predicts them from the loads, the choice, and the model
    behind it with where it came from (the dense ``auto``'s, :func:`allreduce.auto.explain`).
    A call in which every rank looks its probes up (:func:`worth_probing`) may choose
    otherwise, from the overlap they measure."""
    if candidates is None:
        from . import SPARSE_ALGORITHMS as candidates
    model = dense_model()
    times = _predictions(n, _rounded_loads(counts, loads), itemsize, model, tuple(candidates),
                         dense_output, None, _constants())
    listing = ", ".join(f"{label(*option)} {t * 1e3:.3f} ms" for option, t in times.items())
    return (f"sparse auto on {len(counts)} ranks, n = {n}, {sum(counts)} pairs in all: "
            f"{label(*min(times, key=times.get))} (predicted: {listing})\n"
            f"model: {describe_model(model)}, local work at {RANKS_PER_CORE:g} ranks per core\n"
            f"from {model_source()}")


def label(algorithm: str, boundaries: str = "length") -> str:
    """How a choice is named (in :func:`explain`, the benchmark's rows and ``-a``):
    ``sparse_direct``, or ``sparse_direct:nonzeros`` when it cuts chunks of equal
    nonzeros."""
    return algorithm if boundaries == "length" else f"{algorithm}:{boundaries}"


def parse(name: str) -> tuple[str, str]:
    """The algorithm and boundaries a :func:`label` names."""
    algorithm, _, boundaries = name.partition(":")
    return algorithm, boundaries or "length"
