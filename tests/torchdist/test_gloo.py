"""Every algorithm over torch.distributed with gloo, against ``dist.all_reduce``."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.distributed as dist
from conftest import assert_on_all_ranks

import allreduce
from allreduce.testing import exact_input, first_difference

TORCH_OPS = {"sum": dist.ReduceOp.SUM, "mean": dist.ReduceOp.SUM, "max": dist.ReduceOp.MAX,
             "min": dist.ReduceOp.MIN, "prod": dist.ReduceOp.PRODUCT}
VALID = [(op, dtype) for op in allreduce.OP_NAMES for dtype in allreduce.DTYPES
         if not (op == "mean" and dtype.startswith("int"))]


def torch_reference(x: torch.Tensor, op: str, group=None) -> torch.Tensor:
    expected = x.clone()
    dist.all_reduce(expected, op=TORCH_OPS[op], group=group)
    if op == "mean":
        expected /= dist.get_world_size(group)
    return expected


@pytest.mark.parametrize("algorithm", allreduce.ALGORITHMS)
def test_every_op_and_dtype_against_dist_all_reduce(world, algorithm):
    rank = dist.get_rank()
    for op, dtype in VALID:
        for count in (0, 1, 2, 5, 1000):
            x = torch.from_numpy(exact_input(rank, count, dtype, op)).reshape(-1, 1)
            result = allreduce.allreduce(x, world, algorithm=algorithm, op=op)
            wrong = first_difference(torch_reference(x, op).numpy(), result.numpy())
            assert_on_all_ranks(
                not wrong and result.dtype == x.dtype and result.shape == x.shape,
                f"{algorithm} {op} {dtype} count={count}: {wrong}")


@pytest.mark.parametrize("algorithm", allreduce.ALGORITHMS)
def test_in_place_on_a_subgroup(algorithm):
    """A process group other than the default one: ranks are group-relative."""
    members = sorted({0, dist.get_world_size() - 1})
    group = dist.new_group(members)
    if dist.get_rank() in members:
        x = torch.from_numpy(exact_input(dist.get_rank(), 77, "float32", "sum"))
        expected = torch_reference(x, "sum", group)
        result = allreduce.allreduce(x, group, algorithm=algorithm, out=x)
        ok, why = result is x and not first_difference(expected.numpy(), x.numpy()), "subgroup"
    else:
        ok, why = True, ""
    assert_on_all_ranks(ok, why)
    dist.destroy_process_group(group)


def test_numpy_arrays_over_gloo(world):
    x = np.full(10, dist.get_rank() + 1, dtype=np.int64)
    result = allreduce.allreduce(x, world, algorithm="ring")
    p = dist.get_world_size()
    assert_on_all_ranks(isinstance(result, np.ndarray) and bool((result == p * (p + 1) // 2).all()),
                        str(result))


def test_a_split_of_a_group_that_is_not_the_default_one(world):
    """Communicator.split of such a group makes groups of messages over it, whose check
    moved numpy buffers through torch's transport, which takes tensors: every call raised
    AttributeError."""
    group = dist.new_group(list(range(dist.get_world_size())))
    sub = allreduce.as_communicator(group).split([r % 2 for r in range(dist.get_world_size())])
    result = allreduce.allreduce(torch.ones(4), sub, algorithm="ring")
    assert_on_all_ranks(bool((result == sub.size).all()), str(result))
    dist.destroy_process_group(group)


def test_numpy_arrays_of_negative_strides_over_gloo(world):
    """torch.from_numpy refuses x[::-1], but a strided x travels as the library's contiguous
    copy: the check asked the transport about x itself and refused it on every rank."""
    x = (np.arange(6.0) * (dist.get_rank() + 1))[::-1]  # a view, of stride -8
    assert x.strides == (-8,)
    out = np.empty(12)[::-2]
    result = allreduce.allreduce(x, world, algorithm="ring", out=out)
    p = dist.get_world_size()
    want = np.arange(6.0)[::-1] * (p * (p + 1) // 2)
    assert_on_all_ranks(result is out and bool((out == want).all()), str(out))


@pytest.mark.parametrize("make", [lambda: np.arange(1.0)[::-1],
                                  lambda: np.arange(4.0).reshape(1, 4)[::-1]],
                         ids=["one element", "one row"])
def test_contiguous_numpy_arrays_of_a_negative_stride_over_gloo(world, make):
    """numpy calls an array contiguous whatever the stride of an axis of length 1, and the
    library took such an x (or out) without a copy, where torch.from_numpy refused it on
    every rank (a correctness sweep's finding): it now goes over gloo as over MPI."""
    x, out = make(), make()
    x *= dist.get_rank() + 1  # in place: x keeps its stride
    assert all(any(stride < 0 for stride in a.strides) and a.flags.c_contiguous
               for a in (x, out))
    p = dist.get_world_size()
    result = allreduce.allreduce(x, world, algorithm="ring")
    into = allreduce.allreduce(x, world, algorithm="ring", out=out)
    want = make() * (p * (p + 1) // 2)
    assert_on_all_ranks(into is out and np.array_equal(result, want)
                        and np.array_equal(out, want), f"{result} {out}")


def test_the_transport_still_refuses_a_reversed_view_of_several_elements(world):
    """Only a contiguous array gets its strides rewritten: a reversed view of several
    elements (which the library copies before it reaches the transport) is refused by torch
    if handed to it directly, never read as a forward view past its buffer."""
    from allreduce.transports import as_communicator

    with pytest.raises(ValueError, match="negative"):
        as_communicator(world).native(np.arange(4.0)[::-1])


def test_mismatch_raises_on_every_rank(world):
    if dist.get_world_size() == 1:
        pytest.skip("a mismatch needs two ranks")
    count = 50 + (dist.get_rank() == 1)
    try:
        allreduce.allreduce(torch.ones(count), world, algorithm="ring")
        message = "no error"
    except ValueError as error:
        message = str(error)
    assert_on_all_ranks("disagree on the element count" in message and "51 on rank 1" in message,
                        message)


def test_cuda_tensor_needs_nccl(world):
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device: the gloo/CUDA mismatch cannot be built here")
    try:
        allreduce.allreduce(torch.ones(4, device="cuda"), world)
        message = "no error"
    except TypeError as error:
        message = str(error)
    assert_on_all_ranks("cannot go over a gloo process group" in message, message)


@pytest.mark.parametrize("algorithm,boundaries", [
    *((name, "length") for name in (*allreduce.SPARSE_ALGORITHMS, "auto")),
    ("sparse_ring", "nonzeros"), ("sparse_direct", "nonzeros")])
def test_sparse_coo_tensors_against_gloos_sparse_all_reduce(world, algorithm, boundaries):
    """allreduce.sparse_allreduce on torch sparse COO tensors over gloo, against gloo's own
    sparse all_reduce (an all-gather of the pairs, then a sum): the same dense result, and
    the union of the supports as the result's support."""
    rank = dist.get_rank()
    rng = np.random.default_rng(rank)
    for dtype in (torch.int64, torch.float32):
        for n, k in ((0, 0), (5, 5), (1000, 30), (1000, 0 if rank == 0 else 400)):
            indices = torch.from_numpy(np.sort(rng.choice(n, size=k, replace=False)))
            values = torch.from_numpy(rng.integers(-4, 5, k)).to(dtype)
            mine = torch.sparse_coo_tensor(indices[None], values, (n,), check_invariants=True)
            expected = mine.clone().coalesce()
            dist.all_reduce(expected)
            result = allreduce.sparse_allreduce(mine, world, algorithm=algorithm,
                                                boundaries=boundaries)
            same = bool(torch.equal(result.to_dense(), expected.to_dense())
                        and torch.equal(result.indices(), expected.coalesce().indices()))
            assert_on_all_ranks(result.is_sparse and same,
                                f"{algorithm} {dtype} n={n} k={k}: differs from gloo")


def test_messages_of_unknown_length_cross_gloo(world):
    """torch receives no message of unknown length by itself: send_any sends the length
    first.  Shorter, exact and longer messages, around the ring, numpy and tensors."""
    comm = allreduce.as_communicator(world)
    p, rank = comm.size, comm.rank
    right, left = (rank + 1) % p, (rank - 1) % p
    ok = True
    for length in (0, 3, 8, 12) if p > 1 else ():  # torch sends nothing to itself
        mine = torch.arange(length, dtype=torch.int32) + 100 * rank
        inbox = torch.full((8,), -1, dtype=torch.int32)
        exact = comm.sendrecv_any(mine, right, inbox, left)
        theirs = torch.arange(length, dtype=torch.int32) + 100 * left
        fits = min(length, 8)
        ok &= exact == (length == 8) and torch.equal(inbox[:fits], theirs[:fits])
        if rank == 0:
            comm.send_any(mine, 1)
        elif rank == 1:
            inbox[:] = -1
            ok &= comm.recv_any(inbox, 0) == (length == 8)
            ok &= torch.equal(inbox[:fits], torch.arange(fits, dtype=torch.int32))
    assert_on_all_ranks(ok, "a message of unknown length arrived wrong")


def test_topk_allreduce_over_gloo(world):
    """The re-selecting sum over gloo: result plus every rank's unsent pairs is the sum."""
    rank, p = dist.get_rank(), dist.get_world_size()
    rng = np.random.default_rng(rank)
    n, k = 3000, 40
    indices = np.sort(rng.choice(n, size=200, replace=False))
    values = rng.integers(-50, 50, 200).astype(np.int64)
    result = allreduce.topk_allreduce(indices, values, n, k, world)
    mine = torch.zeros(n, dtype=torch.int64)
    mine[torch.from_numpy(indices)] = torch.from_numpy(values)
    dist.all_reduce(mine)
    unsent = torch.zeros(n, dtype=torch.int64)
    unsent[torch.from_numpy(result.unsent_indices.astype(np.int64))] = torch.from_numpy(
        result.unsent_values)
    dist.all_reduce(unsent)
    got = torch.zeros(n, dtype=torch.int64)
    got[torch.from_numpy(result.indices.astype(np.int64))] = torch.from_numpy(result.values)
    assert_on_all_ranks(bool(torch.equal(got + unsent, mine))
                        and len(result.indices) <= p * -(-k // p), "topk over gloo")


def _train_with_ddp(state, steps):
    """The capstone's digits MLP under DistributedDataParallel over gloo, each rank on its
    shard of the same batches; with ``allreduce.ddp_hook`` when ``state`` is given.
    Returns the final weights and the loss on the whole data set."""
    from torch.nn.parallel import DistributedDataParallel

    from allreduce import training

    torch.set_num_threads(1)
    X, y = training.digits()
    model = training.make_model(0)
    ddp = DistributedDataParallel(model)
    if state is not None:
        ddp.register_comm_hook(state, allreduce.ddp_hook)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.5)
    for batch in training.batches(len(X), 60, steps, 0):
        mine = training.shard(batch, dist.get_rank(), dist.get_world_size())
        optimizer.zero_grad()
        torch.nn.functional.cross_entropy(ddp(X[mine]), y[mine]).backward()
        optimizer.step()
    with torch.no_grad():
        loss = torch.nn.functional.cross_entropy(model(X), y).item()
    return training.flat_weights(model), loss


def test_the_dense_hook_trains_as_plain_ddp(world):
    """The hook averages (DDP does not divide by the ranks when a hook is registered):
    after 40 steps the weights equal plain DDP's to float32 rounding (DDP divides each
    gradient before summing, the hook after: the only difference, below 1e-5)."""
    plain, _ = _train_with_ddp(None, 40)
    hooked, _ = _train_with_ddp(allreduce.DDPHookState(), 40)
    worst = float(np.abs(plain - hooked).max())
    assert_on_all_ranks(worst < 1e-5, f"dense hook differs from DDP by {worst:.3g}")


def test_topk_with_error_feedback_keeps_up_with_dense(world):
    """Top-k at 1% of each bucket (48 of the model's 4,810 gradient entries), after 150 steps:
    with error feedback the loss on the whole data set is within 25% of dense training's
    (measured here: 0.142 against 0.135, +6%, on 3 and on 4 ranks); without it the loss
    stays far higher (0.46-0.49, 3.4-3.6x dense), which is the reason for error feedback."""
    _, dense = _train_with_ddp(allreduce.DDPHookState(), 150)
    _, with_feedback = _train_with_ddp(
        allreduce.DDPHookState(density=0.01, start_iteration=2), 150)
    _, without = _train_with_ddp(
        allreduce.DDPHookState(density=0.01, error_feedback=False, start_iteration=2), 150)
    assert_on_all_ranks(with_feedback < 1.25 * dense < without,
                        f"losses: dense {dense:.4f}, Top-k 1% with error feedback "
                        f"{with_feedback:.4f}, without {without:.4f}")


@pytest.mark.parametrize("options", [{"ranks_per_node": 1}, {"ranks_per_node": 2}, {}],
                         ids=["one rank a node", "two ranks a node", "torchrun's nodes"])
def test_hierarchical_on_nodes_over_gloo(world, options):
    """Chapter 65's hierarchical allreduce over gloo: its groups are torch process groups
    (new_group), made at the first call and kept: a second call makes none."""
    from allreduce.transports import torchdist

    rank = dist.get_rank()
    for op, dtype in VALID:
        for count in (0, 1, 5, 1000):
            x = torch.from_numpy(exact_input(rank, count, dtype, op))
            result = allreduce.allreduce(x, world, algorithm="hierarchical", op=op, **options)
            wrong = first_difference(torch_reference(x, op).numpy(), result.numpy())
            assert_on_all_ranks(not wrong, f"hierarchical {options} {op} {dtype} {count}: {wrong}")
    made = sum(map(len, torchdist._MADE.values()))
    allreduce.allreduce(torch.ones(10), world, algorithm="hierarchical", **options)
    assert_on_all_ranks(sum(map(len, torchdist._MADE.values())) == made, "a group made twice")


@pytest.mark.parametrize("algorithm", allreduce.api.PHASED)
def test_phases_over_gloo(world, algorithm):
    """Every phased algorithm's reduce-scatter leaves chunk_bounds(n, p, r) on rank r,
    and its all-gather hands every rank the whole result."""
    rank, p = dist.get_rank(), dist.get_world_size()
    for count in (0, 1, 7, 1000):
        x = torch.from_numpy(exact_input(rank, count, "int64", "sum"))
        expected = torch_reference(x, "sum")
        mine = x.clone()
        bounds = allreduce.reduce_scatter(mine, world, algorithm=algorithm)
        gathered = torch.zeros_like(x)
        gathered[slice(*bounds)] = mine[slice(*bounds)]
        allreduce.allgather(gathered, world, algorithm=algorithm)
        ok = bounds == allreduce.chunk_bounds(count, p, rank) and torch.equal(gathered, expected)
        assert_on_all_ranks(ok, f"{algorithm} n={count}: bounds {bounds}")


def test_sends_started_in_groups_as_on_nccl(world, monkeypatch):
    """On NCCL the transport keeps its sends and receives until a wait and starts them as one
    group (``batch_isend_irecv``): two ranks that each receive before they send would
    otherwise block each other's GPU.  The same path here on gloo, where CI has no GPU: every
    algorithm, the hierarchical one's subgroups, the sparse algorithms, and messages of
    unknown length, against gloo's own all_reduce."""
    from allreduce.transports import torchdist

    started, start = [], dist.batch_isend_irecv

    def batch_isend_irecv(ops):
        started.append(len(ops))
        return start(ops)

    monkeypatch.setattr(torchdist.dist, "batch_isend_irecv", batch_isend_irecv, raising=True)
    comm = torchdist.TorchCommunicator(world)
    comm.grouped = True
    rank, failures = dist.get_rank(), []
    for algorithm, options in [*((name, {}) for name in allreduce.ALGORITHMS),
                               ("hierarchical", {"ranks_per_node": 2})]:
        for op, dtype in (("sum", "int64"), ("mean", "float32"), ("max", "float64")):
            for count in (0, 1, 5, 1000):
                x = torch.from_numpy(exact_input(rank, count, dtype, op))
                result = allreduce.allreduce(x, comm, algorithm=algorithm, op=op, **options)
                wrong = first_difference(torch_reference(x, op).numpy(), result.numpy())
                if wrong:
                    failures.append(f"{algorithm} {options} {op} {dtype} {count}: {wrong}")
    rng = np.random.default_rng(rank)
    indices = torch.from_numpy(np.sort(rng.choice(1000, size=40, replace=False)))
    mine = torch.sparse_coo_tensor(indices[None], torch.ones(40), (1000,))
    expected = mine.clone().coalesce()
    dist.all_reduce(expected)
    for algorithm in allreduce.SPARSE_ALGORITHMS:
        result = allreduce.sparse_allreduce(mine, comm, algorithm=algorithm)
        if not torch.equal(result.to_dense(), expected.to_dense()):
            failures.append(f"sparse {algorithm}: differs from gloo")
    one_rank = dist.get_world_size() == 1  # nothing to send: no group is started
    assert_on_all_ranks(not failures and (started or one_rank) and comm._kept is None,
                        "; ".join(failures[:3]) or f"{len(started)} groups started")


def test_a_process_group_keeps_its_plans_from_call_to_call(world, monkeypatch):
    """A torch.distributed group is wrapped once (``as_communicator`` keeps its wrapper), so
    a second call like the first skips ``describe`` as over MPI; a call that differs is
    described again."""
    from allreduce import api

    assert allreduce.as_communicator(world) is allreduce.as_communicator(world)
    described = []
    original = api.describe
    monkeypatch.setattr(api, "describe", lambda *a, **k: described.append(1) or original(*a, **k))
    p = dist.get_world_size()
    shape, other = (13, 17), (17, 13)  # shapes no other test uses: no plan kept before
    results = [allreduce.allreduce(torch.full(shape, float(i), dtype=torch.float64), world)
               for i in range(3)]
    results.append(allreduce.allreduce(torch.full(other, 1.0, dtype=torch.float64), world))
    same = all(torch.equal(r, torch.full(shape, float(p * i), dtype=torch.float64))
               for i, r in enumerate(results[:3]))
    assert_on_all_ranks(same and torch.equal(results[3], torch.full(other, float(p),
                                                                     dtype=torch.float64)),
                        "results differ from the sums")
    assert_on_all_ranks(len(described) == 2, f"describe ran {len(described)} times, not 2")
