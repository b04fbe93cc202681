"""Chapter 65's simulation of flat against two-level allreduce on 1-1,024 nodes of 8 GPUs
(allreduce.simulate on cost.NODE_NETWORKS), its crossovers asserted, and the pipelined
ring's segment count that overlap would choose."""

from __future__ import annotations

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
