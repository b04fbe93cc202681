"""Micro-measurements behind constants and choices of the library's hot path.

``python -m allreduce.bench.micro``: :func:`combine_forms`, in CPU time per call
(``time.process_time``), which other processes' load disturbs far less than the wall clock.
``mpiexec -n 4 python -m mpi4py -m allreduce.bench.micro --in-band``: :func:`in_band`, the
wall-clock ratios behind :data:`allreduce.validation.IN_BAND_LIMIT`.  Medians of 7 rounds."""

from __future__ import annotations

import statistics
import time

import numpy as np

SIZES = (8 << 10, 128 << 10, 512 << 10, 2 << 20, 8 << 20)


def combine_forms(sizes=SIZES, rounds: int = 7) -> list[dict]:
    """Seconds per call of the two forms :func:`allreduce.ops.combine` could take with a
    ``source``: the three-array ``add(incoming, source, out=inout)``, and a copy of
    ``source`` into ``inout`` followed by the in-place ``add(incoming, inout, out=inout)``;
    float32 slices at an odd offset, as Rabenseifner's first halving round reduces them."""
    found = []
    for nbytes in sizes:
        n = nbytes // 4
        rng = np.random.default_rng(0)
        x, buf, scratch = (rng.random(2 * n + 3, dtype=np.float32) for _ in range(3))
        source, inout, incoming = x[n + 3:2 * n], buf[n + 3:2 * n], scratch[:n - 3]

        def three(incoming=incoming, source=source, inout=inout):
            np.add(incoming, source, out=inout)

        def copy_then_in_place(incoming=incoming, source=source, inout=inout):
            inout[:] = source
            np.add(incoming, inout, out=inout)

        repeats = max(20, (20 << 20) // nbytes)
        times: dict[str, list[float]] = {"three": [], "copy": []}
        for _ in range(rounds):
            for name, form in (("three", three), ("copy", copy_then_in_place)):
                start = time.process_time()
                for _ in range(repeats):
                    form()
                times[name].append((time.process_time() - start) / repeats)
        found.append({"nbytes": nbytes, **{k: statistics.median(v) for k, v in times.items()}})
    return found


def in_band(comm, sizes=(1 << 10, 1 << 12, 1 << 14, 1 << 16, 1 << 18, 1 << 20),
            rounds: int = 7, iterations: int = 20) -> list[dict]:
    """Seconds per call (the slowest rank's mean, median over interleaved rounds) of
    ``MPI_Allreduce`` and of the library's recursive doubling with its check carried in
    the data's messages (``in_band``) or sent first as a header-only round (``header``),
    float32 sum on the mpi4py communicator ``comm``."""
    from mpi4py import MPI

    from .. import api
    from ..api import allreduce

    limit = api.IN_BAND_LIMIT
    found = []
    try:
        for nbytes in sizes:
            x = np.ones(nbytes // 4, np.float32)
            out = np.empty_like(x)

            def run(limit_now, x=x, out=out):
                api.IN_BAND_LIMIT = limit_now
                allreduce(x, comm, algorithm="recursive_doubling", out=out)

            forms = {"mpi": lambda x=x, out=out: comm.Allreduce(x, out),
                     "in_band": lambda: run(1 << 62), "header": lambda: run(-1)}
            times: dict[str, list[float]] = {name: [] for name in forms}
            for form in forms.values():
                form()
            for _ in range(rounds):
                for name, form in forms.items():
                    comm.Barrier()
                    start = time.perf_counter()
                    for _ in range(iterations):
                        form()
                    mean = (time.perf_counter() - start) / iterations
                    times[name].append(comm.allreduce(mean, op=MPI.MAX))
            found.append({"nbytes": nbytes, **{k: statistics.median(v) for k, v in times.items()}})
    finally:
        api.IN_BAND_LIMIT = limit
    return found


def main(argv: list[str] | None = None) -> None:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m allreduce.bench.micro",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--in-band", action="store_true",
                        help="the in-band check against a header round first, on the ranks "
                             "of mpiexec -n 4 python -m mpi4py -m allreduce.bench.micro "
                             "(default: the two forms of a reduction, in one process)")
    if parser.parse_args(argv).in_band:
        from mpi4py import MPI

        rows = in_band(MPI.COMM_WORLD)
        if MPI.COMM_WORLD.rank == 0:
            for row in rows:
                print(f"{row['nbytes']:>8} B: MPI_Allreduce {row['mpi'] * 1e6:8.1f} us; "
                      f"check in band {row['mpi'] / row['in_band']:.2f}x MPI, header round "
                      f"first {row['mpi'] / row['header']:.2f}x MPI")
        return
    for row in combine_forms():
        print(f"{row['nbytes']:>9} B: three-array {row['three'] * 1e6:9.2f} us, copy then "
              f"in place {row['copy'] * 1e6:9.2f} us ({row['copy'] / row['three']:.2f}x)")


if __name__ == "__main__":
    main()
