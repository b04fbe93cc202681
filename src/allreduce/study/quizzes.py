"""The study guide's self-check quizzes, one list for the whole book.

Each quiz belongs to a part of the book (the review page of that part shows it) and to the
chapter that teaches it.  Every number a quiz expects is computed here by the library (the
cost formulas, the cost model, ``auto``'s rule, DDP's buckets), never typed; every
multiple-choice answer is chosen by the library too where it can be.  ``tests/test_study_guide.py``
checks each answer again, independently where the library allows it (a formula's counts
against a replay of the real code's trace, a choice against every candidate's predicted
time), and that the built pages carry exactly these answers.

The page checks an answer in the reader's browser (``study/static/quiz.js``): a number is
right within ``tolerance`` (relative; 0 means exactly), a choice when it is the answer.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from .. import cost, scaling, sharded
from ..algorithms.auto import CANDIDATES, fastest
from ..ddp_buckets import BUCKET_BYTES, FIRST_BUCKET_BYTES, ddp_buckets
from ..sparse.allgather import terms as allgather_terms
from ..sparse.sparse_ring import terms as sparse_ring_terms
from ..sparse.vector import HEADER_BYTES

__all__ = ["Quiz", "format_number", "quizzes"]


@dataclass(frozen=True)
class Quiz:
    """One self-check question.  ``prompt`` and ``explanation`` are MyST Markdown;
    ``answer`` is a number (``choices`` empty) or one of ``choices``."""

    id: str
    part: str  # the caption of the part in _toc.yml whose review page shows it
    chapter: str  # the label of the chapter that teaches it
    prompt: str
    answer: float | str
    explanation: str
    unit: str = ""
    tolerance: float = 0.0  # relative, for numbers
    choices: tuple[str, ...] = field(default=())

    @property
    def kind(self) -> str:
        return "choice" if self.choices else "number"


def format_number(x: float) -> str:
    """A number as a quiz states it: an integer without decimals, else 3 significant
    digits (1,400; 85.9; 0.125)."""
    if float(x).is_integer():
        return f"{int(x):,}"
    digits = max(0, 2 - math.floor(math.log10(abs(x)))) if x else 0
    return f"{x:,.{digits}f}"


NET_100G = cost.Model(alpha=2e-6, beta=1 / 12.5e9)  # the chapters' 100 Gb/s network, γ aside


def quizzes() -> list[Quiz]:
    """Every quiz of the book, in the order the review pages show them."""
    found: list[Quiz] = []

    # --- Foundations --------------------------------------------------------------------
    fit = cost.fit([cost.Terms(1, 8, 0), cost.Terms(1, 1e6, 0)], [3e-6, 53e-6], gamma=False)
    found.append(Quiz(
        "ping-pong-bandwidth", "Foundations", "data-parallel",
        "Half a ping-pong's round trip is 3 µs for a message of 8 bytes and 53 µs for one "
        "of 1 MB ($10^6$ bytes). Fitting $T(m) = \\alpha + m\\beta$ through both points, "
        "what is the bandwidth $1/\\beta$?",
        1 / fit.beta / 1e9, unit="GB/s", tolerance=0.02,
        explanation=f"$\\beta$ = (53 − 3) µs / ($10^6$ − 8) bytes, so $1/\\beta$ ≈ "
                    f"{format_number(1 / fit.beta / 1e9)} GB/s, and $\\alpha$ ≈ "
                    f"{format_number(fit.alpha * 1e6)} µs."))
    one_mib = NET_100G.message(1 << 20)
    found.append(Quiz(
        "message-time", "Foundations", "data-parallel",
        f"With $\\alpha$ = {NET_100G.alpha * 1e6:g} µs and $1/\\beta$ = "
        f"{1 / NET_100G.beta / 1e9:g} GB/s, how long does one message of "
        "1 MiB ($2^{20}$ bytes) take?",
        one_mib * 1e6, unit="µs", tolerance=0.01,
        explanation=f"$\\alpha + m\\beta$ = {NET_100G.alpha * 1e6:g} µs + 1,048,576 B / "
                    f"{1 / NET_100G.beta / 1e9:g} GB/s = "
                    f"{format_number(one_mib * 1e6)} µs: the bandwidth term dominates."))
    compositions = {"reduce, then broadcast": "reduce_broadcast",
                    "reduce-scatter, then all-gather": "ring"}
    lightest = min(compositions, key=lambda c: cost.terms(compositions[c], 8, 1.0).bytes)
    found.append(Quiz(
        "composition", "Foundations", "data-parallel",
        "Allreduce can be written as two collectives, one after the other. In which way "
        "does the busiest rank move the fewest bytes, on 8 ranks?",
        lightest, choices=(*compositions, "all-gather, then reduce-scatter"),
        explanation="Reduce-scatter then all-gather spreads the work: every rank sends "
                    "$2\\frac{p-1}{p}n$ bytes and receives as many. In a reduce then "
                    "broadcast where every rank sends straight to the root, the root receives "
                    "$(p-1)n$ and sends $(p-1)n$ ($\\lceil\\lg p\\rceil n$ each way along "
                    "a binomial tree: less, but still more than reduce-scatter then "
                    "all-gather). (An all-gather first would gather the unreduced vectors, "
                    "$(p-1)n$ bytes to every rank: $p$ times the all-gather of the reduced "
                    "chunks.)"))

    # --- Algorithms ---------------------------------------------------------------------
    ring8 = cost.terms("ring", 8, 64e6)
    found.append(Quiz(
        "ring-steps", "Algorithms", "ring",
        "How many steps does the ring allreduce take on 8 ranks?",
        ring8.steps, unit="steps",
        explanation=f"$2(p-1)$ = {format_number(ring8.steps)}: $p-1$ for the reduce-scatter "
                    "and $p-1$ for the all-gather."))
    found.append(Quiz(
        "ring-bytes", "Algorithms", "ring",
        "On 8 ranks, how many megabytes does each rank send in a ring allreduce of a 64 MB "
        "gradient?",
        ring8.bytes / 1e6, unit="MB", tolerance=0.01,
        explanation=f"$2\\frac{{p-1}}{{p}}n$ = 2 · 7/8 · 64 MB = "
                    f"{format_number(ring8.bytes / 1e6)} MB, the lower bound for any "
                    "allreduce of point-to-point messages."))
    server = cost.terms("parameter_server", 8, 100e6, servers=1)
    ring100 = cost.terms("ring", 8, 100e6)
    found.append(Quiz(
        "server-bytes", "Algorithms", "parameter-server",
        "A single parameter server serves 7 workers (8 ranks in all, the server among "
        "them) a 100 MB gradient. How many megabytes cross the server's link, in and out, "
        "in one training step?",
        server.bytes / 1e6, unit="MB", tolerance=0.01,
        explanation=f"$2(p-1)n$ = 2 · 7 · 100 MB = {format_number(server.bytes / 1e6)} MB, "
                    f"{format_number(server.bytes / 2e6)} MB in, then "
                    f"{format_number(server.bytes / 2e6)} MB out, one after the other; a rank "
                    f"of a ring sends {format_number(ring100.bytes / 1e6)} MB while it receives "
                    f"{format_number(ring100.bytes / 1e6)} MB, at the same time, so the "
                    f"server's step takes $p$ = {format_number(server.bytes / ring100.bytes)} "
                    "times as long."))
    sharded8 = cost.terms("parameter_server", 8, 100e6, servers=8)
    found.append(Quiz(
        "sharded-server-bytes", "Algorithms", "parameter-server",
        "The same 8 ranks and 100 MB gradient, but now every rank serves one eighth of the "
        "parameters ($S = p$ = 8 shards). How many megabytes does each rank send in one "
        "training step, its pushes as a worker and its sums as a server together?",
        sharded8.bytes / 1e6, unit="MB", tolerance=0.01,
        explanation=f"Each rank pushes $p-1$ shards of $n/S$ to the other servers and "
                    f"sends its own shard's sum to the $p-1$ others: 2 · 7 · "
                    f"{format_number(100 / 8)} MB = "
                    f"{format_number(sharded8.bytes / 1e6)} MB, what a rank of a ring sends "
                    "($2\\frac{p-1}{p}n$): sharded servers are a reduce-scatter and an "
                    "all-gather."))
    naive8 = cost.terms("naive", 8, 10e6)
    found.append(Quiz(
        "naive-bytes", "Algorithms", "naive",
        "In the naive allreduce every rank sends its whole buffer to every other rank. On 8 "
        "ranks with a 10 MB gradient, how many megabytes does each rank send?",
        naive8.bytes / 1e6, unit="MB", tolerance=0.01,
        explanation=f"$(p-1)n$ = 7 · 10 MB = {format_number(naive8.bytes / 1e6)} MB, and "
                    "$p(p-1)n$ over the whole network."))
    ratio16 = cost.terms("naive", 16, 1.0).bytes / cost.terms("ring", 16, 1.0).bytes
    found.append(Quiz(
        "naive-vs-ring", "Algorithms", "naive",
        "On 16 ranks, how many times as many bytes does each rank send in the naive allreduce "
        "as in the ring?",
        ratio16, unit="times", tolerance=0.01,
        explanation=f"$(p-1)n$ against $2\\frac{{p-1}}{{p}}n$: a factor of $p/2$ = "
                    f"{format_number(ratio16)}, which grows with $p$."))
    doubling6 = cost.terms("recursive_doubling", 6, 1.0)
    q6 = cost.largest_power_of_two(6)
    found.append(Quiz(
        "doubling-steps", "Algorithms", "tree",
        "How many steps does recursive doubling take on 6 ranks?",
        doubling6.steps, unit="steps",
        explanation=f"6 is not a power of two: {6 - q6} ranks fold into their partners "
                    f"(1 step), the {q6} that remain run $\\log_2 {q6}$ = "
                    f"{format_number(math.log2(q6))} rounds, and the fold is undone "
                    f"(1 step): {format_number(doubling6.steps)}."))
    busbw = cost.busbw(2e9, 0.05, 16)
    found.append(Quiz(
        "busbw", "Algorithms", "ring",
        "An allreduce of 2 GB on 16 GPUs takes 50 ms. What bus bandwidth (busbw) does "
        "nccl-tests report?",
        busbw / 1e9, unit="GB/s", tolerance=0.01,
        explanation=f"algbw = 2 GB / 50 ms = {format_number(2e9 / 0.05 / 1e9)} GB/s; "
                    f"busbw = algbw · $2(p-1)/p$ = {format_number(2e9 / 0.05 / 1e9)} · "
                    f"{2 * 15}/16 = {format_number(busbw / 1e9)} GB/s."))
    small = {"ring": "ring", "binomial tree": "tree", "recursive doubling": "recursive_doubling"}
    small_winner = min(small, key=lambda name: NET_100G.time(small[name], 1024, 1024))
    found.append(Quiz(
        "small-message", "Algorithms", "tree",
        f"On 1,024 ranks over a {8 / NET_100G.beta / 1e9:g} Gb/s network ($\\alpha$ = "
        f"{NET_100G.alpha * 1e6:g} µs), which algorithm finishes an allreduce of 1 KiB first?",
        small_winner, choices=tuple(small),
        explanation="For a kilobyte the latency term decides: recursive doubling takes "
                    "$\\log_2 p$ = "
                    f"{format_number(cost.terms('recursive_doubling', 1024, 1024).steps)} "
                    "steps, the binomial tree "
                    f"{format_number(cost.terms('tree', 1024, 1024).steps)} and the ring "
                    f"$2(p-1)$ = {format_number(cost.terms('ring', 1024, 1024).steps)}."))

    # --- Practice -----------------------------------------------------------------------
    p = 64
    crossing = cost.crossover(NET_100G, "recursive_doubling", "ring", p)
    above, below = 2 * (p - 1) - math.log2(p), math.log2(p) - 2 * (p - 1) / p
    found.append(Quiz(
        "crossover-64", "Practice", "choosing",
        f"On 64 ranks with $\\alpha$ = {NET_100G.alpha * 1e6:g} µs and $1/\\beta$ = "
        f"{1 / NET_100G.beta / 1e9:g} GB/s (γ aside), above what "
        "message size does the ring beat recursive doubling? Answer in KiB.",
        crossing / 1024, unit="KiB", tolerance=0.02,
        explanation=f"$n^* = \\frac{{\\alpha}}{{\\beta}}\\cdot"
                    f"\\frac{{2(p-1) - \\log_2 p}}{{\\log_2 p - 2\\frac{{p-1}}{{p}}}}$ = "
                    f"{NET_100G.alpha / NET_100G.beta / 1e3:g} kB · {above:g}/{below:.2f} ≈ "
                    f"{format_number(crossing / 1e3)} kB ≈ "
                    f"{format_number(crossing / 1024)} KiB."))
    nvlink = cost.NETWORKS["NVLink-class, α = 1 µs"]
    found.append(Quiz(
        "auto-choice", "Practice", "choosing",
        f"On 8 ranks of the NVLink-class network of the chapter (α = {nvlink.alpha * 1e6:g} µs, "
        f"1/β = {1 / nvlink.beta / 1e9:g} GB/s), "
        "which algorithm does `auto`'s rule run for 64 MiB per rank?",
        fastest(64 << 20, 8, nvlink), choices=tuple(CANDIDATES),
        explanation="For large messages the bytes decide, and on a power of two "
                    "Rabenseifner sends the ring's $2\\frac{p-1}{p}n$ bytes in "
                    f"$2\\log_2 p$ = {cost.terms('rabenseifner', 8, 1).steps:g} steps instead "
                    f"of {cost.terms('ring', 8, 1).steps:g}."))
    for key, count, size in (("ddp-buckets", 100, 3 << 20), ("ddp-buckets-large", 40, 10 << 20)):
        rebuilt = ddp_buckets([size] * count, BUCKET_BYTES, FIRST_BUCKET_BYTES)
        found.append(Quiz(
            key, "Practice", "nccl",
            f"A model has {count} gradient tensors of {size >> 20} MiB each. After DDP rebuilds "
            f"its buckets ({FIRST_BUCKET_BYTES >> 20} MiB for the first bucket, then "
            f"{BUCKET_BYTES >> 20} MiB), how many allreduces does a step run?",
            len(rebuilt), unit="allreduces",
            explanation=_buckets_explained(size, count, len(rebuilt))))
    zero3 = sharded.volume("ZeRO-3 / FSDP", 64, 2e9)
    found.append(Quiz(
        "zero3-volume", "Practice", "beyond-ring",
        "A model of 1 billion parameters in bfloat16 ($\\Psi$ = 2 GB) trains on 64 ranks "
        "with ZeRO-3 (FSDP's full sharding). How many gigabytes does each rank send per step?",
        zero3 / 1e9, unit="GB", tolerance=0.01,
        explanation=f"Two all-gathers of the parameters (before forward and before backward) "
                    f"and one reduce-scatter of the gradients, $\\frac{{p-1}}{{p}}\\Psi$ "
                    f"each: 3 · 63/64 · 2 GB = {format_number(zero3 / 1e9)} GB, "
                    f"{zero3 / sharded.volume('DDP', 64, 2e9):g} times "
                    "DDP's allreduce."))
    strategies = tuple(sharded.STEPS)
    found.append(Quiz(
        "zero-most-bytes", "Practice", "beyond-ring",
        "Which of these sends the most bytes per rank and training step, on the same model "
        "and ranks?",
        max(strategies, key=lambda s: sharded.volume(s, 64, 1.0)), choices=strategies,
        explanation="DDP's allreduce is a reduce-scatter and an all-gather, $2\\Psi$; ZeRO-1 "
                    "and 2 run the same two halves; ZeRO-3 all-gathers the parameters twice, "
                    "$3\\Psi$."))
    k64 = 1 << 20  # n = 2^26 float32 entries; k is where the all-gather meets the ring
    n64 = 1 << 26
    ring64 = cost.terms("ring", 64, 4 * n64).bytes
    at0 = allgather_terms(64, 0, 8).bytes
    per_pair = (allgather_terms(64, k64, 8).bytes - at0) / k64
    threshold = (ring64 - at0) / per_pair / n64
    found.append(Quiz(
        "allgather-threshold", "Practice", "sparse",
        "On 64 ranks, a float32 gradient of $2^{26}$ entries is sent as Top-k pairs (int32 "
        "index, float32 value) by an all-gather. Below which density, in percent, does it "
        "send fewer bytes per rank than the dense ring?",
        100 * threshold, unit="%", tolerance=0.01,
        explanation=f"$(p-1)kc < 2\\frac{{p-1}}{{p}}nw$ gives $d < 2w/(pc) = 1/p$: about "
                    f"{format_number(100 * threshold)}% (a hair under 1/64 for the headers)."))
    disjoint = sparse_ring_terms(8, 8000, 8, "disjoint")
    found.append(Quiz(
        "sparse-ring-disjoint", "Practice", "sparse",
        "On 8 ranks, each with 8,000 float32 pairs (8 bytes each) spread evenly over the chunks, "
        "on disjoint supports: how many kB does `sparse_ring` send through each rank, its "
        f"{HEADER_BYTES}-byte message headers included?",
        disjoint.bytes / 1e3, unit="kB", tolerance=0.01,
        explanation=f"The reduce-scatter carries growing unions, $\\frac{{p-1}}{{2}}kc$, and "
                    f"the all-gather $(p-1)kc$: $1.5(p-1)kc + 2(p-1)h$ = "
                    f"{format_number(disjoint.bytes / 1e3)} kB, more than the all-gather's "
                    "$(p-1)(kc + h)$."))
    net = cost.NETWORKS["100 Gb/s, α = 2 µs"]
    example = dict(gradient_bytes=1e9, sample_seconds=0.25 / 32, model=net)
    weak8 = scaling.weak_efficiency(8, batch=32, **example)
    found.append(Quiz(
        "weak-efficiency", "Practice", "capstone",
        "The capstone's worked example: 1 GB of gradients, 0.25 s of compute for a batch of 32 "
        f"per GPU, {8 / net.beta / 1e9:g} Gb/s ($\\alpha$ = {net.alpha * 1e6:g} µs, "
        f"γ = 1/({1 / net.gamma / 1e9:g} GB/s)), the algorithm `auto`'s rule picks on that "
        "network, no overlap. What is the weak-scaling efficiency on 8 GPUs, in percent?",
        100 * weak8, unit="%", tolerance=0.01,
        explanation=f"$T(1)$ = 0.25 s; $T(8)$ adds the allreduce (Rabenseifner on a power of "
                    f"two, about $2\\frac{{7}}{{8}}n\\beta + \\frac{{7}}{{8}}n\\gamma$): "
                    f"$E = T(1)/T(8)$ ≈ {format_number(100 * weak8)}%."))
    strong64 = scaling.strong_efficiency(64, global_batch=1024, **example)
    weak64 = scaling.weak_efficiency(64, batch=32, **example)
    found.append(Quiz(
        "strong-efficiency", "Practice", "capstone",
        "The same model and network, but strong scaling: a global batch of 1,024 shared by "
        f"64 GPUs ({format_number(1024 / 64)} each). What is the efficiency "
        "$T(1)/(p\\,T(p))$, in percent?",
        100 * strong64, unit="%", tolerance=0.01,
        explanation=f"Each GPU computes {format_number(1024 / 64)} samples "
                    f"({format_number(1024 / 64 * example['sample_seconds'])} s) but pays the "
                    f"whole allreduce: {format_number(100 * strong64)}%, below weak scaling's "
                    f"{format_number(100 * weak64)}% on 64 GPUs, because the allreduce does not "
                    "shrink with the batch."))
    return found


def _buckets_explained(size: int, count: int, buckets: int) -> str:
    """Why ``count`` equal tensors of ``size`` bytes fill ``buckets`` of DDP's rebuilt
    buckets, from the library's caps (a bucket closes with the tensor that takes it to its
    cap)."""
    first = -(-FIRST_BUCKET_BYTES // size)
    per = -(-BUCKET_BYTES // size)
    assert buckets == 1 + -(-(count - first) // per), (size, count, buckets)
    return (f"The first bucket closes after {first} tensor{'s' if first != 1 else ''} "
            f"({first * size >> 20} MiB ≥ "
            f"{FIRST_BUCKET_BYTES >> 20} MiB); each later one once it reaches "
            f"{BUCKET_BYTES >> 20} MiB, that is after {per} tensors ({per * size >> 20} MiB): "
            f"1 + ⌈{count - first}/{per}⌉ = {buckets} buckets, one allreduce each.")
