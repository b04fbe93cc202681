"""The data behind the figures of chapters 10 and 40 (issue 22): the message timeline, the
recursive-doubling and Rabenseifner step figures, and NCCL's double binary tree.  nbval and
the book compare no picture, so what each one draws is checked here."""

from __future__ import annotations

from itertools import pairwise

import pytest

from allreduce import cost, viz
from allreduce.trace import record
from allreduce.viz.dtree import btree, dtree, interior
from allreduce.viz.timeline import message_intervals

ALPHA, BETA = 2e-6, 1 / 2e9


@pytest.mark.parametrize("name", ["tree", "reduce_broadcast", "ring", "recursive_doubling"])
@pytest.mark.parametrize("p", [2, 4, 5])
def test_timeline_intervals_are_the_replay(name, p):
    trace, _ = record(name, p, 1000)
    messages = message_intervals(trace, ALPHA, BETA)
    assert len(messages) == sum(trace.messages_sent(r) for r in range(p))
    for m in messages:  # each bar: α, then m·β, on its sender's port
        assert m.end - m.start == pytest.approx(ALPHA + m.nbytes * BETA)
        assert m.alpha == ALPHA and m.start >= 0
    for rank in range(p):  # one message at a time on a send port
        mine = sorted((m.start, m.end) for m in messages if m.source == rank)
        assert all(a_end <= b_start + 1e-15 for (_, a_end), (b_start, _) in pairwise(mine))
    assert max(m.end for m in messages) <= trace.critical_path(alpha=ALPHA, beta=BETA) + 1e-15


def test_the_tree_timeline_of_chapter_10():
    trace, _ = record("tree", 4, 1000)
    messages = message_intervals(trace, ALPHA, BETA)
    assert [(m.source, m.dest) for m in messages] == [(1, 0), (3, 2), (2, 0), (0, 2), (0, 1),
                                                      (2, 3)]
    one = ALPHA + 8000 * BETA
    assert [round(m.end / one) for m in messages] == [1, 1, 2, 3, 4, 4]  # 4 in a row
    assert max(m.end for m in messages) == pytest.approx(
        cost.Model(ALPHA, BETA).time("tree", 4, 8000))


def test_recursive_doubling_figure_holds_blocks():
    _, states = viz.record_states("recursive_doubling", 8, 4)
    assert len(states) == 4
    for k in range(1, 4):
        for r in range(8):
            block = (r >> k) << k
            assert viz.contributors(int(states[k, r, 0])) == list(range(block, block + (1 << k)))


def test_rabenseifner_figure_on_six_ranks_folds_and_unfolds():
    trace, states = viz.record_states("rabenseifner", 6, 8)
    full = (1 << 6) - 1
    assert len(states) == 7  # fold, 2 halving, 2 doubling, unfold
    assert sorted((s, d) for st, s, d, _, n in trace.messages() if st == 1 and n == 8) == [
        (0, 1), (2, 3)]
    assert viz.contributors(int(states[1, 1, 0])) == [0, 1]
    for v, r in enumerate((1, 3, 4, 5)):
        assert (states[3, r, 2 * v:2 * v + 2] == full).all()
        assert not (states[2, r] == full).any()
    assert sorted((s, d) for st, s, d, _, _ in trace.messages() if st == 6) == [(1, 0), (3, 2)]
    assert (states[-1] == full).all() and not (states[-2, 0] == full).any()


# NCCL's drawings in src/graph/trees.cc (v2.30.7-1): (rank, parent, children) per tree
NCCL_12 = ({0: (-1, [8]), 8: (0, [4, 10]), 4: (8, [2, 6]), 10: (8, [9, 11]), 2: (4, [1, 3]),
            6: (4, [5, 7]), 1: (2, []), 11: (10, [])},
           {11: (-1, [3]), 3: (11, [1, 7]), 7: (3, [5, 9]), 1: (3, [0, 2]), 5: (7, [4, 6]),
            9: (7, [8, 10]), 0: (1, []), 10: (9, [])})
NCCL_13 = ({0: (-1, [8]), 8: (0, [4, 12]), 12: (8, [10]), 10: (12, [9, 11]), 4: (8, [2, 6])},
           {1: (-1, [9]), 9: (1, [0, 5]), 0: (9, [11]), 11: (0, [10, 12]), 5: (9, [3, 7]),
            3: (5, [2, 4])})


@pytest.mark.parametrize("nranks, drawing", [(12, NCCL_12), (13, NCCL_13)])
def test_double_binary_tree_matches_nccls_drawings(nranks, drawing):
    for tree, expected in enumerate(drawing):
        for rank, (parent, children) in expected.items():
            assert dtree(nranks, rank)[tree] == (parent, children), (nranks, tree, rank)


@pytest.mark.parametrize("nranks", range(2, 40))
def test_double_binary_tree_shape(nranks):
    for tree in (0, 1):  # children name their parent; every rank reaches the one root
        roots = {r for r in range(nranks) if dtree(nranks, r)[tree][0] == -1}
        assert len(roots) == 1
        for rank in range(nranks):
            children = dtree(nranks, rank)[tree][1]
            for child in children:
                assert dtree(nranks, child)[tree][0] == rank
            assert len(children) <= 2
            at, hops = rank, 0
            while (parent := dtree(nranks, at)[tree][0]) != -1 and hops <= nranks:
                at, hops = parent, hops + 1
            assert at in roots
    both = interior(nranks, 0) & interior(nranks, 1)
    if nranks % 2 == 0:  # mirrored: interior in exactly one tree
        assert not both and interior(nranks, 0) | interior(nranks, 1) == set(range(nranks))
    elif nranks > 1:     # shifted: rank 0 is interior in both
        assert both == {0}


def test_btree_rejects_a_rank_outside():
    with pytest.raises(ValueError):
        btree(4, 4)
