"""Beyond one flat ring (chapter 65) on thread ranks: the hierarchical allreduce on every
node layout (equal, uneven, explicit, scattered), the 2D and bidirectional rings, the
public phases of every phased algorithm with the ring's chunk ownership, groups made by
Communicator.split, and bad layout options raising the same error on every rank.

The same algorithms run against MPI_Allreduce at 1-8 ranks in tests/mpi, and over gloo in
tests/torchdist; tests/test_algorithms.py runs them with their defaults among all others."""

from __future__ import annotations

import re

import numpy as np
import pytest

import allreduce
from allreduce import chunk_bounds, cost
from allreduce.comm import SubCommunicator
from allreduce.testing import exact_input, first_difference, gradient_input, reference
from allreduce.topology import Layout, grid
from allreduce.trace import Trace, TracingCommunicator, record
from allreduce.transports.threads import run_threads

NEW = ("hierarchical", "torus", "bidirectional_ring")


def layouts(p: int) -> list[dict]:
    """Every ranks_per_node from 1 to p, and two explicit layouts of uneven nodes whose
    ranks are not consecutive (as COMM_TYPE_SHARED can give)."""
    found = [{"ranks_per_node": k} for k in range(1, p + 1)]
    if p >= 3:
        found.append({"nodes": [(r * 7) % 3 if r % 4 else 2 for r in range(p)]})
        found.append({"nodes": [0] * (p - 1) + [5]})  # a node of one rank
    return found


def counts(p: int) -> list[int]:
    return sorted({0, 1, 3, max(p - 1, 0), p + 1, 1000})


def run(p, algorithm, count, dtype="int64", op="sum", **options):
    inputs = [exact_input(r, count, dtype, op) for r in range(p)]
    results = run_threads(p, lambda comm: allreduce.allreduce(inputs[comm.rank].copy(), comm,
                                                              algorithm, op, **options))
    return inputs, results


def assert_all_right(inputs, results, op, what):
    expected = reference(inputs, op)
    for rank, result in enumerate(results):
        wrong = first_difference(expected, result)
        assert result.dtype == inputs[0].dtype and not wrong, f"{what}, rank {rank}: {wrong}"


@pytest.mark.parametrize("p", range(1, 9))
def test_hierarchical_on_every_layout_and_count(p):
    for options in layouts(p):
        for inner in ("auto", "ring", "rabenseifner", "tree"):
            for count in counts(p):
                inputs, results = run(p, "hierarchical", count, inner=inner, **options)
                assert_all_right(inputs, results, "sum", f"p={p} {options} {inner} n={count}")


VALID = [(op, dtype) for op in allreduce.OP_NAMES for dtype in allreduce.DTYPES
         if not (op == "mean" and dtype.startswith("int"))]


@pytest.mark.parametrize(("op", "dtype"), VALID)
def test_every_op_and_dtype_on_uneven_nodes(op, dtype):
    """p = 7 on nodes of 3, 3 and 1 ranks (the last node's rank owns everything its
    column-mates own), and p = 6 on a 2 × 3 grid."""
    for p, algorithm, options in ((7, "hierarchical", {"ranks_per_node": 3}),
                                  (5, "hierarchical", {"nodes": [1, 0, 1, 0, 1]}),
                                  (6, "torus", {}), (7, "bidirectional_ring", {})):
        for count in (1, 6, 130):
            inputs, results = run(p, algorithm, count, dtype, op, **options)
            assert_all_right(inputs, results, op, f"{algorithm} {options} {op} {dtype} {count}")


def test_a_million_and_three_elements():
    for algorithm, options in (("hierarchical", {"ranks_per_node": 3}), ("torus", {}),
                               ("bidirectional_ring", {})):
        inputs, results = run(5, algorithm, 1_000_003, "float32", "sum", **options)
        assert_all_right(inputs, results, "sum", algorithm)


@pytest.mark.parametrize("algorithm", NEW)
def test_every_rank_gets_the_same_bits(algorithm):
    for p in (3, 4, 6):
        inputs = [gradient_input(r, 1001, "float32") for r in range(p)]
        results = run_threads(p, lambda comm, inputs=inputs: allreduce.allreduce(
            inputs[comm.rank], comm, algorithm,
            **({"ranks_per_node": 2} if algorithm == "hierarchical" else {})))
        assert all(r.tobytes() == results[0].tobytes() for r in results), algorithm


def test_the_2d_grid_for_every_p():
    """As square as p allows, rows ≤ columns; a prime is one row (the flat ring)."""
    for p in range(1, 200):
        rows, columns = grid(p)
        assert rows * columns == p and rows <= columns
        assert not any(p % d == 0 for d in range(rows + 1, int(p**0.5) + 1))
    assert grid(97) == (1, 97) and grid(8192) == (64, 128)
    trace, _ = record("torus", 7, 2520)  # one row of 7: the flat ring's steps
    assert trace.steps() == record("ring", 7, 2520)[0].steps() == 12


# -- the phases --------------------------------------------------------------------------

class _Two:
    """An integer as far as ``operator.index`` goes, and no further (no ``//``)."""

    def __index__(self):
        return 2

    def __repr__(self):
        return "_Two()"


PHASE_CASES = [(name, {}) for name in allreduce.api.PHASED] + [
    ("hierarchical", {"ranks_per_node": 2}), ("hierarchical", {"ranks_per_node": 3}),
    ("hierarchical", {"nodes": [2, 0, 2, 1, 0, 0, 1]}),
    # integers of other types, taken as allreduce takes them: the phase runs with the ints
    # the check read (before, it was given the caller's object, and _Two failed in it)
    ("hierarchical", {"ranks_per_node": np.int64(2)}),
    ("hierarchical", {"nodes": np.array([1, 1, 0, 0, 2])}),
    ("hierarchical", {"ranks_per_node": _Two()})]


@pytest.mark.parametrize(("algorithm", "options"), PHASE_CASES, ids=str)
def test_phases_own_the_rings_chunks_and_compose(algorithm, options):
    """Every phased algorithm leaves rank r with chunk_bounds(n, p, r) reduced (mean
    divided), returns those bounds, and its all-gather from the owned chunks alone gives
    everyone the whole result."""
    sizes = [len(options["nodes"])] if "nodes" in options else range(1, 10)
    for p in sizes:
        for count in (0, 1, 3, p - 1, p + 1, 101):
            inputs = [exact_input(r, count, "float64", "mean") for r in range(p)]
            expected = reference(inputs, "mean")

            def body(comm, inputs=inputs, count=count):
                x = inputs[comm.rank].copy()
                lo, hi = allreduce.reduce_scatter(x, comm, "mean", algorithm=algorithm,
                                                  **options)
                gathered = np.full(count, np.nan)
                gathered[lo:hi] = x[lo:hi]
                allreduce.allgather(gathered, comm, algorithm=algorithm, **options)
                return (lo, hi), x[lo:hi].copy(), gathered

            for rank, (bounds, owned, gathered) in enumerate(run_threads(p, body)):
                what = f"{algorithm} {options} p={p} n={count} rank {rank}"
                assert bounds == chunk_bounds(count, p, rank), what
                assert not first_difference(expected[slice(*bounds)], owned), what
                assert not first_difference(expected, gathered), what


# -- what crosses between nodes ------------------------------------------------------------

def crossing(trace: Trace, nodes) -> list[int]:
    """Elements each rank sent to another node."""
    return [sum(e.count for e in trace.events[r] if e.kind == "send" and nodes[e.peer] != nodes[r])
            for r in range(trace.size)]


@pytest.mark.parametrize(("p", "k"), [(4, 2), (6, 2), (6, 3), (8, 4), (7, 3), (9, 2)])
def test_only_the_owned_shard_crosses_nodes(p, k):
    """With a ring across the nodes, a rank with local rank j < s sends 2(N−1)/N of its
    shard of n/s elements to other nodes, and nothing else does; the flat ring sends about
    2n across from the ranks at the nodes' edges."""
    n = 2520 * 4
    where = Layout.per_node(p, k)
    s, nodes = where.smallest, where.node_of
    trace, results = record("hierarchical", p, n, ranks_per_node=k, inner="ring")
    assert all((r == p * (p + 1) // 2).all() for r in results)
    sent = crossing(trace, nodes)
    for rank in range(p):
        shard = n // s if where.local_rank(rank) < s else 0
        assert sent[rank] == 2 * (where.nodes - 1) * shard // where.nodes, (rank, sent)
    flat = crossing(record("ring", p, n)[0], nodes)
    assert sum(sent) < sum(flat) or where.nodes == p
    assert sent == [trace.elements_across(r, nodes) for r in range(p)]  # what the chapter counts


# -- the two-level model against traces labelled by level ---------------------------------

LEVEL_CASES = [(name, {}) for name in cost.LEVELS if name != "hierarchical"] + [
    ("hierarchical", {"inner": inner}) for inner in ("ring", "rabenseifner", "recursive_doubling")]
NETWORKS = [  # (intra α, β), (inter α, β): each term alone, then all four at once
    ((1, 0), (1, 0)), ((1, 0), (10, 0)), ((0, 1), (0, 1)), ((0, 1), (0, 10)),
    ((1, 0.001), (7, 0.013))]


@pytest.mark.parametrize(("algorithm", "options"), LEVEL_CASES, ids=str)
def test_network_time_is_the_replay_of_the_trace_with_each_link_its_own_level(algorithm,
                                                                               options):
    """cost.Network (what the chapter's simulation and auto read) against the replay of the
    real code's trace in which each message pays the link it takes: intra when both ranks
    share a node, inter otherwise; p = 2…8, every ranks_per_node.  Equal where the levels
    claim to be exact (cost.level_exact), and an upper bound elsewhere."""
    for p in range(2, 9):
        for k in range(1, p + 1):
            extra = {"ranks_per_node": k} if algorithm == "hierarchical" else {}
            trace, results = record(algorithm, p, 5040, **extra, **options)
            assert all((r == p * (p + 1) // 2).all() for r in results)
            nodes = Layout.per_node(p, k).node_of
            exact = algorithm == "hierarchical" or cost.level_exact(algorithm, p, k)
            for (ai, bi), (ae, be) in NETWORKS:
                net = cost.Network(cost.Model(ai, bi), cost.Model(ae, be), ranks_per_node=k)
                predicted = net.time(algorithm, p, 5040 * 8, **options)
                replayed = trace.critical_path(link=net.link(nodes))
                what = f"{algorithm} {options} p={p} k={k} {net}"
                if exact:
                    assert predicted == pytest.approx(replayed, rel=1e-12), what
                else:
                    assert replayed <= predicted * (1 + 1e-12), what


# -- groups ---------------------------------------------------------------------------------

def test_split_makes_each_group_once_and_keeps_it():
    def body(comm):
        halves = comm.split([r % 2 for r in range(comm.size)])
        again = comm.split([r % 2 for r in range(comm.size)])
        whole = comm.split([7] * comm.size)
        x = np.full(3, comm.rank, np.int64)
        total = allreduce.allreduce(x, halves, "ring")
        return halves is again, whole is comm, halves.rank, halves.size, total

    for rank, (kept, whole, sub_rank, sub_size, total) in enumerate(run_threads(5, body)):
        assert kept and whole and sub_rank == rank // 2
        assert sub_size == (3 if rank % 2 == 0 else 2)
        assert (total == sum(r for r in range(5) if r % 2 == rank % 2)).all()


def test_split_keeps_the_groups_of_the_colourings_used_last(monkeypatch):
    """A program that cycles through many node layouts keeps a bounded number of groups
    (MPI runs out of communicators after about 2,000: tests/mpi): the least recently used
    is let go, one used again is kept, and a new group's messages never share a context
    with a kept one's (the generic group, SubCommunicator, whose tags are its context)."""
    import allreduce.comm
    from allreduce.comm import Communicator
    from allreduce.transports.threads import ThreadCommunicator

    class Generic(ThreadCommunicator):  # groups over the parent's own messages
        _split = Communicator._split

    monkeypatch.setattr(allreduce.comm, "KEPT_GROUPS", 3)

    def body(comm):
        comm = Generic(comm.world, comm.rank)
        colourings = [[r % 2 + 2 * i for r in range(comm.size)] for i in range(6)]  # 6 keys
        order = [0, 1, 2, 0, 3, 4, 0, 5, 1]  # 0 kept by use; 1 let go and made again
        made, totals = {}, []
        for i in order:
            group = comm.split(colourings[i])
            made.setdefault(i, []).append(group)
            totals.append(allreduce.allreduce(np.full(4, comm.rank + 1, np.int64), group))
        kept = comm._groups()
        contexts = [group.context for group in kept.values()]
        return (made, totals, [colourings.index(list(c)) for c in kept],
                len(set(contexts)) == len(contexts))

    for rank, (made, totals, kept, apart) in enumerate(run_threads(4, body)):
        assert kept == [0, 5, 1] and apart, kept  # least recently used first
        assert all(group is made[0][0] for group in made[0])  # used again: the same group
        assert made[1][0] is not made[1][1]  # let go after 2, 3, 4 and 0, then made anew
        mine = [r for r in range(4) if r % 2 == rank % 2]
        assert all((total == sum(r + 1 for r in mine)).all() for total in totals)


def test_a_traced_group_logs_its_messages_under_the_parents_ranks():
    def body(comm):
        tracer = TracingCommunicator(comm)
        group = tracer.split([r // 2 for r in range(comm.size)])
        allreduce.allreduce(np.ones(8), group, "ring")
        return tracer.events

    trace = Trace(run_threads(4, body))
    for rank in range(4):
        peers = {e.peer for e in trace.events[rank] if e.kind in ("send", "recv")}
        assert peers == {rank ^ 1}, (rank, peers)
    assert trace.steps() == 2


def test_the_generic_group_talks_through_its_parents_messages():
    """SubCommunicator (what split makes where a transport has nothing of its own, as in
    the grader): ranks renumbered, tags apart, its own all-gather and barrier."""
    def body(comm):
        mine = [r for r in range(comm.size) if r % 3 == comm.rank % 3]
        group = SubCommunicator(comm, mine, context=0)
        group.barrier()
        names = group.allgather_object(f"rank {comm.rank}")
        total = allreduce.allreduce(np.full(5, comm.rank, np.int64), group, "rabenseifner")
        return names, total

    for rank, (names, total) in enumerate(run_threads(7, body)):
        mine = [r for r in range(7) if r % 3 == rank % 3]
        assert names == [f"rank {r}" for r in mine]
        assert (total == sum(mine)).all()


def test_auto_on_nodes_chooses_on_two_levels_and_runs_its_choice():
    """With ranks_per_node, auto evaluates the hierarchical allreduce too, on the
    network's two levels (here both this machine's model), and runs what it chose."""
    from allreduce.algorithms.auto import network, resolve

    name, options = resolve(8 << 20, 6, ranks_per_node=2)
    net = network(2)
    times = {alg: net.time(alg, 6, 8 << 20) for alg in ("recursive_doubling", "rabenseifner", "ring")}
    assert name == "hierarchical" and options["ranks_per_node"] == 2
    assert net.time(name, 6, 8 << 20, **options) < min(times.values())
    assert resolve(8 << 20, 6)[0] in times  # without nodes, a flat candidate
    inputs, results = run(6, "auto", 2 << 20, "int32", "sum", ranks_per_node=2)
    assert_all_right(inputs, results, "sum", "auto on nodes")


def test_bidirectional_ring_halves_the_bytes_when_every_link_is_a_port():
    for p in (3, 4, 8):
        trace, _ = record("bidirectional_ring", p, 5040)
        ring, _ = record("ring", p, 5040)
        assert trace.critical_path(beta=1, ports="link") * 2 == ring.critical_path(beta=1)
        assert trace.critical_path(alpha=1, ports="link") == ring.steps() == 2 * (p - 1)
        assert trace.critical_path(beta=1) == ring.critical_path(beta=1)  # one port: no gain


# -- bad input --------------------------------------------------------------------------------

def same_error_everywhere(call, p=4):
    outcomes = run_threads(p, call, timeout=10, return_exceptions=True)
    assert all(isinstance(o, (TypeError, ValueError)) for o in outcomes), outcomes
    assert len({str(o) for o in outcomes}) == 1, {str(o) for o in outcomes}
    return outcomes[0]


BAD = [
    ("ranks_per_node differs across ranks",
     lambda c, x: allreduce.allreduce(x, c, "hierarchical", ranks_per_node=2 + (c.rank == 3)),
     r"disagree on the ranks_per_node: 2 on ranks 0, 1, 2, 3 on rank 3"),
    ("ranks_per_node differs, auto",
     lambda c, x: allreduce.allreduce(x, c, ranks_per_node=2 if c.rank else 4),
     r"disagree on the ranks_per_node: 4 on rank 0, 2 on ranks 1, 2, 3"),
    ("ranks_per_node of 0", lambda c, x: allreduce.allreduce(x, c, "hierarchical",
                                                              ranks_per_node=0),
     r"ranks_per_node must be a positive integer, got 0"),
    ("ranks_per_node as text", lambda c, x: allreduce.allreduce(x, c, "hierarchical",
                                                                 ranks_per_node="2"),
     r"ranks_per_node must be a positive integer, got '2'"),
    ("ranks_per_node for the ring", lambda c, x: allreduce.allreduce(x, c, "ring",
                                                                      ranks_per_node=2),
     r"ranks_per_node= applies only to auto and hierarchical, not to 'ring'"),
    ("nodes of the wrong length", lambda c, x: allreduce.allreduce(x, c, "hierarchical",
                                                                    nodes=[0, 0, 1]),
     r"nodes must give one node id per rank \(4\), got 3"),
    ("nodes that differ", lambda c, x: allreduce.allreduce(
        x, c, "hierarchical", nodes=[0, 0, 1, 1] if c.rank else [0, 1, 0, 1]),
     r"disagree on the nodes: \(0, 1, 0, 1\) on rank 0, \(0, 0, 1, 1\) on ranks 1, 2, 3"),
    ("nodes and ranks_per_node", lambda c, x: allreduce.allreduce(
        x, c, "hierarchical", nodes=[0, 0, 1, 1], ranks_per_node=2),
     r"give ranks_per_node= or nodes=, not both"),
    ("an unknown inner algorithm", lambda c, x: allreduce.allreduce(x, c, "hierarchical",
                                                                     inner="rign"),
     r"unknown inner algorithm 'rign'"),
    ("hierarchical inside itself", lambda c, x: allreduce.allreduce(x, c, "hierarchical",
                                                                     inner="hierarchical"),
     r"unknown inner algorithm 'hierarchical'"),
    ("inner differs", lambda c, x: allreduce.allreduce(
        x, c, "hierarchical", ranks_per_node=2, inner="ring" if c.rank else "tree"),
     r"disagree on the inner algorithm: tree on rank 0, ring on ranks 1, 2, 3"),
    ("a phase of an algorithm without phases",
     lambda c, x: allreduce.reduce_scatter(x, c, algorithm="tree"),
     r"unknown algorithm 'tree'; choose one of ring, rabenseifner, torus, hierarchical"),
    ("a phase on differing layouts", lambda c, x: allreduce.allgather(
        x, c, algorithm="hierarchical", ranks_per_node=1 if c.rank == 2 else 2),
     r"disagree on the ranks_per_node: 2 on ranks 0, 1, 3, 1 on rank 2"),
    ("a phase's layout for the ring", lambda c, x: allreduce.reduce_scatter(
        x, c, algorithm="ring", ranks_per_node=2),  # the phases have no auto
     r"ranks_per_node= applies only to hierarchical, not to 'ring'"),
    ("nodes for the ring", lambda c, x: allreduce.allreduce(x, c, "ring", nodes=[0, 0, 1, 1]),
     r"nodes= applies only to hierarchical, not to 'ring'"),  # auto takes ranks_per_node only
    ("inner for auto", lambda c, x: allreduce.allreduce(x, c, inner="ring", ranks_per_node=2),
     r"inner= applies only to hierarchical, not to 'auto'"),
]


@pytest.mark.parametrize(("what", "call", "pattern"), BAD, ids=[b[0] for b in BAD])
def test_bad_layouts_raise_the_same_error_on_every_rank_and_touch_nothing(what, call, pattern):
    def body(comm):
        x = np.arange(12.0) + comm.rank
        try:
            call(comm, x)
        finally:
            assert (x == np.arange(12.0) + comm.rank).all(), "the caller's data changed"

    error = same_error_everywhere(body)
    assert isinstance(error, ValueError) and re.search(pattern, str(error)), str(error)


def test_node_ids_that_are_not_integers_raise_a_type_error():
    """nodes=[0.5, ...] was read as int(0.5) = 0: both ranks on one node, without a word."""
    error = same_error_everywhere(lambda c: allreduce.allreduce(
        np.arange(12.0), c, "hierarchical", nodes=[0.0, 0.5, 1.0, 1.5]))
    assert isinstance(error, TypeError) and "nodes must be a sequence of integers" in str(error)


def test_auto_reads_each_calls_own_input():
    """auto remembers its choices per size; the options it runs with must not carry one
    call's input into the next (a bug once: a call that read its input in place of a copy
    left it in the remembered options, and the next call, in place, read it again)."""
    def body(comm):
        first = allreduce.allreduce(np.full(1 << 18, comm.rank, np.int64), comm)
        second = np.full(1 << 18, 10 * comm.rank, np.int64)
        allreduce.allreduce(second, comm, out=second)
        return first, second

    for first, second in run_threads(3, body):
        assert (first == 3).all() and (second == 30).all()


def test_a_plan_keeps_the_checked_nodes_not_the_callers_list():
    """A kept plan held the caller's nodes list itself: changed after the call, it changed
    the layout a later call ran with (one that the check had passed with other nodes).  An
    iterator for nodes, read by the check, was empty by the time the algorithm read it."""
    def body(comm):
        x = exact_input(comm.rank, 10, "float64", "sum")
        mine = [0, 0, 1, 1]
        first = allreduce.allreduce(x, comm, "hierarchical", nodes=mine)
        mine[:] = [0, 1, 2, 3, 4]  # the caller's list, changed: no business of the plan's
        again = allreduce.allreduce(x, comm, "hierarchical", nodes=[0, 0, 1, 1])
        once = allreduce.allreduce(x, comm, "hierarchical", nodes=iter([0, 1, 0, 1]))
        scattered = x.copy()
        allreduce.reduce_scatter(scattered, comm, algorithm="hierarchical",
                                 nodes=(r // 2 for r in range(4)))
        return first, again, once

    inputs = [exact_input(r, 10, "float64", "sum") for r in range(4)]
    for results in run_threads(4, body, timeout=20):
        for result in results:
            assert not first_difference(reference(inputs, "sum"), result)
