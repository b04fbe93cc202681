"""Bad input raises the same clear error on every rank, never a hang.

Each case runs on thread ranks with a short timeout: a rank left waiting would raise
TimeoutError instead of the expected error, and the test would fail."""

from __future__ import annotations

import re

import numpy as np
import pytest

import allreduce
from allreduce.transports.threads import run_threads

P = 4


@pytest.fixture(params=["in band", "all-gather"], autouse=True)
def checking_path(request, monkeypatch):
    """Run every case down both checking paths: the description carried in recursive
    doubling's messages (the thread transport, like MPI, receives any length), and the
    separate all-gather that transports without that ability use."""
    if request.param == "all-gather":
        from allreduce.transports.threads import ThreadCommunicator

        monkeypatch.setattr(ThreadCommunicator, "receives_any_length", False)
    return request.param


def errors_on_every_rank(per_rank_call, p=P):
    """Run ``per_rank_call(comm)`` on p ranks; return the exception every rank raised."""
    outcomes = run_threads(p, per_rank_call, timeout=10, return_exceptions=True)
    for rank, outcome in enumerate(outcomes):
        assert isinstance(outcome, (TypeError, ValueError)), f"rank {rank} returned {outcome!r}"
    messages = {str(outcome) for outcome in outcomes}
    assert len(messages) == 1, f"the ranks raised different messages: {messages}"
    assert len({type(outcome) for outcome in outcomes}) == 1
    return outcomes[0]


def one_rank_differs(rank_that_differs, normal, odd, **call):
    def body(comm):
        x = odd() if comm.rank == rank_that_differs else normal()
        return allreduce.allreduce(x, comm, **call)

    return body


CASES = [
    # (what, per-rank call, expected type, pattern in the message)
    ("a shorter buffer on one rank",
     one_rank_differs(2, lambda: np.ones(1000), lambda: np.ones(999), algorithm="ring"),
     ValueError, r"disagree on the element count: 1000 on ranks 0, 1, 3, 999 on rank 2"),
    ("a longer buffer on one rank, recursive doubling",
     one_rank_differs(0, lambda: np.ones(1000), lambda: np.ones(1001),
                      algorithm="recursive_doubling"),
     ValueError, r"disagree on the element count: 1001 on rank 0, 1000 on ranks 1, 2, 3"),
    ("a shorter buffer on one rank, auto",
     one_rank_differs(1, lambda: np.ones(100), lambda: np.ones(3)),
     ValueError, r"disagree on the element count: 100 on ranks 0, 2, 3, 3 on rank 1"),
    ("an empty buffer on one rank",
     one_rank_differs(3, lambda: np.ones(100), lambda: np.ones(0)),
     ValueError, r"disagree on the element count: 100 on ranks 0, 1, 2, 0 on rank 3"),
    ("same bytes, different dtype",
     one_rank_differs(2, lambda: np.ones(8, np.float64), lambda: np.ones(8, np.int64)),
     ValueError, r"disagree on the dtype: float64 on ranks 0, 1, 3, int64 on rank 2"),
    ("a different shape, same count",
     one_rank_differs(1, lambda: np.ones((4, 6)), lambda: np.ones((6, 4))),
     ValueError, r"disagree on the shape: \(4, 6\) on ranks 0, 2, 3, \(6, 4\) on rank 1"),
    ("a different dtype",
     one_rank_differs(3, lambda: np.ones(8, np.float32), lambda: np.ones(8, np.float64)),
     ValueError, r"disagree on the dtype: float32 on ranks 0, 1, 2, float64 on rank 3"),
    ("an unknown algorithm everywhere",
     lambda comm: allreduce.allreduce(np.ones(4), comm, algorithm="rign"),
     ValueError, r"unknown algorithm 'rign'; choose one of parameter_server, .*ring"),
    ("an unknown algorithm on one rank",
     lambda comm: allreduce.allreduce(np.ones(4), comm, algorithm="rign" if comm.rank == 1 else "ring"),
     ValueError, r"invalid call on rank 1 \(rank 1: ValueError: unknown algorithm 'rign'"),
    ("different algorithms",
     lambda comm: allreduce.allreduce(np.ones(4), comm, algorithm=("ring", "tree")[comm.rank % 2]),
     ValueError, r"disagree on the algorithm: ring on ranks 0, 2, tree on ranks 1, 3"),
    ("an unknown op",
     lambda comm: allreduce.allreduce(np.ones(4), comm, op="avg"),
     ValueError, r"unknown op 'avg'; choose one of sum, mean, max, min, prod"),
    ("different ops",
     lambda comm: allreduce.allreduce(np.ones(4), comm, op="max" if comm.rank else "sum"),
     ValueError, r"disagree on the op: sum on rank 0, max on ranks 1, 2, 3"),
    ("mean of integers",
     lambda comm: allreduce.allreduce(np.ones(4, np.int32), comm, op="mean"),
     TypeError, r"op 'mean' needs a floating-point dtype, got int32"),
    ("strings",
     lambda comm: allreduce.allreduce(np.array(["a", "b"]), comm),
     TypeError, r"dtype str\d+ is not supported; use one of float16, float32, float64, int32, int64"),
    ("Python objects",
     lambda comm: allreduce.allreduce(np.array([1, None]), comm),
     TypeError, r"dtype object is not supported"),
    ("complex numbers",
     lambda comm: allreduce.allreduce(np.ones(3, np.complex128), comm),
     TypeError, r"dtype complex128 is not supported"),
    ("booleans",
     lambda comm: allreduce.allreduce(np.ones(3, bool), comm),
     TypeError, r"dtype bool is not supported"),
    ("a list on one rank",
     lambda comm: allreduce.allreduce([1.0, 2.0] if comm.rank == 0 else np.ones(2), comm),
     TypeError, r"invalid call on rank 0 \(rank 0: TypeError: x must be a numpy.ndarray or a torch.Tensor, got list\)"),
    ("out of the wrong shape",
     lambda comm: allreduce.allreduce(np.ones(4), comm, out=np.ones(5)),
     ValueError, r"out must have x's shape and dtype \(4,\) float64, got \(5,\) float64"),
    ("out of the wrong type",
     lambda comm: allreduce.allreduce(np.ones(4), comm, out=[0.0] * 4),
     TypeError, r"out must be of the same type as x \(ndarray\), got list"),
    ("servers for an algorithm without servers",
     lambda comm: allreduce.allreduce(np.ones(4), comm, algorithm="ring", servers=2),
     ValueError, r"servers= applies only to parameter_server and sharded_parameter_server"),
    ("more servers than ranks",
     lambda comm: allreduce.allreduce(np.ones(4), comm, algorithm="parameter_server", servers=9),
     ValueError, r"servers must be an integer from 1 to the number of ranks \(4\), got 9"),
    ("the other byte order on one rank (the same dtype name)",
     one_rank_differs(1, lambda: np.ones(8), lambda: np.ones(8, ">f8"), algorithm="ring"),
     TypeError, r"rank 1: TypeError: x has the non-native byte order '>f8'"),
    ("a read-only out on one rank",
     lambda comm: allreduce.allreduce(np.ones(8), comm, algorithm="ring",
                                      out=_read_only(8) if comm.rank == 2 else np.ones(8)),
     TypeError, r"rank 2: TypeError: out is read-only, and the call writes into it"),
    ("in place on a read-only x",
     lambda comm: (lambda x: allreduce.allreduce(x, comm, algorithm="tree", out=x))(
         _read_only(8) if comm.rank == 0 else np.ones(8)),
     TypeError, r"rank 0: TypeError: x is read-only, and the call writes into it"),
    ("a broadcast out",
     lambda comm: allreduce.allreduce(np.ones((3, 8)), comm, out=np.broadcast_to(
         np.zeros(8), (3, 8)).copy() if comm.rank else _broadcast_writable(3, 8)),
     TypeError, r"rank 0: TypeError: out has several elements on one address"),
    ("a numpy matrix",
     lambda comm: allreduce.allreduce(np.asmatrix(np.ones((1, 8))), comm, algorithm="ring"),
     TypeError, r"x must be a plain numpy.ndarray, got matrix \(pass np.asarray\(x\)\)"),
    ("a masked array on one rank",
     one_rank_differs(3, lambda: np.ones(8), lambda: np.ma.masked_less(np.ones(8), 0)),
     TypeError, r"rank 3: TypeError: x must be a plain numpy.ndarray, got MaskedArray"),
    ("servers=True (a bool, not a count)",
     lambda comm: allreduce.allreduce(np.ones(4), comm, algorithm="parameter_server",
                                      servers=True),
     ValueError, r"servers must be an integer from 1 to the number of ranks \(4\), got True"),
    ("servers=np.True_ (numpy's bool, not a count)",
     lambda comm: allreduce.allreduce(np.ones(4), comm, algorithm="parameter_server",
                                      servers=np.True_),
     ValueError, r"servers must be an integer from 1 to the number of ranks \(4\), got "
                 r"(np\.True_|True)"),  # numpy 1.x prints np.True_ as True
    ("ranks_per_node=np.True_",
     lambda comm: allreduce.allreduce(np.ones(4), comm, algorithm="hierarchical",
                                      ranks_per_node=np.True_),
     ValueError, r"ranks_per_node must be a positive integer, got (np\.True_|True)"),
    ("a torch tensor on one rank, numpy arrays on the others",
     lambda comm: allreduce.allreduce(_torch_ones(8) if comm.rank == 1 else np.ones(8), comm,
                                      algorithm="ring"),
     ValueError, r"disagree on the array type: numpy array on ranks 0, 2, 3, torch tensor on "
                 r"rank 1"),
    ("several ranks with different problems",
     lambda comm: allreduce.allreduce(
         np.ones(4, np.int64) if comm.rank == 1 else np.ones(4), comm,
         op="mean", algorithm="nope" if comm.rank == 2 else "ring"),
     TypeError, r"invalid call on ranks 1, 2 \(rank 1: TypeError: op 'mean' needs .*; "
                r"rank 2: ValueError: unknown algorithm 'nope'"),
]


def _torch_ones(n):
    import torch

    return torch.ones(n, dtype=torch.float64)


def _read_only(n):
    x = np.ones(n)
    x.flags.writeable = False
    return x


def _broadcast_writable(rows, n):
    """Every row on the same memory, yet writeable (as_strided), as a careless view is."""
    return np.lib.stride_tricks.as_strided(np.zeros(n), (rows, n), (0, 8), writeable=True)


@pytest.mark.parametrize(("what", "call", "error", "pattern"), CASES, ids=[c[0] for c in CASES])
def test_bad_input_raises_the_same_error_on_every_rank(what, call, error, pattern):
    raised = errors_on_every_rank(call)
    assert isinstance(raised, error)
    assert re.search(pattern, str(raised)), str(raised)


@pytest.mark.parametrize("algorithm", ["ring", "recursive_doubling"])
@pytest.mark.parametrize("p", [3, 4, 5])
def test_the_ranks_recover_after_an_error(algorithm, p):
    """An error leaves no message in flight: the next call on the same ranks works."""
    def body(comm):
        with pytest.raises(ValueError):
            allreduce.allreduce(np.ones(10 + (comm.rank == 0)), comm, algorithm=algorithm)
        return allreduce.allreduce(np.full(10, comm.rank + 1.0), comm, algorithm=algorithm)

    for result in run_threads(p, body, timeout=10):
        assert (result == p * (p + 1) / 2).all()


def test_a_communicator_of_the_wrong_kind():
    with pytest.raises(TypeError, match=r"comm must be an mpi4py intracommunicator .* got int"):
        allreduce.allreduce(np.ones(3), 42)
    with pytest.raises(TypeError, match=r"got str"):
        allreduce.allreduce(np.ones(3), "COMM_WORLD")


def test_torch_tensor_mismatches():
    torch = pytest.importorskip("torch")
    raised = errors_on_every_rank(
        one_rank_differs(0, lambda: torch.ones(6), lambda: torch.ones(6, dtype=torch.float64)))
    assert re.search(r"disagree on the dtype: float64 on rank 0, float32 on ranks 1, 2, 3", str(raised))
    raised = errors_on_every_rank(
        lambda comm: allreduce.allreduce(torch.ones(3, dtype=torch.complex64), comm))
    assert "dtype complex64 is not supported" in str(raised)
    raised = errors_on_every_rank(
        lambda comm: allreduce.allreduce(torch.ones(3), comm, out=np.ones(3, np.float32)))
    assert "out must be of the same type as x (Tensor), got ndarray" in str(raised)


def test_a_sparse_tensor_is_refused_on_every_rank():
    """torch 2.13 gives a sparse COO tensor strides, (0,) for 1-D: a check that waited for
    stride() to raise let it through to the algorithm, which raised a RuntimeError on every
    rank, or, when one rank alone passed one, left the others waiting in the ring."""
    torch = pytest.importorskip("torch")
    for ranks_with_one in ((0,), range(P)):
        for algorithm in ("ring", "recursive_doubling", "auto"):
            raised = errors_on_every_rank(lambda comm: allreduce.allreduce(
                torch.arange(8.0).to_sparse() if comm.rank in ranks_with_one else
                torch.arange(8.0), comm, algorithm))
            assert "x must be a dense tensor, got layout torch.sparse_coo" in str(raised)
    # an expanded dense tensor has a sparse one's strides, (0,), and may be reduced (nothing
    # writes into it): its kept plan must not let a sparse tensor skip the check
    def body(comm):
        allreduce.allreduce(torch.zeros(1).expand(8), comm, "ring")
        sparse = torch.arange(8.0).to_sparse()
        return allreduce.allreduce(sparse if comm.rank == 0 else sparse.to_dense(), comm, "ring")
    assert "got layout torch.sparse_coo" in str(errors_on_every_rank(body))


@pytest.mark.parametrize("algorithm", ["ring", "recursive_doubling", "auto"])
def test_an_empty_array_of_several_dimensions_is_written(algorithm):
    """numpy gives an empty array zero strides, (0, 0) for shape (2, 0): they name no address
    that several elements share, so out=x, another empty out and a phase all take it."""
    def body(comm):
        x = np.zeros((2, 0))
        shapes = [allreduce.allreduce(x, comm, algorithm, out=x).shape,
                  allreduce.allreduce(x, comm, algorithm, out=np.empty((2, 0))).shape]
        allreduce.reduce_scatter(np.zeros((3, 0)), comm)
        return shapes

    assert run_threads(P, body, timeout=10) == [[(2, 0), (2, 0)]] * P


@pytest.mark.parametrize("algorithm", ["ring", "recursive_doubling", "auto"])
def test_a_failed_call_leaves_out_untouched(algorithm):
    def body(comm):
        x = np.ones(10 + (comm.rank == 0))
        out = np.full_like(x, -1.0)
        with pytest.raises(ValueError, match="disagree on the element count"):
            allreduce.allreduce(x, comm, algorithm=algorithm, out=out)
        return out

    for out in run_threads(P, body, timeout=10):
        assert (out == -1.0).all()


# -- the plan cache (issue 24 §1): a call like a cached one skips describe(), never its check --

def _cached_then(first, then, p=P):
    """On p ranks: ``first(comm)`` (a valid call, whose plan is cached), then ``then(comm)``;
    return the exception every rank raised in ``then``."""
    def body(comm):
        first(comm)
        try:
            return then(comm)
        finally:  # a rank that raised on a sub-communicator waits for the other groups
            comm.barrier()

    return errors_on_every_rank(body, p)


CACHE_CASES = [
    # (key part, the cached call, a call differing from it only there, pattern)
    ("type of x", lambda c: allreduce.allreduce(np.ones(2), c),
     lambda c: allreduce.allreduce([1.0, 2.0] if c.rank == 0 else np.ones(2), c),
     r"x must be a numpy.ndarray or a torch.Tensor, got list"),
    ("shape of x", lambda c: allreduce.allreduce(np.ones(4), c, out=np.ones(4)),
     lambda c: allreduce.allreduce(np.ones(5), c, out=np.ones(4)),
     r"out must have x's shape and dtype \(5,\) float64, got \(4,\) float64"),
    ("dtype of x", lambda c: allreduce.allreduce(np.ones(4), c, op="mean"),
     lambda c: allreduce.allreduce(np.ones(4, np.int64), c, op="mean"),
     r"op 'mean' needs a floating-point dtype, got int64"),
    ("type of out", lambda c: allreduce.allreduce(np.ones(4), c, out=np.ones(4)),
     lambda c: allreduce.allreduce(np.ones(4), c, out=[0.0] * 4),
     r"out must be of the same type as x \(ndarray\), got list"),
    ("shape of out", lambda c: allreduce.allreduce(np.ones(4), c, out=np.ones(4)),
     lambda c: allreduce.allreduce(np.ones(4), c, out=np.ones(5)),
     r"out must have x's shape and dtype \(4,\) float64, got \(5,\) float64"),
    ("dtype of out", lambda c: allreduce.allreduce(np.ones(4), c, out=np.ones(4)),
     lambda c: allreduce.allreduce(np.ones(4), c, out=np.ones(4, np.float32)),
     r"got \(4,\) float32"),
    ("byte order of x", lambda c: allreduce.allreduce(np.ones(4), c),
     lambda c: allreduce.allreduce(np.ones(4, ">f8" if c.rank == 1 else "<f8"), c),
     r"x has the non-native byte order '>f8'"),
    ("writability of out", lambda c: allreduce.allreduce(np.ones(4), c, out=np.ones(4)),
     lambda c: allreduce.allreduce(np.ones(4), c, out=_read_only(4)),
     r"out is read-only"),
    ("broadcast out", lambda c: allreduce.allreduce(np.ones((3, 4)), c, out=np.ones((3, 4))),
     lambda c: allreduce.allreduce(np.ones((3, 4)), c, out=_broadcast_writable(3, 4)),
     r"out has several elements on one address"),
    ("expanded tensor out", lambda c: allreduce.allreduce(_torch_ones(4), c, out=_torch_ones(4)),
     lambda c: allreduce.allreduce(_torch_ones(4), c, out=_torch_ones(1).expand(4)),
     r"out has several elements on one address"),
    ("writability of x in place", lambda c: (lambda x: allreduce.allreduce(x, c, out=x))(
        np.ones(4)),
     lambda c: (lambda x: allreduce.allreduce(x, c, out=x))(_read_only(4)),
     r"x is read-only"),
    ("op", lambda c: allreduce.allreduce(np.ones(4, np.int32), c, op="sum"),
     lambda c: allreduce.allreduce(np.ones(4, np.int32), c, op="mean"),
     r"op 'mean' needs a floating-point dtype, got int32"),
    ("algorithm", lambda c: allreduce.allreduce(np.ones(4), c, algorithm="ring"),
     lambda c: allreduce.allreduce(np.ones(4), c, algorithm="rign"),
     r"unknown algorithm 'rign'"),
    ("servers", lambda c: allreduce.allreduce(np.ones(4), c, algorithm="parameter_server",
                                              servers=2),
     lambda c: allreduce.allreduce(np.ones(4), c, algorithm="parameter_server", servers=9),
     r"servers must be an integer from 1 to the number of ranks \(4\), got 9"),
    ("ranks_per_node", lambda c: allreduce.allreduce(np.ones(4), c, algorithm="hierarchical",
                                                     ranks_per_node=1),
     lambda c: allreduce.allreduce(np.ones(4), c, algorithm="hierarchical",
                                   ranks_per_node=True),
     r"ranks_per_node must be a positive integer, got True"),
    ("nodes", lambda c: allreduce.allreduce(np.ones(4), c, algorithm="hierarchical",
                                            nodes=[0, 0, 1, 1]),
     lambda c: allreduce.allreduce(np.ones(4), c, algorithm="hierarchical", nodes=[0, 0, 1]),
     r"nodes must give one node id per rank \(4\), got 3"),
    ("inner", lambda c: allreduce.allreduce(np.ones(4), c, algorithm="hierarchical",
                                            ranks_per_node=2, inner="ring"),
     lambda c: allreduce.allreduce(np.ones(4), c, algorithm="hierarchical", ranks_per_node=2,
                                   inner="hierarchical"),
     r"unknown inner algorithm 'hierarchical'"),
    ("communicator", lambda c: allreduce.allreduce(np.ones(4), c, algorithm="parameter_server",
                                                   servers=4),
     lambda c: allreduce.allreduce(np.ones(4), c.split([r % 2 for r in range(c.size)]),
                                   algorithm="parameter_server", servers=4),
     r"servers must be an integer from 1 to the number of ranks \(2\), got 4"),
]


@pytest.mark.parametrize(("part", "first", "then", "pattern"), CACHE_CASES,
                         ids=[c[0] for c in CACHE_CASES])
def test_a_call_that_differs_from_a_cached_one_is_checked_in_full(part, first, then, pattern):
    raised = _cached_then(first, then)
    assert re.search(pattern, str(raised)), str(raised)


def test_the_plan_key_holds_the_device_and_equal_calls_skip_describe(monkeypatch):
    torch = pytest.importorskip("torch")
    from allreduce import api

    key = api._plan_key(torch.ones(3), None, "sum", "auto", None, None, None, None)
    assert key == api._plan_key(torch.ones(3), None, "sum", "auto", None, None, None, None)
    assert key != api._plan_key(torch.ones(3, device="meta"), None, "sum", "auto", None,
                                None, None, None)
    assert key != api._plan_key(np.ones(3, np.float32), None, "sum", "auto", None,
                                None, None, None)
    described = []
    original = api.describe
    monkeypatch.setattr(api, "describe", lambda *a, **k: described.append(1) or original(*a, **k))

    def body(c):
        return [allreduce.allreduce(np.full(5, float(i)), c) for i in range(3)]

    for results in run_threads(P, body, timeout=10):
        assert [r.tolist() for r in results] == [[P * float(i)] * 5 for i in range(3)]
    assert len(described) == P  # once per rank: the two later calls found the plan


def test_fast_and_slow_paths_together(checking_path):
    """Ranks whose plan is cached (no describe) and a rank whose is not get the same result
    together, and the same error together, leaving out untouched."""
    from allreduce import api

    def body(comm):
        x = np.arange(1000.0)
        allreduce.allreduce(x, comm)  # every rank caches the plan
        if comm.rank == 2:
            api._PLANS[comm].clear()  # this rank takes the slow path next
        agreed = allreduce.allreduce(x, comm)
        out = np.full(1000 - (comm.rank == 2), -1.0)
        try:
            allreduce.allreduce(x[:len(out)], comm, out=out)
        except ValueError as error:
            return agreed, out, str(error)
        return agreed, out, None

    outcomes = run_threads(P, body, timeout=10)
    for agreed, out, error in outcomes:
        assert (agreed == P * np.arange(1000.0)).all()
        assert (out == -1.0).all()
        assert error == outcomes[0][2] and "disagree on the element count" in error


@pytest.mark.parametrize("p", [2, 3, 4, 5])
def test_a_wrong_length_under_matching_headers_fails_every_rank(p, checking_path):
    """One rank carries data in its packets, the others not, with equal headers: the
    lengths differ, so every rank raises (none uses a half-reduced buffer), never hangs."""
    if checking_path == "all-gather":
        pytest.skip("only the in-band check reads lengths")
    from allreduce.ops import OPS
    from allreduce.validation import CallDescription, agree_in_band

    names = ("recursive_doubling",)

    def body(comm):
        call = CallDescription(shape=(8,), dtype="float64", op="sum",
                               algorithm="recursive_doubling", resolved="recursive_doubling")
        buf, out = np.ones(8), np.full(8, -1.0)
        try:
            agree_in_band(comm, call, names, buf if comm.rank == 0 else None, OPS["sum"],
                          out=out)
        except RuntimeError as error:
            return str(error), out
        return None, out

    outcomes = run_threads(p, body, timeout=10)
    for error, out in outcomes:
        assert error is not None and "differ in a way this check cannot name" in error
        assert (out == -1.0).all()


def test_plans_do_not_keep_a_communicator_alive():
    """The plans are kept per communicator, weakly: a tracing wrapper or a group that is
    gone takes its plans with it."""
    import gc
    import weakref

    from allreduce import api

    def body(comm):
        allreduce.allreduce(np.ones(3), comm)
        assert len(api._PLANS[comm]) == 1
        return weakref.ref(comm)

    references = run_threads(2, body)
    gc.collect()
    assert all(reference() is None for reference in references)


@pytest.mark.parametrize("algorithm", allreduce.ALGORITHMS)
def test_an_out_that_overlaps_x_gets_the_sum(algorithm):
    """``out`` sharing memory with ``x`` without being ``x`` (here shifted by one element):
    the algorithms that read ``x`` in place would overwrite it before reading it, so the
    call stages the result apart."""
    def body(comm):
        memory = np.arange(11.0) + comm.rank
        x, out = memory[1:], memory[:10]
        expected = sum(np.arange(1.0, 11.0) + r for r in range(comm.size))
        allreduce.allreduce(x, comm, algorithm=algorithm, out=out)
        return np.array_equal(out, expected)

    assert all(run_threads(P, body, timeout=10))


@pytest.mark.parametrize("phase", ["reduce_scatter", "allgather"])
def test_a_phase_on_strided_memory_on_one_rank_raises_on_every_rank(phase):
    """The phases work in ``x`` itself: one rank's strided or read-only ``x`` is part of
    the check, so every rank raises instead of the others waiting for it."""
    def strided(comm):
        x = np.ones(16)[::2] if comm.rank == 1 else np.ones(8)
        return getattr(allreduce, phase)(x, comm)

    def read_only(comm):
        return getattr(allreduce, phase)(_read_only(8) if comm.rank == 2 else np.ones(8), comm)

    assert "rank 1: ValueError: reduce_scatter and allgather work in place: x must be " \
        "contiguous" in str(errors_on_every_rank(strided))
    assert "rank 2: TypeError: x is read-only" in str(errors_on_every_rank(read_only))


def test_numpy_integers_count_as_integers():
    """servers=, ranks_per_node= and nodes= take numpy integers, as sparse_allreduce's n
    does: a layout computed with numpy (np.int64(p // 2)) is a layout."""
    for algorithm, options in (("parameter_server", {"servers": np.int64(2)}),
                               ("sharded_parameter_server", {"servers": np.int32(3)}),
                               ("hierarchical", {"ranks_per_node": np.int64(2)}),
                               ("hierarchical", {"nodes": np.array([0, 0, 1, 1])})):
        for result in run_threads(P, lambda comm: allreduce.allreduce(
                np.arange(5.0) + comm.rank, comm, algorithm, **options)):
            assert result.tolist() == (4 * np.arange(5.0) + 6).tolist(), (algorithm, options)
