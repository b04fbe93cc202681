"""The ``allreduce-bench`` command: nccl-tests' options for sizes, op and type (``-b -e
-f``, ``-o``, ``-d``) and ``-a`` for the algorithms (nccl-tests' own ``-a`` picks how its
time is read across ranks), under ``mpiexec`` or ``torchrun``, and the book's sweep mode."""

from __future__ import annotations

from pathlib import Path

from .progress import Progress
from .record import _plot, fit_model, format_table
from .sparse import MOST_ITERATIONS as SPARSE_MOST
from .sweep import sweep
from .table import LEAST_TIMED, MOST_ITERATIONS, _World, run_table
from .timing import ROUNDS

UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def _seconds(text: str) -> float:
    """``--least-timed``: a finite number of seconds, 0 or more."""
    import argparse
    import math

    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"not a number of seconds (0 or more): {text!r}")
    return value


def parse_size(text: str) -> int:
    """``"64K"`` → 65536, as nccl-tests' ``-b``/``-e`` read sizes."""
    text = text.strip().upper().removesuffix("B")
    unit = text[-1] if text and text[-1] in UNITS else ""
    try:
        return int(float(text[: len(text) - len(unit)]) * UNITS[unit])
    except ValueError:
        raise ValueError(f"not a size: {text!r} (use e.g. 8, 1K, 64M)") from None


def size_range(begin: int, end: int, factor: int) -> list[int]:
    """``begin, begin·factor, …`` up to ``end`` (nccl-tests' ``-b -e -f``)."""
    if begin <= 0 or end < begin or factor < 2:
        raise ValueError("need 0 < begin <= end and factor >= 2")
    sizes = [begin]
    while sizes[-1] * factor <= end:
        sizes.append(sizes[-1] * factor)
    return sizes


def _wants_sparse(argv: list[str] | None) -> bool:
    import argparse
    import sys

    flag = argparse.ArgumentParser(add_help=False)
    flag.add_argument("--sparse", action="store_true")
    known, _ = flag.parse_known_args(sys.argv[1:] if argv is None else argv)
    return known.sparse


MPIEXEC = ".venv/bin/mpiexec -n 4 .venv/bin/python -m mpi4py -m allreduce.bench"
LAUNCH = f"Launch it on several ranks: `{MPIEXEC}` (what `make bench` runs)"


def _show_defaults():
    import argparse

    class ShowDefaults(argparse.ArgumentDefaultsHelpFormatter):
        """Every option's default at the end of its help: "off" for a flag, "none" for a
        file that is written only when named."""

        def _get_help_string(self, action):
            if action.default is False or action.default is None:
                return action.help + (" (default: off)" if action.default is False
                                      else " (default: none)")
            return super()._get_help_string(action)

    return ShowDefaults


def _parser(sparse: bool):
    """The options of the dense benchmark, or with ``sparse`` those of ``--sparse``; every
    option's help ends with its default."""
    import argparse

    parser = argparse.ArgumentParser(
        prog="allreduce-bench" + " --sparse" * sparse,
        formatter_class=_show_defaults(),
        description=(
            "The sparse allreduce (for Top-k gradients) against the dense one, at several "
            f"densities, in interleaved rounds.  Launch it on several ranks: `{MPIEXEC} "
            "--sparse`." if sparse else
            "Allreduce benchmark in nccl-tests' columns, with the libraries' own allreduce as "
            "peers in the same run. " + LAUNCH + ", or `.venv/bin/torchrun --nproc-per-node 4 "
            "-m allreduce.bench`.  `allreduce-bench --sparse --help` lists the sparse "
            "benchmark's options."))
    if sparse:
        from ..sparse import SPARSE_CHOICES
        from .sparse import LEAST_TIMED as least_timed

        parser.add_argument("--sparse", action="store_true",
                            help="benchmark the sparse allreduce (under mpiexec)")
        parser.add_argument("-a", "--algorithms", default=",".join([*SPARSE_CHOICES, "auto"]),
                            help="comma-separated sparse algorithms (name:nonzeros cuts a "
                                 "chunked one's range at equal nonzeros), or 'all'")
        parser.add_argument("--count", default="16M", help="dense length n of the vectors")
        parser.add_argument("--densities", default="0.0001,0.001,0.01,0.1,0.5",
                            help="comma-separated densities (fractions of n)")
        parser.add_argument("--supports", default="uniform",
                            help="comma-separated kinds of support: uniform, identical, "
                                 "disjoint, gradients (the course transformer's Top-k "
                                 "gradients; densities above 1%% regenerate them once, in "
                                 "minutes)")
        parser.add_argument("--least-timed", type=_seconds, default=least_timed,
                            metavar="SECONDS",
                            help="time each call at a density for at least this long: more "
                                 f"iterations for short calls, up to {SPARSE_MOST:,}")
    else:
        parser.add_argument("-b", "--minbytes", default="1K", help="smallest size")
        parser.add_argument("-e", "--maxbytes", default="64M", help="largest size")
        parser.add_argument("-f", "--stepfactor", type=int, default=4, help="size factor")
        parser.add_argument("-a", "--algorithms", default="ring,rabenseifner,auto",
                            help="comma-separated, or 'all'")
        parser.add_argument("-o", "--op", default="sum", help="sum, mean, max, min or prod")
        parser.add_argument("-d", "--dtype", default="float32",
                            help="float16, float32, float64, int32 or int64")
        parser.add_argument("--least-timed", type=_seconds, default=LEAST_TIMED,
                            metavar="SECONDS",
                            help="time each call at a size for at least this long: more "
                                 f"iterations (up to {MOST_ITERATIONS:,}) for short calls; "
                                 "0 for exactly -n")
    parser.add_argument("-n", "--iters", type=int, default=20,
                        help="timed iterations, at least (see --least-timed)")
    parser.add_argument("-w", "--warmup_iters", type=int, default=5, help="warm-up iterations")
    parser.add_argument("--no-torch", action="store_true",
                        help="under mpiexec, leave out the torch gloo peer")
    if not sparse:
        parser.add_argument("--csv", type=Path, help="write the rows as CSV")
    parser.add_argument("--json", type=Path, help="write the rows as JSON")
    if not sparse:
        parser.add_argument("--plot", type=Path, help="plot busbw against size (PNG)")
        parser.add_argument("--save-model", action="store_true",
                            help="keep the fitted model (at $ALLREDUCE_MODEL or "
                                 "~/.cache/allreduce/model.json) for --model or "
                                 "allreduce.auto.load_model()")
        parser.add_argument("--sparse", action="store_true",
                            help="benchmark the sparse allreduce instead (see --sparse --help)")
    parser.add_argument("--model", type=Path, metavar="FILE",
                        help="auto chooses with the model saved in FILE instead of the committed "
                             "default; every rank must see the same file")
    parser.add_argument("--allow-one-rank", action="store_true",
                        help="run on a single rank (an allreduce on one rank moves no data, "
                             "so its table measures nothing of the network)")
    parser.add_argument("--sweep", action="store_true", help=argparse.SUPPRESS)  # run_sweep
    parser.add_argument("--sizes", nargs="+", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--iterations", type=int, default=5, help=argparse.SUPPRESS)
    return parser


def one_rank(size: int, allowed: bool) -> str | None:
    """The refusal to measure on one rank (``None`` when there are more, or when allowed)."""
    if size > 1 or allowed:
        return None
    return ("allreduce-bench: refusing to measure on 1 rank: an allreduce on one rank moves "
            "no data, so the table would say nothing of the algorithms. " + LAUNCH +
            "; --allow-one-rank measures on one rank anyway.")


def _per_second(inverse: float) -> str:
    """``1/beta`` or ``1/gamma`` in GB/s, or "not measured" where the fit left it at 0."""
    return f"{1 / inverse / 1e9:.2f} GB/s" if inverse > 0 else "not measured"


def _main(argv: list[str] | None = None) -> int:
    import csv
    import json
    import sys

    from .. import cost
    from ..api import ALGORITHMS
    from ..transports import as_communicator

    sparse = _wants_sparse(argv)
    parser = _parser(sparse)
    args, rest = parser.parse_known_args(argv)
    if args.sweep:  # the book's build-time measurements (run_sweep)
        from mpi4py import MPI

        algorithms = [a for a in rest if not a.startswith("-")] if rest else []
        result = sweep(MPI.COMM_WORLD, algorithms, args.sizes, iterations=args.iterations)
        if MPI.COMM_WORLD.rank == 0:
            print(json.dumps(result))
        return 0
    if rest:
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    if args.model:
        from ..algorithms.auto import load_model

        load_model(args.model)
    if args.sparse:
        return _sparse_main(parser, args)
    algorithms = [a for a in ALGORITHMS] if args.algorithms == "all" else args.algorithms.split(",")
    unknown = [a for a in algorithms if a not in ALGORITHMS]
    if unknown:
        parser.error(f"unknown algorithm(s) {', '.join(unknown)}; known: {', '.join(ALGORITHMS)}")
    sizes = size_range(parse_size(args.minbytes), parse_size(args.maxbytes), args.stepfactor)
    world = _World(torch_peer=not args.no_torch)
    if (refusal := one_rank(world.size, args.allow_one_rank)) is not None:
        world.close()
        print(refusal, file=sys.stderr)
        return 2
    show = world.rank == 0
    bar = Progress()

    def progress(done, total, nbytes):
        """One size measured: in the first pass every algorithm and MPI's allreduce; under
        MPI, torch's all_reduce is timed alone in a second pass (see _World)."""
        if show:
            from .runs import size

            passes, current = total // len(sizes), (done - 1) // len(sizes) + 1
            timed = "the algorithms and MPI_Allreduce" if current == 1 else \
                "torch's all_reduce alone"
            what = "" if passes == 1 else f", pass {current} of {passes}: {timed}"
            bar(done, total, f"{size(nbytes)}{what}")

    try:
        rows = run_table(world, algorithms, sizes, dtype=args.dtype, op=args.op,
                         iterations=args.iters, warmup=args.warmup_iters,
                         least_timed=args.least_timed, progress=progress)
    finally:
        bar.close()
        world.close()
    if not show:
        return 0
    in_band = world.mpi is not None and as_communicator(world.comm).receives_any_length
    model, rows = fit_model(rows, list(world.peers), in_band=in_band)
    print(f"# allreduce-bench: {world.size} ranks on {world.describe()}, {args.dtype} {args.op}, "
          f"{args.warmup_iters} warm-up + at least {args.iters} timed iterations per call"
          + (f", more (up to {MOST_ITERATIONS:,}) to time each for {args.least_timed:g} s"
             if args.least_timed else "")
          + f", in up to {ROUNDS} interleaved rounds; time = median over rounds of "
          "the slowest rank's mean per call")
    print(format_table(rows, list(world.peers)))
    if "auto" in algorithms:
        print(_auto_model_line())
    if model:
        print(f"# model fitted to this run's algorithm rows (critical path of the whole call, "
              f"relative error): alpha = {model.alpha * 1e6:.1f} us per step, 1/beta = "
              f"{_per_second(model.beta)}, 1/gamma = {_per_second(model.gamma)}, "
              f"overhead = {model.overhead * 1e6:.1f} us per call")
        if args.save_model:
            print(f"# saved the model for auto to {cost.save(model)} (auto uses it only when "
                  "loaded: --model FILE, or allreduce.auto.load_model(FILE))")
    fields = ["nbytes", "count", "dtype", "op", "name", "seconds", "ranks", "wrong",
              "peer_ratio", "predicted", "in_band_limit", "least_timed", "algbw", "busbw"]
    records = [{f: getattr(row, f) for f in fields} for row in rows]
    if args.csv:
        with args.csv.open("w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=fields)
            writer.writeheader()
            writer.writerows(records)
    if args.json:
        args.json.write_text(json.dumps(records, indent=1))
    if args.plot:
        _plot(rows, args.plot)
    return 1 if any(row.wrong for row in rows) else 0


def _sparse_main(parser, args) -> int:
    import json
    import sys

    from mpi4py import MPI

    from ..sparse import SPARSE_CHOICES
    from .sparse import MOST_ITERATIONS, ROUNDS, format_sparse, sparse_table
    from .sparse_inputs import SOURCES

    if (refusal := one_rank(MPI.COMM_WORLD.size, args.allow_one_rank)) is not None:
        print(refusal, file=sys.stderr)
        return 2
    names = [*SPARSE_CHOICES, "auto"] if args.algorithms == "all" \
        else args.algorithms.split(",")
    unknown = [a for a in names if a not in (*SPARSE_CHOICES, "auto")]
    if unknown:
        parser.error(f"unknown sparse algorithm(s) {', '.join(unknown)}; known: "
                     f"{', '.join(SPARSE_CHOICES)}, auto")
    densities = [float(d) for d in args.densities.split(",")]
    supports = tuple(args.supports.split(","))
    unknown = [s for s in supports if s not in SOURCES]
    if unknown:
        parser.error(f"unknown supports {', '.join(unknown)}; known: {', '.join(SOURCES)}")
    rows = sparse_table(MPI.COMM_WORLD, parse_size(args.count), densities, names,
                        supports=supports, iterations=args.iters, warmup=args.warmup_iters,
                        torch_peer=not args.no_torch, least_timed=args.least_timed)
    if MPI.COMM_WORLD.rank == 0:
        print(f"# allreduce-bench --sparse: {MPI.COMM_WORLD.size} MPI ranks, float32 sum; "
              f"at least {max(args.iters, ROUNDS)} timed iterations per call, more (up to "
              f"{MOST_ITERATIONS}) to time each for {args.least_timed:g} s; "
              f"time = median over {ROUNDS} interleaved rounds (torch gloo's rows: -n "
              f"iterations, timed alone), slowest rank; local = merging, "
              "encoding, densifying; wire = time - local; model = auto's prediction from "
              "the real supports")
        print(format_sparse(rows))
        print(_auto_model_line())
        if args.json:
            args.json.write_text(json.dumps([row.__dict__ for row in rows], indent=1))
    return 1 if any(row.wrong for row in rows) else 0


def _auto_model_line() -> str:
    """Which model auto chose with in this run, and where it came from."""
    from ..algorithms.auto import describe_model, model, model_source

    return f"# auto chose with {describe_model(model())}, from {model_source()}"


def main() -> None:
    """Console script ``allreduce-bench``."""
    raise SystemExit(_main())
