"""``allreduce-bench --sparse``: the sparse allreduce against the dense one, under
``mpiexec`` (chapter "Sparse allreduce").

For each kind of support (:mod:`.sparse_inputs`) and density, the sparse algorithms (and
``auto``) are timed in interleaved rounds with two dense peers on the densified vector, the
library's ``ring`` and the MPI library's ``MPI_Allreduce`` (the vector already densified:
the most favourable case for dense); torch gloo's sparse ``all_reduce`` on the same pairs
is timed last, alone, since gloo's threads slow everything else.  Every result is compared
with ``MPI_Allreduce``'s (#wrong); the time each call spends in local work (checking,
merging, encoding, densifying: :func:`allreduce.sparse.vector.local_seconds`) is reported beside its
time on the wire; each sparse row carries the model's prediction from the real supports
(:func:`allreduce.sparse.auto.predict`); and the Top-k selection that would produce such
pairs from a dense gradient is timed apart.

The allocator is left as a user's process has it.  On the reference machine much of a
sparse call's time above 1% density is the kernel's: a call allocates arrays of megabytes,
glibc hands those above its mmap threshold back to the kernel when they are freed, and the
next call faults them in again, zeroed.  Measured on 2026-11-27 (4 ranks, ``sparse_direct``
on uniform supports at 10%, 16 M elements, three runs each): 145-178 ms a call by default,
93.4-93.6 ms with ``MALLOC_MMAP_THRESHOLD_=4294967296 MALLOC_TRIM_THRESHOLD_=8589934592
MALLOC_TOP_PAD_=268435456`` in the environment (glibc then keeps freed memory, at the price
of holding it).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from .sparse_inputs import SOURCES, inputs
from .timing import PEER, _interleaved, _slowest, blocks, enough

DENSE_RING = "ring (densified)"
GLOO = "torch gloo sparse"
TOPK = "Top-k selection"


@dataclass(frozen=True)
class SparseRow:
    """One algorithm (or peer) at one density on one kind of support."""

    n: int
    density: float
    name: str
    seconds: float
    ranks: int
    nnz_in: int  # pairs per rank, the largest
    nnz_out: int  # pairs in the result
    wrong: int  # elements that differ from MPI_Allreduce's dense result
    vs_ring: float | None = None  # the dense ring's time / this row's
    supports: str = "uniform"
    local: float | None = None  # seconds of local work per call (slowest rank)
    predicted: float | None = None  # the model's seconds, from the real supports
    chosen: str | None = None  # what auto ran


def sparse_table(comm, n: int, densities: list[float], algorithms: list[str], *,
                 supports: tuple[str, ...] = ("uniform",), iterations: int = 5,
                 warmup: int = 1, torch_peer: bool = True,
                 least_timed: float | None = None) -> list[SparseRow]:
    """The rows of ``--sparse`` on the mpi4py communicator ``comm`` (collective); each call
    timed for at least ``least_timed`` seconds (default :data:`LEAST_TIMED`)."""
    least_timed = LEAST_TIMED if least_timed is None else least_timed
    rows = []
    for source in supports:
        length = n
        if source == "gradients":
            from ..sparse.samples import PAIRS_DENSITY, Samples, full_gradients
            from .sparse_inputs import gradient_length

            length = gradient_length()
            if max(densities) > PAIRS_DENSITY or comm.size > Samples().pair_shards:
                if comm.rank == 0:  # regenerated (minutes) and cached once, then read
                    full_gradients(comm.size, 0)
                _idle_barrier(comm)
        pairs = {d: inputs(source, comm.rank, comm.size, length, d) for d in densities}
        rows += _source_rows(comm, length, densities, algorithms, source, pairs, iterations,
                             warmup, least_timed)
        if torch_peer and source in ("uniform", "gradients"):
            rows += _gloo_rows(comm, length, densities, source, pairs, iterations, warmup)
    ring = {(row.supports, row.density): row.seconds for row in rows if row.name == DENSE_RING}
    return [SparseRow(**{**row.__dict__,
                         "vs_ring": ring[row.supports, row.density] / row.seconds})
            for row in rows]


def _source_rows(comm, n, densities, algorithms, source, pairs, iterations, warmup,
                 least_timed):
    from mpi4py import MPI

    from ..algorithms.auto import model as dense_model
    from ..api import allreduce
    from ..sparse import auto, sparse_allreduce
    from ..sparse.compression import topk
    from ..sparse.chunks import CHUNKED
    from ..sparse.vector import densify, local_seconds

    rows = []
    for density in densities:
        indices, values = pairs[density]
        dense = densify(indices, values, n)
        reference = np.empty_like(dense)
        comm.Allreduce(dense, reference)
        results, local = {}, {}

        def call_of(name, dense=dense, indices=indices, values=values, results=results,
                    local=local):
            if name == PEER:
                out = np.empty_like(dense)
                return lambda: (comm.Allreduce(dense, out), results.__setitem__(name, out))
            if name == DENSE_RING:
                out = np.empty_like(dense)
                return lambda: results.__setitem__(name, allreduce(dense, comm, "ring", out=out))

            algorithm, boundaries = auto.parse(name)
            if algorithm not in CHUNKED:
                boundaries = None  # auto chooses them; the others take none

            def run():
                before = local_seconds()
                results[name] = sparse_allreduce(indices, values, n, comm, algorithm=algorithm,
                                                 boundaries=boundaries)
                local.setdefault(name, []).append(local_seconds() - before)
            return run

        names = list(dict.fromkeys([PEER, DENSE_RING, *algorithms]))
        calls = {name: call_of(name) for name in names}
        timed = _enough(comm, calls, iterations, least_timed)
        local.clear()  # the probes' local times are not the timed calls'
        seconds = _interleaved(calls, timed, warmup, barrier=comm.Barrier,
                               slowest=lambda t: _slowest(comm, t), rounds=ROUNDS,
                               seed=(SOURCES.index(source), densities.index(density)),
                               rewarm=True)
        gradient = np.random.default_rng(comm.rank).standard_normal(n).astype(np.float32)
        comm.Barrier()
        start = time.perf_counter()
        topk(gradient, len(indices))
        selection = _slowest(comm, time.perf_counter() - start)
        counts = comm.allgather(len(indices))
        everyone = comm.gather(indices, root=0)
        for name in names:
            out = results[name]
            got = out if isinstance(out, np.ndarray) else densify(*out, n)
            wrong = int(np.sum(~np.isclose(got, reference, rtol=1e-5, atol=1e-5 * comm.size)))
            nnz = int(np.count_nonzero(got)) if isinstance(out, np.ndarray) else len(out[0])
            mine = _timed_local(local[name], timed[name], warmup) if name in local else None
            spent = None if mine is None else comm.allreduce(mine, op=MPI.MAX)
            chosen = predicted = None
            if name not in (PEER, DENSE_RING) and comm.rank == 0:
                model = dense_model()
                chosen = name
                if name == "auto":
                    chosen = auto.label(*auto.choose_for_supports(n, everyone, 4, model,
                                                                  _exact()))
                algorithm, boundaries = auto.parse(chosen)
                predicted = auto.predict(algorithm, n, counts, 4, model, boundaries=boundaries,
                                         supports=everyone)
            _idle_barrier(comm)  # the others sleep while rank 0 replays the real supports
            chosen, predicted = comm.bcast((chosen, predicted))
            rows.append(SparseRow(n, density, name, seconds[name], comm.size, max(counts), nnz,
                                  comm.allreduce(wrong, op=MPI.MAX), None, source, spent,
                                  predicted, chosen if name == "auto" else None))
        rows.append(SparseRow(n, density, TOPK, selection, comm.size, max(counts),
                              max(counts), 0, None, source))
    return rows


#: The least time, in seconds, that each call at a density is timed for: :func:`_enough`
#: raises the iterations of a short call (up to :data:`MOST_ITERATIONS`), so that a sparse
#: call of a millisecond is judged on hundreds of calls, not on the few that suit the dense
#: peers beside it, which take tens of milliseconds.
LEAST_TIMED = 0.25
MOST_ITERATIONS = 400
#: The rounds each density's calls are timed in (:func:`~allreduce.bench.timing._interleaved`,
#: each block after one untimed call of its own): more than the dense benchmark's five,
#: since every call gets at least as many iterations.  Measured in two runs each (identical
#: supports, 0.01-1%, seven rounds): without the untimed call ``auto``'s row was 0.80-1.15x
#: the row of the algorithm it ran (the same code), with it 0.92-1.06x.
ROUNDS = 7


def _enough(comm, calls: dict, iterations: int, least_timed: float) -> dict[str, int]:
    """The timed iterations of each of ``calls`` at one density (:func:`~.timing.enough`):
    at least ``iterations`` and :data:`ROUNDS`, enough for ``least_timed`` seconds, at most
    :data:`MOST_ITERATIONS`, each probed by one call, its first (cold)."""
    return enough(calls, max(iterations, ROUNDS), least_timed, MOST_ITERATIONS,
                  barrier=comm.Barrier, slowest=lambda t: _slowest(comm, t))


def _timed_local(per_call: list[float], iterations: int, warmup: int) -> float:
    """This rank's local seconds per call, aggregated as :func:`_interleaved` aggregates
    time: warm-up calls and each block's untimed first call left out, the mean of each
    round's calls, the median of the rounds.  Each call's local work is part of its time on
    this rank, so the result never exceeds the slowest rank's time."""
    rounds = blocks(iterations, ROUNDS)
    if len(per_call) != warmup + len(rounds) + iterations:
        raise RuntimeError(f"{len(per_call)} local times for {warmup} warm-up, {len(rounds)} "
                           f"untimed and {iterations} timed calls")
    means, start = [], warmup
    for block in rounds:
        start += 1  # the block's untimed call
        means.append(sum(per_call[start:start + block]) / block)
        start += block
    return float(np.median(means))


def _idle_barrier(comm) -> None:
    """A barrier that sleeps while it waits: MPICH's blocking one polls a core at 100%."""
    request = comm.Ibarrier()
    while not request.Test():
        time.sleep(0.2)


def _exact():
    from ..sparse import SPARSE_ALGORITHMS

    return SPARSE_ALGORITHMS


def _gloo_rows(comm, n, densities, source, pairs, iterations, warmup) -> list[SparseRow]:
    """torch gloo's sparse all_reduce on the same pairs (an all-gather, then a sum)."""
    import torch
    import torch.distributed as dist
    from mpi4py import MPI

    from ..sparse.vector import densify
    from ..transports.torchdist import init_from_mpi

    torch.set_num_threads(1)
    init_from_mpi(comm)
    rows = []
    try:
        for density in densities:
            indices, values = pairs[density]
            expected = np.empty(n, np.float32)
            comm.Allreduce(densify(indices, values, n), expected)
            tensor = torch.sparse_coo_tensor(torch.from_numpy(indices)[None],
                                             torch.from_numpy(values), (n,),
                                             check_invariants=False)
            result = {}

            def call(tensor=tensor, result=result):
                reduced = tensor.clone()
                dist.all_reduce(reduced)
                result["out"] = reduced

            seconds = _interleaved({GLOO: call}, iterations, warmup, barrier=comm.Barrier,
                                   slowest=lambda t: _slowest(comm, t))[GLOO]
            got = result["out"].to_dense().numpy()
            wrong = int(np.sum(~np.isclose(got, expected, rtol=1e-5, atol=1e-5 * comm.size)))
            rows.append(SparseRow(n, density, GLOO, seconds, comm.size,
                                  comm.allreduce(len(indices), op=MPI.MAX),
                                  int(result["out"].coalesce().indices().shape[1]),
                                  comm.allreduce(wrong, op=MPI.MAX), None, source))
    finally:
        dist.destroy_process_group()
    return rows


def format_sparse(rows: list[SparseRow]) -> str:
    """The rows as a table: supports, size, density, pairs in and out, time, local work
    and wire, the model's prediction and its error, speed-up over the dense ring on the
    densified vector, and #wrong."""
    lines = [f"{'supports':>9} {'count':>9} {'density':>8} {'algorithm':>30} {'nnz in':>8} "
             f"{'nnz out':>9} {'time':>9} {'local':>8} {'wire':>8} {'model':>8} "
             f"{'error':>7} {'vs ring':>8} {'#wrong':>6}",
             f"{'':>9} {'(elems)':>9} {'':>8} {'':>30} {'(rank)':>8} {'':>9} "
             f"{'(ms)':>9} {'(ms)':>8} {'(ms)':>8} {'(ms)':>8} {'':>7} {'(x)':>8} {'':>6}"]

    def ms(value):
        return f"{value * 1e3:>8.2f}" if value is not None else f"{'':>8}"

    for row in rows:
        name = row.name + (f" ({row.chosen})" if row.chosen else "")
        wire = row.seconds - row.local if row.local is not None else None
        error = (f"{row.predicted / row.seconds - 1:>+7.0%}" if row.predicted is not None
                 else f"{'':>7}")
        lines.append(f"{row.supports:>9} {row.n:>9} {row.density:>8.2%} {name:>30} "
                     f"{row.nnz_in:>8} {row.nnz_out:>9} {row.seconds * 1e3:>9.2f} "
                     f"{ms(row.local)} {ms(wire)} {ms(row.predicted)} {error} "
                     f"{row.vs_ring:>7.2f}x {row.wrong:>6}")
    return "\n".join(lines)
