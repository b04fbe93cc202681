"""NCCL's double binary tree, drawn (chapter "Tree allreduce").

The rules are NCCL's ``ncclGetBtree`` and ``ncclGetDtree`` (``src/graph/trees.cc``, NCCL
v2.30.7-1), restated here from their comments: in the first tree a rank's lowest set bit
``b`` gives its parent (``rank ^ b`` with bit ``2b`` set, or ``rank ^ b`` when that does
not exist) and its children (``rank ∓ b/2``, the upper one moved down until it exists);
rank 0 is the root.  The second tree mirrors the first (rank ``r`` plays ``p − 1 − r``) for
an even number of ranks and shifts it by one (``r`` plays ``r − 1``) for an odd number.
NCCL builds these trees over nodes, one rank per node.  The library runs no double binary
tree; this module only draws NCCL's, and the tests check it against the drawings in
``trees.cc``.
"""

from __future__ import annotations


def btree(nranks: int, rank: int) -> tuple[int, list[int]]:
    """``(parent, children)`` of ``rank`` in NCCL's first binary tree over ``nranks``
    (parent −1 for the root, rank 0)."""
    if not 0 <= rank < nranks:
        raise ValueError(f"rank {rank} is not in 0..{nranks - 1}")
    bit = 1
    while bit < nranks and not bit & rank:
        bit <<= 1
    if rank == 0:
        return -1, [bit >> 1] if nranks > 1 else []
    parent = (rank ^ bit) | (bit << 1)
    if parent >= nranks:
        parent = rank ^ bit
    low = bit >> 1
    children = []
    if low:
        children.append(rank - low)
        upper = rank + low
        while upper >= nranks:  # move the upper child down until it exists
            low >>= 1
            upper = rank + low
        if low:
            children.append(upper)
    return parent, children


def dtree(nranks: int, rank: int) -> tuple[tuple[int, list[int]], tuple[int, list[int]]]:
    """``rank``'s ``(parent, children)`` in both trees of NCCL's double binary tree."""
    first = btree(nranks, rank)
    if nranks % 2:  # odd: the first tree shifted by one rank
        parent, children = btree(nranks, (rank - 1) % nranks)
        def move(r):
            return -1 if r == -1 else (r + 1) % nranks
    else:           # even: the first tree mirrored
        parent, children = btree(nranks, nranks - 1 - rank)
        def move(r):
            return -1 if r == -1 else nranks - 1 - r
    return first, (move(parent), sorted(move(c) for c in children))


def interior(nranks: int, tree: int) -> set[int]:
    """The ranks with at least one child in tree ``tree`` (0 or 1)."""
    return {r for r in range(nranks) if dtree(nranks, r)[tree][1]}


def _depths(nranks: int, tree: int) -> dict[int, int]:
    depth = {}
    for rank in range(nranks):
        d, r = 0, rank
        while (parent := dtree(nranks, r)[tree][0]) != -1:
            d, r = d + 1, parent
        depth[rank] = d
    return depth


def dtree_figure(sizes: tuple[int, ...] = (8, 7)):
    """One row per number of ranks in ``sizes``, one column per tree: each rank at its
    place in the tree's left-to-right order (its rank; one less in a shifted tree) and y =
    its depth, interior ranks filled, leaves open, edges to the
    parent.  Returns the figure."""
    import matplotlib.pyplot as plt

    from . import rank_colour

    fig, axes = plt.subplots(len(sizes), 2, figsize=(6.5, 2.3 * len(sizes)),
                             constrained_layout=True, squeeze=False)
    for row, nranks in zip(axes, sizes):
        for tree, ax in enumerate(row):
            depth = _depths(nranks, tree)
            inner = interior(nranks, tree)
            shift = 1 if tree == 1 and nranks % 2 else 0
            x = {rank: (rank - shift) % nranks for rank in range(nranks)}
            for rank in range(nranks):
                parent = dtree(nranks, rank)[tree][0]
                if parent != -1:
                    ax.plot([x[rank], x[parent]], [depth[rank], depth[parent]], color="black",
                            lw=1.2, zorder=1)
            for rank in range(nranks):
                filled = rank in inner
                ax.scatter(x[rank], depth[rank], s=330, zorder=2, linewidths=1.6,
                           facecolor=rank_colour(0) if filled else "white",
                           edgecolor=rank_colour(0))
                ax.text(x[rank], depth[rank], str(rank), ha="center", va="center", zorder=3,
                        color="white" if filled else "black", fontsize=9)
            how = "" if tree == 0 else (" (mirrored)" if nranks % 2 == 0 else
                                        " (shifted by one)")
            ax.set_title(f"{nranks} nodes, tree {tree}{how}", fontsize=10)
            ax.set_xlim(-0.7, nranks - 0.3)
            ax.set_ylim(max(depth.values()) + 0.6, -0.6)
            ax.axis("off")
    return fig
