"""The labs' cluster: ipyparallel engines started by MPI, in one call; and the check cells.

In a script, a ``with`` block::

    with allreduce.lab.cluster(n=4) as view:
        view.execute("from mpi4py import MPI; rank = MPI.COMM_WORLD.rank")
        print(view["rank"])         # [0, 1, 2, 3]: engine i is MPI rank i

In a notebook, where a block cannot span cells, ``view = allreduce.lab.start(n=4)`` and, in
the last cell, ``allreduce.lab.stop()``.  The engines also stop when the kernel exits or
restarts, so a failing cell never leaves them behind.

The engines are started with the ``mpiexec`` of the environment that runs this Python (the
PyPI MPICH that ``make`` installs into ``.venv``), never with whatever ``mpiexec`` is first on
PATH: Debian's cannot start the PyPI MPICH.  The view is blocking and activated, so ``%%px``
cells work at once, and the engines are stopped when the block ends, even if a cell fails.

On a cluster, start the engines with ipyparallel's own launchers instead (``ipcluster
start --engines=MPI`` in an allocation, or ``--engines=Slurm``/``SSH``) and connect with
``ipyparallel.Client()``: see the chapter "The allreduce library".
"""

from __future__ import annotations

import atexit
import logging
import os
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from .algorithms._schedule import chunk_bounds

_running: list = []  # the cluster that start() made, for stop()
_live: list = []  # every cluster not yet stopped, for _stop_all at exit


def mpiexec() -> Path:
    """The ``mpiexec`` next to this Python (the environment's own MPI)."""
    path = Path(sys.executable).parent / "mpiexec"
    if not path.exists():
        raise FileNotFoundError(
            f"no mpiexec next to {sys.executable}: install the environment with `make venv` "
            "(it brings MPI as the mpich wheel)"
        )
    return path


#: One compute thread per rank.  Numerical libraries (OpenBLAS, MKL, OpenMP in torch) start
#: a thread per core in every process by default; with several MPI ranks per machine those
#: threads spin on the same cores as the ranks, and a 20 µs allreduce can take 20 ms.
#: Measured here: numpy work between allreduces on 4 ranks made each allreduce 40× slower.
ONE_THREAD_PER_RANK = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1",
                       "MKL_NUM_THREADS": "1"}


def rank_environment() -> dict[str, str]:
    """This process's environment, with :data:`ONE_THREAD_PER_RANK` where the user has not
    chosen otherwise: what the processes that the labs, the book and the benchmark start
    under ``mpiexec`` run with."""
    return {**ONE_THREAD_PER_RANK, **os.environ}


def _start(n: int, timeout: float):
    import ipyparallel as ipp
    from traitlets.config import Config

    config = Config()
    config.MPILauncher.mpi_cmd = [str(mpiexec())]
    config.MPIEngineSetLauncher.environment = {
        name: value for name, value in rank_environment().items() if name in ONE_THREAD_PER_RANK}
    # _stop_all, registered below, stops the engines when this Python exits (ipyparallel's
    # own shutdown_atexit does too, but about 3 s slower, which every nbval run would wait).
    # Errors only: the INFO lines name process ids and would differ in every notebook run.
    # A heartbeat every second instead of every 3: the controller counts an engine as ready
    # at its first heartbeat, so this cuts start-up from about 10 s to 6-7 s here; an
    # engine is declared dead after 10 missed beats.
    engines = ipp.Cluster(engines="mpi", n=n, config=config, load_profile=False,
                          shutdown_atexit=False, log_level=logging.ERROR,
                          controller_args=["--HeartMonitor.period=1000"])
    try:
        engines.start_cluster_sync()
        _watch(engines)
        client = engines.connect_client_sync()
        client.wait_for_engines(n, timeout=timeout, interactive=False)
    except BaseException:
        engines.stop_cluster_sync()
        raise
    view = client[:]
    view.block = True
    _live.append((engines, view))
    if _in_ipython():
        from IPython import get_ipython

        view.activate()  # %px and %%px now run on these engines
        # no progress bars on long %%px cells: they would make outputs differ run to run
        get_ipython().run_line_magic("pxconfig", "--progress-after -1")
    return engines, view


_WATCHDOG = """
import os, signal, sys, time

def alive(kill, target):
    try:
        kill(target, 0)
        return True
    except OSError:
        return False

parent, groups = int(sys.argv[1]), [int(g) for g in sys.argv[2:]]
while alive(os.kill, parent):
    groups = [g for g in groups if alive(os.killpg, g)]
    if not groups:  # stopped normally: nothing to do, and no reused id to hit later
        sys.exit()
    time.sleep(0.5)
for group in groups:
    try:
        os.killpg(group, signal.SIGKILL)
    except OSError:
        pass
"""


def _watch(engines) -> None:
    """Kill the controller and the engines if this process dies without stopping them.

    ``atexit`` stops them on a normal exit, but a kernel can be killed outright (nbval
    shuts its kernels down that way, and so does a crash); ipyparallel starts the
    controller and ``mpiexec`` in sessions of their own, so nothing else would stop them.
    A small process watches this one and kills those two process groups when it is gone;
    it leaves as soon as the groups are gone, so a later process reusing their ids is safe.
    """
    import os
    import subprocess

    launchers = [engines.controller, *engines.engines.values()]
    groups = [str(launcher.pid) for launcher in launchers if getattr(launcher, "pid", None)]
    subprocess.Popen([sys.executable, "-c", _WATCHDOG, str(os.getpid()), *groups],
                     start_new_session=True, stdin=subprocess.DEVNULL,
                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


@contextmanager
def cluster(n: int = 4, *, timeout: float = 60) -> Iterator:
    """Start ``n`` MPI engines and yield a blocking, activated ``DirectView`` on all of them.

    Engine ``i`` is MPI rank ``i`` of ``MPI.COMM_WORLD`` on the engines.  The controller and
    engines are stopped when the ``with`` block ends, however it ends.
    """
    engines, view = _start(n, timeout)
    try:
        yield view
    finally:
        _stop(engines, view)


def start(n: int = 4, *, timeout: float = 60):
    """For notebooks: start ``n`` MPI engines and return the blocking, activated view, as
    :func:`cluster` does.  :func:`stop` (or the kernel exiting) stops them."""
    stop()
    engines, view = _start(n, timeout)
    _running.append((engines, view))
    return view


def stop() -> None:
    """Stop the engines that :func:`start` started, if any."""
    while _running:
        _stop(*_running.pop())


def _stop(engines, view) -> None:
    # the client first, then the engines, then the controller: about 1 s here, where
    # stop_cluster_sync() with the client still open takes about 4 s
    if (engines, view) not in _live:
        return
    _live.remove((engines, view))
    view.client.close()
    try:
        engines.stop_engines_sync()
    finally:
        engines.stop_controller_sync()


@atexit.register
def _stop_all() -> None:
    """Stop every cluster this process started and has not stopped (at exit)."""
    while _live:
        try:
            _stop(*_live[-1])
        except Exception:  # noqa: BLE001 - exiting anyway; the watchdog kills what is left
            _live.pop()


def _in_ipython() -> bool:
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    return get_ipython() is not None


# --- check cells -------------------------------------------------------------------------
# A lab's check cell calls check(view, name, phase) with the name of the student's
# function on the engines and what it should do (a key of PHASES).  It runs there on a duplicate of MPI.COMM_WORLD,
# against MPI's own Allreduce, for several sizes including ones p does not divide, and
# prints one deterministic line.  A wrong answer raises AssertionError naming the size, the
# rank, the chunk and the expected and actual values.  Inputs are contribution bit sets
# (rank r adds 2**r), so "actual" says exactly which ranks' data a chunk holds.

CHECK_COUNTS = (1, 3, 4, 7, 12, 1001)


def _ranks(bits: int, size: int) -> str:
    from .viz import contributors

    if bits == (1 << size) - 1:
        return f"all {size} ranks"
    names = contributors(bits)
    return ("ranks " + "+".join(map(str, names))) if names else "nothing"


def _first_wrong(name: str, n: int, rank: int, size: int, buf, expected, chunk: int) -> str | None:
    lo, hi = chunk_bounds(n, size, chunk)
    bad = np.flatnonzero(buf[lo:hi] != expected[lo:hi])
    if not len(bad):
        return None
    i = lo + int(bad[0])
    return (f"{name} is wrong for n = {n} on {size} ranks: rank {rank}, chunk {chunk} "
            f"(elements {lo}..{hi - 1}), element {i}: expected the data of "
            f"{_ranks(expected[i], size)}, got {_ranks(buf[i], size)} (value {int(buf[i])})")


def _checking_communicator(world, patience: float):
    """The library's MPI communicator, except that every wait gives up after ``patience``
    seconds without completing: a student's deadlock becomes an error on every rank
    instead of stuck engines."""
    from mpi4py import MPI

    from .comm import Communicator
    from .transports.mpi import MPICommunicator

    class CheckingCommunicator(MPICommunicator):
        # the non-blocking forms and waitall below, instead of MPI's blocking calls
        send, recv, sendrecv = Communicator.send, Communicator.recv, Communicator.sendrecv
        wait = Communicator.wait
        receives_any_length = False  # checks by all-gather, not by MPI's blocking Sendrecv

        def waitall(self, requests):
            requests = list(requests)
            statuses = [MPI.Status() for _ in requests]
            deadline = time.monotonic() + patience
            while not self._testall(requests, statuses):
                if time.monotonic() > deadline:
                    for request in requests:
                        if request != MPI.REQUEST_NULL:
                            request.Cancel()
                    raise TimeoutError(f"rank {self.rank} waited {patience:.0f} s for a message "
                                       "that never came: a deadlock?")
                time.sleep(0.0005)

        @staticmethod
        def _testall(requests, statuses) -> bool:
            try:
                return MPI.Request.Testall(requests, statuses)
            except MPI.Exception:  # the reason is in the statuses
                errors = [s.Get_error() for s in statuses if s.Get_error() != MPI.SUCCESS]
                if MPI.ERR_TRUNCATE in [MPI.Get_error_class(e) for e in errors]:
                    raise RuntimeError("a message was longer than its receive buffer: sender "
                                       "and receiver disagree on the chunk") from None
                raise RuntimeError("; ".join(MPI.Get_error_string(e) for e in errors)) from None

    return CheckingCommunicator(world)


def _all_chunks_wrong(name, n, rank, size, buf, expected) -> str | None:
    return next((problem for c in range(size)
                 if (problem := _first_wrong(name, n, rank, size, buf, expected, c))), None)


def _try_reduce_scatter(function, comm, n, mine, expected) -> str | None:
    """Ring reduce-scatter: chunk ``rank`` complete, and its bounds returned."""
    from .ops import OPS

    rank, size = comm.rank, comm.size
    buf = mine.copy()
    returned = function(buf, comm, OPS["sum"])
    if returned is None or tuple(returned) != chunk_bounds(n, size, rank):
        return (f"reduce_scatter returned {returned} on rank {rank} for n = {n}; it should "
                f"return the bounds of chunk {rank}, {chunk_bounds(n, size, rank)}")
    return _first_wrong("reduce_scatter", n, rank, size, buf, expected, rank)


def _try_allgather(function, comm, n, mine, expected) -> str | None:
    """Ring all-gather: from only chunk ``rank`` finished to every chunk everywhere."""
    rank, size = comm.rank, comm.size
    buf = np.zeros(n, dtype=mine.dtype)
    lo, hi = chunk_bounds(n, size, rank)
    buf[lo:hi] = expected[lo:hi]
    function(buf, comm)
    return _all_chunks_wrong("allgather", n, rank, size, buf, expected)


def _try_reduce_to_root(function, comm, n, mine, expected) -> str | None:
    """A reduce to rank 0, called as ``function(buf, comm, op, scratch)``."""
    from .ops import OPS

    buf, scratch = mine.copy(), np.empty_like(mine)
    function(buf, comm, OPS["sum"], scratch)
    if comm.rank:
        return None  # only the root's result is defined
    return _all_chunks_wrong("the reduce", n, 0, comm.size, buf, expected)


def _try_allreduce(function, comm, n, mine, expected) -> str | None:
    """A whole allreduce, called as ``function(buf, comm, op)``, in place."""
    from .ops import OPS

    buf = mine.copy()
    function(buf, comm, OPS["sum"])
    return _all_chunks_wrong("the allreduce", n, comm.rank, comm.size, buf, expected)


def _try_average_gradients(function, comm, n, mine, expected) -> str | None:
    """``function(grads, comm)`` must return the element-wise mean over ranks of a list of
    gradient arrays of different shapes (small integers: the mean is exact)."""
    from mpi4py import MPI

    shapes = [(n,), (2, n), (n, 3, 1)]
    rng = np.random.default_rng([n, comm.rank])
    grads = [rng.integers(-8, 9, shape).astype(np.float64) for shape in shapes]
    means = []
    for g in grads:
        total = np.empty_like(g)
        comm.comm.Allreduce(g, total, op=MPI.SUM)
        means.append(total / comm.size)
    result = function([g.copy() for g in grads], comm)
    if not isinstance(result, (list, tuple)) or len(result) != len(grads):
        return (f"average_gradients returned {type(result).__name__} on rank {comm.rank} for "
                f"n = {n}; it should return a list of {len(grads)} arrays")
    for index, (got, want) in enumerate(zip(result, means)):
        got = np.asarray(got)
        if got.shape != want.shape:
            return (f"average_gradients: gradient {index} has shape {got.shape} on rank "
                    f"{comm.rank} for n = {n}, expected {want.shape}")
        bad = np.argwhere(got != want)
        if len(bad):
            where = tuple(int(i) for i in bad[0])
            return (f"average_gradients is wrong for n = {n} on rank {comm.rank}: gradient "
                    f"{index}, element {where}: expected the mean {want[where]}, got {got[where]}")
    return None


PHASES = {"reduce_scatter": _try_reduce_scatter, "allgather": _try_allgather,
          "reduce_to_root": _try_reduce_to_root, "allreduce": _try_allreduce,
          "average_gradients": _try_average_gradients}


def _run_check(function, phase: str, counts, patience: float) -> list[tuple[int, int, str]]:
    """On each engine: run the student's ``function`` for every count, against MPI's own
    Allreduce; return the problems as ``(n, rank, message)``.  The ranks stop together at
    the first count where any of them found a problem."""
    from mpi4py import MPI

    world = MPI.COMM_WORLD
    rank = world.rank
    problems: list[tuple[int, int, str]] = []
    for n in counts:
        private = world.Dup()  # the student's messages cannot meet anyone else's
        mine = np.full(n, 1 << rank, dtype=np.int64)
        expected = np.empty_like(mine)
        world.Allreduce(mine, expected)  # MPI's own answer, the reference
        try:
            comm = _checking_communicator(private, patience)
            problem = PHASES[phase](function, comm, n, mine, expected)
        except Exception as error:  # reported, not raised: the other ranks must get here too
            problem = f"{phase} raised on rank {rank} for n = {n}: {type(error).__name__}: {error}"
        private.Free()
        if problem:
            problems.append((n, rank, problem))
        if world.allreduce(bool(problem), op=MPI.LOR):
            break
    return problems


def check(view, function: str, phase: str, *, counts=CHECK_COUNTS, timeout: float = 30,
          patience: float = 5) -> None:
    """A lab's check cell: run the engines' ``function`` as ``phase`` (a key of
    :data:`PHASES`) for each count in ``counts`` and print one deterministic line, or raise
    ``AssertionError`` with the first problem (smallest count, then lowest rank).  A wait
    that makes no progress for ``patience`` seconds is reported as a deadlock."""
    import ipyparallel as ipp

    if phase not in PHASES:
        raise ValueError(f"unknown phase {phase!r}; known: {', '.join(PHASES)}")
    result = view.apply_async(_run_check, ipp.Reference(function), phase, list(counts),
                              patience)
    try:
        problems = result.get(timeout=timeout)
    except ipp.error.TimeoutError:
        raise TimeoutError(
            f"{function} did not finish on all ranks within {timeout:.0f} s: a deadlock (a "
            "receive with no matching send) or an endless loop.  The engines are stuck; "
            "restart the kernel, which stops them, and run the notebook again.") from None
    found = sorted(problem for per_rank in problems for problem in per_rank)
    if found:  # the smallest size, then the lowest rank: the same report on every run
        # a rank that raised explains the others' time-outs, so it goes first
        found.sort(key=lambda p: (p[0], "TimeoutError" in p[2], p[1]))
        more = f"  ({len(found) - 1} more on other ranks)" if len(found) > 1 else ""
        raise AssertionError(found[0][2] + more)
    print(f"{function}: correct on {len(view)} ranks for n = {', '.join(map(str, counts))}")


def check_fit(function) -> None:
    """Check cell for the α-β fitting exercise (chapter "Why gradients must be
    aggregated"): ``function(sizes, seconds)`` must return ``(alpha, beta)`` minimising the
    squared relative error, as :func:`allreduce.cost.fit` does.  Runs here, not on the
    engines, on synthetic ping-pong times with known α and β and a fixed 5% ripple."""
    from . import cost

    sizes = [2**k for k in range(25)]
    ripple = [1 + 0.05 * ((-1) ** k) for k in range(len(sizes))]
    seconds = [(4e-6 + n * 1e-10) * r for n, r in zip(sizes, ripple)]
    expected = cost.fit([cost.Terms(1, n, 0) for n in sizes], seconds, gamma=False)
    got = function(sizes, seconds)
    if not isinstance(got, (tuple, list)) or len(got) != 2:
        raise AssertionError(f"the fit should return (alpha, beta), got {got!r}")
    for name, value, want in (("alpha", got[0], expected.alpha), ("beta", got[1], expected.beta)):
        if not np.isclose(value, want, rtol=1e-6, atol=0):
            raise AssertionError(f"{name} = {value:.6g}, expected {want:.6g} (the minimum of the "
                                 "squared relative error; an ordinary least-squares fit gives "
                                 "a different alpha)")
    print(f"fit: alpha = {got[0] * 1e6:.2f} us, 1/beta = {1 / got[1] / 1e9:.2f} GB/s, "
          "as allreduce.cost.fit finds")


def _check_models():
    """The machines the lab "Choosing an algorithm" checks its exercises on: this course's
    reference model, and the chapter's two simulated networks."""
    from . import cost
    from .algorithms.auto import DEFAULT_MODEL

    return {"the reference machine": DEFAULT_MODEL, **cost.NETWORKS}


def check_choice(function) -> None:
    """Check cell for the exercise ``choose_algorithm(model, p, nbytes)`` (chapter
    "Choosing an algorithm"): it must name a candidate of ``auto`` with the smallest
    predicted time, on three machines, 2 to 4,096 ranks and 8 B to 512 MiB.  Runs here."""
    from .algorithms.auto import CANDIDATES

    cases = 0
    for machine, model in _check_models().items():
        for p in (2, 3, 4, 5, 8, 12, 64, 100, 1024, 4096):
            for nbytes in (8 * 4**k for k in range(14)):
                got = function(model, p, nbytes)
                times = {name: model.time(name, p, nbytes) for name in CANDIDATES}
                if got not in times:
                    raise AssertionError(f"p = {p}, n = {nbytes} B: got {got!r}, expected one "
                                         f"of {', '.join(CANDIDATES)}")
                if times[got] > min(times.values()):
                    best = min(times, key=times.get)
                    raise AssertionError(
                        f"{machine}, p = {p}, n = {nbytes} B: {got} is predicted to take "
                        f"{times[got] * 1e6:.3g} us, but {best} takes {times[best] * 1e6:.3g} us")
                cases += 1
    print(f"choose_algorithm: the fastest candidate in all {cases} cases")


def check_crossover(function) -> None:
    """Check cell for the exercise ``doubling_crossover(model, p)``: the closed-form size
    in bytes at which Rabenseifner overtakes recursive doubling on a power-of-two ``p``,
    against :func:`allreduce.cost.crossover`'s bisection.  Runs here."""
    from . import cost

    for machine, model in _check_models().items():
        for p in (2, 4, 8, 64, 1024, 4096):
            want = cost.crossover(model, "recursive_doubling", "rabenseifner", p)
            got = function(model, p)
            if want is None or got is None:
                if want is not got:
                    raise AssertionError(f"{machine}, p = {p}: got {got!r}, expected {want!r}")
                continue
            if not np.isclose(got, want, rtol=1e-6):
                raise AssertionError(f"{machine}, p = {p}: got {got:.6g} B, bisection of the "
                                     f"model gives {want:.6g} B")
    print("doubling_crossover: agrees with the model's bisection on 3 machines, p = 2 to 4,096")


def check_busbw(function) -> None:
    """Check cell for the exercise ``busbw(nbytes, seconds, p)`` (chapter "Allreduce on
    GPUs: NCCL"), against :func:`allreduce.cost.busbw`.  Runs here."""
    from . import cost

    for p in (1, 2, 3, 4, 8, 1024):
        for nbytes, seconds in ((1024, 1e-5), (1 << 30, 0.01), (12345, 3.5e-3)):
            got, want = function(nbytes, seconds, p), cost.busbw(nbytes, seconds, p)
            if not np.isclose(got, want, rtol=1e-9):
                raise AssertionError(f"p = {p}, n = {nbytes} B in {seconds} s: got {got:.6g} "
                                     f"B/s, expected {want:.6g} B/s")
    print("busbw: agrees with nccl-tests' definition for p = 1 to 1,024")


def check_ddp_buckets(function) -> None:
    """Check cell for the exercise ``ddp_buckets(sizes, cap)``: the buckets DDP reduces after
    its rebuild (:func:`allreduce.ddp_buckets.ddp_buckets`, checked against a real DDP by
    the test suite).  Runs here."""
    from .ddp_buckets import ddp_buckets

    rng = np.random.default_rng(0)
    cases = [([4, 4, 4], 8), ([10, 2, 3], 4), ([], 8), ([1] * 7, 3)]
    cases += [(list(rng.integers(1, 100, rng.integers(1, 30))), int(rng.integers(50, 300)))
              for _ in range(50)]
    for sizes, cap in cases:
        want = ddp_buckets(sizes, cap)
        got = function(sizes, cap)
        if [list(b) for b in got] != want:
            raise AssertionError(f"sizes {sizes}, cap {cap}: got {got}, expected {want}")
    print(f"ddp_buckets: the buckets DDP would make, in {len(cases)} cases")


def _overlap_check(attach, steps: int) -> str | None:
    """On each engine: train with the student's hooks and without overlap; compare."""
    from mpi4py import MPI

    from .training import train

    world = MPI.COMM_WORLD
    private = world.Dup()
    try:
        plain = train(private, average="per_tensor", steps=steps)
        overlapped = train(private, average="overlap", attach=attach, steps=steps)
    finally:
        private.Free()
    if overlapped.weights.tobytes() != plain.weights.tobytes():
        worst = int(np.argmax(np.abs(overlapped.weights - plain.weights)))
        return (f"rank {world.rank}: after {steps} steps weight {worst} is "
                f"{overlapped.weights[worst]:.6g} with your hooks, {plain.weights[worst]:.6g} "
                "without overlap (is every gradient submitted exactly once?)")
    return None


def check_overlap(view, function: str, *, steps: int = 5, timeout: float = 60) -> None:
    """Check cell for the exercise ``attach_overlap(model, thread)`` (the capstone): train
    on the engines with the student's hooks and without overlap; the weights must be the
    same bits."""
    import ipyparallel as ipp

    result = view.apply_async(_overlap_check, ipp.Reference(function), steps)
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
