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

from . import wire
from .matching import Case, Failure, Outcome, clean

__all__ = ["STOP", "Failure", "Judge", "Outcome", "clean"]

STOP = threading.Event()  # set on Ctrl-C: every judge gives up within a second
ERROR_GRACE = 2.0  # seconds the other ranks get to fail too, once one rank has failed


class Judge:
    def __init__(self, sockets: list[socket.socket]):
        self.sockets, self.size = sockets, len(sockets)
        self.readers = [wire.Reader() for _ in sockets]
        self.selector = selectors.DefaultSelector()
        for rank, sock in enumerate(sockets):
            sock.setblocking(True)
            self.selector.register(sock, selectors.EVENT_READ, rank)
        self.closed = [False] * self.size

    def close(self) -> None:
        self.selector.close()
        for sock in self.sockets:
            sock.close()

    def send(self, rank: int, header: dict, blobs=()) -> None:
        try:
            self.sockets[rank].settimeout(10)  # a rank that stops reading cannot stall us
            wire.send(self.sockets[rank], header, blobs)
        except OSError:
            pass  # it died; its silence will be reported

    def frames(self, deadline: float, waiting_for: str):
        """Frames as they come, from any rank, until ``deadline``."""
        while True:
            for rank in range(self.size):
                if self.readers[rank].ready:
                    yield (rank, *self.readers[rank].ready.popleft())
                    break
            else:
                if STOP.is_set():
                    raise Failure("grading was interrupted")
                left = deadline - time.monotonic()
                if left <= 0:
                    raise Failure(waiting_for)
                for key, _ in self.selector.select(timeout=min(left, 1.0)):
                    rank = key.data
                    try:
                        data = key.fileobj.recv(1 << 20)
                    except OSError:
                        data = b""
                    if not data:
                        self.selector.unregister(key.fileobj)
                        self.closed[rank] = True
                        raise Failure(f"rank {rank}'s process ended without answering: it was "
                                      "killed (over its memory, process or CPU-time limit?) or "
                                      "it exited")
                    try:
                        self.readers[rank].ready.extend(self.readers[rank].feed(data))
                    except wire.WireError as error:
                        raise Failure(f"rank {rank} broke the grader's protocol: {error}") from None

    def setup(self, header: dict, timeout: float) -> str | None:
        """Send every rank the code to load; return the first warning.  An error is raised
        once every rank has answered, as the lowest failing rank's (the same every run)."""
        for rank in range(self.size):
            self.send(rank, header)
        answered, errors, warning = set(), {}, None
        deadline = time.monotonic() + timeout
        try:
            for rank, reply, _ in self.frames(deadline, f"loading your code took longer than "
                                                        f"{timeout:.0f} s"):
                if reply.get("op") == "error":
                    errors[rank] = clean(reply.get("message"))
                elif reply.get("warning"):
                    warning = warning or clean(reply["warning"])
                answered.add(rank)
                if len(answered) == self.size:
                    break
        except Failure:
            if errors:
                raise Failure(errors[min(errors)]) from None
            raise
        if errors:
            raise Failure(errors[min(errors)])
        return warning

    def case(self, headers: list[tuple[dict, list]], timeout: float, what: str) -> Outcome:
        """Send each rank its case and serve it until every rank has answered.  Once a rank
        has failed, the others get :data:`ERROR_GRACE` seconds to fail or stop too, and the
        lowest failing rank is the one reported (the same rank every run)."""
        state = Case(self)
        for rank, (header, blobs) in enumerate(headers):
            self.send(rank, header, blobs)
        deadline = time.monotonic() + timeout
        late = (f"{what} did not finish within {timeout:.0f} s: an endless loop, or a rank "
                "computing for too long?")
        try:
            while True:
                for rank, header, blobs in self.frames(deadline, late):
                    state.handle(rank, header, blobs)
                    if state.finished():
                        return state.outcome()
                    if state.errors and deadline - time.monotonic() > ERROR_GRACE:
                        deadline = time.monotonic() + ERROR_GRACE
                        break  # read on, with the shorter deadline
        except Failure:
            if state.errors:
                raise Failure(state.errors[min(state.errors)]) from None
            raise

    def bye(self) -> None:
        for rank in range(self.size):
            self.send(rank, {"op": "bye"})
