"""The thread transport: ranks as threads of one process, messages through queues.

It is a complete transport, not a stand-in: sends are eager (the data is copied into the
receiver's mailbox), receives check that the lengths match, and a rank that waits too long,
or whose peer has failed, raises instead of hanging.  The book records its traces with it
at build time (no ``mpiexec`` needed), and the unit tests run every algorithm at world sizes
up to 16 with it in about a second.

    >>> from allreduce.transports.threads import run_threads
    >>> run_threads(3, lambda comm: comm.rank * 10)
    [0, 10, 20]
"""

from __future__ import annotations

import queue
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..comm import Communicator, members


class PeerFailed(RuntimeError):
    """Raised in a rank that was waiting when another rank of its world failed."""


class ThreadWorld:
    """The shared state of ``size`` thread ranks: mailboxes, a barrier, gather slots."""

    def __init__(self, size: int, timeout: float = 60.0, failed: threading.Event | None = None):
        if size < 1:
            raise ValueError(f"a world needs at least one rank, got size={size}")
        self.size = size
        self.timeout = timeout
        self.failed = failed or threading.Event()  # a group's world fails with its parent's
        self._groups: dict[tuple, ThreadWorld] = {}
        self._mailboxes: defaultdict[tuple[int, int, int], queue.SimpleQueue] = defaultdict(
            queue.SimpleQueue
        )
        self._lock = threading.Lock()
        self._turnstile = threading.Condition()
        self._arrived = 0
        self._generation = 0
        self._slots: list[Any] = [None] * size

    def mailbox(self, source: int, dest: int, tag: int) -> queue.SimpleQueue:
        with self._lock:
            return self._mailboxes[source, dest, tag]

    def barrier(self) -> None:
        """Wait for every rank.  A rank released by the barrier always returns normally,
        even if another rank fails right afterwards."""
        with self._turnstile:
            generation = self._generation
            self._arrived += 1
            if self._arrived == self.size:
                self._arrived, self._generation = 0, generation + 1
                self._turnstile.notify_all()
                return
            deadline = time.monotonic() + self.timeout
            while generation == self._generation:
                if self.failed.is_set():
                    raise PeerFailed("another rank failed while this one waited at a barrier")
                if time.monotonic() > deadline:
                    raise TimeoutError(f"a barrier waited {self.timeout:.0f} s: a deadlock?")
                self._turnstile.wait(0.05)

    def abort(self) -> None:
        self.failed.set()
        with self._turnstile:
            self._turnstile.notify_all()

    def gather(self, rank: int, value: Any) -> list[Any]:
        self._slots[rank] = value
        self.barrier()
        everything = list(self._slots)
        self.barrier()  # nobody overwrites a slot before everyone has read it
        return everything

    def communicators(self) -> list[ThreadCommunicator]:
        return [ThreadCommunicator(self, rank) for rank in range(self.size)]

    def group(self, key: tuple, size: int) -> ThreadWorld:
        """The world of one group of a split (``key`` names the split and the colour): made
        by the first of its ranks to ask, found by the others."""
        with self._lock:
            if key not in self._groups:
                self._groups[key] = ThreadWorld(size, self.timeout, self.failed)
            return self._groups[key]


class _Receive:
    __slots__ = ("buf", "source", "tag")

    def __init__(self, buf, source: int, tag: int):
        self.buf, self.source, self.tag = buf, source, tag


class ThreadCommunicator(Communicator):
    """One rank of a :class:`ThreadWorld`."""

    def __init__(self, world: ThreadWorld, rank: int):
        self.world = world
        self.rank = rank
        self.size = world.size

    def _check_peer(self, peer: int) -> None:
        if not 0 <= peer < self.size:
            raise ValueError(f"rank {self.rank}: peer {peer} is outside a world of size {self.size}")

    def isend(self, buf, dest: int, tag: int = 0) -> None:
        self._check_peer(dest)
        data = buf.copy() if isinstance(buf, np.ndarray) else buf.clone()
        self.world.mailbox(self.rank, dest, tag).put(data)
        return None  # eager: the send is complete once the copy is in the mailbox

    def irecv(self, buf, source: int, tag: int = 0) -> _Receive:
        self._check_peer(source)
        return _Receive(buf, source, tag)

    def waitall(self, requests: Sequence[_Receive | None]) -> None:
        for request in requests:
            if request is not None:
                self._complete(request)

    receives_any_length = True  # a message carries its own length here

    def send_any(self, buf, dest: int, tag: int = 0) -> None:
        self.send(buf, dest, tag)

    def sendrecv_any(self, sendbuf, dest: int, recvbuf, source: int, tag: int = 0) -> bool:
        self.isend(sendbuf, dest, tag)
        return self.recv_any(recvbuf, source, tag)

    def recv_any(self, buf, source: int, tag: int = 0) -> bool:
        self._check_peer(source)
        data = self._take(source, tag)
        fits = min(len(data), len(buf))
        self.copy(buf[:fits], data[:fits])
        return len(data) == len(buf)

    def _complete(self, request: _Receive) -> None:
        data = self._take(request.source, request.tag)
        if data.shape != request.buf.shape:
            raise RuntimeError(
                f"rank {self.rank}: message from rank {request.source} has {data.shape[0]} "
                f"elements, the receive expected {request.buf.shape[0]}"
            )
        self.copy(request.buf, data)

    def _take(self, source: int, tag: int):
        """The next message from ``source`` with ``tag``, waiting for it."""
        box = self.world.mailbox(source, self.rank, tag)
        deadline = time.monotonic() + self.world.timeout
        while True:
            if self.world.failed.is_set():
                raise PeerFailed(f"rank {self.rank}: another rank failed while this one waited")
            try:
                data = box.get(timeout=0.05)
                break
            except queue.Empty:
                if time.monotonic() > deadline:
                    raise TimeoutError(
                        f"rank {self.rank}: no message from rank {source} "
                        f"(tag {tag}) after {self.world.timeout:.0f} s: a deadlock?"
                    ) from None
        return data

    def barrier(self) -> None:
        self.world.barrier()

    def native(self, array):
        return array  # threads share memory: numpy arrays and tensors alike

    def allgather_ints(self, values: np.ndarray) -> np.ndarray:
        return np.array(self.world.gather(self.rank, np.array(values, dtype=np.int64)))

    def allgather_object(self, obj: Any) -> list[Any]:
        return self.world.gather(self.rank, obj)

    def _split(self, colors: tuple[int, ...], index: int) -> ThreadCommunicator:
        group = members(colors, self.rank)
        world = self.world.group((colors, colors[self.rank]), len(group))
        return ThreadCommunicator(world, group.index(self.rank))


def run_threads(
    size: int,
    function: Callable[[ThreadCommunicator], Any],
    *,
    timeout: float = 60.0,
    return_exceptions: bool = False,
) -> list[Any]:
    """Run ``function(comm)`` on ``size`` thread ranks and return their results by rank.

    If a rank raises, the others are woken (they raise :class:`PeerFailed`) and the first
    failing rank's exception is re-raised here, unless ``return_exceptions`` is set, in which
    case each rank's exception takes the place of its result.
    """
    world = ThreadWorld(size, timeout=timeout)
    results: list[Any] = [None] * size
    failures: list[BaseException | None] = [None] * size

    def body(comm: ThreadCommunicator) -> None:
        try:
            results[comm.rank] = function(comm)
        except BaseException as error:  # noqa: BLE001 - handed back to the caller
            failures[comm.rank] = error
            world.abort()  # wake ranks waiting on this one instead of letting them time out

    threads = [
        threading.Thread(target=body, args=(comm,), name=f"rank-{comm.rank}", daemon=True)
        for comm in world.communicators()
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout + 5)
        if thread.is_alive():
            world.abort()
            raise TimeoutError(f"{thread.name} did not finish within {timeout:.0f} s")
    if return_exceptions:
        return [failure if failure is not None else result for result, failure in zip(results, failures)]
    failed = [f for f in failures if f is not None]
    if failed:  # the first rank that failed by itself, not one woken by another's failure
        raise next((f for f in failed if not isinstance(f, PeerFailed)), failed[0])
    return results
