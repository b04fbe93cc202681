"""Figures of the book's Practice part, each from the library's model or a port of the
source it shows: the model's time of each candidate against size with the crossovers
(chapter "Choosing an algorithm"), ZeRO's memory per GPU (chapter "Beyond one flat ring"),
and NCCL's channels, NCCL's tree and DDP's bucket timeline (chapter "Allreduce on GPUs:
NCCL").  Each ``*_data`` function returns what its figure draws, so tests check it."""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib.pyplot as plt

from ..cost import Model, crossing
from .dtree import dtree
from .style import OKABE_ITO

# -- chapter "Choosing an algorithm": time against size, crossovers marked -------------------


def model_times(net: Model, p: int, sizes: Sequence[float], names: Sequence[str]) -> dict:
    """``{name: [seconds at each size]}`` predicted by ``net`` on ``p`` ranks."""
    return {name: [net.time(name, p, n) for n in sizes] for name in names}


def fastest_changes(net: Model, p: int, names: Sequence[str], smallest: float = 1.0,
                    largest: float = 2.0**40) -> list[tuple[float, str, str]]:
    """Where the fastest of ``names`` changes between ``smallest`` and ``largest`` bytes:
    ``[(size, from, to), ...]`` in increasing size, each found by bisection."""
    def best(n: float) -> str:
        return min(names, key=lambda name: net.time(name, p, n))

    changes, n, current = [], smallest, best(smallest)
    while True:
        later = [(crossing(lambda m, a=current: net.time(a, p, m),
                           lambda m, b=other: net.time(b, p, m), largest=largest), other)
                 for other in names if other != current]
        later = [(size, other) for size, other in later if size is not None and size > n]
        if not later:
            return changes
        size, _ = min(later)
        winner = best(size * 1.0001)
        changes.append((size, current, winner))
        n, current = size, winner


def time_figure(net: Model, p: int, sizes: Sequence[float], names: Sequence[str], title: str):
    """The model's time of each of ``names`` against bytes per rank, log-log, with a
    dashed line at each size where the fastest changes."""
    times = model_times(net, p, sizes, names)
    fig, ax = plt.subplots(figsize=(7, 4), constrained_layout=True)
    for colour, name in zip(OKABE_ITO, names):
        ax.plot(sizes, [t * 1e6 for t in times[name]], color=colour, label=name)
    for size, before, after in fastest_changes(net, p, names, sizes[0], sizes[-1]):
        ax.axvline(size, color="0.4", linestyle="--", linewidth=1)
        ax.annotate(f"{size / 1024:,.0f} KiB\n{before} → {after}", (size, 0.97),
                    xycoords=("data", "axes fraction"), ha="right", va="top", fontsize=8,
                    rotation=90)
    ax.set(xscale="log", yscale="log", xlabel="bytes per rank", ylabel="predicted time (µs)",
           title=title)
    ax.legend(loc="lower right")
    return fig


# -- chapter "Beyond one flat ring": ZeRO's memory per GPU ----------------------------------

#: Bytes per parameter in mixed-precision Adam (ZeRO paper, §3.1): fp16 parameters (2),
#: fp16 gradients (2), and the optimizer state K = 12 (fp32 parameters, momentum, variance).
ZERO_BYTES = {"parameters": 2, "gradients": 2, "optimizer state": 12}
#: What each stage shards across the ranks (ZeRO paper, §5: P_os, P_os+g, P_os+g+p).
ZERO_SHARDED = {"DDP": (), "ZeRO-1": ("optimizer state",),
                "ZeRO-2": ("optimizer state", "gradients"),
                "ZeRO-3": ("optimizer state", "gradients", "parameters")}


def zero_memory(parameters: float, p: int) -> dict[str, dict[str, float]]:
    """Bytes per GPU of each part, for each stage, for ``parameters`` parameters on ``p``
    ranks: a sharded part takes 1/p of its bytes."""
    return {stage: {part: parameters * per / (p if part in sharded else 1)
                    for part, per in ZERO_BYTES.items()}
            for stage, sharded in ZERO_SHARDED.items()}


def zero_figure(parameters: float, p: int):
    """Stacked bars of :func:`zero_memory`, in GB."""
    memory = zero_memory(parameters, p)
    fig, ax = plt.subplots(figsize=(7, 3.4), constrained_layout=True)
    left = [0.0] * len(memory)
    for colour, part in zip(OKABE_ITO, ZERO_BYTES):
        widths = [memory[stage][part] / 1e9 for stage in memory]
        ax.barh(list(memory), widths, left=left, color=colour, label=part)
        left = [a + b for a, b in zip(left, widths)]
    for y, total in enumerate(left):
        ax.text(total, y, f" {total:,.1f} GB", va="center", fontsize=9)
    ax.invert_yaxis()
    ax.set(xlabel="GB per GPU", xlim=(0, max(left) * 1.25),
           title=f"{parameters / 1e9:g} billion parameters, mixed-precision Adam, {p} GPUs")
    ax.legend(loc="lower right", fontsize=9)
    return fig


# -- chapter "Allreduce on GPUs: NCCL" -------------------------------------------------------

def tree_edges(nodes: int) -> list[list[tuple[int, int]]]:
    """Each of the two trees of NCCL's double binary tree over ``nodes`` nodes
    (:func:`allreduce.viz.dtree.dtree`) as ``(parent, child)`` edges."""
    return [[(parent, r) for r in range(nodes)
             for parent in [dtree(nodes, r)[t][0]] if parent != -1] for t in (0, 1)]


def tree_depths(edges: list[tuple[int, int]], nodes: int) -> list[int]:
    """Each node's depth in a tree given as ``(parent, child)`` edges (the root at 0)."""
    parent = {child: up for up, child in edges}
    depth = []
    for node in range(nodes):
        d, at = 0, node
        while at in parent:
            at, d = parent[at], d + 1
        depth.append(d)
    return depth


def nccl_tree_figure(nodes: int, gpus: int):
    """NCCL's Tree on ``nodes`` nodes of ``gpus`` GPUs, one panel per tree of
    :func:`tree_edges`: each node a box holding its chain of GPUs, placed by depth."""
    fig, axes = plt.subplots(1, 2, figsize=(7, 3.2), constrained_layout=True)
    for t, (ax, edges) in enumerate(zip(axes, tree_edges(nodes))):
        depth = tree_depths(edges, nodes)
        for parent, child in edges:
            ax.annotate("", (child, -depth[child] + 0.2), (parent, -depth[parent] - 0.2),
                        arrowprops={"arrowstyle": "-|>", "color": OKABE_ITO[t], "lw": 1.8})
        for node in range(nodes):
            y = -depth[node]
            ax.add_patch(plt.Rectangle((node - 0.4, y - 0.2), 0.8, 0.4, fill=False,
                                       edgecolor="0.3"))
            xs = [node - 0.3 + 0.6 * g / max(gpus - 1, 1) for g in range(gpus)]
            ax.plot(xs, [y] * gpus, "o-", color="0.5", markersize=4)
            ax.text(node, y + 0.25, f"node {node}", ha="center", fontsize=8)
        ax.set_title(f"tree {t + 1}", fontsize=10)
        ax.set(xlim=(-0.6, nodes - 0.4), ylim=(-max(depth) - 0.5, 0.6))
        ax.axis("off")
    return fig


def channel_rings(nodes: int, gpus: int, channels: int) -> list[list[tuple[int, int]]]:
    """A schematic of NCCL's rings: channel ``c`` enters each node at local GPU ``c`` (its
    own network card, as ``ncclTopoSearchRecNet`` starts each channel at the next card),
    runs through the node's GPUs, and leaves from the GPU before it to the next node.
    Returns each channel's ring as ``(node, gpu)`` in order."""
    return [[(node, (c + g) % gpus) for node in range(nodes) for g in range(gpus)]
            for c in range(channels)]


def channel_figure(nodes: int, gpus: int, channels: int):
    """The rings of :func:`channel_rings`, one panel per channel."""
    rings = channel_rings(nodes, gpus, channels)
    fig, axes = plt.subplots(1, channels, figsize=(7, 2.6), constrained_layout=True)
    for c, (ax, ring) in enumerate(zip(axes, rings)):
        def where(node, gpu):
            return node * (gpus + 1.5) + gpu, 0.0

        for node in range(nodes):
            ax.add_patch(plt.Rectangle((node * (gpus + 1.5) - 0.5, -0.5), gpus, 1, fill=False,
                                       edgecolor="0.3"))
            ax.text(node * (gpus + 1.5) + gpus / 2 - 0.5, 0.6, f"node {node}", ha="center",
                    fontsize=8)
        for (a, b) in zip(ring, ring[1:] + ring[:1]):
            (x0, y0), (x1, y1) = where(*a), where(*b)
            across = a[0] != b[0]
            rad = 0.0 if not across else (0.35 if x1 > x0 else 0.15)
            ax.annotate("", (x1, y1), (x0, y0), arrowprops={
                "arrowstyle": "-|>", "color": OKABE_ITO[c] if across else "0.4",
                "lw": 2 if across else 1,
                "connectionstyle": f"arc3,rad={-rad if across else 0.5}"})
        xs = [where(*g)[0] for g in ring]
        ax.plot(xs, [0] * len(xs), "o", color="0.2", markersize=5)
        for node in range(nodes):
            entry = ring[node * gpus][1]
            ax.text(where(node, entry)[0], -0.85, f"in: GPU {entry}", ha="center", fontsize=8,
                    color=OKABE_ITO[c])
        ax.set_title(f"channel {c}", fontsize=9)
        ax.set(xlim=(-1, nodes * (gpus + 1.5) - 1), ylim=(-1.6, 1.6))
        ax.axis("off")
    return fig


def ddp_timeline(sizes: Sequence[int], packed: Sequence[Sequence[int]], net: Model, p: int,
                 algorithm: str, compute_per_byte: float) -> list[dict]:
    """DDP's overlap in the model: backward produces the gradients in the order of
    ``packed``'s buckets (each a list of indices into ``sizes``), each tensor taking
    ``compute_per_byte`` seconds per gradient byte; a bucket is ready when its last gradient
    is, and its allreduce (``net.time(algorithm, p, bytes)``) starts once it is ready and the
    bucket before it is reduced (DDP launches buckets strictly in order).  Returns one
    ``{"bytes", "ready", "start", "end"}`` per bucket."""
    rows, clock, free = [], 0.0, 0.0
    for bucket in packed:
        nbytes = sum(sizes[i] for i in bucket)
        clock += nbytes * compute_per_byte
        start = max(clock, free)
        free = start + net.time(algorithm, p, nbytes)
        rows.append({"bytes": nbytes, "ready": clock, "start": start, "end": free})
    return rows


def ddp_timeline_figure(rows: Sequence[dict]):
    """Two lanes, backward compute and allreduce, one box per bucket."""
    fig, ax = plt.subplots(figsize=(7, 2.6), constrained_layout=True)
    before = 0.0
    for i, row in enumerate(rows):
        colour = OKABE_ITO[i % len(OKABE_ITO)]
        ax.barh(1, (row["ready"] - before) * 1e3, left=before * 1e3, color=colour,
                edgecolor="white")
        ax.barh(0, (row["end"] - row["start"]) * 1e3, left=row["start"] * 1e3, color=colour,
                edgecolor="white")
        ax.plot([row["ready"] * 1e3] * 2, [0.6, 0.4], color="0.2", linewidth=0.8)
        before = row["ready"]
    ax.axvline(rows[-1]["ready"] * 1e3, color="0.2", linestyle="--", linewidth=1)
    ax.set_yticks([0, 1], ["allreduce", "backward"])
    ax.set_xlabel("ms since backward began (same colour: same bucket; tick: bucket ready)")
    return fig
