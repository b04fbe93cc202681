"""The cost formulas the book states, checked against what the communicator counts.

The first test is the one the chapters rely on: every algorithm's :class:`~allreduce.cost.
Formula` (which the chapters render and the model and ``auto`` evaluate) equals the critical
path of a replay of the real code's trace, for its α, β and γ terms, p = 1…9.  The tests
after it check what the traces show rank by rank: messages, elements sent and reduced.  n is
divisible by every p used, so the formulas hold exactly; uneven chunks are checked apart."""

from __future__ import annotations

import math

import numpy as np
import pytest

import allreduce
from allreduce import chunk_bounds, cost
from allreduce.trace import Trace, TracingCommunicator, record
from allreduce.transports.threads import run_threads
from allreduce.validation import IN_BAND_LIMIT, in_band_terms

N = 5040  # divisible by 1..10
LAYOUTS = [{"ranks_per_node": k, "inner": inner} for k in (2, 3)
           for inner in ("ring", "rabenseifner", "recursive_doubling")]
FORMULA_CASES = [(name, options) for name in allreduce.cost.FORMULAS
                 for options in ([{"servers": s} for s in (1, 2, 3)]
                                 if name.endswith("parameter_server") else
                                 [{}, *LAYOUTS] if name == "hierarchical" else [{}])]


@pytest.mark.parametrize(("algorithm", "options"), FORMULA_CASES, ids=str)
@pytest.mark.parametrize("p", range(1, 10))
def test_the_formula_is_the_critical_path_of_the_trace(algorithm, options, p):
    """cost.terms (the formula each chapter prints) against Trace.terms (the replay with
    (α, β, γ) = (1, 0, 0), (0, 1, 0), (0, 0, 1)), for several sizes and two item sizes;
    the pipelined ring's largest size has several segments per step."""
    if options.get("servers", 0) > p:
        pytest.skip("more servers than ranks")
    unit = 5040 if algorithm == "bidirectional_ring" else 2520  # two halves, p chunks each
    counts = [0, unit, 3 * unit] + ([2520 * 64] if algorithm == "pipelined_ring" else [])
    for count in counts:  # 2520 = lcm(1, ..., 9): every chunk is whole
        for dtype in ("int64", "int32"):
            trace, results = record(algorithm, p, count, dtype=dtype, **options)
            assert all((r == p * (p + 1) // 2).all() for r in results), "wrong result"
            n = count * np.dtype(dtype).itemsize
            expected = cost.terms(algorithm, p, n, **options)
            assert trace.terms() == cost.Terms(expected.steps if count else 0,
                                               expected.bytes, expected.reduced), (count, dtype)


def test_a_two_level_network_charges_each_message_its_own_link():
    """Ranks 0-1 and 2-3 are two "nodes": links inside cost (α, β) = (1, 0), links between
    them (10, 0).  The ring 0→1→2→3→0 crosses nodes at 1→2 and 3→0 in every step, so every
    step pays the slow link; with one level slow everywhere, the same trace pays 10 a step."""
    trace, _ = record("ring", 4, 2520)

    def link(source, dest):
        return (1.0, 0.0) if source // 2 == dest // 2 else (10.0, 0.0)

    assert trace.critical_path(link=link) == 10 * 2 * 3
    assert trace.critical_path(link=lambda s, d: (1.0, 0.0)) == trace.steps() == 6
    rd, _ = record("recursive_doubling", 4, 2520)  # round 1 inside the nodes, round 2 across
    assert rd.critical_path(link=link) == 1 + 10


def test_a_joint_replay_is_the_sum_of_the_three_for_lock_step_algorithms():
    """The model adds the three terms; for lock-step schedules that is the joint replay."""
    alpha, beta, gamma = 3.0, 0.01, 0.002
    for name in ("ring", "recursive_doubling", "rabenseifner", "tree", "reduce_broadcast"):
        for p in (2, 4, 8):
            trace, _ = record(name, p, 2520)
            t = trace.terms()
            assert math.isclose(trace.critical_path(alpha, beta, gamma),
                                t.steps * alpha + t.bytes * beta + t.reduced * gamma), (name, p)


def lg(p: int) -> int:
    return math.ceil(math.log2(p))


def is_power_of_two(p: int) -> bool:
    return p & (p - 1) == 0


def counts(algorithm, p, n=N, **options):
    trace, results = record(algorithm, p, n, **options)
    assert all((r == p * (p + 1) // 2).all() for r in results), "wrong result"
    return trace, range(p)


@pytest.mark.parametrize("p", range(2, 11))
def test_ring(p):
    trace, ranks = counts("ring", p)
    assert trace.steps() == 2 * (p - 1)
    for r in ranks:
        assert trace.elements_sent(r) == 2 * (p - 1) * N // p
        assert trace.elements_reduced(r) == (p - 1) * N // p
        assert trace.messages_sent(r) == 2 * (p - 1)


@pytest.mark.parametrize("p", [2, 3, 5, 7])
def test_ring_uneven_chunks(p):
    n = 1000 * p + 1  # not divisible by p
    trace, ranks = counts("ring", p, n)
    size = [hi - lo for lo, hi in (chunk_bounds(n, p, c) for c in range(p))]
    assert max(size) - min(size) == 1
    for r in ranks:  # reduce-scatter sends every chunk but r, all-gather every chunk but r+1
        assert trace.elements_sent(r) == 2 * n - size[r] - size[(r + 1) % p]
        assert trace.elements_reduced(r) == n - size[(r - 1) % p]


@pytest.mark.parametrize("p", range(2, 11))
def test_rabenseifner(p):
    trace, ranks = counts("rabenseifner", p)
    if is_power_of_two(p):
        assert trace.steps() == 2 * lg(p)
        for r in ranks:
            assert trace.elements_sent(r) == 2 * (p - 1) * N // p
            assert trace.elements_reduced(r) == (p - 1) * N // p
    else:  # folded onto 2^⌊lg p⌋ ranks: one step of n before and one after
        q = 1 << (p.bit_length() - 1)
        assert trace.steps() == 2 * int(math.log2(q)) + 2
        assert max(map(trace.elements_sent, ranks)) == 2 * (q - 1) * N // q + N


@pytest.mark.parametrize("p", range(2, 11))
def test_recursive_doubling(p):
    trace, ranks = counts("recursive_doubling", p)
    q = 1 << (p.bit_length() - 1)
    extra = 0 if is_power_of_two(p) else 2
    assert trace.steps() == int(math.log2(q)) + extra
    if is_power_of_two(p):
        for r in ranks:
            assert trace.elements_sent(r) == N * lg(p)
            assert trace.elements_reduced(r) == N * lg(p)


@pytest.mark.parametrize("p", range(2, 11))
def test_tree(p):
    trace, ranks = counts("tree", p)
    assert trace.steps() == 2 * lg(p)
    # the root receives and sends lg p whole buffers, and reduces lg p of them
    assert trace.elements_received(0) == trace.elements_sent(0) == lg(p) * N
    assert trace.elements_reduced(0) == lg(p) * N
    assert trace.total_elements_sent() == 2 * (p - 1) * N  # every edge of the tree, twice


@pytest.mark.parametrize("p", range(2, 11))
def test_reduce_broadcast(p):
    trace, ranks = counts("reduce_broadcast", p)
    assert trace.steps() == 2 * (p - 1)
    assert trace.elements_received(0) == trace.elements_sent(0) == (p - 1) * N
    assert trace.elements_reduced(0) == (p - 1) * N
    for r in ranks[1:]:
        assert trace.elements_sent(r) == trace.elements_received(r) == N


@pytest.mark.parametrize("p", range(2, 11))
def test_naive(p):
    trace, ranks = counts("naive", p)
    assert trace.steps() == p - 1
    assert trace.total_elements_sent() == p * (p - 1) * N
    for r in ranks:
        assert trace.elements_sent(r) == (p - 1) * N
        assert trace.elements_reduced(r) == (p - 1) * N


@pytest.mark.parametrize(("p", "servers"),
                         [(p, s) for p in range(2, 9) for s in (1, 2, 4, p) if s <= p])
def test_parameter_server(p, servers):
    trace, ranks = counts("parameter_server", p, servers=servers)
    shard = N // servers
    for s in range(servers):  # a server's link carries 2(p−1)·n/S elements
        assert trace.elements_received(s) - (servers - 1) * shard == (p - 1) * shard
        assert trace.elements_reduced(s) == (p - 1) * shard
    assert max(trace.elements_sent(s) + trace.elements_received(s) for s in range(servers)) == \
        2 * (p - 1) * shard + 2 * (servers - 1) * shard
    if servers in (1, p):
        assert trace.steps() == 2 * (p - 1)


@pytest.mark.parametrize("algorithm", ["ring", "pipelined_ring", "rabenseifner",
                                       "recursive_doubling", "tree", "naive"])
@pytest.mark.parametrize("p", [1, 2, 3, 4, 5, 6, 8])
def test_a_whole_call_costs_the_algorithm_plus_its_in_band_check(algorithm, p):
    """What the benchmark's model counts for a call over MPI: cost.terms of the algorithm
    plus validation.in_band_terms of its check, against a trace of whole allreduce calls
    whose check travels in band (below and above IN_BAND_LIMIT for recursive doubling)."""
    for count in (840, (IN_BAND_LIMIT // 8 // 840 + 1) * 840):  # 840 = lcm(1, ..., 8)
        def body(comm):
            tracer = TracingCommunicator(comm, in_band=True)
            x = np.full(count, comm.rank + 1, np.int64)
            allreduce.allreduce(x, tracer, algorithm, out=x)
            assert (x == p * (p + 1) // 2).all()
            return tracer.events

        trace = Trace(run_threads(p, body), 8)
        n = count * 8
        own, check = cost.terms(algorithm, p, n), in_band_terms(algorithm, p, n)
        assert trace.terms() == own + check, (count, trace.terms(), own, check)
        if p > 1:  # the check is not free: header bytes always, steps unless carried
            assert check.bytes > 0
            assert (check.steps == 0) == (algorithm == "recursive_doubling" and n <= IN_BAND_LIMIT)
