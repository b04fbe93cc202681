"""The judge: the grader's side of a run, outside the sandbox.  Every rank is connected to it
by a socket, and everything a rank does with another goes through it: the judge reads the
ranks' frames, puts each case to them, and hands every request to the case's bookkeeping
(:mod:`allreduce.grading.matching`), which matches sends with receives as MPI does, computes
each ``allreduce.allreduce`` and records what crossed.  So the trace the pattern check reads
is what actually happened, not what a rank says happened.
"""

from __future__ import annotations

import selectors
import socket
import threading
import time
from collections import deque

from . import wire
from .matching import Case, Failure, Outcome, clean

__all__ = ["STOP", "Failure", "Judge", "Outcome", "clean", "seconds"]

#: What :meth:`Judge.frames` gives in place of a header once a rank is lost (its process
#: ended, or it sent what is no frame); the reason comes as its one blob
LOST = object()
STOP = threading.Event()  # set on Ctrl-C: every judge gives up within a second
TICK = 0.2  # seconds between looks at STOP while no rank speaks
MAX_UNREAD = 64 << 20  # bytes of replies a rank has not read, before it fails
ERROR_GRACE = 2.0  # seconds the other ranks get to fail too, once one rank has failed


def seconds(value: float) -> str:
    """A time limit for a message: whole seconds, or two digits below ten ("0.37")."""
    return f"{value:.0f}" if value >= 10 else f"{value:.2g}"


class Judge:
    """Never blocks on a rank: the sockets are non-blocking, replies wait in an outbox per
    rank and leave as the rank reads them, and the deadline and Ctrl-C are looked at before
    every frame, so no rank can hold a case past its deadline by what it sends or fails to
    read."""

    def __init__(self, sockets: list[socket.socket]):
        self.sockets, self.size = sockets, len(sockets)
        self.readers = [wire.Reader() for _ in sockets]
        self.outbox: list[deque] = [deque() for _ in sockets]  # memoryviews not yet sent
        self.unread = [0] * self.size  # bytes in each outbox
        self.selector = selectors.DefaultSelector()
        for rank, sock in enumerate(sockets):
            sock.setblocking(False)
            self.selector.register(sock, selectors.EVENT_READ, rank)
        self.closed = [False] * self.size
        self.turn = 0  # the rank whose frames are taken first: each in turn

    def close(self) -> None:
        self.selector.close()
        for sock in self.sockets:
            sock.close()

    def send(self, rank: int, header: dict, blobs=()) -> None:
        """Queue a frame for ``rank`` and send what its socket takes now."""
        if self.closed[rank]:
            return  # it died; its silence will be reported
        frame = wire.pack(header, blobs)
        self.outbox[rank].append(memoryview(frame))
        self.unread[rank] += len(frame)
        if self.unread[rank] > MAX_UNREAD:  # that rank's failure, the lowest one reported
            self.outbox[rank].clear()
            self.unread[rank] = 0
            self._lose(rank, f"rank {rank} did not read the grader's replies (more than "
                             f"{MAX_UNREAD >> 20} MiB of them waited)")
            return
        self._flush(rank)

    def _flush(self, rank: int) -> None:
        box, sock = self.outbox[rank], self.sockets[rank]
        try:
            while box:
                sent = sock.send(box[0])
                self.unread[rank] -= sent
                if sent < len(box[0]):
                    box[0] = box[0][sent:]
                    break
                box.popleft()
        except BlockingIOError:
            pass
        except OSError:  # it died; its silence will be reported
            box.clear()
            self.unread[rank] = 0
        if not self.closed[rank]:
            events = selectors.EVENT_READ | (selectors.EVENT_WRITE if box else 0)
            if self.selector.get_key(sock).events != events:
                self.selector.modify(sock, events, rank)

    def frames(self, deadline: float, waiting_for: str):
        """Frames as they come, from any rank (each in turn), until ``deadline``."""
        while True:
            if STOP.is_set():
                raise Failure("grading was interrupted")
            left = deadline - time.monotonic()
            if left <= 0:
                raise Failure(waiting_for)
            for rank in [*range(self.turn, self.size), *range(self.turn)]:
                if self.readers[rank].ready:
                    self.turn = (rank + 1) % self.size
                    yield (rank, *self.readers[rank].ready.popleft())
                    break
            else:
                self._pump(min(left, TICK))

    def _pump(self, timeout: float) -> None:
        """Wait up to ``timeout`` for a rank to speak or to take its replies."""
        for key, mask in self.selector.select(timeout=timeout):
            rank = key.data
            if mask & selectors.EVENT_WRITE:
                self._flush(rank)
            if not mask & selectors.EVENT_READ:
                continue
            try:
                data = key.fileobj.recv(1 << 20)
            except BlockingIOError:
                continue
            except OSError:
                data = b""
            if not data:
                self._lose(rank, f"rank {rank}'s process ended without answering: it was "
                                 "killed (over its memory, process or CPU-time limit?) or "
                                 "it exited")
                continue
            try:
                self.readers[rank].ready.extend(self.readers[rank].feed(data))
            except wire.WireError as error:
                self.readers[rank].ready.extend(error.frames)  # what it sent whole counts
                self._lose(rank, f"rank {rank} broke the grader's protocol: {error}")

    def _lose(self, rank: int, why: str) -> None:
        """Stop reading ``rank``: after what it sent whole, :func:`frames` gives ``LOST`` and
        why, and the caller fails that rank as if it had raised (the lowest failed rank is
        reported, the same every run, whichever rank's process went first)."""
        self.selector.unregister(self.sockets[rank])
        self.closed[rank] = True
        self.readers[rank].ready.append((LOST, [why]))

    def setup(self, header: dict, timeout: float, note: str = "") -> str | None:
        """Send every rank the code to load; return the first warning.  An error is raised
        once every rank has answered, as the lowest failing rank's (the same every run);
        ``note`` follows the time limit in the message when loading takes longer."""
        for rank in range(self.size):
            self.send(rank, header)
        answered, errors, warning = set(), {}, None
        deadline = time.monotonic() + timeout
        late = f"loading your code took longer than {seconds(timeout)} s{note}"
        try:
            while len(answered) < self.size:
                for rank, reply, blobs in self.frames(deadline, late):
                    if reply is LOST:  # after its own error, if it sent one: keep that
                        errors.setdefault(rank, f"while loading your code: {blobs[0]}")
                    elif reply.get("op") == "error":
                        errors[rank] = clean(reply.get("message"))
                    elif reply.get("warning"):
                        warning = warning or clean(reply["warning"])
                    answered.add(rank)
                    if errors and deadline - time.monotonic() > ERROR_GRACE:
                        deadline = time.monotonic() + ERROR_GRACE  # the others: fail or answer
                        break
                    if len(answered) == self.size:
                        break
        except Failure:
            if errors:
                raise Failure(errors[min(errors)]) from None
            raise
        if errors:
            raise Failure(errors[min(errors)])
        return warning

    def case(self, headers: list[tuple[dict, list]], timeout: float, what: str,
             expected: dict | None = None, dtype: str | None = None) -> Outcome:
        """Send each rank its case and serve it until every rank has answered; with
        ``expected`` (see :class:`~allreduce.grading.matching.Case`), check every message's
        content.  Once a rank has failed, the others get :data:`ERROR_GRACE` seconds to fail
        or stop too, and the lowest failing rank is the one reported (the same rank every
        run)."""
        state = Case(self, expected, dtype)
        for rank, (header, blobs) in enumerate(headers):
            self.send(rank, header, blobs)
        deadline = time.monotonic() + timeout
        late = (f"{what} did not finish within {seconds(timeout)} s: an endless loop, or a "
                "rank computing for too long?")
        try:
            while True:
                for rank, header, blobs in self.frames(deadline, late):
                    if header is LOST:
                        state.lose(rank, blobs[0])
                    else:
                        state.handle(rank, header, blobs)
                    if state.finished():
                        return state.outcome()
                    if state.errors and deadline - time.monotonic() > ERROR_GRACE:
                        deadline = time.monotonic() + ERROR_GRACE
                        break  # read on, with the shorter deadline
        except Failure as failure:
            if state.errors:  # the lowest failed rank's reason (and which case, if it lacks it)
                lowest = min(state.errors)
                why = state.errors[lowest]
                raise Failure(f"{what}: {why}" if lowest in state.unlabelled else why) from None
            if what in str(failure):
                raise
            raise Failure(f"{what}: {failure}") from None  # which case: the size it failed at

    def bye(self) -> None:
        for rank in range(self.size):
            try:
                self.send(rank, {"op": "bye"})
            except Failure:  # the verdict is made; a rank that reads nothing is ended anyway
                pass
