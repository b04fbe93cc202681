"""Pictures drawn from traces of the real algorithms: step figures, animations, timing plots.

Used by every algorithm chapter (first in "Ring allreduce").  Nothing here models an
algorithm: :func:`record_states` runs the library's own code on thread ranks under a
:class:`~allreduce.trace.TracingCommunicator` and the pictures show what it did.

Each rank starts with ``2**rank`` in every element, and the reduction is a sum, so every
element of every buffer is, at every step, the bit set of the ranks whose data it holds
(:func:`contributors`).  A chunk is finished when it holds all ``p`` bits.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from html import escape

import numpy as np

from .. import cost
from ..algorithms._schedule import chunk_bounds
from ..trace import Trace, record
from .style import use_book_style  # noqa: F401  (the pages call viz.use_book_style())


def contribution_input(rank: int, count: int) -> np.ndarray:
    """Rank ``rank``'s input for a contribution trace: ``2**rank`` in every element."""
    return np.full(count, 1 << rank, dtype=np.int64)


def record_states(algorithm: str, size: int, count: int, **options) -> tuple[Trace, np.ndarray]:
    """Run ``algorithm`` on ``size`` thread ranks with :func:`contribution_input` and return
    the trace and :meth:`~allreduce.trace.Trace.states`: ``states[t, r, i]`` is the bit set of
    ranks that element ``i`` of rank ``r`` holds after step ``t``."""
    if not 1 <= size <= 62:
        raise ValueError(f"contribution traces use one bit per rank: size must be 1..62, got {size}")
    trace, _ = record(algorithm, size, count, make=contribution_input, snapshots=True, **options)
    return trace, trace.states()


def contributors(bits: int) -> list[int]:
    """The ranks in the bit set ``bits``: ``contributors(0b1011) == [0, 1, 3]``."""
    return [rank for rank in range(int(bits).bit_length()) if bits >> rank & 1]


def chunk_labels(states: np.ndarray, chunks: int) -> list[list[list[str]]]:
    """``labels[t][r][c]``: which ranks' data chunk ``c`` of rank ``r`` holds after step
    ``t``, as text (``"0+1+3"``, ``"all"`` when complete, ``"mixed"`` if the chunk's
    elements differ)."""
    steps, size, count = states.shape
    labels = []
    for t in range(steps):
        rows = []
        for rank in range(size):
            row = []
            for chunk in range(chunks):
                lo, hi = chunk_bounds(count, chunks, chunk)
                values = np.unique(states[t, rank, lo:hi])
                row.append("mixed" if len(values) != 1 else compact_label(int(values[0]), size))
            rows.append(row)
        labels.append(rows)
    return labels


class MarkdownTable(str):
    """Markdown text that a notebook displays as a table (``_repr_markdown_``)."""

    def _repr_markdown_(self) -> str:
        return str(self)


class DisplayMath(str):
    """LaTeX that a notebook displays as a displayed formula (``_repr_latex_``)."""

    def _repr_latex_(self) -> str:
        return f"$${self}$$"


def formula(algorithm: str, label: str, **options) -> DisplayMath:
    """The critical-path cost of ``algorithm`` as every chapter prints it: its
    :class:`~allreduce.cost.Formula`, the one the model and ``auto`` evaluate and the tests
    check against traces.  ``options`` go to :meth:`~allreduce.cost.Formula.latex`."""
    return DisplayMath(cost.FORMULAS[algorithm].latex(label, **options))


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> MarkdownTable:
    """A Markdown table from a header and rows of cells; the book's computed tables."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return MarkdownTable("\n".join(lines))


def step_table(states: np.ndarray, chunks: int,
               step_names: Sequence[str] | None = None) -> MarkdownTable:
    """A Markdown table, one row per step and rank, one column per chunk, of
    :func:`chunk_labels`."""
    rows = []
    for t, per_rank in enumerate(chunk_labels(states, chunks)):
        name = step_names[t] if step_names else str(t)
        rows += [[name if rank == 0 else "", rank, *row] for rank, row in enumerate(per_rank)]
    return markdown_table(["step", "rank", *(f"chunk {c}" for c in range(chunks))], rows)


def compact_label(bits: int, size: int) -> str:
    """The ranks in ``bits`` as a figure labels them: ``"all"`` when all ``size`` are there,
    else every rank joined by ``+`` (``"0+1+2"``, ``"0+2+3"``), as :func:`chunk_labels` and
    the labs' tables write them (a range such as "0-2" would read as a subtraction)."""
    if bits == (1 << size) - 1:
        return "all"
    return "+".join(map(str, contributors(bits)))


#: A rank's colour in the trace figures: Okabe & Ito's, which colour-blind readers tell apart.
def rank_colour(rank: int) -> str:
    from .style import OKABE_ITO

    return OKABE_ITO[rank % len(OKABE_ITO)]


_ROW_IN = 0.3        # the height of one rank's row in a step figure
_CHAR_IN = 0.075     # the width of one character of the figures' 9 pt labels, about
_CHANGED = "#000000"  # the outline of a chunk that changed in a step


def _column_in(states: np.ndarray, chunks: int) -> float:
    """The width of one chunk's column, from the longest label any step puts in it."""
    _, size, count = states.shape
    longest = 3
    for chunk in range(chunks):
        lo, hi = chunk_bounds(count, chunks, chunk)
        if hi > lo:
            for bits in np.unique(states[:, :, lo:hi]):
                longest = max(longest, len(compact_label(int(bits), size)))
    return max(0.45, longest * _CHAR_IN + 0.16)


def _draw_state(ax, states: np.ndarray, t: int, chunks: int, messages=(), changed=None,
                rank_labels: bool = True, nodes: Sequence | None = None) -> None:
    """One panel: one row per rank, one column per element, coloured by how many ranks'
    data each element holds and labelled with those ranks; the chunks that changed in step
    ``t`` outlined; its messages drawn as arrows in the sender's colour; with ``nodes``
    (each rank's node, node-major), a thick black line between one node's rows and the
    next's."""
    from matplotlib import patheffects
    from matplotlib.patches import FancyArrowPatch, Rectangle

    from .style import SMALLEST_PT

    _, size, count = states.shape
    held = np.vectorize(lambda bits: int(bits).bit_count())(states[t]).astype(float)
    ax.pcolormesh(np.arange(count + 1), np.arange(size + 1), held, cmap="Blues",
                  vmin=0, vmax=size * 1.15, edgecolors="none")
    outline = [patheffects.withStroke(linewidth=3, foreground="white")]
    for chunk in range(chunks):
        lo, hi = chunk_bounds(count, chunks, chunk)
        ax.axvline(lo, color="white", lw=2)
        for rank in range(size):
            bits = states[t, rank, lo:hi]
            if hi > lo and (bits == bits[0]).all():
                ax.text((lo + hi) / 2, rank + 0.5, compact_label(int(bits[0]), size),
                        ha="center", va="center", fontsize=SMALLEST_PT,
                        color="white" if held[rank, lo] > size / 2 else "black")
            if changed is not None and hi > lo and changed[rank, lo:hi].any():
                ax.add_patch(Rectangle((lo + 0.03, rank + 0.04), hi - lo - 0.06, 0.92,
                                       fill=False, lw=2, ec=_CHANGED))
    for _, source, dest, offset, n in messages:
        if offset is None:
            continue
        x = offset + n * 0.22  # left of the centred label, which it would hide
        arrow = FancyArrowPatch((x, source + 0.5), (x, dest + 0.5), color=rank_colour(source),
                                arrowstyle="-|>", mutation_scale=12, lw=1.8,
                                connectionstyle="arc3,rad=0.35")
        arrow.set_path_effects(outline)
        ax.add_patch(arrow)
    for rank in range(size - 1):
        if nodes is not None and nodes[rank] != nodes[rank + 1]:
            ax.axhline(rank + 1, color="black", lw=3)
    if rank_labels:
        ax.set_yticks([r + 0.5 for r in range(size)], [f"rank {r}" for r in range(size)])
        for rank, label in enumerate(ax.get_yticklabels()):
            label.set_color(rank_colour(rank) if rank_colour(rank) != "#F0E442" else "black")
    else:
        ax.set_yticks([])
    ax.set_xticks([])
    ax.set_xlim(0, count)
    ax.set_ylim(size, 0)


def step_figure(trace: Trace, states: np.ndarray, chunks: int,
                step_names: Sequence[str] | None = None, columns: int | None = None,
                width: float | None = None, nodes: Sequence | None = None):
    """Every chunk on every rank after every step, one panel per step.  Chunks that changed
    in a step are outlined, and the messages of that step are drawn as arrows from sender
    to receiver, in the sender's colour.  Returns the matplotlib figure.

    The figure scales with the number of ranks: each panel has one row per rank
    (0.3 in each) and one column per chunk, wide enough for its longest label at 9 pt; the
    panels wrap into as many ``columns`` as fit ``width`` inches (the page's,
    :data:`allreduce.viz.style.PAGE_WIDTH_IN`), so that its text stays legible where the
    page shows it, whatever the number of ranks.  ``nodes``: see :func:`_draw_state`."""
    import matplotlib.pyplot as plt

    from .style import PAGE_WIDTH_IN

    width = width or PAGE_WIDTH_IN
    steps, size, _ = states.shape
    titles = [step_names[t] if step_names else f"after step {t}" for t in range(steps)]
    # wide enough for every chunk's longest label, and for the longest title (10 pt)
    panel = max(chunks * _column_in(states, chunks), max(map(len, titles)) * 0.085)
    label_in = 0.6  # "rank 0" beside the first panel of each row
    if columns is None:
        columns = max(1, min(steps, int((width - label_in - 0.1) // (panel + 0.15))))
    rows = -(-steps // columns)
    fig_width = min(width, label_in + columns * (panel + 0.15))
    fig, axes = plt.subplots(rows, columns, figsize=(fig_width, rows * (size * _ROW_IN + 0.45)),
                             squeeze=False, constrained_layout=True)
    messages = trace.messages()
    for t, ax in enumerate(axes.flat):
        if t >= steps:
            ax.axis("off")
            continue
        changed = states[t] != states[t - 1] if t else None
        _draw_state(ax, states, t, chunks, [m for m in messages if m[0] == t], changed,
                    rank_labels=t % columns == 0, nodes=nodes)
        ax.set_title(titles[t], fontsize=10)
    return fig


def animate(trace: Trace, states: np.ndarray, chunks: int,
            step_names: Sequence[str] | None = None, interval_ms: int = 1200,
            nodes: Sequence | None = None):
    """The same pictures as :func:`step_figure`, one frame per step, as a matplotlib
    animation; :func:`animation_html` plays it in a static web page.  The frame is as wide
    as its chunks need (at most the page's width) and one row per rank high."""
    import matplotlib.pyplot as plt
    from matplotlib.animation import FuncAnimation

    from .style import PAGE_WIDTH_IN

    messages = trace.messages()
    size = states.shape[1]
    frame_width = min(PAGE_WIDTH_IN, max(5.5, 0.8 + chunks * _column_in(states, chunks) * 1.6))
    fig, ax = plt.subplots(figsize=(frame_width, size * _ROW_IN * 1.25 + 0.7),
                           constrained_layout=True)

    def frame(t: int):
        ax.clear()
        changed = states[t] != states[t - 1] if t else None
        _draw_state(ax, states, t, chunks, [m for m in messages if m[0] == t], changed,
                    nodes=nodes)
        ax.set_title(step_names[t] if step_names else f"after step {t}")

    animation = FuncAnimation(fig, frame, frames=states.shape[0], interval=interval_ms)
    animation.alt_text = (
        f"An animation of {states.shape[0]} frames on {size} ranks, one per step: each rank's "
        f"row of {chunks} chunk{'s' if chunks > 1 else ''}, labelled with the ranks whose data "
        "it holds, with the step's messages as arrows from sender to receiver")
    plt.close(fig)  # the animation, not a still, is what the page shows
    return animation


#: Icons for matplotlib's animation controls, which it draws with Font Awesome loaded from a
#: CDN: inline SVG instead (one path each, in a 16 × 16 box, drawn in the button's text
#: colour), so the controls show in a page read offline and need no font at all.  Symbols
#: such as U+23EE (⏮) are not in the fonts most Linux machines have (DejaVu, Liberation) and
#: drew as empty boxes.  The buttons keep matplotlib's titles and aria-labels.
_CONTROL_PATHS = {
    "fa fa-minus": "M3 7h10v2H3z",
    "fa fa-fast-backward": "M2 3h2v10H2zM9 3v10L4 8zM14 3v10L9 8z",
    "fa fa-step-backward": "M3 3h2v10H3zM13 3v10L6 8z",
    "fa fa-play fa-flip-horizontal": "M12 3v10L4 8z",
    "fa fa-pause": "M4 3h3v10H4zM9 3h3v10H9z",
    "fa fa-play": "M4 3v10l8-5z",
    "fa fa-step-forward": "M3 3v10l7-5zM11 3h2v10h-2z",
    "fa fa-fast-forward": "M2 3v10l5-5zM7 3v10l5-5zM12 3h2v10h-2z",
    "fa fa-plus": "M7 3h2v4h4v2H9v4H7V9H3V7h4z",
}


def _control_icon(path: str) -> str:
    return ('<svg class="anim-icon" viewBox="0 0 16 16" width="16" height="16" '
            'aria-hidden="true" focusable="false" style="vertical-align: middle">'
            f'<path fill="currentColor" d="{path}"/></svg>')


def animation_html(animation, alt: str | None = None) -> str:
    """``animation.to_jshtml()`` with nothing loaded from the network: the controls'
    Font Awesome stylesheet (a CDN link in matplotlib's template) is dropped and each icon
    replaced by an inline SVG (:data:`_CONTROL_PATHS`); the buttons keep their titles and
    labels.  The frame's image gets ``alt`` as its text for a reader who cannot see it (by
    default the animation's ``alt_text``, which :func:`animate` sets, or a sentence saying it
    is an animation of so many frames)."""
    html = re.sub(r'<link rel="stylesheet"\s+href="https?://[^"]*font-awesome[^"]*">', "",
                  animation.to_jshtml())
    if alt is None:
        frames = getattr(animation, "_save_count", None) or len(re.findall(
            r"frames\[\d+\]\s*=", html))
        alt = getattr(animation, "alt_text", None) or f"An animation of {frames} frames"
    html, found = re.subn(r'<img id="(_anim_img[0-9a-f]+)"',
                          lambda m: f'<img id="{m.group(1)}" alt="{escape(alt)}"', html, count=1)
    if not found:
        raise RuntimeError("matplotlib's animation template changed: no frame image found")
    for icon, path in _CONTROL_PATHS.items():
        html = html.replace(f'<i class="{icon}"></i>', _control_icon(path))
    if "font-awesome" in html or 'class="fa ' in html:
        raise RuntimeError("matplotlib's animation template changed: an icon or link was left")
    return html


def ring_step_names(size: int) -> list[str]:
    """Titles for the ``2(p-1) + 1`` states of the ring: input, reduce-scatter, all-gather."""
    names = ["input"]
    names += [f"reduce-scatter step {s}" for s in range(1, size)]
    names += [f"all-gather step {s}" for s in range(1, size)]
    return names


def time_plot(sizes_bytes: Sequence[int], measured: dict[str, Sequence[float]],
              predicted: dict[str, Sequence[float]] | None = None, title: str = ""):
    """Time against message size on log-log axes: measured series as markers, model
    predictions as dashed lines.  Returns the figure."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.5, 4), constrained_layout=True)
    for name, seconds in measured.items():
        ax.loglog(sizes_bytes, np.asarray(seconds) * 1e6, "o-", label=f"{name} (measured)")
    for name, seconds in (predicted or {}).items():
        ax.loglog(sizes_bytes, np.asarray(seconds) * 1e6, "--", label=f"{name} (predicted)")
    ax.set_xlabel("message size per rank (bytes)")
    ax.set_ylabel("time (µs)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    ax.set_title(title)
    return fig
