"""Every algorithm against MPI_Allreduce, on real MPI processes (run by tests/test_mpi.py at
world sizes 1 to 5)."""

from __future__ import annotations

import time

import numpy as np
import pytest
from conftest import assert_on_all_ranks
from mpi4py import MPI

import allreduce
from allreduce.testing import exact_input, first_difference, gradient_input, sum_tolerance
from allreduce.trace import TracingCommunicator
from allreduce.transports.mpi import MPICommunicator

MPI_OPS = {"sum": MPI.SUM, "mean": MPI.SUM, "max": MPI.MAX, "min": MPI.MIN, "prod": MPI.PROD}
VALID = [(op, dtype) for op in allreduce.OP_NAMES for dtype in allreduce.DTYPES
         if not (op == "mean" and dtype.startswith("int"))]


def mpi_reference(comm, x, op):
    expected = np.empty_like(x)
    comm.Allreduce(x, expected, op=MPI_OPS[op])
    if op == "mean":
        expected /= np.array(comm.size, dtype=x.dtype)
    return expected


def check(comm, algorithm, op, dtype, count, **options):
    x = exact_input(comm.rank, count, dtype, op)
    result = allreduce.allreduce(x, comm, algorithm=algorithm, op=op, **options)
    wrong = first_difference(mpi_reference(comm, x, op), result)
    same_type = result.dtype == x.dtype and result.shape == x.shape
    assert_on_all_ranks(comm, not wrong and same_type,
                        f"{algorithm} {op} {dtype} count={count}: {wrong or 'wrong dtype/shape'}")


@pytest.mark.parametrize("algorithm", allreduce.ALGORITHMS)
def test_every_op_dtype_and_small_count(world, algorithm):
    p = world.size
    for op, dtype in VALID:
        for count in sorted({0, 1, 3, p - 1, p + 1, 1000}):
            check(world, algorithm, op, dtype, count)


@pytest.mark.parametrize("algorithm", allreduce.ALGORITHMS)
def test_large_prime_count_every_op(world, algorithm):
    for op, dtype in [("sum", "float64"), ("mean", "float32"), ("max", "int64"),
                      ("min", "float16"), ("prod", "int32"), ("sum", "int64")]:
        check(world, algorithm, op, dtype, 1_000_003)


@pytest.mark.parametrize("algorithm", allreduce.ALGORITHMS)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_random_gradients(world, algorithm, dtype):
    """Realistic floats: within the summation error bound of MPI's answer, and the very
    same bits on every rank."""
    x = gradient_input(world.rank, 4099, dtype)
    result = allreduce.allreduce(x, world, algorithm=algorithm)
    expected = mpi_reference(world, x, "sum")
    inputs = world.allgather(x)
    close = bool((np.abs(result.astype(np.float64) - expected) <= sum_tolerance(inputs)).all())
    assert_on_all_ranks(world, close, f"{algorithm} differs from MPI_Allreduce beyond the bound")
    digests = world.allgather(result.tobytes())
    assert_on_all_ranks(world, all(d == digests[0] for d in digests),
                        f"{algorithm}: ranks hold different bits")


def test_duplicated_and_split_communicators(world):
    dup = world.Dup()
    half = world.Split(color=world.rank % 2, key=world.rank)
    try:
        for algorithm in allreduce.ALGORITHMS:
            check(dup, algorithm, "sum", "int64", 101)
            check(half, algorithm, "max", "float32", 101)
            own = MPICommunicator(half)  # the library's own communicator object works too
            x = exact_input(half.rank, 57, "int32", "sum")
            result = allreduce.allreduce(x, own, algorithm=algorithm)
            assert_on_all_ranks(world, not first_difference(mpi_reference(half, x, "sum"), result),
                                f"{algorithm} on a Communicator object")
    finally:
        dup.Free()
        half.Free()


def test_torch_cpu_tensors_over_mpi(world):
    torch = pytest.importorskip("torch")
    x = torch.arange(12, dtype=torch.float64).reshape(3, 4) * (world.rank + 1)
    x.requires_grad_()  # a leaf that autograd tracks, such as a parameter
    result = allreduce.allreduce(x, world, algorithm="ring")
    expected = torch.arange(12, dtype=torch.float64).reshape(3, 4) * sum(range(1, world.size + 1))
    assert_on_all_ranks(world, isinstance(result, torch.Tensor) and bool((result == expected).all())
                        and not result.requires_grad, f"got {result}")


@pytest.mark.parametrize("algorithm", ["ring", "recursive_doubling", "auto"])
def test_a_shorter_buffer_fails_on_every_rank_within_seconds(world, algorithm):
    """recursive_doubling and (at this size) auto carry the check in the data's messages:
    the last rank's shorter message must not be mistaken for data, nor a longer one
    overflow the partner's buffer (MPI truncates it, and the header shows why)."""
    count = 1000 - (world.rank == world.size - 1) if world.size > 1 else 1000
    start = time.monotonic()
    try:
        allreduce.allreduce(np.ones(count), world, algorithm=algorithm)
        message = "no error"
    except ValueError as error:
        message = str(error)
    elapsed = time.monotonic() - start
    messages = world.allgather(message)
    if world.size == 1:
        assert_on_all_ranks(world, message == "no error", message)
        return
    expected = (f"disagree on the element count: 1000 on ranks {', '.join(map(str, range(world.size - 1)))}"
                if world.size > 2 else "disagree on the element count: 1000 on rank 0")
    assert_on_all_ranks(world, expected in message and len(set(messages)) == 1 and elapsed < 5,
                        f"{message!r} after {elapsed:.1f} s")


def test_ranks_whose_models_choose_differently_raise_instead_of_hanging(world):
    """auto resolves its choice before the check: a rank whose saved model differs (here,
    one that only counts steps) picks another algorithm, and every rank says so."""
    from allreduce.algorithms.auto import choose, use_model
    from allreduce.cost import Model

    use_model(Model(alpha=1.0, beta=0.0) if world.rank == 0 else Model(alpha=0.0, beta=1.0))
    try:
        allreduce.allreduce(np.ones(1 << 16, np.float32), world)
        message = "no error"
    except ValueError as error:
        message = str(error)
    finally:
        use_model(None)
    if world.size < 3:  # on one or two ranks both models rank recursive doubling first (ties)
        assert_on_all_ranks(world, message == "no error", message)
        return
    others = choose(1 << 18, world.size, Model(alpha=0.0, beta=1.0))
    expected = f"disagree on the algorithm auto chose: recursive_doubling on rank 0, {others} on"
    assert_on_all_ranks(world, expected in message, message)


def test_bad_input_on_one_rank_raises_everywhere(world):
    algorithm = "rign" if world.rank == 0 else "ring"
    try:
        allreduce.allreduce(np.ones(5), world, algorithm=algorithm)
        message = "no error"
    except ValueError as error:
        message = str(error)
    assert_on_all_ranks(world, "invalid call on rank 0" in message and "'rign'" in message, message)


def test_trace_counts_on_real_mpi(world):
    """The ring's byte count, counted on the MPI transport itself."""
    p, n = world.size, 60 * world.size
    tracer = TracingCommunicator(MPICommunicator(world))
    x = np.ones(n, dtype=np.float32)
    allreduce.allreduce(x, tracer, algorithm="ring", out=x)
    trace = tracer.trace(itemsize=4)
    ok = trace.steps() == 2 * (p - 1) and all(
        trace.bytes_sent(r) == 2 * (p - 1) * n // p * 4 for r in range(p))
    assert_on_all_ranks(world, ok and bool((x == p).all()), f"steps {trace.steps()}")


def test_bench_times_in_interleaved_rounds_and_keeps_the_slowest_rank(world):
    """allreduce-bench's timing (bench._interleaved) on real ranks: every call runs its
    warm-up and timed iterations, each round in an order shuffled afresh and the same on
    every rank (so that no call always follows the same one), and the time kept is the
    slowest rank's (rank r sleeps r ms per call, so every rank must report at least
    size - 1 ms: sleep never returns early)."""
    from allreduce import bench

    order: list[str] = []
    counts = {"a": 0, "b": 0, "c": 0}

    def call_of(name):
        def call():
            counts[name] += 1
            order.append(name)
            time.sleep(world.rank / 1000)
        return call

    seconds = bench._interleaved({n: call_of(n) for n in "abc"}, 7, 2, barrier=world.Barrier,
                                 slowest=lambda t: world.allreduce(t, op=MPI.MAX))
    timed = order[3 * 2:]  # after each call's warm-up
    blocks = [7 // 5 + (i < 7 % 5) for i in range(5)]  # 2, 2, 1, 1, 1
    rounds, at = [], 0
    for block in blocks:  # each round runs every call once, a block of calls each
        names = timed[at:at + 3 * block:block]
        rounds.append("".join(names))
        at += 3 * block
    whole_blocks = timed == [name for r, block in zip(rounds, blocks) for name in r
                             for _ in range(block)]
    followers = {(r[i], r[i + 1]) for r in rounds for i in range(2)}
    nothing = bench._interleaved({}, 7, 2, barrier=world.Barrier, slowest=lambda t: t)
    ok = (counts == {"a": 9, "b": 9, "c": 9} and whole_blocks and nothing == {}
          and all(sorted(r) == list("abc") for r in rounds)
          and len(followers) > 3  # a rotation of "abc" only ever gives ab, bc, ca
          and len(set(world.allgather(tuple(rounds)))) == 1
          and all(s >= (world.size - 1) / 1000 for s in seconds.values())
          and len(set(world.allgather(tuple(sorted(seconds.items()))))) == 1)
    assert_on_all_ranks(world, ok, f"counts {counts}, order {timed}, seconds {seconds}")


def test_bench_times_each_call_its_own_iterations_with_an_untimed_call_per_block(world):
    """The sparse benchmark's timing: iterations per name (a short call gets more), split
    into ``rounds`` blocks (a call with fewer iterations than rounds sits the last rounds
    out), each block's timed calls after one untimed call of its own (``rewarm``) and a
    barrier, in orders drawn from ``seed`` and the round (the same on every rank, and not
    another seed's)."""
    from allreduce import bench

    log: list[str] = []

    def call_of(name):
        return lambda: log.append(name)

    def barrier():
        log.append("|")
        world.Barrier()

    orders = []
    for seed in ((0, 0), (0, 1)):
        log.clear()
        seconds = bench._interleaved({n: call_of(n) for n in "abc"}, {"a": 14, "b": 3, "c": 7},
                                     1, barrier=barrier, slowest=lambda t: t, rounds=7,
                                     seed=seed, rewarm=True)
        # before each barrier: the block's untimed call; after it, the block's timed calls
        pieces = "".join(log[3:]).split("|")  # after one warm-up each
        blocks = [pieces[i][:-1] for i in range(1, len(pieces) - 1)] + [pieces[-1]]
        untimed = [piece[-1] for piece in pieces[:-1]]
        firsts = tuple(block[0] for block in blocks)
        orders.append(firsts)
        ok = (log[:3] == list("abc") and set(seconds) == set("abc") and pieces[0] == untimed[0]
              and untimed == list(firsts) and all(len(set(block)) == 1 for block in blocks)
              and sorted(map(len, blocks)) == [1] * 3 + [1] * 7 + [2] * 7  # b, c, a
              and firsts.count("a") == 7 and firsts.count("b") == 3
              and len(set(world.allgather(firsts))) == 1)
        assert_on_all_ranks(world, ok, f"seed {seed}: {log}")
    assert_on_all_ranks(world, orders[0] != orders[1], f"one order for two seeds: {orders}")


SPARSE_CASES = [(name, "length") for name in (*allreduce.SPARSE_ALGORITHMS, "auto")] + [
    ("sparse_ring", "nonzeros"), ("sparse_direct", "nonzeros")]


@pytest.mark.parametrize("algorithm,boundaries", SPARSE_CASES)
def test_sparse_allreduce_equals_mpi_allreduce_of_the_dense_vectors(algorithm, boundaries):
    """allreduce.sparse on real MPI processes: int64 exactly, float32 to rounding, against
    MPI_Allreduce of the densified vectors; every rank the same bits."""
    _sparse_against_mpi(algorithm, boundaries)


def test_sparse_auto_that_probes_the_overlap_equals_mpi_allreduce(monkeypatch):
    """The same, with every call long enough for auto to probe how the supports overlap
    (``PROBE_FROM`` at 0 on every rank), the hits carried in the check's all-gather, on
    real processes; and where one rank does not look, no rank chooses from the probes."""
    from allreduce.sparse import auto, overlap

    monkeypatch.setattr(auto, "PROBE_FROM", 0.0)
    probed, taken = [], []
    hits, choose = overlap.hits, auto.choose
    monkeypatch.setattr(overlap, "hits", lambda *a: probed.append(1) or hits(*a))
    monkeypatch.setattr(auto, "choose", lambda *a, hits=None, **k:
                        taken.append(hits is not None) or choose(*a, hits=hits, **k))
    _sparse_against_mpi("auto", None)
    world = MPI.COMM_WORLD
    # every call whose n gives each chunk room for its probes (n = 4096, on 2 to 16 ranks),
    # at two densities, for each dtype; none on one rank, nor beyond FEW_RANKS
    probes = 4 * (1 < world.size <= auto.FEW_RANKS)
    assert_on_all_ranks(world, len(probed) == sum(taken) == probes,
                        f"{len(probed)} looked up, {sum(taken)} chosen from, not {probes}")
    taken.clear()
    if world.rank == world.size - 1:  # this rank alone never looks
        monkeypatch.setattr(auto, "worth_probing", lambda *a, **k: False)
    _sparse_against_mpi("auto", None)
    assert_on_all_ranks(world, len(taken) == 10 and not any(taken),
                        f"{sum(taken)} of {len(taken)} calls chose from the probes")


def _sparse_against_mpi(algorithm, boundaries):
    from allreduce.sparse import sparse_allreduce

    world = MPI.COMM_WORLD
    rng = np.random.default_rng(100 + world.rank)
    for dtype in ("int64", "float32"):
        for n, density in ((0, 0.0), (1, 1.0), (97, 0.1), (4096, 0.02), (4096, 0.7)):
            k = 0 if world.rank == 1 else int(density * n)
            indices = np.sort(rng.choice(n, size=k, replace=False)) if k else np.empty(0, int)
            values = (rng.integers(-9, 9, k) if dtype == "int64"
                      else rng.standard_normal(k)).astype(dtype)
            full = np.zeros(n, dtype)
            full[indices] = values
            expected = np.empty_like(full)
            world.Allreduce(full, expected, op=MPI.SUM)
            got_indices, got_values = sparse_allreduce(indices, values, n, world,
                                                       algorithm=algorithm,
                                                       boundaries=boundaries)
            got = np.zeros(n, dtype)
            got[got_indices] = got_values
            if dtype == "int64":
                assert (got == expected).all()
            else:
                assert np.allclose(got, expected, rtol=1e-5, atol=1e-5 * world.size)
            same = world.allgather(got_values.tobytes() + got_indices.tobytes())
            assert all(other == same[0] for other in same)


def test_a_sparse_call_with_another_length_raises_on_every_rank():
    from allreduce.sparse import sparse_allreduce

    world = MPI.COMM_WORLD
    n = 100 + (world.rank == world.size - 1) * (world.size > 1)
    with pytest.raises(ValueError) as raised:
        sparse_allreduce(np.array([1, 2]), np.array([1.0, 2.0]), n, world)
        raise ValueError("no disagreement to find on one rank")
    messages = world.allgather(str(raised.value))
    assert len(set(messages)) == 1


def test_topk_allreduce_keeps_k_and_hands_back_the_rest():
    """The re-selecting sum on real MPI processes: at most p·⌈k/p⌉ pairs, the same on every
    rank, and the result plus every rank's unsent pairs is exactly MPI_Allreduce's sum."""
    world = MPI.COMM_WORLD
    rng = np.random.default_rng(7 + world.rank)
    n, k = 5000, 60
    indices = np.sort(rng.choice(n, size=300, replace=False))
    values = rng.integers(-50, 50, 300).astype(np.int64)
    full = np.zeros(n, np.int64)
    full[indices] = values
    expected = np.empty_like(full)
    world.Allreduce(full, expected)
    result = allreduce.topk_allreduce(indices, values, n, k, world, boundaries="nonzeros")
    unsent = np.zeros(n, np.int64)
    unsent[result.unsent_indices] = result.unsent_values
    total = np.empty_like(unsent)
    world.Allreduce(unsent, total)
    got = np.zeros(n, np.int64)
    got[result.indices] = result.values
    p = world.size
    ok = (len(result.indices) <= p * -(-k // p) and (got + total == expected).all()
          and len(set(world.allgather(result.indices.tobytes() + result.values.tobytes()))) == 1)
    assert_on_all_ranks(world, ok, f"{len(result.indices)} pairs kept")
