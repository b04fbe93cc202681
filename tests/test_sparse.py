"""allreduce.sparse on thread ranks: every sparse algorithm gives the union of the supports
with the dense sum of the densified vectors there (exactly for integers, to rounding for
floats; small integers cancel often, so sums of zero are in the support too), with the same
bits on every rank, for p = 1..8, lengths around p, densities from empty to full, some ranks empty;
torch sparse tensors in and out; a bad or mismatched call raises the same error on every
rank and leaves the caller's arrays alone."""

from __future__ import annotations

import numpy as np
import pytest

from allreduce.sparse import SPARSE_ALGORITHMS, sparse_allreduce
from allreduce.transports.threads import run_threads

ALGORITHMS = (*SPARSE_ALGORITHMS, "auto")


def supports(rng, p, n, density, dtype):
    """Each rank's sorted, unique indices and values; rank 1 (if any) has none."""
    vectors = []
    for rank in range(p):
        k = 0 if rank == 1 else min(n, int(round(density * n)))
        indices = np.sort(rng.choice(n, size=k, replace=False)) if k else np.empty(0, np.int64)
        values = (rng.integers(-3, 4, k) if dtype.startswith("int") else
                  rng.standard_normal(k)).astype(dtype)
        vectors.append((indices, values))
    return vectors


def dense_sum(vectors, n, dtype):
    total = np.zeros(n, np.float64 if dtype.startswith("float") else dtype)
    for indices, values in vectors:
        total[indices] += values
    return total


@pytest.mark.parametrize("algorithm", ALGORITHMS)
@pytest.mark.parametrize("p", range(1, 9))
def test_the_sum_equals_the_dense_sum(algorithm, p):
    rng = np.random.default_rng(p)
    for dtype in ("int64", "int32", "float32", "float64"):
        for n in sorted({0, 1, max(p - 1, 1), p, p + 1, 257}):
            for density in (0.0, 0.05, 0.5, 1.0):
                vectors = supports(rng, p, n, density, dtype)
                results = run_threads(p, lambda c: sparse_allreduce(
                    *vectors[c.rank], n, c, algorithm=algorithm))
                want = dense_sum(vectors, n, dtype)
                union = np.unique(np.concatenate([i for i, _ in vectors] + [np.empty(0, int)]))
                first = results[0]
                for indices, values in results:
                    assert indices.dtype == np.int32 and values.dtype == np.dtype(dtype)
                    assert (indices.astype(np.int64) == union).all(), (algorithm, n, density)
                    assert indices.tobytes() == first[0].tobytes()
                    assert values.tobytes() == first[1].tobytes(), "ranks differ in bits"
                    got = np.zeros(n, want.dtype)
                    got[indices] = values
                    if dtype.startswith("int"):
                        assert (got == want).all(), (dtype, n, density)
                    else:  # rounding of a sum in another order; zero sums may vanish
                        tolerance = 1e-5 if dtype == "float32" else 1e-12
                        assert np.allclose(got, want, rtol=tolerance, atol=tolerance * p)


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64", "int32", "int64"])
def test_both_ways_of_merging_sum_left_to_right_bit_for_bit(dtype, monkeypatch):
    """The merge sorts the pairs when they are sparse in their range and adds them into a
    dense array of it when they are not: both give every index the sum of its values in
    the runs' order, left to right, bit for bit (signed zeros, overflow and all), and the
    merge switches at :data:`~allreduce.sparse.vector.DENSE_MERGE_SHARE`."""
    from allreduce.sparse import vector

    rng = np.random.default_rng(11)
    dtype = np.dtype(dtype)
    for _ in range(300):
        width, p = int(rng.integers(1, 120)), int(rng.integers(2, 7))
        runs = []
        for _ in range(p):
            k = int(rng.integers(1, width + 1))
            indices = np.sort(rng.choice(width, k, replace=False)).astype(np.int64) + 7
            if dtype.kind == "f":  # magnitudes far apart, so the order of the sum shows
                values = rng.standard_normal(k) * 10.0 ** rng.integers(-6, 6, k)
                with np.errstate(over="ignore"):  # float16 overflows to inf: summed too
                    values = np.where(rng.random(k) < 0.1, -0.0, values).astype(dtype)
            else:
                values = rng.integers(-1000, 1000, k).astype(dtype)
            runs.append((indices, values))
        want = {}
        with np.errstate(over="ignore", invalid="ignore"):
            for indices, values in runs:
                for i, v in zip(indices.tolist(), values):
                    want[i] = v if i not in want else dtype.type(want[i] + v)
            lo = min(int(i[0]) for i, _ in runs)
            hi = max(int(i[-1]) for i, _ in runs) + 1
            ways = [vector._merge_sorted(runs), vector._merge_in_range(runs, dtype, lo, hi),
                    vector.merge(runs, dtype)]
        for indices, values in ways:
            assert indices.tolist() == sorted(want) and values.dtype == dtype
            assert values.tobytes() == np.array([want[i] for i in sorted(want)],
                                                dtype).tobytes()
    wide = [(np.array([0, 99]), np.ones(2)), (np.array([50]), np.ones(1))]
    narrow = [(np.array([0, 3]), np.ones(2)), (np.array([2]), np.ones(1))]
    assert 3 < vector.DENSE_MERGE_SHARE * 100 and 3 >= vector.DENSE_MERGE_SHARE * 4
    calls, original = [], vector._merge_in_range
    monkeypatch.setattr(vector, "_merge_in_range", lambda *a: calls.append(a) or original(*a))
    vector.merge(wide, np.dtype(float)), vector.merge(narrow, np.dtype(float))
    assert [(lo, hi) for _, _, lo, hi in calls] == [(0, 4)]


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_mean_and_dense_output(algorithm):
    p, n = 4, 100
    vectors = supports(np.random.default_rng(7), p, n, 0.2, "float64")
    want = dense_sum(vectors, n, "float64")
    means = run_threads(p, lambda c: sparse_allreduce(*vectors[c.rank], n, c,
                                                      algorithm=algorithm, op="avg"))
    dense = run_threads(p, lambda c: sparse_allreduce(*vectors[c.rank], n, c,
                                                      algorithm=algorithm, dense_output=True))
    for (indices, values), full in zip(means, dense):
        got = np.zeros(n)
        got[indices] = values
        assert np.allclose(got, want / p) and np.allclose(full, want) and full.shape == (n,)


def test_explicit_zeros_and_cancelled_sums_stay_in_the_support():
    """The result is the sum on the union of the supports: an entry given as 0, or whose
    contributions cancel, is still there (with value 0), in every encoding."""
    n = 64
    vectors = [(np.array([3, 10]), np.array([0, 5])), (np.array([10, 20]), np.array([-5, 1]))]
    dense_ish = [(np.arange(n), np.where(np.arange(n) % 2, 1, -1)) for _ in range(2)]
    for algorithm in ALGORITHMS:
        for inputs in (vectors, dense_ish):  # the second is dense enough to switch encoding
            results = run_threads(2, lambda c: sparse_allreduce(*inputs[c.rank], n, c,
                                                                algorithm=algorithm))
            union = np.unique(np.concatenate([i for i, _ in inputs]))
            for indices, values in results:
                assert (indices == union).all(), algorithm
                assert (values == sum(np.bincount(i, v, n)[union] for i, v in inputs)).all()


def test_torch_sparse_tensors_in_and_out():
    torch = pytest.importorskip("torch")
    p, n = 3, 50
    vectors = supports(np.random.default_rng(3), p, n, 0.3, "float32")
    tensors = [torch.sparse_coo_tensor(torch.from_numpy(i)[None], torch.from_numpy(v), (n,),
                                       check_invariants=True) for i, v in vectors]
    results = run_threads(p, lambda c: sparse_allreduce(tensors[c.rank], c))
    want = dense_sum(vectors, n, "float32")
    for result in results:
        assert result.is_sparse and result.shape == (n,) and result.dtype == torch.float32
        assert np.allclose(result.to_dense().numpy(), want, atol=1e-5)
    # a gradient's own tensor (requires_grad) was refused: "Can't call numpy() on Tensor
    # that requires grad", on every rank
    for tensor in tensors:
        tensor.requires_grad_(True)
    results = run_threads(p, lambda c: sparse_allreduce(tensors[c.rank], c))
    assert all(np.allclose(r.to_dense().numpy(), want, atol=1e-5) for r in results)


BAD = {
    "unsorted": lambda i, v, n: (i[::-1].copy(), v, n),
    "duplicate": lambda i, v, n: (np.r_[i[:1], i], np.r_[v[:1], v], n),
    "out of range": lambda i, v, n: (np.r_[i[:-1], n], v, n),
    "lengths differ": lambda i, v, n: (i, v[:-1], n),
    "another n": lambda i, v, n: (i, v, n + 1),
    "another dtype": lambda i, v, n: (i, v.astype(np.float32), n),
    "the other byte order": lambda i, v, n: (i, v.astype(">f8"), n),
}


@pytest.mark.parametrize("problem", sorted(BAD))
@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_a_bad_call_on_one_rank_raises_on_every_rank(problem, algorithm):
    p, n = 4, 40
    vectors = [(np.array([1, 5, 9]), np.array([1.0, 2.0, 3.0])) for _ in range(p)]
    copies = [(i.copy(), v.copy()) for i, v in vectors]

    def body(comm):
        args = vectors[comm.rank]
        if comm.rank == 2:
            args = BAD[problem](*args, n)
        else:
            args = (*args, n)
        try:
            sparse_allreduce(*args, comm, algorithm=algorithm)
        except (TypeError, ValueError) as error:
            return str(error)
        return None

    messages = run_threads(p, body)
    assert all(messages) and len(set(messages)) == 1, messages
    assert "rank 2" in messages[0]
    for (i, v), (i0, v0) in zip(vectors, copies):
        assert i.tobytes() == i0.tobytes() and v.tobytes() == v0.tobytes()


def test_a_dense_tensor_where_a_sparse_one_belongs_raises_on_every_rank():
    """sparse_allreduce(t, comm) with a dense t on one rank: that rank took the
    communicator for the values and raised at once, and the others waited in the check."""
    torch = pytest.importorskip("torch")

    def body(comm):
        t = torch.zeros(8)
        t[comm.rank] = 1.0
        try:
            sparse_allreduce(t if comm.rank == 1 else t.to_sparse(), comm)
        except (TypeError, ValueError) as error:
            return str(error)
        return None

    messages = run_threads(4, body, timeout=10)
    assert all(messages) and len(set(messages)) == 1, messages
    assert "takes a torch sparse COO tensor, got one of layout torch.strided" in messages[0]


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_the_result_never_shares_the_callers_values(algorithm):
    """When one rank alone holds pairs, its own values are the sum: the result is still a
    new array, so that clearing the input (an error-feedback residual) leaves it alone."""
    def body(comm):
        values = np.array([1.0, 2.0, 3.0]) if comm.rank == 1 else np.empty(0)
        indices = np.array([1, 5, 9]) if comm.rank == 1 else np.empty(0, np.int64)
        _, result = sparse_allreduce(indices, values, 40, comm, algorithm=algorithm)
        values[:] = 0
        return result.tolist()

    assert run_threads(4, body) == [[1.0, 2.0, 3.0]] * 4


def test_the_dense_path_s_kept_buffers_carry_nothing_from_one_call_to_the_next():
    """``dense`` sums in the communicator's kept scratch buffers: calls one after another in
    the same ranks, longer then shorter vectors and other supports, each give their own sum
    (nothing left over from the call before), and a result already returned is not touched
    by the next call (nor is the dense sum handed out with ``dense_output``)."""
    rng = np.random.default_rng(7)
    calls = [(1000, 0.5, "float32"), (300, 0.05, "float32"), (1000, 0.01, "float32"),
             (999, 0.3, "int32"), (2000, 0.2, "float32")]
    inputs = [(n, supports(rng, 3, n, density, dtype)) for n, density, dtype in calls]

    def body(comm):
        results, handed = [], None
        for n, vectors in inputs:
            results.append(sparse_allreduce(*vectors[comm.rank], n, comm, algorithm="dense"))
            if handed is None:  # after a call that filled the kept buffers
                handed = sparse_allreduce(*vectors[comm.rank], n, comm, algorithm="dense",
                                          dense_output=True)
                first = handed.copy()
        assert handed.tobytes() == first.tobytes(), "the handed-out dense sum changed"
        return results

    for results in run_threads(3, body):
        for (n, vectors), (indices, values) in zip(inputs, results):
            union = np.unique(np.concatenate([i for i, _ in vectors]))
            assert np.array_equal(indices, union), n
            got = np.zeros(n, np.float64)
            got[indices] = values
            assert np.allclose(got, dense_sum(vectors, n, str(values.dtype)), atol=1e-5), n


@pytest.mark.parametrize("op", ["max", "min", "prod"])
def test_ops_that_are_not_sparse_raise_a_clear_error(op):
    def body(comm):
        with pytest.raises(ValueError, match="supports op 'sum' and 'mean'"):
            sparse_allreduce(np.array([0]), np.array([1.0]), 4, comm, op=op)

    run_threads(3, body)


def traced(algorithm, p, n, vectors, **options):
    from allreduce.trace import Trace, TracingCommunicator

    def body(comm):
        tracer = TracingCommunicator(comm)
        sparse_allreduce(*vectors[comm.rank], n, tracer, algorithm=algorithm, **options)
        return tracer.events

    return Trace(run_threads(p, body), 1).terms()


def clustered(rng, p, n, density):
    """Supports that cluster as Top-k gradients do: rank r draws from the first n/(1 + r%3)
    indices, a different number of pairs each."""
    vectors = []
    for rank in range(p):
        span = max(1, n // (1 + rank % 3))
        k = min(span, int(density * n * rng.uniform(0.2, 1.5)))
        indices = np.sort(rng.choice(span, size=k, replace=False)) if n else np.empty(0, int)
        vectors.append((indices.astype(np.int64), rng.integers(-3, 4, len(indices))))
    return vectors


@pytest.mark.parametrize("algorithm", ["sparse_ring", "sparse_direct"])
@pytest.mark.parametrize("p", range(1, 9))
def test_chunks_of_equal_nonzeros_give_the_same_sum(algorithm, p):
    rng = np.random.default_rng(10 + p)
    for n in (0, 1, p, 300, 5000):
        for density in (0.0, 0.02, 0.4):
            vectors = clustered(rng, p, n, density)
            results = run_threads(p, lambda c: sparse_allreduce(
                *vectors[c.rank], n, c, algorithm=algorithm, boundaries="nonzeros"))
            want = dense_sum(vectors, n, "int64")
            union = np.unique(np.concatenate([i for i, _ in vectors] + [np.empty(0, int)]))
            for indices, values in results:
                assert (indices == union).all() and (values == want[union]).all()


def test_chunks_of_equal_nonzeros_balance_clustered_supports():
    """With every pair in the first tenth of the range, equal lengths put them all in one
    chunk; equal nonzeros spread them within a bin's width of k/p each."""
    from allreduce.sparse.chunks import balanced, equal_length, histogram

    p, n = 8, 80_000
    rng = np.random.default_rng(3)
    supports = [np.sort(rng.choice(n // 10, 400, replace=False)) for _ in range(p)]
    total = sum(histogram(s, n, p) for s in supports)

    def largest(bounds):
        return max(sum(int(((s >= lo) & (s < hi)).sum()) for s in supports) for lo, hi in bounds)

    assert largest(equal_length(n, p)) == p * 400
    assert largest(balanced(total, n, p)) <= p * 400 / p + total.max()
    bounds = balanced(total, n, p)
    assert bounds[0][0] == 0 and bounds[-1][1] == n
    assert all(a[1] == b[0] for a, b in zip(bounds, bounds[1:]))


@pytest.mark.parametrize("n", [0, 1, 7, 255, 256, 257, 1000, 123_457, 2**33 + 5, 2**55 + 3,
                               2**62, 2**63 - 1])
@pytest.mark.parametrize("p", [1, 3, 4, 8])
def test_the_histogram_counts_each_bin_as_its_definition_says(n, p):
    """The histogram (a binary search per bin edge) counts in bin ``j`` the indices ``i``
    with ``⌊i·bins/n⌋ = j``, including the first and last index of the range, up to the
    longest int64 range (where ``i·bins`` overflows int64: the definition is evaluated in
    Python's integers)."""
    from allreduce.sparse.chunks import bins, histogram

    rng = np.random.default_rng(n + p)
    k = min(n, 3000)
    indices = np.unique(np.concatenate([rng.integers(0, max(n, 1), k), [0, n - 1]]))
    indices = indices[(indices >= 0) & (indices < n)]
    count = bins(n, p)
    want = np.bincount([i * count // max(n, 1) for i in indices.tolist()], minlength=count)
    got = histogram(indices, n, p)
    assert got.dtype == np.int64 and len(got) == count
    assert (got == want).all() and got.sum() == len(indices)


@pytest.mark.parametrize("algorithm", [a for a in ALGORITHMS if a != "dense"])
@pytest.mark.parametrize("p", [2, 3, 4, 5])
def test_a_long_vector_with_few_pairs_needs_memory_for_its_pairs_not_its_length(algorithm, p):
    """Receive buffers are sized by the pairs every rank holds (which the check gathers),
    not by the range's dense form: at n = 2⁶², a few hundred pairs per rank, a dense-sized
    buffer could not be allocated anywhere (2⁶² float32 values are 16 EiB)."""
    from allreduce.sparse import topk_allreduce

    n, rng = 2**62, np.random.default_rng(p)
    vectors = []
    for rank in range(p):
        indices = np.unique(np.concatenate([rng.integers(0, n, 300), [0, n - 1]]))
        vectors.append((indices, rng.integers(-3, 4, len(indices)).astype(np.int64)))
    want = {}
    for indices, values in vectors:
        for index, value in zip(indices.tolist(), values.tolist()):
            want[index] = want.get(index, 0) + value
    for boundaries in (None, "nonzeros") if algorithm in ("sparse_ring", "sparse_direct",
                                                          "auto") else (None,):
        results = run_threads(p, lambda c: sparse_allreduce(
            *vectors[c.rank], n, c, algorithm=algorithm, boundaries=boundaries))
        for indices, values in results:
            assert indices.dtype == np.int64
            assert dict(zip(indices.tolist(), values.tolist())) == want, boundaries
    if algorithm == "auto":  # topk_allreduce's messages: at most ⌈k/p⌉ pairs each
        kept = run_threads(p, lambda c: topk_allreduce(*vectors[c.rank], n, 64, c))
        assert all(len(result.indices) <= p * -(-64 // p) for result in kept)


@pytest.mark.parametrize("p", range(1, 9))
def test_the_cost_from_the_supports_is_the_replayed_trace(p):
    """allreduce.sparse.cost computes every message from the supports (the unions after
    each merge, the dense switch) and runs the schedule's recurrence: its steps and bytes
    equal the tracing communicator's replay of the real code, for uneven, clustered
    supports whose messages differ from rank to rank; and "each step waits for its largest
    message" bounds it from above."""
    from allreduce.sparse import cost

    rng = np.random.default_rng(20 + p)
    for n in (50, 4000, 100_000):
        for density in (0.0, 0.01, 0.3, 0.9):
            vectors = clustered(rng, p, n, density)
            supports = [i for i, _ in vectors]
            for name in ("allgather", "sparse_ring", "sparse_direct",
                         "sparse_recursive_doubling"):
                for boundaries in ("length", "nonzeros"):
                    if boundaries == "nonzeros" and name not in ("sparse_ring", "sparse_direct"):
                        continue
                    got = traced(name, p, n, vectors, boundaries=boundaries)
                    want = cost.terms(name, supports, n, 8, boundaries)
                    assert (got.steps, got.bytes) == (want.steps, want.bytes), (name, n, density)
                    bound = cost.step_bound(name, supports, n, 8, boundaries)
                    assert bound.steps == want.steps and bound.bytes >= want.bytes


@pytest.mark.parametrize("p", range(1, 10))
def test_allgather_takes_bruck_s_steps_below_the_limit_and_the_ring_s_above(p, monkeypatch):
    """The sparse allgather all-gathers by Bruck's algorithm (⌈lg p⌉ steps, any p) while
    the blocks gathered are bounded below BRUCK_LIMIT, by the ring (p − 1 steps) from it;
    both give every rank the dense sum, the same bits, and the steps and bytes the cost
    module and its closed form price."""
    import importlib

    from allreduce.sparse import cost

    module = importlib.import_module("allreduce.sparse.allgather")
    rng = np.random.default_rng(70 + p)
    n = 3000
    vectors = [(np.sort(rng.choice(n, size=k, replace=False)),
                rng.standard_normal(k).astype(np.float32))
               for k in rng.integers(0, 200, p)]
    dense = np.zeros(n, np.float64)
    for indices, values in vectors:
        dense[indices] += values
    found = {}
    for limit, steps in ((1 << 40, (p - 1).bit_length()), (0, p - 1)):
        monkeypatch.setattr(module, "BRUCK_LIMIT", limit)
        results = run_threads(p, lambda comm: sparse_allreduce(*vectors[comm.rank], n, comm,
                                                               algorithm="allgather"))
        for indices, values in results:
            assert np.array_equal(indices, results[0][0])
            assert values.tobytes() == results[0][1].tobytes()
        got = np.zeros(n, np.float64)
        got[results[0][0]] = results[0][1]
        np.testing.assert_allclose(got, dense, rtol=1e-5, atol=1e-5)
        found[limit] = results[0]
        terms = traced("allgather", p, n, vectors)
        assert terms.steps == (steps if p > 1 else 0)
        want = cost.terms("allgather", [i for i, _ in vectors], n, 4)
        assert (terms.steps, terms.bytes) == (want.steps, want.bytes)
        equal = [(np.arange(60) * 7, np.ones(60, np.float32))] * p  # k = 60 on every rank
        closed = module.terms(p, 60, 8) if p > 1 else cost.Terms(0, 0, 0)
        replayed = traced("allgather", p, 1000, equal)
        assert (replayed.steps, replayed.bytes) == (closed.steps, closed.bytes)
        full = [(np.arange(16), np.full(16, r + 0.5)) for r in range(p)]  # dense-form blocks
        for indices, values in run_threads(p, lambda comm: sparse_allreduce(
                *full[comm.rank], 16, comm, algorithm="allgather")):
            assert indices.tolist() == list(range(16)) and np.all(values == p * p / 2)
    assert found[0][0].tobytes() == found[1 << 40][0].tobytes()
    assert found[0][1].tobytes() == found[1 << 40][1].tobytes()  # merged in rank order alike


@pytest.mark.parametrize("p", range(1, 9))
def test_closed_forms_equal_the_replayed_trace(p):
    """Identical and disjoint supports, k/p pairs of every rank in every chunk of the ring,
    float32 values with int32 indices (8 bytes a pair), well below the dense switch."""
    from allreduce.algorithms._schedule import chunk_bounds
    from allreduce.sparse.allgather import terms as allgather_terms
    from allreduce.sparse.sparse_direct import terms as direct_terms
    from allreduce.sparse.sparse_recursive_doubling import terms as doubling_terms
    from allreduce.sparse.sparse_ring import terms as ring_terms

    n, per_chunk = 1 << 15, 4
    k = per_chunk * p

    def support(offset):  # per_chunk indices in every chunk of the ring
        return np.concatenate([lo + offset + 16 * np.arange(per_chunk)
                               for lo, _ in (chunk_bounds(n, p, c) for c in range(p))])
    layouts = {"identical": [support(0) for _ in range(p)],
               "disjoint": [support(rank) for rank in range(p)]}
    for supports, indices in layouts.items():
        vectors = [(i, np.ones(k, np.float32)) for i in indices]
        checks = [("allgather", allgather_terms(p, k, 8)),
                  ("sparse_ring", ring_terms(p, k, 8, supports)),
                  ("sparse_direct", direct_terms(p, k, 8, supports))]
        if supports == "identical" or p & (p - 1) == 0:
            checks.append(("sparse_recursive_doubling", doubling_terms(p, k, 8, supports)))
        for name, formula in checks:
            got = traced(name, p, n, vectors)
            want = formula if p > 1 else formula.__class__(0, 0, 0)
            assert (got.steps, got.bytes) == (want.steps, want.bytes), (name, supports)


def test_topk_and_randomk_select_what_they_say():
    from allreduce.sparse.compression import randomk, topk

    x = np.array([0.5, -3.0, 2.0, 0.0, -2.0, 1.0], np.float32)
    indices, values = topk(x, 3)
    assert indices.tolist() == [1, 2, 4] and values.tolist() == [-3.0, 2.0, -2.0]
    assert topk(x, 0)[0].size == 0 and topk(x, 99)[0].tolist() == list(range(6))
    rng = np.random.default_rng(0)
    indices, values = randomk(x, 2, rng)
    assert len(indices) == 2 and np.all(np.diff(indices) > 0)
    assert np.allclose(values, x[indices] * 3)  # scaled by n/k: unbiased
    mean = np.zeros(6)
    for _ in range(3000):
        i, v = randomk(x.astype(np.float64), 2, rng)
        mean[i] += v / 3000
    assert np.allclose(mean, x, atol=0.15)


def test_topk_counts_nan_and_the_integer_minimum_as_largest():
    """A NaN is selected (as the largest), never silently left out, so that the call still
    returns k pairs and the NaN shows in the sum; |minimum| of a signed integer wraps in
    numpy, yet it is the largest magnitude."""
    from allreduce.sparse.compression import ErrorFeedback, topk

    x = np.array([1.0, np.nan, 3.0, -4.0, 2.0])
    for k, want in ((1, [1]), (2, [1, 3]), (3, [1, 2, 3])):
        indices, values = topk(x, k)
        assert indices.tolist() == want
        assert np.array_equal(values, x[want], equal_nan=True)
    assert topk(np.array([np.nan, np.nan, 1.0]), 2)[0].tolist() == [0, 1]
    # ties at the k-th largest fill k without it: the NaN must still be picked
    assert topk(np.array([np.nan, 1, 1, 1.0]), 2)[0].tolist() == [0, 1]
    assert topk(np.array([0, 0, np.nan, 0, 0.0]), 2)[0].tolist() == [0, 2]
    assert topk(np.array([0, 0, np.nan, 0, 0], np.float16), 1)[0].tolist() == [2]
    assert ErrorFeedback(5, 2, np.float64).compress(x)[0].tolist() == [1, 3]
    for dtype in (np.int8, np.int32, np.int64):
        low = np.iinfo(dtype).min
        assert topk(np.array([5, low, 1], dtype), 1)[0].tolist() == [1]


@pytest.mark.parametrize("algorithm", ["dense", "allgather", "sparse_recursive_doubling"])
def test_equal_nonzeros_for_an_algorithm_that_does_not_cut_raise_on_every_rank(algorithm):
    outcomes = run_threads(3, lambda c: sparse_allreduce(
        np.array([c.rank]), np.ones(1), 4, c, algorithm, boundaries="nonzeros"),
        return_exceptions=True)
    assert all(isinstance(o, ValueError) for o in outcomes), outcomes
    assert len({str(o) for o in outcomes}) == 1
    assert "boundaries='nonzeros' applies only to sparse_ring and sparse_direct" in str(
        outcomes[0])
    # "length", what an algorithm named cuts anyway, is taken by every algorithm (a loop
    # over the algorithms may pass it to all)
    for indices, values in run_threads(3, lambda c: sparse_allreduce(
            np.array([c.rank]), np.ones(1), 4, c, algorithm, boundaries="length")):
        assert indices.tolist() == [0, 1, 2] and values.tolist() == [1.0] * 3


def test_a_torch_tensor_takes_the_algorithm_third(monkeypatch):
    """``sparse_allreduce(t, comm, "sparse_ring")`` runs the sparse ring (as
    ``allreduce(x, comm, "ring")`` does); an unknown name raises on every rank, and so does
    an ``n`` beside a tensor other than the tensor's own length."""
    import torch

    from allreduce.sparse import auto as sparse_auto

    def one_pair(comm):  # rank r holds 1.0 at index r of 8
        return torch.sparse_coo_tensor(torch.tensor([[comm.rank]]), torch.tensor([1.0]), (8,))

    def support(result):
        return result.coalesce().indices()[0].tolist()

    chosen = []
    original = sparse_auto.choose
    monkeypatch.setattr(sparse_auto, "choose",
                        lambda *args, **kwargs: chosen.append(1) or original(*args, **kwargs))
    ran = run_threads(3, lambda c: support(sparse_allreduce(one_pair(c), c, "sparse_ring")))
    assert ran == [[0, 1, 2]] * 3 and not chosen  # the sparse ring ran, auto did not
    with_its_length = run_threads(3, lambda c: support(sparse_allreduce(one_pair(c), None, 8, c)))
    assert with_its_length == [[0, 1, 2]] * 3  # n = the tensor's length: taken
    for call in (lambda c: sparse_allreduce(one_pair(c), c, "no_such_algorithm"),
                 lambda c: sparse_allreduce(one_pair(c), None, 9, c)):
        outcomes = run_threads(3, call, return_exceptions=True)
        assert all(isinstance(o, (TypeError, ValueError)) for o in outcomes), outcomes
        assert len({str(o) for o in outcomes}) == 1


def test_error_feedback_sends_everything_eventually():
    """What was sent plus the residual always equals the sum of the gradients, and with the
    same gradient every step (magnitudes within a factor of 3) every entry is sent."""
    from allreduce.sparse.compression import ErrorFeedback

    rng = np.random.default_rng(1)
    n, k = 50, 5
    feedback = ErrorFeedback(n, k, np.float64)
    sent, total = np.zeros(n), np.zeros(n)
    gradient = rng.choice([-1, 1], n) * rng.uniform(0.5, 1.5, n)
    ever = np.zeros(n, bool)
    for _ in range(n // k * 4):
        total += gradient
        indices, values = feedback.compress(gradient)
        assert len(indices) == k
        sent[indices] += values
        ever[indices] = True
        assert np.allclose(sent + feedback.residual, total)
    assert ever.all()


def test_auto_switches_to_dense_as_the_density_grows():
    """Under the reference machine's model: a sparse algorithm at 0.1% density, the dense
    allreduce at 50% (the fill-in of 4 ranks' supports makes the pairs larger than the
    values); and the prediction grows with the density for every algorithm."""
    from allreduce.algorithms.auto import DEFAULT_MODEL
    from allreduce.sparse import auto as sparse_auto
    from allreduce.sparse import layout as sparse_layout

    n = 16 << 20
    def choice(density):
        return sparse_auto.choose(n, [int(density * n)] * 4, 4, DEFAULT_MODEL,
                                  SPARSE_ALGORITHMS)[0]

    assert choice(0.001) != "dense" and choice(0.5) == "dense"
    # a caller who wants the dense sum spares the dense path its union: the gather of one
    # integer a rank (how many of its pairs sum to zero), and reading the sums at its own
    # pairs and at the union's (the presence mask, only for sums of zero, is not predicted)
    from allreduce.algorithms.auto import fastest

    counts = [int(0.1 * n)] * 4
    spared = (sparse_auto.predict("dense", n, counts, 4, DEFAULT_MODEL)
              - sparse_auto.predict("dense", n, counts, 4, DEFAULT_MODEL, dense_output=True))
    count = sparse_auto.ZERO_COUNT_BYTES
    gathered = DEFAULT_MODEL.time(fastest(count, 4, DEFAULT_MODEL), 4, count)
    # every rank gathers alike, so on shared cores each takes RANKS_PER_CORE times as long
    # (at most as many times as there are ranks, 4)
    read = ((sparse_layout.union(n, 0.1, 4) + counts[0]) * sparse_auto.LOCAL["gather"]
            * max(1.0, min(sparse_auto.RANKS_PER_CORE, 4)))
    assert spared == pytest.approx(gathered + read, rel=1e-6)  # counts are whole pairs
    for name in SPARSE_ALGORITHMS:
        times = [sparse_auto.predict(name, n, [int(d * n)] * 4, 4, DEFAULT_MODEL)
                 for d in (0.0001, 0.001, 0.01, 0.1, 0.5)]
        assert times == sorted(times), name


def test_local_work_counts_ranks_sharing_cores(monkeypatch):
    """Where ranks share cores, a rank's local work takes at least the ranks' mean times
    RANKS_PER_CORE (at most the ranks there are): allgather, where every rank merges the same
    pairs at once (the check's pass at 0, as fitted), takes twice its one rank's work at 2
    ranks per core and four times at 4 or more; sparse_direct on skewed supports, where the
    rank holding most pairs merges mostly alone, takes its busiest rank's; and recursive
    doubling on 3 ranks, where the folded rank only sends its pairs and decodes the sum,
    less than three times its busiest rank's on one core."""
    from allreduce.sparse import auto as sparse_auto
    from allreduce.sparse import layout as sparse_layout

    monkeypatch.setitem(sparse_auto.LOCAL, "check", 0.0)
    n, rng = 1 << 20, np.random.default_rng(5)
    skewed = [np.sort(rng.choice(n // 4, 40_000, replace=False))] + [
        np.sort(rng.choice(n, 1_000, replace=False)) for _ in range(3)]
    counts = [len(s) for s in skewed]
    unions = sparse_layout.measured_unions(skewed)
    held = sparse_layout.from_supports(skewed, n, "length")

    def work(name, ranks_per_core):
        monkeypatch.setattr(sparse_auto, "RANKS_PER_CORE", ranks_per_core)
        return sparse_auto.local_work(name, n, counts, unions,
                                      held if name == "sparse_direct" else None)

    assert work("allgather", 2.0) == pytest.approx(2 * work("allgather", 1.0), rel=1e-12)
    assert work("allgather", 64.0) == pytest.approx(4 * work("allgather", 1.0), rel=1e-12)
    assert work("sparse_direct", 2.0) == work("sparse_direct", 1.0) > 0
    three = skewed[1:]
    monkeypatch.setattr(sparse_auto, "RANKS_PER_CORE", 1.0)
    alone = sparse_auto.local_work("sparse_recursive_doubling", n, [len(s) for s in three],
                                   sparse_layout.measured_unions(three))
    monkeypatch.setattr(sparse_auto, "RANKS_PER_CORE", 3.0)
    shared = sparse_auto.local_work("sparse_recursive_doubling", n, [len(s) for s in three],
                                    sparse_layout.measured_unions(three))
    assert alone < shared < 3 * alone


@pytest.mark.parametrize("p", [4, 17])
def test_auto_remembers_a_choice_per_exact_loads_and_chooses_as_it_predicts(p):
    """choose() keys its memo on the loads as given (a list, a tuple or an array of the same
    ints are one key), answers a repeat from it, and answers what the rounded predictions
    rank first, on few ranks (remembered) and on more than FEW_RANKS (not)."""
    from allreduce.algorithms.auto import DEFAULT_MODEL
    from allreduce.sparse import auto as sparse_auto

    n = 1 << 20
    loads = [[1000 * (c == r) + 7 * c + 3 for c in range(p)] for r in range(p)]
    counts = [sum(row) for row in loads]
    sparse_auto._choice.cache_clear()
    first = sparse_auto.choose(n, counts, 4, DEFAULT_MODEL, SPARSE_ALGORITHMS, loads=loads)
    again = sparse_auto.choose(n, tuple(counts), 4, DEFAULT_MODEL, list(SPARSE_ALGORITHMS),
                               loads=np.array(loads))
    assert first == again
    remembered = p <= sparse_auto.FEW_RANKS
    assert sparse_auto._choice.cache_info().hits == (1 if remembered else 0)
    times = sparse_auto._predictions(n, sparse_auto._rounded_loads(counts, loads), 4,
                                     DEFAULT_MODEL, SPARSE_ALGORITHMS, False, None,
                                     sparse_auto._constants())
    assert first == min(times, key=times.get)


def test_a_changed_ranks_per_core_takes_effect_at_the_next_choice(monkeypatch):
    """The remembered choices are keyed on the constants: with one rank holding most pairs,
    auto picks one algorithm at 1 rank per core and another at 2, and each choice is what
    the predictions under the constants of that moment rank first."""
    from allreduce.algorithms.auto import DEFAULT_MODEL
    from allreduce.sparse import auto as sparse_auto

    n = 1 << 20
    loads = [[32000 * (r == 0 and c == 0) + 3000 for c in range(4)] for r in range(4)]
    counts = [sum(row) for row in loads]
    chosen = {}
    for ranks_per_core in (1.0, 2.0, 1.0):
        monkeypatch.setattr(sparse_auto, "RANKS_PER_CORE", ranks_per_core)
        chosen[ranks_per_core] = sparse_auto.choose(n, counts, 4, DEFAULT_MODEL,
                                                    SPARSE_ALGORITHMS, loads=loads)
        times = sparse_auto._predictions(n, sparse_auto._rounded_loads(counts, loads), 4,
                                         DEFAULT_MODEL, SPARSE_ALGORITHMS, False, None,
                                         sparse_auto._constants())
        assert chosen[ranks_per_core] == min(times, key=times.get)
    assert chosen[1.0] != chosen[2.0]


def test_ranks_whose_sparse_constants_differ_raise_together(monkeypatch):
    """The check compares a digest of allreduce.sparse.auto's constants with the dense
    model: a rank with another RANKS_PER_CORE would choose another algorithm, so every rank
    raises the same error instead."""
    from allreduce.algorithms.auto import DEFAULT_MODEL
    from allreduce.sparse import _model_bits, _probe_words, check
    from allreduce.sparse import auto as sparse_auto

    bits = _model_bits(DEFAULT_MODEL)
    monkeypatch.setattr(sparse_auto, "RANKS_PER_CORE", 1.0)
    other = _model_bits(DEFAULT_MODEL)
    assert other[:4] == bits[:4] and other != bits

    def call(c):
        described = check.describe(np.array([c.rank]), np.ones(1), 8, "sum", "auto", ("auto",))
        try:
            check.agree(c, described, ("auto",), bits if c.rank == 0 else other,
                        probes=_probe_words(None, c.size))
        except ValueError as error:
            return str(error)
        return None

    for message in run_threads(3, call):
        assert message is not None and "cost models differ" in message


def test_sparse_auto_explains_its_choice_and_names_the_model():
    """The sparse auto chooses under the dense auto's model (the committed default unless a
    process loads one), and explain() says which, with each prediction."""
    import allreduce.auto as dense_auto
    from allreduce import cost
    from allreduce.sparse import auto as sparse_auto

    n, counts = 1 << 20, [1000] * 4
    text = sparse_auto.explain(n, counts)
    chosen = sparse_auto.choose(n, counts, 4, dense_auto.DEFAULT_MODEL, SPARSE_ALGORITHMS)
    assert text.startswith(f"sparse auto on 4 ranks, n = {n}, 4000 pairs in all: "
                           f"{sparse_auto.label(*chosen)} ")
    assert all(name in text for name in SPARSE_ALGORITHMS)
    assert "from the committed default" in text
    dense_auto.use_model(cost.Model(alpha=1e-3, beta=1e-9), "a test's model")
    try:
        assert "overhead left out" in sparse_auto.explain(n, counts)
        assert sparse_auto.explain(n, counts).endswith("from a test's model")
    finally:
        dense_auto.use_model(None)


@pytest.mark.parametrize("p", range(1, 9))
def test_topk_allreduce_keeps_at_most_k_and_hands_back_exactly_the_rest(p):
    """The re-selecting sum: every message and the result hold at most ⌈k/p⌉ pairs per
    chunk; the result is the same on every rank; and the result plus every rank's unsent
    pairs is exactly the sum of the inputs (integers), so error feedback loses nothing."""
    from allreduce import topk_allreduce

    rng = np.random.default_rng(30 + p)
    for n, k, density in ((0, 0, 0.0), (10, 3, 0.5), (2000, 40, 0.05), (2000, 2000, 0.5)):
        for boundaries in ("length", "nonzeros"):
            vectors = clustered(rng, p, n, density)
            results = run_threads(p, lambda c: topk_allreduce(
                *vectors[c.rank], n, k, c, boundaries=boundaries))
            want = dense_sum(vectors, n, "int64")
            got = np.zeros(n, np.int64)
            got[results[0].indices] = results[0].values
            assert len(results[0].indices) <= p * -(-k // p)
            for result, (indices, values) in zip(results, vectors):
                assert result.indices.tobytes() == results[0].indices.tobytes()
                assert result.values.tobytes() == results[0].values.tobytes()
                np.add.at(got, result.unsent_indices, result.unsent_values)
                assert np.isin(result.unsent_indices, indices).all()
            assert (got == want).all(), (n, k, boundaries)


def test_topk_allreduce_selects_the_largest_sums_and_checks_k():
    from allreduce import topk_allreduce

    n = 8
    vectors = [(np.array([0, 1, 5]), np.array([5.0, 1.0, -2.0])),
               (np.array([1, 5, 6]), np.array([1.0, -9.0, 0.5]))]
    results = run_threads(2, lambda c: topk_allreduce(*vectors[c.rank], n, 2, c, op="mean"))
    # chunks [0, 4) and [4, 8): one pair each; the largest sums are 5 at 0 and -11 at 5
    assert results[0].indices.tolist() == [0, 5]
    assert results[0].values.tolist() == [2.5, -5.5]
    assert results[1].unsent_indices.tolist() == [1, 6]  # capped at 1 pair per chunk
    assert results[0].unsent_indices.tolist() == [1]

    def body(comm):
        try:
            topk_allreduce(*vectors[comm.rank], n, 2 + comm.rank, comm)
        except ValueError as error:
            return str(error)

    messages = run_threads(2, body)
    assert messages[0] == messages[1] and "disagree on the k" in messages[0]

    def without_k(comm):  # k=None read as k=0, which kept nothing
        try:
            topk_allreduce(*vectors[comm.rank], n, None, comm)
        except TypeError as error:
            return str(error)

    messages = run_threads(2, without_k)
    assert messages[0] == messages[1] and "must be an integer >= 0, got None" in messages[0]


def test_error_feedback_restores_what_the_reduction_dropped():
    from allreduce.sparse.compression import ErrorFeedback

    feedback = ErrorFeedback(6, 2, np.float64)
    gradient = np.array([3.0, -1.0, 0.5, 4.0, 0.0, 2.0])
    indices, _ = feedback.compress(gradient)
    assert indices.tolist() == [0, 3]
    feedback.restore(np.array([3]), np.array([4.0]))  # the reduction dropped index 3
    assert feedback.residual.tolist() == [0.0, -1.0, 0.5, 4.0, 0.0, 2.0]


@pytest.mark.parametrize("p", range(1, 9))
def test_the_taught_reduce_scatter_leaves_the_bits_of_the_fast_ring(p):
    """sparse_ring.taught_reduce_scatter (the chapter's listing: the length, then the packet)
    leaves on rank r the same bits as chunk r of the fast sparse_ring's result."""
    from allreduce.algorithms._schedule import chunk_bounds
    from allreduce.sparse.sparse_ring import taught_reduce_scatter

    rng = np.random.default_rng(40 + p)
    for n in (0, 5, 300):
        for density in (0.0, 0.1, 0.9):
            vectors = [(i, v.astype(np.float32) / 7) for i, v in clustered(rng, p, n, density)]
            taught = run_threads(p, lambda c: taught_reduce_scatter(*vectors[c.rank], n, c))
            fast = run_threads(p, lambda c: sparse_allreduce(*vectors[c.rank], n, c,
                                                             algorithm="sparse_ring"))[0]
            for rank, (indices, values) in enumerate(taught):
                lo, hi = chunk_bounds(n, p, rank)
                inside = (fast[0] >= lo) & (fast[0] < hi)
                assert (indices == fast[0][inside]).all()
                assert values.tobytes() == fast[1][inside].tobytes()


@pytest.mark.parametrize("p", range(1, 9))
def test_measured_unions_are_the_windows_unions(p):
    """layout.measured_unions counts on a mask; here, by definition: the mean over the p
    windows of s consecutive ranks of the size of their supports' union (np.unique)."""
    from allreduce.sparse import layout as sparse_layout

    rng = np.random.default_rng(p)
    for n, k in ((1, 1), (10, 0), (60, 25), (5000, 900)):
        supports = [np.sort(rng.choice(n, size=rng.integers(0, k + 1), replace=False))
                    for _ in range(p)]
        expected = [0.0] + [float(np.mean([len(np.unique(np.concatenate(
            [supports[(r - i) % p] for i in range(s)]))) for r in range(p)]))
            for s in range(1, p + 1)]
        assert sparse_layout.measured_unions(supports) == expected


def test_the_dense_path_reads_the_union_from_the_non_zeros_unless_a_sum_is_zero(monkeypatch):
    """Without a sum of zero at any rank's pair, the union is where the dense sum is not
    zero, and no rank runs the presence mask (a NaN is not zero); one rank's explicit 0
    alone at an index, every rank's -0.0 at one (a sum of -0.0), or two ranks' values that
    cancel, send every rank to the mask, and that index stays in the union (with the sum
    0)."""
    import importlib

    dense_module = importlib.import_module("allreduce.sparse.dense")
    marked = []
    mark = dense_module._mark
    monkeypatch.setattr(dense_module, "_mark", lambda *a, **k: marked.append(1) or mark(*a, **k))
    p, n, rng = 3, 5000, np.random.default_rng(9)
    base = supports(rng, p, n, 0.1, "float32")
    zero_at, cancel_at = map(int, np.setdiff1d(np.arange(n),
                                               np.concatenate([i for i, _ in base]))[:2])

    def with_pair(vectors, rank, index, value):
        indices, values = vectors[rank]
        at = np.searchsorted(indices, index)
        vectors = list(vectors)
        vectors[rank] = (np.insert(indices, at, index),
                         np.insert(values, at, np.float32(value)))
        return vectors

    every = base
    for rank in range(p):
        every = with_pair(every, rank, zero_at, -0.0)
    cases = {"no zero sum": (base, 0),
             "one rank's NaN": (with_pair(base, 1, zero_at, np.nan), 0),
             "one rank's 0": (with_pair(base, 2, zero_at, 0.0), p),
             "every rank's -0.0": (every, p),
             "values that cancel": (with_pair(with_pair(base, 0, cancel_at, 1.5), 2, cancel_at,
                                              -1.5), p)}
    for case, (vectors, masks) in cases.items():
        marked.clear()
        results = run_threads(p, lambda c, v=vectors: sparse_allreduce(*v[c.rank], n, c,
                                                                        algorithm="dense"))
        assert len(marked) == masks, case
        union = np.unique(np.concatenate([i for i, _ in vectors]))
        want = dense_sum(vectors, n, "float32")[union]
        for indices, values in results:
            assert np.array_equal(indices, union), case
            assert np.allclose(values, want, atol=1e-5, equal_nan=True), case
            if case == "every rank's -0.0":  # the sum there is -0.0, and it is in the union
                assert np.signbit(values[indices == zero_at]).all()


@pytest.mark.parametrize("packed", [True, False], ids=["bytes", "int32 per element"])
def test_the_dense_paths_presence_mask_finds_the_union(monkeypatch, packed):
    """The mask of one byte per element summed as int32 words (up to 255 ranks), and the
    int32 per element used from 256 ranks (forced here at p = 5), both give the union, also
    where the values cancel and at lengths that are not whole words."""
    import importlib

    dense_module = importlib.import_module("allreduce.sparse.dense")  # not the function
    if not packed:
        monkeypatch.setattr(dense_module, "PACKED_RANKS", 1)
    p = 5
    for n in (0, 1, 3, 7, 1001):
        rng = np.random.default_rng(n)
        vectors = [(np.sort(rng.choice(n, size=min(n, 1 + n // 3), replace=False)).astype(
            np.int32) if n else np.zeros(0, np.int32)) for _ in range(p)]
        vectors = [(v, np.where(np.arange(len(v)) % 2, 1, -1).astype(np.int64) * (r % 2 * 2 - 1))
                   for r, v in enumerate(vectors)]
        union = np.unique(np.concatenate([v for v, _ in vectors]))
        results = run_threads(p, lambda c: sparse_allreduce(*vectors[c.rank], n, c,
                                                            algorithm="dense"))
        expected = np.zeros(n, np.int64)
        for v, x in vectors:
            expected[v] += x
        for indices, values in results:
            assert np.array_equal(indices, union)
            assert np.array_equal(values, expected[union])


def test_the_packed_mask_carries_nothing_at_255_ranks():
    """255 ranks' 0/1 bytes summed as int32 words (np.add, as the library's sum reduces;
    words wrap past 2³¹, which leaves every byte intact): every byte reads back as the
    number of ranks that marked it, and no neighbour is touched; from 256 ranks each
    element has an int32 of its own."""
    import importlib

    dense_module = importlib.import_module("allreduce.sparse.dense")
    n = 10  # not whole words: the padding bytes stay 0
    total = np.zeros(dense_module.mask_bytes(n, 255) // 4, np.int32)
    for rank in range(255):
        np.add(total, dense_module._mark(np.array([0, 3, 4, 9][:1 + rank % 4]), n, 255),
               out=total)
    counts = total.view(np.uint8)
    assert list(counts[:n]) == [255, 0, 0, 191, 127, 0, 0, 0, 0, 63] and not counts[n:].any()
    wide = dense_module._mark(np.array([2, 5]), n, 256)
    assert wide.dtype == np.int32 and len(wide) == n and list(np.flatnonzero(wide)) == [2, 5]


def test_ring_link_load_counts_what_a_ring_of_links_carries():
    """The data behind chapter 75's contention figure: the sparse ring's busiest link carries
    exactly what the contention-free model charges; the direct algorithm's scatter step ``s``
    on ``p`` ranks loads a link with ``min(s, p - s)`` messages of equal size (supports
    spread evenly, identical on every rank, so every scatter message is the same size)."""
    from allreduce.viz.messages import record_sparse, ring_link_load

    p, per_chunk, width = 8, 5, 1000
    indices = np.concatenate([c * width + np.arange(per_chunk) for c in range(p)])
    vectors = [(indices, np.ones(len(indices), np.float32)) for _ in range(p)]
    ring = ring_link_load(record_sparse("sparse_ring", vectors, p * width))
    assert len(ring) == 2 * (p - 1) and all(c == b for c, b in ring)
    direct = ring_link_load(record_sparse("sparse_direct", vectors, p * width))
    assert len(direct) == 2 * (p - 1)
    for s, (charged, busiest) in enumerate(direct[:p - 1], start=1):
        assert busiest == min(s, p - s) * charged, (s, charged, busiest)
    assert all(c == b for c, b in direct[p - 1:])  # the all-gather goes to neighbours


@pytest.mark.parametrize("p", [2, 3, 4, 7])
def test_the_expected_layout_is_the_real_one_on_independent_supports(p):
    """layout.expected, from each rank's pairs per equal-length chunk (what the check
    gathers), matches layout.from_supports on independent uniform supports: every piece
    exactly, the ring's partial sums, the finished chunks and the windows' unions within
    2%; with equal nonzeros the chunks' pairs differ from the real cut by under 5%."""
    from allreduce.sparse import auto as sparse_auto
    from allreduce.sparse import layout

    rng = np.random.default_rng(p)
    n = 1 << 18
    for density in (0.01, 0.2):
        supports = [np.sort(rng.choice(n, int(density * n), replace=False)) for _ in range(p)]
        loads = [layout.chunk_counts(s, n, p) for s in supports]
        real, guess = layout.from_supports(supports, n), layout.expected(loads, n)
        assert (real.pieces == guess.pieces).all() and real.bounds == guess.bounds
        assert np.allclose(guess.ring, real.ring, rtol=0.02)
        assert np.allclose(guess.finished, real.finished, rtol=0.02)
        assert np.allclose(layout.window_unions(loads, n), layout.measured_unions(supports),
                           rtol=0.02)
        cut = layout.expected(loads, n, "nonzeros")
        assert np.allclose(cut.pieces.sum(axis=0), layout.from_supports(
            supports, n, "nonzeros").pieces.sum(axis=0), rtol=0.05)


def test_the_check_gathers_each_ranks_pairs_per_chunk():
    """Every rank gets loads[r][c], rank r's pairs in equal-length chunk c, and every rank's
    probe words, from the check's one all-gather."""
    from allreduce.algorithms.auto import DEFAULT_MODEL
    from allreduce.sparse import _model_bits, check

    p, n = 3, 30
    vectors = [np.array([0, 1, 2, 29]), np.array([], int), np.array([10, 11, 25])]

    def loads(c):
        call = check.describe(vectors[c.rank], np.ones(len(vectors[c.rank])), n, "sum",
                              "auto", ("auto",))
        return check.agree(c, call, ("auto",), _model_bits(DEFAULT_MODEL),
                           probes=np.array([7 * c.rank, -1], np.int64))

    for got, probes in run_threads(p, loads):
        assert got == [[3, 0, 1], [0, 0, 0], [0, 2, 1]]
        assert probes.tolist() == [[0, -1], [7, -1], [14, -1]]


def test_auto_cuts_equal_nonzeros_when_the_pairs_cluster():
    """Under the reference model: with every rank's pairs in the first of four equal-length
    chunks, auto runs a chunked algorithm on chunks of equal nonzeros, which it predicts
    faster than the same algorithm on equal lengths; with the same pairs spread evenly it
    keeps equal lengths (the histogram round would buy nothing); a caller's boundaries are
    kept; and the clustered call's sum is right."""
    from allreduce.algorithms.auto import DEFAULT_MODEL
    from allreduce.sparse import auto as sparse_auto

    n, k, p = 1 << 22, 40_000, 4
    clustered = [[k, 0, 0, 0]] * p
    spread = [[k / p] * p] * p
    algorithm, cut = sparse_auto.choose(n, [k] * p, 4, DEFAULT_MODEL, SPARSE_ALGORITHMS,
                                        loads=clustered)
    assert cut == "nonzeros" and algorithm in ("sparse_ring", "sparse_direct")
    times = {b: sparse_auto.predict(algorithm, n, [k] * p, 4, DEFAULT_MODEL, boundaries=b,
                                    loads=clustered) for b in ("length", "nonzeros")}
    assert times["nonzeros"] < times["length"]
    assert sparse_auto.choose(n, [k] * p, 4, DEFAULT_MODEL, SPARSE_ALGORITHMS,
                              loads=spread)[1] == "length"
    assert sparse_auto.choose(n, [k] * p, 4, DEFAULT_MODEL, SPARSE_ALGORITHMS,
                              loads=clustered, boundaries="length")[1] == "length"
    rng = np.random.default_rng(5)
    vectors = [(np.sort(rng.choice(n // p, k, replace=False)),
                rng.integers(-3, 4, k).astype(np.int64)) for _ in range(p)]
    results = run_threads(p, lambda c: sparse_allreduce(*vectors[c.rank], n, c))
    want = dense_sum(vectors, n, "int64")
    union = np.unique(np.concatenate([i for i, _ in vectors]))
    for indices, values in results:
        assert (indices == union).all() and (values == want[union]).all()


@pytest.mark.parametrize("algorithm", ["auto", "dense"])
def test_ranks_that_differ_in_dense_output_raise_together(algorithm):
    """dense_output changes auto's choice and the dense path's messages (no presence mask),
    so the check compares it: one rank asking for it raises on every rank, not a hang."""
    p, n = 3, 40
    vectors = [(np.array([1, 5, 9]), np.array([1.0, 2.0, 3.0])) for _ in range(p)]

    def body(comm):
        try:
            sparse_allreduce(*vectors[comm.rank], n, comm, algorithm=algorithm,
                             dense_output=comm.rank == 1)
        except ValueError as error:
            return str(error)
        return None

    messages = run_threads(p, body)
    assert all(messages) and len(set(messages)) == 1 and "dense_output" in messages[0]


def test_the_expected_cut_of_equal_nonzeros_keeps_each_parts_density():
    """With both ranks full in the first half of 100 elements, equal nonzeros cut [0, 25)
    and [25, 100); the second chunk holds 25 of the first half and none of the rest, so
    its expected union is 25 (not 75 elements at the chunk's mean density); loads rounded
    above a full chunk count as full; and an algorithm that takes no boundaries is offered
    only equal lengths."""
    from allreduce.sparse import auto as sparse_auto
    from allreduce.sparse import layout

    held = layout.expected([[50, 0], [50, 0]], 100, "nonzeros")
    assert held.bounds == [(0, 25), (25, 100)]
    assert held.finished.tolist() == [25.0, 25.0] and held.pieces.tolist() == [[25, 25]] * 2
    full = layout.expected([[54.5, 0], [54.5, 0]], 100)
    assert full.finished.tolist() == [50.0, 0.0]
    assert layout.window_unions([[54.5, 0], [54.5, 0]], 100)[2] == 50.0
    assert sparse_auto.options(["dense", "sparse_ring"], "nonzeros") == [
        ("dense", "length"), ("sparse_ring", "nonzeros")]
    assert sparse_auto.options(["allgather", "sparse_direct"]) == [
        ("allgather", "length"), ("sparse_direct", "length"), ("sparse_direct", "nonzeros")]


def test_topk_allreduce_reads_no_boundaries_as_equal_lengths():
    from allreduce.sparse import topk_allreduce

    p, n = 3, 60
    vectors = [(np.array([1, 2, 3]) + 20 * r, np.array([3.0, 2.0, 1.0])) for r in range(p)]
    results = [run_threads(p, lambda c: topk_allreduce(*vectors[c.rank], n, 3, c,
                                                       boundaries=b)) for b in (None, "length")]
    for none, length in zip(*results):
        assert none.indices.tolist() == length.indices.tolist()


def test_a_named_algorithm_reads_no_boundaries_as_equal_lengths():
    """Naming an algorithm without boundaries is naming equal lengths: ranks that say it
    one way or the other agree."""
    p, n = 3, 30
    vectors = [(np.array([1, 2, 20 + r]), np.array([1.0, 2.0, 3.0])) for r in range(p)]
    results = run_threads(p, lambda c: sparse_allreduce(
        *vectors[c.rank], n, c, algorithm="sparse_ring",
        boundaries=None if c.rank == 1 else "length"))
    assert all(indices.tolist() == [1, 2, 20, 21, 22] for indices, _ in results)


def test_a_length_beyond_int64_raises_on_every_rank():
    """The check gathers n as an int64: a longer n is refused by every rank's check, not by
    one rank's overflow while the others wait."""
    outcomes = run_threads(3, lambda c: sparse_allreduce(
        np.array([c.rank]), np.ones(1), 2**63 if c.rank == 1 else 8, c),
        return_exceptions=True)
    assert all(isinstance(o, (TypeError, ValueError)) for o in outcomes), outcomes
    assert len({str(o) for o in outcomes}) == 1
    assert "rank 1: TypeError: n, the dense length, must be an integer from 0 to 2**63 - 1" \
        in str(outcomes[0])


@pytest.mark.parametrize("p", [1, 3])
def test_a_rank_that_calls_topk_where_the_others_sum_gets_the_checks_error(p):
    """``topk_allreduce`` and ``sparse_allreduce`` send the check rows as long (the exact
    sum's carries the overlap's probe words; the Top-k's, as many words of none), so a rank
    that calls the other one is named on every rank, not left in a mismatched all-gather."""
    from allreduce.sparse import topk_allreduce

    n = 1000
    indices, values = np.arange(0, n, 10), np.ones(100, np.float32)

    def call(c):
        if c.rank == p - 1:
            return topk_allreduce(indices, values, n, 10, c)
        return sparse_allreduce(indices, values, n, c)

    if p == 1:
        assert len(run_threads(p, call)[0].indices) == 10
        return
    errors = run_threads(p, lambda c: _raised(call, c))
    assert all(isinstance(e, ValueError) and "disagree on the algorithm" in str(e)
               for e in errors), errors


def _raised(function, comm):
    try:
        function(comm)
    except Exception as error:  # noqa: BLE001 - the test looks at what each rank raised
        return error
    return None
