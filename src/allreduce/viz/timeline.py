"""Message timelines: when each message of a traced run occupies its sender's port, split into
its latency α and its transfer time m·β (chapter "Why gradients must be aggregated", the
α-β-γ model).

Nothing here models an algorithm: the intervals come from the trace's own replay under the
single-port, full-duplex model (:meth:`~allreduce.trace.Trace.critical_path`), which the
cost tests check against every algorithm's formula.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..trace import Trace


@dataclass(frozen=True)
class Message:
    """One message on the wire: ``source`` sends ``nbytes`` to ``dest``; its sender's port is
    busy from ``start`` to ``end`` (seconds), the first ``alpha`` of it the latency."""

    source: int
    dest: int
    nbytes: int
    start: float
    end: float
    alpha: float


def message_intervals(trace: Trace, alpha: float, beta: float) -> list[Message]:
    """Every non-empty message of ``trace`` with the interval its sender's port is busy,
    under α and β (γ = 0), in order of start."""
    _, times = trace._replay(alpha, beta, 0.0)  # the replay the cost tests check
    found = []
    for rank, events in enumerate(trace.events):
        for event, time in zip(events, times[rank]):
            if event.kind == "send" and event.count:
                busy = alpha + event.nbytes * beta
                found.append(Message(rank, event.peer, event.nbytes, time - busy, time, alpha))
    return sorted(found, key=lambda m: (m.start, m.source))


def timeline_figure(trace: Trace, alpha: float, beta: float, title: str = ""):
    """One row per rank: each message as a bar on its sender's row, its latency α hatched
    and its transfer m·β solid, with an arrow to the receiver's row at its end; the critical
    path's length marked below.  Times in µs.  Returns the figure."""
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    from . import rank_colour

    messages = message_intervals(trace, alpha, beta)
    total = trace.critical_path(alpha=alpha, beta=beta)
    fig, ax = plt.subplots(figsize=(6.5, 0.5 * trace.size + 1.6), constrained_layout=True)
    us = 1e6
    for m in messages:
        y = m.source
        ax.barh(y, m.alpha * us, left=m.start * us, height=0.5, color="white",
                edgecolor=rank_colour(m.source), hatch="///", lw=1.2)
        ax.barh(y, (m.end - m.start - m.alpha) * us, left=(m.start + m.alpha) * us,
                height=0.5, color=rank_colour(m.source), edgecolor="black", lw=0.6)
        ax.annotate("", xy=(m.end * us, m.dest), xytext=(m.end * us, y),
                    arrowprops={"arrowstyle": "-|>", "color": "black", "lw": 1.0,
                                "shrinkA": 6, "shrinkB": 6})
    ax.axvline(total * us, color="black", ls="--", lw=1)
    ax.set_yticks(range(trace.size), [f"rank {r}" for r in range(trace.size)])
    ax.invert_yaxis()
    ax.set_xlim(0, total * us * 1.04)
    ax.set_xlabel("time (µs)")
    ax.legend(handles=[Patch(facecolor="white", edgecolor="black", hatch="///",
                             label="latency α"),
                       Patch(facecolor="grey", edgecolor="black", label="transfer m·β")],
              loc="upper center", bbox_to_anchor=(0.5, -0.24), ncol=2, frameon=False)
    ax.set_title(title)
    ax.grid(True, axis="x", alpha=0.3)
    return fig
