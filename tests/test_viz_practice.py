"""The data behind the Practice part's figures (allreduce.viz.practice): the crossovers
chapter 60 marks, ZeRO's memory per GPU beside chapter 65's volume table, and chapter 70's
NCCL trees, channels and DDP timeline."""

from __future__ import annotations

import itertools

import matplotlib
import pytest

from allreduce import cost, ddp_buckets
from allreduce.algorithms.auto import CANDIDATES, choose
from allreduce.viz import practice

matplotlib.use("Agg")
NAMES = list(CANDIDATES)
SLOW = cost.NETWORKS["100 Gb/s, α = 2 µs"]


@pytest.mark.parametrize("p", [6, 16, 24, 48, 1024])
def test_the_marked_crossovers_are_where_auto_changes_its_choice(p):
    changes = practice.fastest_changes(SLOW, p, NAMES, 1.0, 2.0**34)
    assert changes, p
    for size, before, after in changes:
        assert before != after
        assert choose(size * 0.99, p, SLOW) == before and choose(size * 1.01, p, SLOW) == after
    sizes = [size for size, _, _ in changes]
    assert sizes == sorted(sizes)
    # between the marks the choice does not change
    edges = [1.0, *sizes, 2.0**34]
    for lo, hi in itertools.pairwise(edges):
        probes = [lo * (hi / lo) ** f for f in (0.1, 0.5, 0.9)]
        assert len({choose(n, p, SLOW) for n in probes}) == 1


def test_on_a_power_of_two_the_ring_is_never_marked():
    assert all("ring" not in (a, b) for _, a, b in practice.fastest_changes(SLOW, 64, NAMES))


def test_zero_memory_is_the_papers_figure_1():
    """ZeRO paper (Rajbhandari et al. 2020), §3.1 and Figure 1: 7.5 B parameters, 64 GPUs,
    K = 12: 120 GB, 31.4 GB, 16.6 GB, 1.9 GB per GPU."""
    memory = practice.zero_memory(7.5e9, 64)
    totals = {stage: sum(parts.values()) for stage, parts in memory.items()}
    assert totals["DDP"] == 16 * 7.5e9
    assert totals["ZeRO-1"] == pytest.approx((4 + 12 / 64) * 7.5e9)
    assert totals["ZeRO-2"] == pytest.approx((2 + 14 / 64) * 7.5e9)
    assert totals["ZeRO-3"] == pytest.approx(16 / 64 * 7.5e9)
    assert [round(totals[s] / 1e9, 1) for s in practice.ZERO_SHARDED] == [120.0, 31.4, 16.6, 1.9]


def _interior(edges):
    return {parent for parent, _ in edges}


@pytest.mark.parametrize("nodes", range(2, 18))
def test_nccl_trees_span_the_nodes_and_share_the_forwarding(nodes):
    trees = practice.tree_edges(nodes)
    for edges in trees:
        assert len(edges) == nodes - 1
        assert max(practice.tree_depths(edges, nodes)) < nodes  # no cycle: all reach the root
        assert len(set(range(nodes)) - {child for _, child in edges}) == 1  # one root
        assert all(sum(1 for p, _ in edges if p == n) <= 2 for n in range(nodes))  # binary
    both = _interior(trees[0]) & _interior(trees[1])
    if nodes % 2 == 0:
        assert not both  # mirrored: interior in at most one tree
    else:
        assert both == {0}  # shifted: node 0 interior in both


def test_the_tree_edges_match_trees_cc_drawing():
    """trees.cc's comment draws 0 -> 4 -> (2, 6), 2 -> (1, 3), 6 -> (5, 7) for 8 ranks
    (the tree rooted at 0 whose child is the middle rank)."""
    parents = {child: parent for parent, child in practice.tree_edges(8)[0]}
    assert parents == {4: 0, 2: 4, 6: 4, 1: 2, 3: 2, 5: 6, 7: 6}


def test_each_channel_is_a_ring_through_every_gpu_entering_at_its_own_gpu():
    rings = practice.channel_rings(3, 4, 3)
    for c, ring in enumerate(rings):
        assert sorted(ring) == [(n, g) for n in range(3) for g in range(4)]
        crossings = [(a, b) for a, b in zip(ring, ring[1:] + ring[:1]) if a[0] != b[0]]
        assert len(crossings) == 3 and all(b[1] == c for _, b in crossings)


def test_the_ddp_timeline_keeps_buckets_in_order_and_after_they_are_ready():
    sizes = [4 << 20] * 40
    packed = ddp_buckets.ddp_buckets(sizes, ddp_buckets.BUCKET_BYTES,
                                     ddp_buckets.FIRST_BUCKET_BYTES)
    net = cost.NETWORKS["NVLink-class, α = 1 µs"]
    rows = practice.ddp_timeline(sizes, packed, net, 8, "ring", 1e-10)
    assert [row["bytes"] for row in rows] == [sum(sizes[i] for i in b) for b in packed]
    assert rows[-1]["ready"] == pytest.approx(sum(sizes) * 1e-10)
    for row in rows:
        assert row["end"] - row["start"] == pytest.approx(net.time("ring", 8, row["bytes"]))
        assert row["start"] >= row["ready"]
    for a, b in itertools.pairwise(rows):
        assert b["start"] == max(b["ready"], a["end"])
    # with instant compute the allreduces run back to back
    fast = practice.ddp_timeline(sizes, packed, net, 8, "ring", 0.0)
    assert fast[-1]["end"] == pytest.approx(sum(net.time("ring", 8, r["bytes"]) for r in fast))


def test_the_figures_draw():
    import matplotlib.pyplot as plt

    for figure in (practice.time_figure(SLOW, 24, [1 << k for k in range(8, 31)], NAMES, "t"),
                   practice.zero_figure(7.5e9, 64), practice.nccl_tree_figure(5, 4),
                   practice.channel_figure(2, 4, 2),
                   practice.ddp_timeline_figure(practice.ddp_timeline(
                       [1 << 20] * 8, [[0, 1], [2, 3, 4, 5, 6, 7]], SLOW, 8, "ring", 1e-9))):
        assert figure.axes
        plt.close(figure)
