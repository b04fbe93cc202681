"""The capstone's check cell: gradients handed to the communication thread from hooks while
backward runs (the overlap), trained on the engines against training without it."""

from __future__ import annotations

import numpy as np


class SubmitLog:
    """Wraps the ``thread`` that ``attach_overlap(model, thread)`` is given and notes every
    submission made outside the backward pass: the overlap must hand each gradient over from
    a hook, while backward is still running, not after it."""

    def __init__(self, attach):
        self.attach, self.late = attach, 0

    def __call__(self, model, thread) -> None:
        log = self

        class Thread:
            __slots__ = ()

            def submit(self, grad) -> None:
                import torch

                if torch._C._current_graph_task_id() == -1:  # not inside backward
                    log.late += 1
                thread.submit(grad)

        self.attach(model, Thread())

    def problem(self, name: str) -> str | None:
        if self.late:
            return (f"{name} submitted {self.late} gradients after backward had finished: the "
                    "overlap must submit each gradient from a hook, as backward produces it "
                    "(register_post_accumulate_grad_hook)")
        return None


def _overlap_check(attach, name: str, steps: int) -> str | None:
    """On each engine: train with the student's hooks and without overlap; compare."""
    from mpi4py import MPI

    from ..training import train

    world = MPI.COMM_WORLD
    private = world.Dup()
    log = SubmitLog(attach)
    try:
        plain = train(private, average="per_tensor", steps=steps)
        overlapped = train(private, average="overlap", attach=log, steps=steps)
    finally:
        private.Free()
    if overlapped.weights.tobytes() != plain.weights.tobytes():
        worst = int(np.argmax(np.abs(overlapped.weights - plain.weights)))
        return (f"rank {world.rank}: after {steps} steps weight {worst} is "
                f"{overlapped.weights[worst]:.6g} with your hooks, {plain.weights[worst]:.6g} "
                "without overlap (is every gradient submitted exactly once?)")
    return log.problem(name)


def check_overlap(view, function: str, *, steps: int = 5, timeout: float = 60) -> None:
    """Check cell for the exercise ``attach_overlap(model, thread)`` (the capstone): train
    on the engines with the student's hooks and without overlap; the weights must be the
    same bits, and every gradient must be submitted during backward."""
    import ipyparallel as ipp

    result = view.apply_async(_overlap_check, ipp.Reference(function), function, steps)
    try:
        problems = [p for p in result.get(timeout=timeout) if p]
    except ipp.error.TimeoutError:
        raise TimeoutError(f"{function}: training did not finish within {timeout:.0f} s on "
                           "every rank: were the gradients submitted in a different order on "
                           "different ranks?  Restart the kernel and run again.") from None
    if problems:
        raise AssertionError(problems[0])
    print(f"{function}: the same weights as without overlap after {steps} steps, on "
          f"{len(view)} ranks")
