"""Beyond one flat ring on real MPI processes (chapter 65), against MPI_Allreduce: the
hierarchical allreduce on several node layouts, its phases and the other phased
algorithms', groups kept on the MPI communicator, and a ranks_per_node that differs on
one rank.  Run by tests/test_mpi.py with the rest of tests/mpi at 1-5 ranks, and alone
under ``mpiexec -n 8``, where every test runs on MPI communicators of 6, 7 and 8 ranks
(the first 6 and 7 ranks of COMM_WORLD, then COMM_WORLD) and the new algorithms also run
with their defaults, as test_mpi_allreduce runs every algorithm at 1-5 ranks.  Every op ×
dtype × count is checked at every size; the node layouts take turns among them."""

from __future__ import annotations

import time

import numpy as np
import pytest
from conftest import assert_on_all_ranks
from mpi4py import MPI
from test_mpi_allreduce import VALID, check, mpi_reference

import allreduce
from allreduce import chunk_bounds
from allreduce.testing import exact_input, first_difference
from allreduce.topology import Layout
from allreduce.trace import TracingCommunicator
from allreduce.transports.mpi import MPICommunicator

NEW = ("hierarchical", "torus", "bidirectional_ring")
WORLD = MPI.COMM_WORLD
SIZES = [6, 7, 8] if WORLD.size == 8 else [WORLD.size]


@pytest.fixture(params=SIZES, ids=lambda size: f"p={size}", scope="module")
def comm(request):
    """COMM_WORLD, or a communicator of its first ``size`` ranks; the other ranks skip."""
    size = request.param
    if size == WORLD.size:
        yield WORLD
        return
    group = WORLD.Split(0 if WORLD.rank < size else MPI.UNDEFINED, WORLD.rank)
    yield group
    if group != MPI.COMM_NULL:
        group.Free()


@pytest.fixture
def world(comm):
    if comm == MPI.COMM_NULL:
        pytest.skip("this rank is not in the communicator")
    return comm


def layouts(p: int) -> list[dict]:
    """Two and three ranks to a node (uneven when p is not a multiple), one, and a
    scattered layout of uneven nodes whose ranks are not consecutive."""
    found = [{"ranks_per_node": k} for k in (1, 2, 3) if k <= p]
    if p >= 3:
        found.append({"nodes": [r % 2 if r != p - 1 else 2 for r in range(p)]})
    return found


def test_new_algorithms_with_their_defaults(world):
    """At 6-8 ranks, what test_mpi_allreduce runs for every algorithm at 1-5: every op ×
    dtype × count, the three algorithms taking turns, and all three on int64 sums."""
    if WORLD.size <= 5:
        pytest.skip("test_mpi_allreduce runs every algorithm at this size")
    p = world.size
    for index, (op, dtype) in enumerate([("sum", "int64"), *VALID]):
        for algorithm in NEW if index == 0 else [NEW[index % len(NEW)]]:
            for count in sorted({0, 1, 3, p - 1, p + 1, 1000}):
                check(world, algorithm, op, dtype, count)


def test_hierarchical_layouts_every_op_dtype_and_count(world):
    """Every op × dtype × count, each op and dtype on the next layout in turn."""
    p = world.size
    options = layouts(p)
    for index, (op, dtype) in enumerate(VALID):
        for count in sorted({0, 1, 3, p - 1, p + 1, 1000}):
            check(world, "hierarchical", op, dtype, count, **options[index % len(options)])
    for layout in options:  # and every layout on int64 sums
        check(world, "hierarchical", "sum", "int64", 1000, **layout)


def test_a_million_and_three_elements_on_nodes(world):
    cases = [("sum", "float64"), ("mean", "float32"), ("max", "int64"), ("min", "float16"),
             ("prod", "int32")]
    for index, (op, dtype) in enumerate(cases):  # each case on another layout
        options = layouts(world.size)[index % len(layouts(world.size))]
        check(world, "hierarchical", op, dtype, 1_000_003, **options)
        check(world, ("torus", "bidirectional_ring")[index % 2], op, dtype, 1_000_003)


@pytest.mark.parametrize("algorithm", allreduce.api.PHASED)
def test_phases_own_the_rings_chunks(world, algorithm):
    p = world.size
    for options in ([{}] if algorithm != "hierarchical" else layouts(p) + [{}]):
        for count in sorted({0, 1, 3, p + 1, 1000}):
            x = exact_input(world.rank, count, "int64", "sum")
            expected = mpi_reference(world, x, "sum")
            mine = x.copy()
            bounds = allreduce.reduce_scatter(mine, world, algorithm=algorithm, **options)
            owned = mine[slice(*bounds)].copy()
            gathered = np.zeros_like(x)
            gathered[slice(*bounds)] = owned
            allreduce.allgather(gathered, world, algorithm=algorithm, **options)
            ok = (bounds == chunk_bounds(count, p, world.rank)
                  and not first_difference(expected[slice(*bounds)], owned)
                  and not first_difference(expected, gathered))
            assert_on_all_ranks(world, ok, f"{algorithm} {options} n={count}: {bounds}")


def test_only_the_owned_shard_crosses_nodes_on_mpi(world):
    """Traced on the MPI transport (the tracing wrapper splits MPI communicators): with
    a ring across the nodes, each rank of a column sends 2(N−1)/N of its shard, n/s
    elements, to other nodes, and a rank beyond the smallest node's s sends none."""
    p, n = world.size, 2520 * 8
    where = Layout.per_node(p, 2)
    tracer = TracingCommunicator(MPICommunicator(world))
    x = np.ones(n, np.int64)
    allreduce.allreduce(x, tracer, "hierarchical", ranks_per_node=2, inner="ring", out=x)
    sent = sum(e.count for e in tracer.events
               if e.kind == "send" and where.node_of[e.peer] != where.node_of[world.rank])
    shard = n // where.smallest if where.local_rank(world.rank) < where.smallest else 0
    expected = 2 * (where.nodes - 1) * shard // where.nodes
    assert_on_all_ranks(world, bool((x == p).all()) and sent == expected,
                        f"sent {sent} elements across nodes, expected {expected}")


def test_groups_are_kept_on_the_mpi_communicator_and_freed_with_it(world):
    dup = world.Dup()
    colors = [r % 2 for r in range(world.size)]
    first = MPICommunicator(dup).split(colors)
    again = MPICommunicator(dup).split(colors)  # another wrapper of the same communicator
    kept = first is again and first.size == len(range(world.rank % 2, world.size, 2))
    dup.Free()
    assert_on_all_ranks(world, kept and first.comm == MPI.COMM_NULL, "groups not kept or freed")


def test_many_colourings_do_not_run_out_of_mpi_communicators(world):
    """MPICH has about 2,000 communicators per process: splitting 2,100 colourings (a
    program cycling through node layouts) ran out of them, with a raw MPI error.  The
    groups of the colourings used last are kept and the others freed."""
    from allreduce.comm import KEPT_GROUPS

    dup = MPICommunicator(world.Dup())
    first = dup.split([r % 2 for r in range(world.size)])
    wrong = []
    for i in range(2100):
        group = dup.split([r % 2 + 2 * i for r in range(world.size)])
        if i % 300 == 0 or i == 2099:
            total = allreduce.allreduce(np.full(3, world.rank + 1), group)
            if not (total == sum(r + 1 for r in range(world.rank % 2, world.size, 2))).all():
                wrong.append(i)
    kept = [key for key in dup._groups() if isinstance(key, tuple)]
    ok = (not wrong and len(kept) == KEPT_GROUPS
          and (first.comm == MPI.COMM_NULL or world.size == 1))  # one rank: the parent itself
    dup.comm.Free()
    assert_on_all_ranks(world, ok, f"wrong at {wrong}, {len(kept)} kept")


def test_a_colouring_let_go_is_split_again_and_a_traced_group_follows(world):
    """With 3 colourings kept: one let go and used again gets a new, working MPI group; a
    traced group used again while the MPI communicator's own kept groups moved on (a
    plain call on the same communicator in between) is made again around a live group,
    not left on a freed one."""
    import allreduce.comm

    saved, allreduce.comm.KEPT_GROUPS = allreduce.comm.KEPT_GROUPS, 3
    dup = world.Dup()
    try:
        plain, tracer = MPICommunicator(dup), TracingCommunicator(MPICommunicator(dup))
        colourings = [[r % 2 + 2 * i for r in range(world.size)] for i in range(5)]
        first = plain.split(colourings[0])
        traced = tracer.split(colourings[0])
        for i in (1, 2, 3):
            plain.split(colourings[i])  # the communicator's kept groups move on: 0 let go
        again, traced_again = plain.split(colourings[0]), tracer.split(colourings[0])
        totals = [allreduce.allreduce(np.full(3, world.rank + 1), group)
                  for group in (again, traced_again)]
        mine = sum(r + 1 for r in range(world.rank % 2, world.size, 2))
        ok = (all((total == mine).all() for total in totals)
              and (world.size == 1 or (first.comm == MPI.COMM_NULL and again is not first
                                       and traced_again.inner is again)))
    finally:
        allreduce.comm.KEPT_GROUPS = saved
        dup.Free()
    assert_on_all_ranks(world, ok, f"totals {totals}")


def test_ranks_per_node_that_differs_on_one_rank_fails_everywhere_at_once(world):
    if world.size == 1:
        pytest.skip("a disagreement needs two ranks")
    x = np.arange(100.0) + world.rank
    start = time.monotonic()
    try:
        allreduce.allreduce(x, world, "hierarchical", ranks_per_node=2 + (world.rank == 1))
        message = "no error"
    except ValueError as error:
        message = str(error)
    elapsed = time.monotonic() - start
    messages = world.allgather(message)
    ok = ("disagree on the ranks_per_node" in message and "3 on rank 1" in message
          and len(set(messages)) == 1 and elapsed < 5
          and bool((x == np.arange(100.0) + world.rank).all()))
    assert_on_all_ranks(world, ok, f"{message!r} after {elapsed:.1f} s")


def test_ranks_whose_networks_choose_other_inner_algorithms_raise(world):
    """auto with ranks_per_node chooses the hierarchical allreduce and an inner algorithm
    across the nodes: ranks whose networks differ agreed on the first and ran different
    inner ones (an MPI truncation on one rank, the others waiting); the inner choice is
    checked too."""
    from allreduce.algorithms.auto import resolve, use_network
    from allreduce.cost import Model

    if world.size < 6:  # three nodes of two at least (on two, both networks pick one
        return  # algorithm); the suite under mpiexec -n 8 runs it on 6 to 8 ranks
    intra = Model(alpha=1e-9, beta=1e-15, gamma=1e-15)
    use_network(intra, Model(alpha=1e-2, beta=1e-12) if world.rank == 0 else
                Model(alpha=1e-9, beta=1e-3))
    try:
        chosen = resolve(8000, world.size, 2)
        allreduce.allreduce(np.ones(1000), world, "auto", ranks_per_node=2)
        message = "no error"
    except ValueError as error:
        message = str(error)
    finally:
        use_network(None)
    inners = world.allgather(chosen[1].get("inner"))
    assert_on_all_ranks(world, chosen[0] == "hierarchical" and len(set(inners)) == 2, inners)
    expected = f"disagree on the inner algorithm auto chose: {inners[0]} on rank 0, "
    assert_on_all_ranks(world, expected in message, message)
