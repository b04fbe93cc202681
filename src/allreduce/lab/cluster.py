"""The labs' cluster: ipyparallel engines started by MPI, in one call (see :mod:`allreduce.lab`).
The engines stop with the block, with :func:`stop`, or when the kernel exits or dies.

On a cluster an instructor points the same call at the cluster's MPI and at an ipyparallel
profile (:func:`settings`): keyword arguments first, then the environment variables
``ALLREDUCE_MPIEXEC`` (a command, e.g. ``srun --mpi=pmi2``) and ``ALLREDUCE_IPP_PROFILE`` (a
profile's name or folder, e.g. ``etc/cluster/profile_allreduce``), and the rank count from
``SLURM_NTASKS`` when none is given (chapter "The allreduce library", "On a cluster")."""

from __future__ import annotations

import atexit
import logging
import os
import shlex
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from ..launch import ONE_THREAD_PER_RANK, rank_environment
from ..launch import mpiexec as _mpiexec

_running: list = []  # the cluster that start() made, for stop()
_live: list = []  # every cluster not yet stopped, for _stop_all at exit


#: The environment variables :func:`settings` reads (chapter "The allreduce library",
#: "On a cluster").
MPIEXEC_VARIABLE, PROFILE_VARIABLE, TASKS_VARIABLE = (
    "ALLREDUCE_MPIEXEC", "ALLREDUCE_IPP_PROFILE", "SLURM_NTASKS")
DEFAULT_RANKS = 4


@dataclass(frozen=True)
class Settings:
    """How :func:`start` starts the engines: ``n`` ranks, launched by the ``mpiexec``
    command (``None``: the one the profile's ``ipcluster_config.py`` names), with an
    ipyparallel ``profile`` (a folder or a profile's name; ``None``: a throw-away
    configuration that starts MPI engines on this machine)."""

    n: int
    mpiexec: tuple[str, ...] | None
    profile: str | None = None


def settings(n: int | None = None, *, mpiexec: str | None = None, profile: str | None = None,
             environ: Mapping[str, str] | None = None) -> Settings:
    """What :func:`start` will do: each keyword given wins; then the environment
    (``ALLREDUCE_MPIEXEC``, ``ALLREDUCE_IPP_PROFILE``, ``SLURM_NTASKS``); then the
    environment's own ``mpiexec`` (or, with a profile, the profile's), no profile and 4
    ranks.

    Python's isolated mode (``python -I``, which is how the grader starts every rank in its
    sandbox, with an emptied environment besides) ignores the environment variables, as it
    ignores ``PYTHONPATH``: a graded run never launches what a variable names."""
    if environ is None:
        environ = {} if sys.flags.isolated else os.environ
    command = mpiexec or environ.get(MPIEXEC_VARIABLE)
    tasks = environ.get(TASKS_VARIABLE)
    if n is None and tasks:
        if not tasks.isdigit() or int(tasks) < 1:
            raise ValueError(f"{TASKS_VARIABLE} must be a positive integer, got {tasks!r}")
        n = int(tasks)
    n = DEFAULT_RANKS if n is None else n
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise ValueError(f"n must be a positive integer, got {n!r}")
    if tasks and tasks.isdigit() and n > int(tasks):
        raise ValueError(f"the lab asks for {n} ranks, but the Slurm job has {tasks} tasks "
                         f"({TASKS_VARIABLE}): ask sbatch for --ntasks={n} or more")
    profile = profile or environ.get(PROFILE_VARIABLE) or None
    if command is not None and not shlex.split(command):
        raise ValueError(f"the mpiexec command is empty: {command!r}")
    words = (tuple(shlex.split(command)) if command
             else None if profile else (str(_mpiexec()),))
    return Settings(n, words, profile)


#: The repository's root, where a relative profile folder (``etc/cluster/profile_allreduce``)
#: is also looked for: a notebook's kernel runs in ``student/`` or ``labs/``.
ROOT = Path(__file__).resolve().parents[3]


def _profile(profile: str) -> dict:
    """ipyparallel's arguments for a profile given as a folder (relative to the working
    folder or to the repository's root) or as a name."""
    folder = Path(profile).expanduser()
    for place in (folder, ROOT / folder):
        if place.is_dir():
            return {"profile_dir": str(place.resolve())}
    if os.sep in profile:
        raise FileNotFoundError(f"no ipyparallel profile folder {profile} (looked in "
                                f"{Path.cwd()} and {ROOT})")
    return {"profile": profile}


def _start(n: int | None, timeout: float, mpiexec: str | None = None,
           profile: str | None = None):
    import ipyparallel as ipp
    from traitlets.config import Config

    chosen = settings(n, mpiexec=mpiexec, profile=profile)
    n = chosen.n
    config = Config()
    # With a profile, its ipcluster_config.py chooses the engines' launcher (MPI, Slurm,
    # SSH) and may name the mpiexec itself; a command given here still wins over it.
    if chosen.mpiexec:
        config.MPILauncher.mpi_cmd = list(chosen.mpiexec)
    config.MPIEngineSetLauncher.environment = {
        name: value for name, value in rank_environment().items() if name in ONE_THREAD_PER_RANK}
    where = (_profile(chosen.profile) if chosen.profile
             else {"engines": "mpi", "load_profile": False})
    # _stop_all, registered below, stops the engines when this Python exits (ipyparallel's
    # own shutdown_atexit does too, but about 3 s slower, which every nbval run would wait).
    # Errors only: the INFO lines name process ids and would differ in every notebook run.
    # A heartbeat every second instead of every 3: the controller counts an engine as ready
    # at its first heartbeat, so this cuts start-up from about 10 s to 6-7 s here; an
    # engine is declared dead after 10 missed beats.
    engines = ipp.Cluster(n=n, config=config, **where,
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
    import subprocess

    launchers = [engines.controller, *engines.engines.values()]
    groups = [str(launcher.pid) for launcher in launchers if getattr(launcher, "pid", None)]
    subprocess.Popen([sys.executable, "-c", _WATCHDOG, str(os.getpid()), *groups],
                     start_new_session=True, stdin=subprocess.DEVNULL,
                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


@contextmanager
def cluster(n: int | None = None, *, timeout: float = 60, mpiexec: str | None = None,
            profile: str | None = None) -> Iterator:
    """Start ``n`` MPI engines and yield a blocking, activated ``DirectView`` on all of them.

    Engine ``i`` is MPI rank ``i`` of ``MPI.COMM_WORLD`` on the engines.  The controller and
    engines are stopped when the ``with`` block ends, however it ends.  ``n``, ``mpiexec``
    and ``profile``: see :func:`settings`.
    """
    engines, view = _start(n, timeout, mpiexec, profile)
    try:
        yield view
    finally:
        _stop(engines, view)


def start(n: int | None = None, *, timeout: float = 60, mpiexec: str | None = None,
          profile: str | None = None):
    """For notebooks: start ``n`` MPI engines and return the blocking, activated view, as
    :func:`cluster` does.  :func:`stop` (or the kernel exiting) stops them.  ``n``,
    ``mpiexec`` and ``profile``: see :func:`settings`."""
    stop()
    engines, view = _start(n, timeout, mpiexec, profile)
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
