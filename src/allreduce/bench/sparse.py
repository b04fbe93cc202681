"""``allreduce-bench --sparse``: the sparse allreduce against the dense one, under
``mpiexec`` (chapter "Sparse allreduce").

At each density, every rank holds ``k = density·n`` float32 pairs on a uniformly random
support of its own.  The sparse algorithms (and ``auto``) are timed in interleaved rounds
with two dense peers on the densified vector, the library's ``ring`` and the MPI library's
``MPI_Allreduce`` (the vector already densified: the most favourable case for dense); torch
gloo's sparse ``all_reduce`` on the same pairs is timed last, alone, since gloo's threads
slow everything else.  Every result is compared with ``MPI_Allreduce``'s (#wrong), and the
Top-k selection that would produce such pairs from a dense gradient is timed apart.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from .timing import PEER, _interleaved, _slowest

DENSE_RING = "ring (densified)"
GLOO = "torch gloo sparse"
TOPK = "Top-k selection"


@dataclass(frozen=True)
class SparseRow:
    """One algorithm (or peer) at one density."""

    n: int
    density: float
    name: str
    seconds: float
    ranks: int
    nnz_in: int  # pairs per rank, the largest
    nnz_out: int  # pairs in the result
    wrong: int  # elements that differ from MPI_Allreduce's dense result
    vs_ring: float | None = None  # the dense ring's time / this row's


def _inputs(rank: int, n: int, density: float):
    rng = np.random.default_rng(1000 + rank)
    k = min(n, int(round(density * n)))
    indices = np.sort(rng.choice(n, size=k, replace=False))
    return indices, rng.standard_normal(k).astype(np.float32)


def sparse_table(comm, n: int, densities: list[float], algorithms: list[str], *,
                 iterations: int = 5, warmup: int = 1, torch_peer: bool = True
                 ) -> list[SparseRow]:
    """The rows of ``--sparse`` on the mpi4py communicator ``comm`` (collective)."""
    from ..api import allreduce
    from ..sparse import sparse_allreduce
    from ..sparse.compression import topk
    from ..sparse.vector import densify

    rows, inputs, expected = [], {}, {}
    for density in densities:
        indices, values = inputs[density] = _inputs(comm.rank, n, density)
        dense = np.zeros(n, np.float32)
        dense[indices] = values
        expected[density] = reference = np.empty_like(dense)
        comm.Allreduce(dense, reference)
        results = {}

        def call_of(name, dense=dense, indices=indices, values=values, results=results):
            if name == PEER:
                out = np.empty_like(dense)
                return lambda: (comm.Allreduce(dense, out), results.__setitem__(name, out))
            if name == DENSE_RING:
                out = np.empty_like(dense)
                return lambda: results.__setitem__(name, allreduce(dense, comm, "ring", out=out))
            return lambda: results.__setitem__(name, sparse_allreduce(
                indices, values, n, comm, algorithm=name))

        names = [PEER, DENSE_RING, *algorithms]
        seconds = _interleaved({name: call_of(name) for name in names}, iterations, warmup,
                               barrier=comm.Barrier, slowest=lambda t: _slowest(comm, t))
        gradient = np.random.default_rng(comm.rank).standard_normal(n).astype(np.float32)
        comm.Barrier()
        start = time.perf_counter()
        topk(gradient, len(indices))
        selection = _slowest(comm, time.perf_counter() - start)
        k = comm.allreduce(len(indices), op=_max())
        for name in names:
            out = results[name]
            got = out if isinstance(out, np.ndarray) else densify(*out, n)
            wrong = int(np.sum(~np.isclose(got, reference, rtol=1e-5, atol=1e-5 * comm.size)))
            nnz = int(np.count_nonzero(got)) if isinstance(out, np.ndarray) else len(out[0])
            rows.append(SparseRow(n, density, name, seconds[name], comm.size, k, nnz,
                                  comm.allreduce(wrong, op=_max())))
        rows.append(SparseRow(n, density, TOPK, selection, comm.size, k, k, 0))
    if torch_peer:
        rows += _gloo_rows(comm, n, densities, inputs, expected, iterations, warmup)
    ring = {row.density: row.seconds for row in rows if row.name == DENSE_RING}
    return [SparseRow(**{**row.__dict__, "vs_ring": ring[row.density] / row.seconds})
            for row in rows]


def _gloo_rows(comm, n, densities, inputs, expected, iterations, warmup) -> list[SparseRow]:
    """torch gloo's sparse all_reduce on the same pairs (an all-gather, then a sum)."""
    import torch
    import torch.distributed as dist

    from ..transports.torchdist import init_from_mpi

    torch.set_num_threads(1)
    init_from_mpi(comm)
    rows = []
    try:
        for density in densities:
            indices, values = inputs[density]
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
            wrong = int(np.sum(~np.isclose(got, expected[density], rtol=1e-5,
                                           atol=1e-5 * comm.size)))
            rows.append(SparseRow(n, density, GLOO, seconds, comm.size,
                                  comm.allreduce(len(indices), op=_max()),
                                  int(result["out"].coalesce().indices().shape[1]),
                                  comm.allreduce(wrong, op=_max())))
    finally:
        dist.destroy_process_group()
    return rows


def _max():
    from mpi4py import MPI

    return MPI.MAX


def format_sparse(rows: list[SparseRow]) -> str:
    """The rows as a table: size, density, pairs in and out, time, speed-up over the dense
    ring on the densified vector, and #wrong."""
    lines = [f"{'size':>10} {'count':>10} {'density':>8} {'algorithm':>26} {'nnz in':>9} "
             f"{'nnz out':>9} {'time':>10} {'vs ring':>8} {'#wrong':>7}",
             f"{'(B)':>10} {'(elements)':>10} {'':>8} {'':>26} {'(rank)':>9} {'':>9} "
             f"{'(ms)':>10} {'(x)':>8} {'':>7}"]
    for row in rows:
        lines.append(f"{row.n * 4:>10} {row.n:>10} {row.density:>8.4%} {row.name:>26} "
                     f"{row.nnz_in:>9} {row.nnz_out:>9} {row.seconds * 1e3:>10.2f} "
                     f"{row.vs_ring:>7.2f}x {row.wrong:>7}")
    return "\n".join(lines)
