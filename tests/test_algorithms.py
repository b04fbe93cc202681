"""Every algorithm against the reference, on the thread transport: world sizes 1 to 16
(powers of two and not), counts from 0 to more than a thousand, every op and dtype.

The inputs come from :func:`allreduce.testing.exact_input`, whose reduction is exact in any
order, so results must match bit for bit: floats included.  The same algorithms run over
MPI in tests/mpi and over gloo in tests/torchdist."""

from __future__ import annotations

import numpy as np
import pytest

import allreduce
from allreduce.algorithms import READS_SOURCE
from allreduce.testing import exact_input, first_difference, gradient_input, reference
from allreduce.transports.threads import run_threads

ALGORITHMS = allreduce.ALGORITHMS
WORLD_SIZES = [1, 2, 3, 4, 5, 6, 7, 8, 9, 12, 16]


def counts_for(p: int) -> list[int]:
    return sorted({0, 1, 2, 3, p - 1, p, p + 1, 2 * p + 1, 17, 1000, 1009})


def run(p: int, algorithm: str, count: int, dtype: str, op: str, **options):
    inputs = [exact_input(r, count, dtype, op) for r in range(p)]
    results = run_threads(
        p, lambda comm: allreduce.allreduce(inputs[comm.rank].copy(), comm, algorithm, op, **options)
    )
    return inputs, results


@pytest.mark.parametrize("algorithm", ALGORITHMS)
@pytest.mark.parametrize("p", WORLD_SIZES)
def test_sum_every_count(algorithm, p):
    for count in counts_for(p):
        inputs, results = run(p, algorithm, count, "int64", "sum")
        expected = reference(inputs, "sum")
        for rank, result in enumerate(results):
            assert result.dtype == np.int64 and result.shape == (count,)
            assert not first_difference(expected, result), (
                f"{algorithm}, p={p}, count={count}, rank {rank}: "
                + first_difference(expected, result))


VALID_OP_DTYPES = [(op, dtype) for op in allreduce.OP_NAMES for dtype in allreduce.DTYPES
                   if not (op == "mean" and dtype.startswith("int"))]  # rejected: test_validation


@pytest.mark.parametrize("algorithm", ALGORITHMS)
@pytest.mark.parametrize(("op", "dtype"), VALID_OP_DTYPES)
def test_every_op_and_dtype(algorithm, op, dtype):
    for p in (3, 4, 5):
        for count in (1, 7, 130):
            inputs, results = run(p, algorithm, count, dtype, op)
            expected = reference(inputs, op)
            for rank, result in enumerate(results):
                assert result.dtype == np.dtype(dtype)
                assert not first_difference(expected, result), (
                    f"{algorithm} {op} {dtype} p={p} count={count} rank {rank}: "
                    + first_difference(expected, result))


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_every_rank_gets_the_same_bits(algorithm):
    """Replicas stay identical only if every rank gets the same rounding, not just a close
    answer.  Random float32 gradients make the order of additions visible."""
    for p in (3, 4, 6):
        inputs = [gradient_input(r, 1001, "float32") for r in range(p)]
        results = run_threads(p, lambda comm: allreduce.allreduce(inputs[comm.rank], comm, algorithm))
        for rank in range(1, p):
            assert results[rank].tobytes() == results[0].tobytes(), f"{algorithm} rank {rank}"


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_nans_of_different_payloads_give_every_rank_the_same_bits(algorithm):
    """A NaN carries a payload, and IEEE leaves which operand's a sum keeps to the machine:
    numpy's in-place add of one element keeps the NaN of the operand that is not ``out``
    (of more elements, the first's), so ranks that add the same two NaNs with ``out`` on
    different sides got different bits, at one element, until ops.combine stopped doing one
    element in place.  Payloads differ by rank here; counts of 1 and more."""
    for p in (2, 3, 5, 6):
        for count in (1, 2, 9):
            def body(comm):
                nan = np.array([0x7FF8000000000000 | (comm.rank + 1)], np.uint64)
                x = np.repeat(nan.view(np.float64), count)
                return allreduce.allreduce(x, comm, algorithm, "sum")
            results = run_threads(p, body)
            assert np.isnan(results[0]).all()
            assert len({r.tobytes() for r in results}) == 1, (algorithm, p, count)


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_shapes_out_and_in_place(algorithm):
    p = 4
    base = [exact_input(r, 60, "float32", "sum").reshape(3, 4, 5) for r in range(p)]
    expected = reference(base, "sum")

    def body(comm):
        x = base[comm.rank].copy()
        new = allreduce.allreduce(x, comm, algorithm)
        assert new is not x and (x == base[comm.rank]).all(), "x changed without out=x"
        target = np.zeros_like(x)
        given = allreduce.allreduce(x, comm, algorithm, out=target)
        same = allreduce.allreduce(x, comm, algorithm, out=x)
        strided = np.asfortranarray(base[comm.rank])  # not C-contiguous: reduced via a copy
        fortran = allreduce.allreduce(strided, comm, algorithm, out=strided)
        return new, given is target, target, same is x, x, fortran is strided, strided

    for new, used_target, target, in_place, x, kept_fortran, fortran in run_threads(p, body):
        assert new.shape == (3, 4, 5) and used_target and in_place and kept_fortran
        for got in (new, target, x, fortran):
            assert not first_difference(expected, got)


def test_scalar_and_non_contiguous_input():
    def body(comm):
        scalar = allreduce.allreduce(np.array(comm.rank + 1.0), comm, "ring")
        column = np.arange(20.0).reshape(5, 4)[:, 1] * (comm.rank + 1)  # strided view
        return scalar, allreduce.allreduce(column, comm, "rabenseifner")

    for scalar, column in run_threads(3, body):
        assert scalar.shape == () and scalar == 6.0
        assert (column == np.arange(20.0).reshape(5, 4)[:, 1] * 6).all()


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_torch_tensors_keep_their_type(algorithm):
    torch = pytest.importorskip("torch")
    p = 3
    inputs = [exact_input(r, 50, "float32", "sum") for r in range(p)]

    def body(comm):
        x = torch.from_numpy(inputs[comm.rank].copy()).reshape(5, 10)
        return allreduce.allreduce(x, comm, algorithm), allreduce.allreduce(x, comm, algorithm, out=x), x

    for result, same, x in run_threads(p, body):
        assert isinstance(result, torch.Tensor) and result.dtype == torch.float32
        assert result.shape == (5, 10) and same is x
        assert not first_difference(reference(inputs, "sum"), result.numpy())
        assert (x == result).all()


@pytest.mark.parametrize("servers", [1, 2, 3, 5])
def test_parameter_server_shards(servers):
    p = 5
    inputs, results = run(p, "parameter_server", 103, "float64", "sum", servers=servers)
    for result in results:
        assert not first_difference(reference(inputs, "sum"), result)


def test_ring_phases_compose_into_allreduce():
    p, count = 4, 10  # uneven chunks: 3, 3, 2, 2
    inputs = [exact_input(r, count, "int64", "sum") for r in range(p)]
    expected = reference(inputs, "sum")

    def body(comm):
        x = inputs[comm.rank].copy()
        lo, hi = allreduce.reduce_scatter(x, comm)
        owned = x[lo:hi].copy()
        allreduce.allgather(x, comm)
        return (lo, hi), owned, x

    for rank, (bounds, owned, full) in enumerate(run_threads(p, body)):
        assert bounds == allreduce.chunk_bounds(count, p, rank)
        assert (owned == expected[slice(*bounds)]).all(), f"rank {rank} owns a wrong chunk"
        assert (full == expected).all()


def test_auto_picks_the_fastest_candidate_under_its_model():
    from allreduce.algorithms.auto import CANDIDATES, DEFAULT_MODEL, choose
    from allreduce.cost import Model

    for model in (DEFAULT_MODEL, Model(alpha=2e-6, beta=1 / 12.5e9, gamma=1 / 50e9)):
        for p in (2, 3, 4, 8, 64, 1024):
            for nbytes in (8, 1024, 65536, 1 << 20, 1 << 26):
                chosen = choose(nbytes, p, model)
                best = min(model.time(name, p, nbytes) for name in CANDIDATES)
                assert model.time(chosen, p, nbytes) == best
    latency_only, bandwidth_only = Model(alpha=1.0, beta=0.0), Model(alpha=0.0, beta=1.0)
    assert choose(1 << 20, 4, latency_only) == "recursive_doubling"  # fewest steps
    assert choose(8, 4, bandwidth_only) in ("rabenseifner", "ring")  # fewest bytes
    assert choose(8, 16, Model(alpha=1.0, beta=1e-3)) == "recursive_doubling"


@pytest.mark.parametrize("p", [1, 2, 3, 4, 5, 6, 7, 8, 9])
def test_recursive_doubling_with_its_check_in_band_gives_the_same_bits(p):
    """The api carries the call's check in recursive doubling's own messages
    (validation.agree_in_band); its result must equal the plain algorithm's, bit for bit."""
    from allreduce.algorithms.recursive_doubling import recursive_doubling
    from allreduce.ops import OPS

    rng = np.random.default_rng(p)
    inputs = [rng.standard_normal(37).astype(np.float32) for _ in range(p)]

    def body(comm):
        assert comm.receives_any_length
        checked = allreduce.allreduce(inputs[comm.rank], comm, algorithm="recursive_doubling")
        plain = inputs[comm.rank].copy()
        recursive_doubling(plain, comm, OPS["sum"])
        return checked, plain

    for checked, plain in run_threads(p, body):
        assert checked.tobytes() == plain.tobytes()




@pytest.mark.parametrize("p", [1, 2, 3, 4, 5, 8])
@pytest.mark.parametrize("name", sorted(READS_SOURCE))
def test_reading_the_input_from_source_gives_the_same_bits(name, p):
    """Algorithms in READS_SOURCE take their input from ``source=`` instead of copying it
    into the result first; the result must equal the in-place run's, bit for bit, and the
    input must be left alone."""
    from allreduce.algorithms import REGISTRY
    from allreduce.ops import OPS

    rng = np.random.default_rng(p)
    inputs = [rng.standard_normal(101).astype(np.float32) for _ in range(p)]

    def body(comm):
        source = inputs[comm.rank].copy()
        out = np.full_like(source, np.nan)  # anything left unwritten would show
        REGISTRY[name](out, comm, OPS["sum"], source=source)
        in_place = inputs[comm.rank].copy()
        REGISTRY[name](in_place, comm, OPS["sum"])
        return out, in_place, source

    for rank, (out, in_place, source) in enumerate(run_threads(p, body)):
        assert out.tobytes() == in_place.tobytes()
        assert source.tobytes() == inputs[rank].tobytes()


@pytest.mark.parametrize("p", range(1, 10))
def test_the_taught_reduce_scatter_gives_the_librarys_bits(p):
    """Chapter 50 shows ring.taught_reduce_scatter; allreduce runs ring.reduce_scatter, with
    and without source=.  Every rank's whole buffer (its reduced chunk and the partial sums
    elsewhere) must be the same bits, for counts below, at and above p, and uneven."""
    from allreduce.algorithms.ring import reduce_scatter, taught_reduce_scatter
    from allreduce.ops import OPS

    rng = np.random.default_rng(p)
    for count in (0, 1, p, 3 * p + 1, 1001):
        inputs = [rng.standard_normal(count).astype(np.float32) for _ in range(p)]

        def body(comm):
            taught, fast, read = (inputs[comm.rank].copy() for _ in range(3))
            bounds = taught_reduce_scatter(taught, comm, OPS["sum"])
            assert reduce_scatter(fast, comm, OPS["sum"]) == bounds
            from_source = np.zeros_like(read)
            assert reduce_scatter(from_source, comm, OPS["sum"], source=read) == bounds
            return taught, fast, from_source, bounds

        for taught, fast, from_source, (lo, hi) in run_threads(p, body):
            assert taught.tobytes() == fast.tobytes(), count
            assert taught[lo:hi].tobytes() == from_source[lo:hi].tobytes(), count


def test_autos_rule_is_the_fastest_candidate_under_a_model():
    """auto.fastest (what chapter 60 shows) is what choose applies, cache or no cache."""
    from allreduce.algorithms.auto import DEFAULT_MODEL, choose, fastest
    from allreduce.cost import NETWORKS

    for model in (DEFAULT_MODEL, *NETWORKS.values()):
        for p in (2, 3, 4, 16, 1024):
            for nbytes in (8, 1 << 12, 1 << 20, 1 << 28):
                times = {name: model.time(name, p, nbytes) for name in
                         ("recursive_doubling", "rabenseifner", "ring")}
                assert fastest(nbytes, p, model) == min(times, key=times.get)
                assert choose(nbytes, p, model) == fastest(nbytes, p, model)


@pytest.mark.parametrize("p", [2, 3, 4, 5])
def test_pipelined_ring_gives_the_rings_bits(p):
    """With chunks of several segments, the pipelined ring adds the same pairs in the same
    order as the ring: the same bits."""
    rng = np.random.default_rng(p)
    inputs = [rng.standard_normal(100_003 * p).astype(np.float32) for _ in range(p)]

    def body(comm):
        ring = allreduce.allreduce(inputs[comm.rank], comm, algorithm="ring")
        pipelined = allreduce.allreduce(inputs[comm.rank], comm, algorithm="pipelined_ring")
        return ring, pipelined

    for ring, pipelined in run_threads(p, body):
        assert ring.tobytes() == pipelined.tobytes()


def test_scratch_buffers_are_kept_per_thread_dtype_and_size():
    """Communicator.scratch keeps one buffer per thread and dtype, grows it when asked for
    more, and release_scratch lets it go."""
    from allreduce.comm import release_scratch

    def body(comm):
        like = np.empty(1, np.float32)
        small = comm.scratch(10, like)
        again = comm.scratch(8, like)
        other = comm.scratch(10, np.empty(1, np.int64))
        bigger = comm.scratch(1000, like)
        kept_after_growth = comm.scratch(10, like)
        release_scratch()
        after_release = comm.scratch(10, like)
        return (np.shares_memory(small, again), np.shares_memory(small, other),
                np.shares_memory(small, bigger), np.shares_memory(bigger, kept_after_growth),
                np.shares_memory(bigger, after_release), small.size, bigger.size,
                other.dtype == np.int64, small.ctypes.data)

    results = run_threads(2, body)
    for result in results:
        assert result[:8] == (True, False, False, True, False, 10, 1000, True)
    assert results[0][8] != results[1][8]  # each thread rank has its own


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_kept_scratch_gives_right_results_call_after_call(algorithm):
    """The same thread ranks run one algorithm on sizes that grow and shrink and on two
    dtypes, so each call finds the scratch buffer the previous one left (stale data,
    another dtype, a size too small or too large)."""
    p = 5
    plan = [(count, dtype) for count in (1000, 7, 4099, 3, 1000) for dtype in ("int64", "int32")]
    inputs = {(count, dtype): [exact_input(r, count, dtype, "sum") for r in range(p)]
              for count, dtype in plan}

    def body(comm):
        return [allreduce.allreduce(inputs[key][comm.rank], comm, algorithm, "sum") for key in plan]

    for rank, results in enumerate(run_threads(p, body)):
        for key, result in zip(plan, results):
            wrong = first_difference(reference(inputs[key], "sum"), result)
            assert not wrong, f"{algorithm} {key} rank {rank}: {wrong}"


@pytest.mark.parametrize("p", [1, 2, 3, 4, 5, 6, 7, 8, 9])
def test_rabenseifner_fast_path_gives_the_readable_ones_bits_and_messages(p, monkeypatch):
    """The api runs rabenseifner.fast (a schedule worked out once per size); the readable
    rabenseifner (halve and double) must give the same bits, with and without ``source``,
    for several counts and ops, and the same messages and reductions (GUIDE §1)."""
    from allreduce.algorithms import REGISTRY
    from allreduce.algorithms.rabenseifner import fast, rabenseifner
    from allreduce.ops import OPS
    from allreduce.trace import record

    assert REGISTRY["rabenseifner"] is fast
    rng = np.random.default_rng(p)
    for n in (0, 1, p, 37, 1000, 4099):
        inputs = [rng.standard_normal(n).astype(np.float32) for _ in range(p)]
        for op in ("sum", "prod", "max"):
            def body(comm):
                results = []
                for algorithm in (rabenseifner, fast):
                    plain = inputs[comm.rank].copy()
                    algorithm(plain, comm, OPS[op])
                    read = np.empty_like(plain)
                    algorithm(read, comm, OPS[op], source=inputs[comm.rank])
                    results.append((plain.tobytes(), read.tobytes()))
                return results

            for (slow_plain, slow_read), (fast_plain, fast_read) in run_threads(p, body):
                assert slow_plain == fast_plain == slow_read == fast_read, (n, op)
    fast_trace, fast_results = record("rabenseifner", p, 1000)
    monkeypatch.setitem(REGISTRY, "rabenseifner", rabenseifner)
    readable_trace, readable_results = record("rabenseifner", p, 1000)
    assert fast_trace.messages() == readable_trace.messages()
    assert (len(fast_trace.messages()) > 0) == (p > 1)
    for weights in ((1, 0, 0), (0, 1, 0), (0, 0, 1)):  # steps, bytes and reductions
        assert fast_trace.critical_path(*weights) == readable_trace.critical_path(*weights)
    assert all((a == b).all() for a, b in zip(fast_results, readable_results))
