"""Sharded data parallelism's volumes (chapter 65) against the library's phases, traced."""

from __future__ import annotations

import numpy as np
import pytest

import allreduce
from allreduce import sharded
from allreduce.trace import Trace, TracingCommunicator
from allreduce.transports.threads import run_threads


def sent_bytes(p: int, n: int, phases: tuple[str, ...]) -> list[int]:
    """Bytes each rank sends running ``phases`` one after the other on the ring."""
    def body(comm):
        tracer = TracingCommunicator(comm)
        x = np.ones(n, np.float32)
        for phase in phases:
            if phase == "allreduce":
                allreduce.allreduce(x, tracer, "ring", out=x)
            else:
                getattr(allreduce, phase)(x, tracer, algorithm="ring")
        return tracer.events

    trace = Trace(run_threads(p, body), itemsize=4)
    return [trace.elements_sent(r) * 4 for r in range(p)]


@pytest.mark.parametrize("strategy", sharded.STEPS)
def test_each_strategys_volume_is_what_its_phases_send(strategy):
    for p in (2, 3, 4, 7, 8):
        n = 840 * 4  # elements, every chunk whole
        sent = sent_bytes(p, n, sharded.STEPS[strategy])
        assert sent == [sharded.volume(strategy, p, n * 4)] * p, (strategy, p, sent)


def test_zero_3_sends_one_and_a_half_times_ddp():
    for p in (2, 8, 1024):
        assert sharded.volume("ZeRO-3 / FSDP", p, 1.0) == 1.5 * sharded.volume("DDP", p, 1.0)
        assert sharded.volume("ZeRO-2", p, 1.0) == sharded.volume("DDP", p, 1.0)
    with pytest.raises(ValueError, match="unknown strategy 'ZeRO-4'"):
        sharded.volume("ZeRO-4", 4, 1.0)
