"""The labs' cluster helper, on real ipyparallel engines started by the environment's MPI."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from allreduce import lab

# What a lab's first %%px cell does: the library's ring against MPI_Allreduce, on the engines.
ENGINE_CHECK = """
import numpy as np
from mpi4py import MPI
import allreduce

comm = MPI.COMM_WORLD
x = np.arange(1001, dtype=np.float64) * (comm.rank + 1)
expected = np.empty_like(x)
comm.Allreduce(x, expected)
outcome = (comm.rank, comm.size, bool((allreduce.allreduce(x, comm, algorithm="ring") == expected).all()))
"""


def test_engines_are_mpi_ranks_and_run_the_library():
    start = time.monotonic()
    with lab.cluster(n=4) as view:
        started = time.monotonic() - start
        assert view.block and len(view) == 4
        view.execute(ENGINE_CHECK)
        assert view["outcome"] == [(r, 4, True) for r in range(4)]  # engine id == MPI rank
        assert view.client.ids == [0, 1, 2, 3]
    assert started < 60, f"the cluster took {started:.0f} s to start"


def test_engines_stop_when_a_cell_fails():
    with pytest.raises(RuntimeError, match="a cell that fails"), lab.cluster(n=2) as view:
        view.execute("import os; pid = os.getpid()")
        pids = view["pid"]
        raise RuntimeError("a cell that fails")
    import os

    time.sleep(1)
    alive = []
    for pid in pids:
        try:
            os.kill(pid, 0)
            alive.append(pid)
        except ProcessLookupError:
            pass
    assert not alive, f"engines still running: {alive}"


KILLED_KERNEL = """
import os, signal
from allreduce import lab
view = lab.start(n=2)
view.execute("import os; pid = os.getpid()")
print(*view["pid"], flush=True)
os.kill(os.getpid(), signal.SIGKILL)   # as nbval, or a crash, ends a kernel: no atexit
"""


def test_engines_stop_when_the_kernel_is_killed(venv_bin):
    import os
    import subprocess

    run = subprocess.run([venv_bin / "python", "-c", KILLED_KERNEL], capture_output=True,
                         text=True, timeout=120)
    pids = [int(pid) for pid in run.stdout.split()]
    assert len(pids) == 2, run.stdout + run.stderr
    deadline = time.monotonic() + 10
    alive = pids
    while alive and time.monotonic() < deadline:
        time.sleep(0.5)
        alive = [pid for pid in pids if os.path.exists(f"/proc/{pid}")
                 and "zombie" not in Path(f"/proc/{pid}/status").read_text()]
    assert not alive, f"engines outlived their kernel: {alive}"


# What a lab's check cell must catch on the engines: values right, work done by someone else.
HANDED_OFF = """
import numpy as np
from mpi4py import MPI
import allreduce
from allreduce import chunk_bounds

def by_mpi(buf, comm, op):
    total = buf.copy()
    MPI.COMM_WORLD.Allreduce(buf, total)
    buf[:] = total
    return chunk_bounds(len(buf), comm.size, comm.rank)

def by_library(buf, comm, op):
    from allreduce.algorithms import ring
    return ring.taught_reduce_scatter(buf, comm, op)

def not_a_ring(buf, comm, op):
    p, rank, n = comm.size, comm.rank, len(buf)
    others = np.empty((p, n), dtype=buf.dtype)
    requests = []
    for k in range(1, p):
        requests.append(comm.irecv(others[(rank - k) % p], (rank - k) % p))
        requests.append(comm.isend(buf, (rank + k) % p))
    comm.waitall(requests)
    for k in range(1, p):
        comm.reduce_local(op, buf, others[(rank - k) % p])
    return chunk_bounds(n, p, rank)

def peeks(buf, comm, op):
    comm.comm.Allreduce(buf.copy(), buf)

def int64_scratch(buf, comm, op):  # the lab's ring, but its scratch always int64
    p, rank, n = comm.size, comm.rank, len(buf)
    incoming = np.empty(-(-n // p), dtype=np.int64)
    for step in range(p - 1):
        send_lo, send_hi = chunk_bounds(n, p, (rank - step - 1) % p)
        recv_lo, recv_hi = chunk_bounds(n, p, (rank - step - 2) % p)
        received = incoming[: recv_hi - recv_lo]
        comm.sendrecv(buf[send_lo:send_hi], (rank + 1) % p, received, (rank - 1) % p)
        comm.reduce_local(op, buf[recv_lo:recv_hi], received)
    return chunk_bounds(n, p, rank)
"""


# An all-gather that receives the wrong chunk (a newcomer's mistake): on n = 1 on 4 ranks it
# receives one element where it posted room for none
WRONG_CHUNK = """
import numpy as np
from mpi4py import MPI
from allreduce import chunk_bounds
from allreduce.lab import patient

def allgather_off_by_two(buf, comm):
    p, rank, n = comm.size, comm.rank, len(buf)
    for s in range(p - 1):
        send_lo, send_hi = chunk_bounds(n, p, (rank - s) % p)
        recv_lo, recv_hi = chunk_bounds(n, p, (rank - s + 1) % p)
        comm.sendrecv(buf[send_lo:send_hi], (rank + 1) % p, buf[recv_lo:recv_hi], (rank - 1) % p)
"""


def test_a_check_names_the_receive_a_longer_message_overflowed_and_a_lab_cell_does_not_hang():
    """The check said only "a message was longer than its receive buffer"; and lab 50's
    own cell that runs the student's ring (not a check) hung the engines for good."""
    import ipyparallel as ipp

    with lab.cluster(n=4) as view:
        view.execute(WRONG_CHUNK, block=True)
        with pytest.raises(AssertionError, match=r"rank \d posted a receive of 0 int64 "
                           r"elements from rank \d, and rank \d sent a longer message"):
            lab.check(view, "allgather_off_by_two", "allgather", counts=(1,))
        started = time.monotonic()
        with pytest.raises(ipp.error.CompositeError, match="a deadlock"):
            view.execute("ring = patient(MPI.COMM_WORLD)\n"
                         "ring.recv(np.empty(1), (ring.rank - 1) % ring.size)  # all receive",
                         block=True)
        assert time.monotonic() - started < 30


# Lab 65's ZeRO-2 step, right and not: its check cell on the engines runs the library's
# own reduce_scatter and allgather (the grader's runs route them through its judge)
ZERO2 = """
import numpy as np
import allreduce
import torch  # as the lab's first cell: the check gives torch tensors
from allreduce import chunk_bounds

def zero2_right(w, g, comm, lr):
    lo, hi = allreduce.reduce_scatter(g, comm)
    w[lo:hi] -= lr * g[lo:hi]
    allreduce.allgather(w, comm)

def zero2_ddp(w, g, comm, lr):
    g.copy_(allreduce.allreduce(g, comm))
    w -= lr * g

def zero2_no_allgather(w, g, comm, lr):
    lo, hi = allreduce.reduce_scatter(g, comm)
    w[lo:hi] -= lr * g[lo:hi]

def zero2_twice(w, g, comm, lr):
    zero2_right(w, g.clone(), comm, lr / 2)
    zero2_right(w, g, comm, lr / 2)

def zero2_gathers_gradients(w, g, comm, lr):  # right weights, an allreduce of the gradients
    allreduce.reduce_scatter(g, comm)
    allreduce.allgather(g, comm)
    w -= lr * g

def zero2_own_ring(w, g, comm, lr):  # the library's messages, written by hand
    p, r, n = comm.size, comm.rank, len(g)
    g, w, incoming = g.numpy(), w.numpy(), np.empty(-(-len(g) // comm.size), g.numpy().dtype)
    for s in range(p - 1):
        send, recv = chunk_bounds(n, p, (r - s - 1) % p), chunk_bounds(n, p, (r - s - 2) % p)
        got = incoming[: recv[1] - recv[0]]
        comm.sendrecv(g[send[0]:send[1]], (r + 1) % p, got, (r - 1) % p)
        g[recv[0]:recv[1]] += got
    lo, hi = chunk_bounds(n, p, r)
    w[lo:hi] -= lr * g[lo:hi]
    for s in range(p - 1):
        send, recv = chunk_bounds(n, p, (r - s) % p), chunk_bounds(n, p, (r - s - 1) % p)
        comm.sendrecv(w[send[0]:send[1]], (r + 1) % p, w[recv[0]:recv[1]], (r - 1) % p)
"""


def test_a_zero2_check_cell_takes_the_library_s_phases_and_nothing_else():
    """As the grader: the values, the messages' peers and sizes, and what they carry (an
    all-gather of the gradients gives the right weights and scores 0 there)."""
    with lab.cluster(n=4) as view:
        view.execute(ZERO2)
        lab.check(view, "zero2_right", "zero2_step", counts=(4, 7))
        lab.check(view, "zero2_own_ring", "zero2_step", counts=(4, 7))
        for function, says in [
                ("zero2_gathers_gradients", r"rank 0's message \d to rank 1 does not hold what a "
                                            "ZeRO-2 step sends there: .* its all-gather each "
                                            "rank's chunk of the weights after its update"),
                ("zero2_ddp", "called the library's allreduce .*: of the library it may call "
                              "allreduce.reduce_scatter and allreduce.allgather only"),
                ("zero2_no_allgather", r"rank 0, chunk 1 .* \(not updated: did the all-gather "
                                       r"bring it from its owner\?\)"),
                ("zero2_twice", r"zero2_twice on rank 0 sent 12 messages .*; a ZeRO-2 step "
                                 "sent 6 messages")]:
            with pytest.raises(AssertionError, match=says):
                lab.check(view, function, "zero2_step", counts=(4, 7))


def test_a_check_cell_catches_work_handed_to_mpi_or_the_library():
    with lab.cluster(n=4) as view:
        view.execute(HANDED_OFF)
        for function, says in [("by_mpi", r"your by_mpi sent 0 messages through comm for n = 4 "
                                          r"on 4 ranks \(did it hand the work to MPI"),
                               ("by_library", "called the library's taught_reduce_scatter"),
                               ("not_a_ring", "on rank 0 sent 3 messages .* to ranks 1, 2, 3 "
                                              "for n = 4 .* it must pass chunks around the ring"),
                               ("peeks", "AttributeError: .* has no attribute 'comm'"),
                               # right on every int64 case; the last case is float32
                               ("int64_scratch", r"for n = 7.*\[in float32, after the int64 "
                                                 r"cases were right")]:
            with pytest.raises(AssertionError, match=says):
                lab.check(view, function, "reduce_scatter", counts=(4, 7))
        # a check run before its solution cell (after a kernel restart, say): a clear word,
        # not four NameErrors and ipyparallel's traceback
        with pytest.raises(NameError, match="the engines have no never_defined: run the %%px "
                           "cell that defines it"):
            lab.check(view, "never_defined", "reduce_scatter", counts=(4,))
