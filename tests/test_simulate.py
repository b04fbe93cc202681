"""Chapter 65's simulation of flat against two-level allreduce on 1-1,024 nodes of 8 GPUs
(allreduce.simulate on cost.NODE_NETWORKS), its crossovers asserted, and the pipelined
ring's segment count that overlap would choose."""

from __future__ import annotations

import dataclasses
import itertools
import math

import pytest

from allreduce import cost, simulate
from allreduce.algorithms import pipelined_ring

NODES = [2 ** k for k in range(11)]  # 1 ... 1,024 nodes
SIZES = [2 ** k for k in range(10, 31, 2)]  # 1 KiB ... 1 GiB per rank


@pytest.mark.parametrize("network", cost.NODE_NETWORKS)
def test_the_hierarchy_beats_the_flat_ring_on_two_nodes_or_more(network):
    net = cost.NODE_NETWORKS[network]
    for nodes in NODES[1:]:
        for size in SIZES:
            flat = simulate.time(net, "flat ring", nodes, size)
            assert simulate.time(net, "hierarchical, ring across", nodes, size) < flat
        assert simulate.crossover(net, nodes, "flat ring", "hierarchical, ring across") is None
    for size in SIZES:  # one node: the hierarchy is the node's ring, the flat ring itself
        assert simulate.time(net, "hierarchical, ring across", 1, size) == pytest.approx(
            simulate.time(net, "flat ring", 1, size))


@pytest.mark.parametrize("network", cost.NODE_NETWORKS)
def test_flat_rabenseifner_wins_small_messages_up_to_a_crossover_that_falls_with_nodes(network):
    net = cost.NODE_NETWORKS[network]
    crossovers = [simulate.crossover(net, nodes, "flat Rabenseifner",
                                     "hierarchical, Rabenseifner across") for nodes in NODES[1:]]
    assert all(c is not None for c in crossovers)
    assert all(a >= b for a, b in itertools.pairwise(crossovers)), crossovers
    for nodes, c in zip(NODES[1:], crossovers):
        assert simulate.fastest(net, nodes, c / 2) == "flat Rabenseifner"
        assert simulate.fastest(net, nodes, c * 2).startswith("hierarchical"), (nodes, c)
    assert simulate.crossover(net, 1, "flat Rabenseifner", "hierarchical, Rabenseifner across") \
        is None


def test_a_faster_network_between_nodes_moves_the_crossover_up():
    slow, fast = cost.NODE_NETWORKS.values()
    for nodes in NODES[1:]:
        pair = ("flat Rabenseifner", "hierarchical, Rabenseifner across")
        assert simulate.crossover(fast, nodes, *pair) > simulate.crossover(slow, nodes, *pair)


def test_the_2d_ring_is_the_hierarchy_when_its_rows_are_the_nodes():
    for net in cost.NODE_NETWORKS.values():
        for nodes in (4, 8):  # grid(32) = 4 x 8, grid(64) = 8 x 8: rows of 8, one per node
            for size in SIZES:
                assert simulate.time(net, "2D ring", nodes, size) == pytest.approx(
                    simulate.time(net, "hierarchical, ring across", nodes, size))


def test_the_best_segment_count_minimises_the_overlapped_step():
    for n, p, alpha, gamma in ((64 << 20, 8, 2e-6, 1e-10), (1 << 20, 4, 5e-6, 1e-9),
                               (256 << 20, 64, 1e-6, 1e-12)):
        best = pipelined_ring.best_segments(n, p, alpha, gamma)
        times = {s: pipelined_ring.overlapped_step(n, p, s, alpha, 1e-10, gamma)
                 for s in range(1, 10 * math.ceil(best) + 10)}
        assert min(times, key=times.get) in (math.floor(best), math.ceil(best)), (best, n, p)


def test_the_crossover_halves_from_two_nodes_to_many():
    """Flat Rabenseifner's extra bytes between nodes grow as 1 - 1/N (the chapter's
    reason): the crossover on 1,024 nodes is half that on 2, within 2%."""
    pair = ("flat Rabenseifner", "hierarchical, Rabenseifner across")
    for net in cost.NODE_NETWORKS.values():
        ratio = simulate.crossover(net, 2, *pair) / simulate.crossover(net, 1024, *pair)
        assert ratio == pytest.approx(2, rel=0.02), ratio


# -- one network card shared by the node's ranks (cost.Network's shared_card) ---------------

@pytest.mark.parametrize("algorithm, p, k, options", [
    ("ring", 8, 4, {}), ("ring", 16, 4, {}), ("bidirectional_ring", 8, 4, {}),
    ("rabenseifner", 16, 4, {}), ("recursive_doubling", 16, 4, {}),
    ("hierarchical", 8, 4, {"inner": "ring"}), ("hierarchical", 16, 4, {"inner": "ring"}),
    ("hierarchical", 16, 4, {"inner": "rabenseifner"}), ("hierarchical", 12, 2, {"inner": "ring"}),
])
def test_a_shared_card_carries_what_the_nodes_crossing_ranks_send(algorithm, p, k, options):
    """What all of a node's ranks send to other nodes, counted in the trace, is what the
    sharers' ranks send across on the critical path, one after another through the card."""
    from allreduce.topology import Layout
    from allreduce.trace import record

    n = p * k * 840  # elements, divisible by every chunk count used here
    if algorithm == "hierarchical":
        options = {**options, "ranks_per_node": k}
    trace, _ = record(algorithm, p, n, dtype="float32", **options)
    nodes = Layout.per_node(p, k).node_of
    _, inter = cost.level_terms(algorithm, p, 4 * n, k, **options)
    sharers = cost.card_sharers(algorithm, p, k)
    for node in set(nodes):
        through_card = sum(4 * trace.elements_across(r, nodes) for r in range(p) if nodes[r] == node)
        assert through_card == pytest.approx(sharers * inter.bytes), (node, sharers)


def test_a_shared_card_leaves_one_card_per_gpu_and_the_flat_ring_alone():
    per_gpu = cost.NODE_NETWORKS["100 Gb/s between nodes"]
    shared = dataclasses.replace(per_gpu, shared_card=True)
    for nodes in (2, 16, 1024):
        p, n = 8 * nodes, 64 << 20
        assert shared.time("ring", p, n) == per_gpu.time("ring", p, n)
        hier = {"ranks_per_node": 8, "inner": "ring"}
        intra, inter = per_gpu.levels("hierarchical", p, n, **hier)
        # the card carries the node's 8 shards: 2(N-1)/N·n, not 2(N-1)/N·n/8
        assert inter.bytes * 8 == pytest.approx(2 * (nodes - 1) / nodes * n)
        extra = inter.bytes * 7 * per_gpu.inter.beta
        assert shared.time("hierarchical", p, n, **hier) == pytest.approx(
            per_gpu.time("hierarchical", p, n, **hier) + extra)
    one_per_node = dataclasses.replace(shared, ranks_per_node=1)  # one GPU, one card
    assert one_per_node.time("rabenseifner", 64, n) == dataclasses.replace(
        per_gpu, ranks_per_node=1).time("rabenseifner", 64, n)


def test_with_a_shared_card_the_hierarchys_lead_falls_sharply():
    """The chapter's headline ratio, flat ring ÷ hierarchy at 64 MiB, both ways: under a
    shared card it falls to well under half, and on 16 nodes at 400 Gb/s the flat ring wins."""
    def ratio(net, nodes):
        return (simulate.time(net, "flat ring", nodes, 64 << 20)
                / simulate.time(net, "hierarchical, ring across", nodes, 64 << 20))

    for per_gpu in cost.NODE_NETWORKS.values():
        shared = dataclasses.replace(per_gpu, shared_card=True)
        for nodes in (2, 16, 128, 1024):
            assert 1 < ratio(per_gpu, nodes) and ratio(shared, nodes) < ratio(per_gpu, nodes) / 1.4
            assert ratio(shared, nodes) < ratio(per_gpu, nodes) / 2 or nodes == 1024
    slow, fast = cost.NODE_NETWORKS.values()
    assert 1.5 < ratio(dataclasses.replace(slow, shared_card=True), 2) < 2
    assert ratio(dataclasses.replace(fast, shared_card=True), 16) < 1
