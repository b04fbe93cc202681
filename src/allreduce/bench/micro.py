"""Micro-measurements behind constants and choices of the library's hot path (issue 24):
``python -m allreduce.bench.micro``.  CPU time per call (``time.process_time``), which other
processes' load disturbs far less than the wall clock; medians of 7 rounds."""

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


def main() -> None:
    for row in combine_forms():
        print(f"{row['nbytes']:>9} B: three-array {row['three'] * 1e6:9.2f} us, copy then "
              f"in place {row['copy'] * 1e6:9.2f} us ({row['copy'] / row['three']:.2f}x)")


if __name__ == "__main__":
    main()
