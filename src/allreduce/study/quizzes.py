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

from .. import cost
from ..algorithms.auto import CANDIDATES, fastest
from ..ddp_buckets import BUCKET_BYTES, FIRST_BUCKET_BYTES, ddp_buckets

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
        "A ping-pong measures 3 µs for a message of 8 bytes and 53 µs for one of 1 MB "
        "($10^6$ bytes). Fitting $T(m) = \\alpha + m\\beta$ through both points, what is the "
        "bandwidth $1/\\beta$?",
        1 / fit.beta / 1e9, unit="GB/s", tolerance=0.02,
        explanation=f"$\\beta$ = (53 − 3) µs / ($10^6$ − 8) bytes, so $1/\\beta$ ≈ "
                    f"{format_number(1 / fit.beta / 1e9)} GB/s, and $\\alpha$ ≈ "
                    f"{format_number(fit.alpha * 1e6)} µs."))
    one_mib = NET_100G.message(1 << 20)
    found.append(Quiz(
        "message-time", "Foundations", "data-parallel",
        "With $\\alpha$ = 2 µs and $1/\\beta$ = 12.5 GB/s, how long does one message of "
        "1 MiB ($2^{20}$ bytes) take?",
        one_mib * 1e6, unit="µs", tolerance=0.01,
        explanation=f"$\\alpha + m\\beta$ = 2 µs + 1,048,576 B / 12.5 GB/s = "
                    f"{format_number(one_mib * 1e6)} µs: the bandwidth term dominates."))
    compositions = {"reduce, then broadcast": "reduce_broadcast",
                    "reduce-scatter, then all-gather": "ring"}
    lightest = min(compositions, key=lambda c: cost.terms(compositions[c], 8, 1.0).bytes)
    found.append(Quiz(
        "composition", "Foundations", "data-parallel",
        "Allreduce can be written as two collectives, one after the other. In which way "
        "does the busiest rank move the fewest bytes, on 8 ranks?",
        lightest, choices=(*compositions, "all-gather, then reduce-scatter"),
        explanation="Reduce-scatter then all-gather spreads the work: every rank moves "
                    "$2\\frac{p-1}{p}n$ bytes, against $2(p-1)n$ through the root of a "
                    "reduce then broadcast. (An all-gather first would gather unreduced "
                    "data: $p$ times more.)"))

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
    found.append(Quiz(
        "server-bytes", "Algorithms", "parameter-server",
        "A single parameter server serves 7 workers (8 ranks in all, the server among "
        "them) a 100 MB gradient. How many megabytes cross the server's link, in and out, "
        "in one step?",
        server.bytes / 1e6, unit="MB", tolerance=0.01,
        explanation=f"$2(p-1)n$ = 2 · 7 · 100 MB = {format_number(server.bytes / 1e6)} MB, "
                    "against 175 MB through each rank's link in a ring."))
    doubling6 = cost.terms("recursive_doubling", 6, 1.0)
    found.append(Quiz(
        "doubling-steps", "Algorithms", "tree",
        "How many steps does recursive doubling take on 6 ranks?",
        doubling6.steps, unit="steps",
        explanation=f"6 is not a power of two: two ranks fold into their partners (1 step), "
                    f"the 4 that remain run $\\log_2 4$ = 2 rounds, and the fold is undone "
                    f"(1 step): {format_number(doubling6.steps)}."))
    busbw = cost.busbw(2e9, 0.05, 16)
    found.append(Quiz(
        "busbw", "Algorithms", "ring",
        "An allreduce of 2 GB on 16 GPUs takes 50 ms. What bus bandwidth (busbw) does "
        "nccl-tests report?",
        busbw / 1e9, unit="GB/s", tolerance=0.01,
        explanation=f"algbw = 2 GB / 50 ms = 40 GB/s; busbw = algbw · $2(p-1)/p$ = "
                    f"40 · 30/16 = {format_number(busbw / 1e9)} GB/s."))
    small = {"ring": "ring", "binomial tree": "tree", "recursive doubling": "recursive_doubling"}
    small_winner = min(small, key=lambda name: NET_100G.time(small[name], 1024, 1024))
    found.append(Quiz(
        "small-message", "Algorithms", "tree",
        "On 1,024 ranks over a 100 Gb/s network ($\\alpha$ = 2 µs), which algorithm "
        "finishes an allreduce of 1 KiB first?",
        small_winner, choices=tuple(small),
        explanation="For a kilobyte the latency term decides: recursive doubling takes "
                    "$\\log_2 p$ = 10 steps, the binomial tree 20 and the ring "
                    "$2(p-1)$ = 2,046."))

    # --- Practice -----------------------------------------------------------------------
    crossing = cost.crossover(NET_100G, "recursive_doubling", "ring", 64)
    found.append(Quiz(
        "crossover-64", "Practice", "choosing",
        "On 64 ranks with $\\alpha$ = 2 µs and $1/\\beta$ = 12.5 GB/s (γ aside), above what "
        "message size does the ring beat recursive doubling? Answer in KiB.",
        crossing / 1024, unit="KiB", tolerance=0.02,
        explanation=f"$n^* = \\frac{{\\alpha}}{{\\beta}}\\cdot"
                    f"\\frac{{2(p-1) - \\log_2 p}}{{\\log_2 p - 2\\frac{{p-1}}{{p}}}}$ = "
                    f"25 KB · 120/4.03 ≈ {format_number(crossing / 1024)} KiB."))
    nvlink = cost.NETWORKS["NVLink-class, α = 1 µs"]
    found.append(Quiz(
        "auto-choice", "Practice", "choosing",
        "On 8 ranks of the NVLink-class network of the chapter (α = 1 µs, 1/β = 150 GB/s), "
        "which algorithm does `auto`'s rule run for 64 MiB per rank?",
        fastest(64 << 20, 8, nvlink), choices=tuple(CANDIDATES),
        explanation="For large messages the bytes decide, and on a power of two "
                    "Rabenseifner sends the ring's $2\\frac{p-1}{p}n$ bytes in "
                    "$2\\log_2 p$ = 6 steps instead of 14."))
    sizes = [3 << 20] * 100
    rebuilt = ddp_buckets(sizes, BUCKET_BYTES, FIRST_BUCKET_BYTES)
    found.append(Quiz(
        "ddp-buckets", "Practice", "nccl",
        "A model has 100 gradient tensors of 3 MiB each. After DDP rebuilds its buckets "
        "(1 MiB for the first bucket, then 25 MiB), how many allreduces does a step run?",
        len(rebuilt), unit="allreduces",
        explanation=f"The first bucket closes with the first tensor (3 MiB ≥ 1 MiB); each "
                    f"later one once it reaches 25 MiB, that is after 9 tensors (27 MiB): "
                    f"1 + ⌈99/9⌉ = {len(rebuilt)} buckets, one allreduce each."))
    return found
