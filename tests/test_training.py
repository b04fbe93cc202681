"""The capstone's data-parallel training: the weights after N steps equal single-process
training on the full batches, whatever algorithm and way of summing the gradients, on thread
ranks and on real MPI processes, and equal PyTorch DistributedDataParallel over gloo."""

from __future__ import annotations

import sys

import numpy as np
import pytest
from conftest import run_launcher

pytest.importorskip("torch")
pytest.importorskip("sklearn")

from allreduce import training  # noqa: E402
from allreduce.transports.threads import run_threads  # noqa: E402

STEPS = 20
# float32 training: the ranks add their shards' gradients in another order than one process
# adds the whole batch's, so the weights differ by rounding (about 2e-7 after 40 steps here);
# 1e-5 leaves room for that and is far below what a wrong gradient does (0.01 to 1).
TOLERANCE = 1e-5


@pytest.fixture(scope="module")
def single():
    return training.train(None, steps=STEPS)


@pytest.mark.parametrize("average", ["per_tensor", "fused", "overlap"])
@pytest.mark.parametrize(("p", "algorithm"), [(1, "ring"), (2, "recursive_doubling"),
                                              (3, "ring"), (4, "rabenseifner"), (4, "auto")])
def test_data_parallel_equals_single_process(single, p, algorithm, average):
    runs = run_threads(p, lambda comm: training.train(comm, algorithm=algorithm, average=average,
                                                      steps=STEPS, bucket_bytes=4096))
    for rank, run in enumerate(runs):
        assert (run.weights == runs[0].weights).all(), f"rank {rank} ended with other weights"
    assert np.abs(runs[0].weights - single.weights).max() < TOLERANCE
    assert np.allclose(runs[0].losses, single.losses, rtol=1e-5)
    assert single.losses[-1] < 0.6 * single.losses[0], "the model did not learn"  # 0.56 here


def test_a_wrong_sum_is_caught(single):
    """The check above can fail: averaging instead of summing the shards' gradients
    (dividing by p twice) changes the weights far beyond the tolerance."""
    def halved(model, comm, algorithm):
        training.per_tensor(model, comm, algorithm)
        for grad in training.gradients(model):
            grad /= comm.size

    runs = run_threads(4, lambda comm: training.train(comm, average=halved, steps=STEPS))
    assert np.abs(runs[0].weights - single.weights).max() > 100 * TOLERANCE


def test_overlap_submits_in_one_fixed_order_whatever_order_the_hooks_fire_in():
    """InOrder hands gradients to the thread in the reverse of the parameters' order, the
    same on every rank, holding back those ready early; step after step."""
    import torch

    class Recorder:
        def __init__(self):
            self.submitted = []

        def submit(self, tensor):
            self.submitted.append(tensor)

    parameters = [torch.nn.Parameter(torch.zeros(k + 1)) for k in range(3)]
    for p in parameters:
        p.grad = torch.zeros_like(p)
    recorder = Recorder()
    ordered = training.InOrder(recorder, parameters)
    for fired in ([0, 2, 1], [1, 0, 2], [2, 1, 0]):  # three steps, hooks in any order
        before = len(recorder.submitted)
        for index in fired:
            ordered.submit(parameters[index].grad)
        got = recorder.submitted[before:]
        assert [id(t) for t in got] == [id(parameters[i].grad) for i in (2, 1, 0)], fired
    ordered.check_step_complete()  # a whole step: nothing pending
    ordered.submit(parameters[0].grad)  # held back: 2 and 1 come first in the fixed order
    with pytest.raises(RuntimeError, match="submitted twice"):
        ordered.submit(parameters[0].grad)
    with pytest.raises(RuntimeError, match="2 of the model's 3 gradients were not submitted"):
        ordered.check_step_complete()
    with pytest.raises(ValueError, match="not the .grad"):
        ordered.submit(torch.zeros(1))


def test_under_mpiexec_against_ddp(venv_bin):
    """Real MPI processes, and PyTorch DDP over a gloo group on the same processes."""
    run = run_launcher([venv_bin / "mpiexec", "-n", "4", sys.executable, "-m", "mpi4py", "-m",
                        "allreduce.training", "--steps", str(STEPS), "ring", "auto"], timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    import json

    result = json.loads(run.stdout)
    runs = result["runs"]
    reference = np.array(runs["single process"]["weights"])
    assert set(runs) == {"single process", "ring, per_tensor", "ring, fused", "ring, overlap",
                         "auto, per_tensor", "DDP (gloo)"}
    for name, data in runs.items():
        assert np.abs(np.array(data["weights"]) - reference).max() < TOLERANCE, name
        assert len(data["losses"]) == STEPS
    assert len(runs["ring, fused"]["communicate"]) == STEPS


def test_a_steps_parts_come_from_its_slowest_rank():
    """The capstone's bars add up to one rank's step: the longest compute waits least, so the
    largest of each part, taken apart, would add up to no rank's step."""
    from allreduce.training import slowest_rank_parts

    everyone = np.array([[[5.0, 1.0], [0.0, 2.0], [1.0, 1.0]],   # rank 0: steps 6 and 4
                         [[2.0, 3.0], [3.0, 0.0], [1.5, 1.0]]])  # rank 1: steps 6.5 and 4
    parts = slowest_rank_parts(everyone)
    assert parts == {"compute": [2.0, 1.0], "wait": [3.0, 2.0], "communicate": [1.5, 1.0]}
