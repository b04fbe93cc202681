"""Pictures of the sparse allreduce's messages, drawn from traces of the real code (chapter
"Sparse allreduce").

:func:`record_sparse` runs a sparse algorithm on thread ranks under a
:class:`~allreduce.trace.TracingCommunicator` that keeps a copy of every message, and the
pictures decode those messages (each one's header says which index range it covers): in
every step, which indices each rank sent.  Nothing here models an algorithm.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..trace import Trace, TracingCommunicator
from ..transports.threads import run_threads
from .style import OKABE_ITO, PAGE_WIDTH_IN


def record_sparse(algorithm: str, vectors: Sequence[tuple[np.ndarray, np.ndarray]], n: int,
                  **options) -> Trace:
    """The trace of ``sparse_allreduce`` on ``len(vectors)`` thread ranks, rank ``r``
    holding ``vectors[r]``, with every message's bytes kept."""
    from ..sparse import sparse_allreduce

    def body(comm):
        tracer = TracingCommunicator(comm, payloads=True)
        sparse_allreduce(*vectors[comm.rank], n, tracer, algorithm=algorithm, **options)
        return tracer.events

    return Trace(run_threads(len(vectors), body))


def sent(trace: Trace, dtype) -> list[tuple[int, int, int, np.ndarray, tuple[int, int], bool]]:
    """Every sparse message as ``(step, source, dest, indices, (lo, hi), dense)``: a message
    of several packets back to back (Bruck's all-gather forwards all the blocks it holds)
    gives the indices of all of them, the range they span, and whether any is dense."""
    from ..sparse.vector import DENSE, decode, header, packets

    dtype = np.dtype(dtype)
    found = []
    for step, source, dest, payload in trace.payloads():
        parts = []
        for packet in packets(payload, dtype.itemsize):
            kind, _, lo, hi = header(packet)
            parts.append((decode(packet, dtype)[0], lo, hi, kind == DENSE))
        found.append((step, source, dest, np.concatenate([p[0] for p in parts]),
                      (min(p[1] for p in parts), max(p[2] for p in parts)),
                      any(p[3] for p in parts)))
    return found


def pairs_table(trace: Trace, dtype) -> list[list[int]]:
    """Pairs sent by each rank (columns) in each step (rows)."""
    messages = sent(trace, dtype)
    steps = max((m[0] for m in messages), default=0)
    table = [[0] * trace.size for _ in range(steps)]
    for step, source, _, indices, _, _ in messages:
        table[step - 1][source] += len(indices)
    return table


def _draw_step(ax, messages, size: int, n: int, step: int) -> None:
    from matplotlib.patches import Rectangle

    for _, source, dest, indices, (lo, hi), dense in messages:
        colour = OKABE_ITO[source % len(OKABE_ITO)]
        ax.add_patch(Rectangle((lo, source + 0.1), hi - lo, 0.8, color=colour, alpha=0.15, lw=0))
        ax.vlines(indices + 0.5, source + 0.15, source + 0.85, color=colour, lw=1.2)
        label = f"→{dest}: {len(indices)}" + (" dense" if dense else "")
        ax.text(n * 1.02, source + 0.5, label, va="center")
    ax.set_xlim(0, n)
    ax.set_ylim(size, 0)
    ax.set_yticks([r + 0.5 for r in range(size)], [f"rank {r}" for r in range(size)])
    ax.set_xticks([0, n], ["0", f"{n}"])
    ax.set_title(f"step {step}")


#: Height of one rank's row, and room for a panel's title and axis, in inches.
_ROW_IN, _PANEL_EXTRA_IN = 0.3, 0.75


def message_figure(trace: Trace, n: int, dtype, step_names: Sequence[str] | None = None,
                   columns: int = 2):
    """One panel per step: each rank's row shows the indices it sent in that step (ticks),
    over the index range its message covers (shaded), and to whom, with the pair count.
    One row per rank, panels wrapped into ``columns`` across the page's width
    (:data:`allreduce.viz.style.PAGE_WIDTH_IN`).  Returns the matplotlib figure."""
    import matplotlib.pyplot as plt


    messages = sent(trace, dtype)
    steps = max((m[0] for m in messages), default=0)
    columns = max(1, min(columns, steps))
    rows = max(1, -(-steps // columns))
    fig, axes = plt.subplots(rows, columns, squeeze=False, constrained_layout=True,
                             figsize=(PAGE_WIDTH_IN,
                                      rows * (trace.size * _ROW_IN + _PANEL_EXTRA_IN)))
    for t, ax in enumerate(axes.flat, start=1):
        if t > steps:
            ax.axis("off")
            continue
        _draw_step(ax, [m for m in messages if m[0] == t], trace.size, n, t)
        if step_names:
            ax.set_title(step_names[t - 1])
        if (t - 1) % columns:
            ax.set_yticks([])
    return fig


def message_animation(trace: Trace, n: int, dtype, step_names: Sequence[str] | None = None,
                      interval_ms: int = 1400):
    """:func:`message_figure`'s panels, one frame per step; play it in a page with
    :func:`allreduce.viz.animation_html`."""
    import matplotlib.pyplot as plt
    from matplotlib.animation import FuncAnimation


    messages = sent(trace, dtype)
    steps = max((m[0] for m in messages), default=0)
    fig, ax = plt.subplots(figsize=(PAGE_WIDTH_IN * 0.8, trace.size * _ROW_IN + _PANEL_EXTRA_IN),
                           constrained_layout=True)

    def frame(t: int):
        ax.clear()
        _draw_step(ax, [m for m in messages if m[0] == t + 1], trace.size, n, t + 1)
        if step_names:
            ax.set_title(step_names[t])

    animation = FuncAnimation(fig, frame, frames=steps, interval=interval_ms)
    animation.alt_text = (f"Animation of the messages of a sparse allreduce on {trace.size} "
                          f"ranks, one frame per step: each rank's row shows the indices it "
                          "sent in that step and to whom")
    plt.close(fig)
    return animation


def ring_link_load(trace: Trace) -> list[tuple[int, int]]:
    """Step by step, ``(charged, busiest)``: the bytes of the step's largest message, all a
    contention-free model charges the step for, and the bytes the step puts on its busiest
    link when the ranks' links form a ring (each direction its own link) and every message
    takes the shorter way round (clockwise on a tie).  A schedule that only ever sends to a
    neighbour has the two equal; an all-to-all step that sends ``s`` places on loads its
    links about ``min(s, p - s)`` times over (chapter "Sparse allreduce")."""
    p = trace.size
    steps: dict[int, list[tuple[int, int, int]]] = {}
    for step, source, dest, payload in trace.payloads():
        steps.setdefault(step, []).append((source, dest, payload.nbytes))
    found = []
    for step in sorted(steps):
        load: dict[tuple[int, int], int] = {}
        for source, dest, nbytes in steps[step]:
            ahead = (dest - source) % p
            way = 1 if ahead <= p - ahead else -1
            for hop in range(min(ahead, p - ahead)):
                here = (source + way * hop) % p
                link = (here, (here + way) % p)
                load[link] = load.get(link, 0) + nbytes
        found.append((max(nbytes for *_, nbytes in steps[step]), max(load.values())))
    return found
