"""A control group for each rank's sandbox: the memory and process limits the kernel holds
for everything in it, whatever kind of memory (``RLIMIT_DATA``, per process, does not count
``memfd``, ``MAP_SHARED | MAP_ANONYMOUS`` mappings or SysV shared memory).

Each group is made **under the grader's own group** (read from ``/proc/self/cgroup``), never
at a hierarchy's root, so that whatever limits the grader itself has still hold: on cgroup
v1, a folder in the memory hierarchy (``memory.limit_in_bytes``, and
``memory.memsw.limit_in_bytes`` where swap is accounted) and one in the pids hierarchy
(``pids.max``); on cgroup v2, one folder (``memory.max``, ``memory.swap.max``, ``pids.max``)
where the grader's group already delegates those controllers to its children.  Where the
cpu controller is there too (v1: a cpu folder; v2: delegated), each sandbox is also a group
of its own for the scheduler, with the default weight: a submission that forks a hundred
busy processes gets one group's share of the CPU, not a hundred, so an honest submission
graded beside it (``--jobs``) is not pushed past its timeout.  The sandbox
is started in its groups (:func:`enter`: a shell writes its own pid into them, then runs
``bwrap``), so its first process and every one after it are counted.

Where no group can be made (not root, a read-only hierarchy, v2 without delegation),
:func:`why_not` says why and grading says so (:mod:`allreduce.grading.cli`).
"""

from __future__ import annotations

import itertools
import os
import time
from pathlib import Path

ROOT = Path("/sys/fs/cgroup")
_NUMBER = itertools.count()


def _own(proc: str = "/proc/self/cgroup") -> dict[str, str]:
    """The grader's group per controller (``"memory"``, ``"pids"``; ``""`` for v2)."""
    found = {}
    for line in Path(proc).read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        for controller in controllers.split(",") if controllers else [""]:
            found[controller] = path
    return found


def _parents() -> dict[str, Path] | str:
    """Where the groups go, per file kind (v1: memory and pids folders; v2: one), or why
    there is nowhere."""
    own = _own()
    v1 = {c: ROOT / c / own[c].lstrip("/") for c in ("memory", "pids") if c in own}
    if len(v1) == 2 and all((p / "cgroup.procs").exists() for p in v1.values()):
        if not all(os.access(p, os.W_OK) for p in v1.values()):
            return "the cgroup v1 memory and pids folders are not writable (not root?)"
        cpu = ROOT / "cpu" / own.get("cpu", "/").lstrip("/")
        if "cpu" in own and (cpu / "cgroup.procs").exists() and os.access(cpu, os.W_OK):
            v1["cpu"] = cpu  # where there is one: a group of its own shares the CPU fairly
        return v1
    if "" in own:
        parent = ROOT / own[""].lstrip("/")
        try:
            delegated = (parent / "cgroup.subtree_control").read_text().split()
        except OSError:
            return "no cgroup memory and pids controllers here"
        if not {"memory", "pids"} <= set(delegated):
            return (f"the grader's cgroup v2 ({parent}) does not delegate the memory and pids "
                    "controllers to its children")
        if not os.access(parent, os.W_OK):
            return f"the grader's cgroup v2 ({parent}) is not writable (not root?)"
        return {"": parent}
    return "no cgroup memory and pids controllers here"


def why_not() -> str | None:
    """``None`` if each sandbox gets its groups here, else why not."""
    where = _parents()
    if isinstance(where, str):
        return where
    try:
        group = Group.make(16 << 20, 4)
    except OSError as error:
        return f"a cgroup could not be made: {error}"
    group.remove()
    return None


_SWEPT: list[int] = []  # remove_stale has run in this process (how many it removed)


def remove_stale(where: dict[str, Path]) -> int:
    """Remove the empty groups that graders which are gone left behind (killed before they
    could remove their own): ``allreduce-grade-PID-N`` whose PID runs no process."""
    removed = 0
    for parent in where.values():
        for folder in parent.glob("allreduce-grade-*-*"):
            try:
                pid = int(folder.name.split("-")[2])
                os.kill(pid, 0)
            except ProcessLookupError:
                try:
                    folder.rmdir()  # fails, and is kept, while a process is still in it
                    removed += 1
                except OSError:
                    pass
            except (ValueError, PermissionError):
                pass  # not a grader's name, or a process of another user's: alive
    return removed


class Group:
    """The groups of one sandbox: ``memory`` bytes and ``pids`` processes and threads, in
    all, for everything in it."""

    def __init__(self, folders: list[Path]):
        self.folders = folders

    @classmethod
    def make(cls, memory: int, pids: int) -> Group:
        where = _parents()
        if isinstance(where, str):
            raise OSError(where)
        if not _SWEPT:
            _SWEPT.append(remove_stale(where))
        name = f"allreduce-grade-{os.getpid()}-{next(_NUMBER)}"
        group = cls([])
        try:
            for kind, parent in where.items():
                folder = parent / name
                folder.mkdir()
                group.folders.append(folder)
                if kind == "memory":
                    (folder / "memory.limit_in_bytes").write_text(str(memory))
                    if (folder / "memory.memsw.limit_in_bytes").exists():
                        (folder / "memory.memsw.limit_in_bytes").write_text(str(memory))
                elif kind == "":
                    (folder / "memory.max").write_text(str(memory))
                    if (folder / "memory.swap.max").exists():
                        (folder / "memory.swap.max").write_text("0")
                if kind in ("pids", ""):
                    (folder / "pids.max").write_text(str(pids))
        except OSError:
            group.remove()
            raise
        return group

    def enter(self, argv: list[str]) -> list[str]:
        """``argv`` started inside the groups: a shell writes its pid into each, then
        becomes ``argv`` (so nothing runs outside them, not even for a moment)."""
        script = ('n=$1; shift; while [ "$n" -gt 0 ]; do echo $$ > "$1" || exit 125; shift; '
                  'n=$((n - 1)); done; exec "$@"')
        procs = [str(folder / "cgroup.procs") for folder in self.folders]
        return ["/bin/sh", "-c", script, "sh", str(len(procs)), *procs, *argv]

    def remove(self) -> None:
        """Remove the groups (once the processes in them have ended: tried for a second)."""
        for folder in self.folders:
            for _ in range(20):
                try:
                    folder.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:  # its last processes are still being reaped
                    time.sleep(0.05)
        self.folders = []
