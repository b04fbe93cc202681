"""Recording what an algorithm does, so that figures and cost formulas come from the code.

:class:`TracingCommunicator` wraps any communicator and logs every send, receive, wait and
local reduction it is asked to do, with element offsets into the buffer being reduced.
:class:`Trace` gathers the logs of all ranks and answers the questions the cost model asks:

* messages, elements sent and elements reduced, per rank;
* the **critical path** under the α-β-γ model's assumption that a rank sends one message
  and receives one message at a time (full duplex, single port; Thakur, Rabenseifner &
  Gropp 2005): :meth:`Trace.critical_path` replays the logs as a discrete-event simulation,
  matching the k-th send from ``s`` to ``d`` with the k-th receive at ``d`` from ``s``, and
  :meth:`Trace.terms` gives its steps, bytes and bytes reduced, which every algorithm's
  formula must equal.

With ``watch(buf, snapshots=True)`` the tracer also copies the watched buffer after every
receive and reduction, and :meth:`Trace.states` replays those copies onto the same step
clock: what every rank holds after every step.  The book's step figures and animations
(:mod:`allreduce.viz`) are drawn from exactly that.

The trace is taken on the real transport and the real algorithm: under ``mpiexec`` wrap
``MPI.COMM_WORLD``; in the book, :func:`record` runs the ranks as threads.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from . import arrays
from .comm import Communicator, members
from .cost import Terms
from .transports.threads import run_threads


@dataclass(frozen=True)
class Event:
    """One thing a rank did.  ``kind`` is send, recv, wait or reduce."""

    kind: str
    rank: int
    peer: int = -1
    tag: int = 0
    count: int = 0  # elements
    nbytes: int = 0  # bytes: the call's check sends bytes, whatever the data's dtype
    offset: int | None = None  # where in the watched buffer, if it lies there
    requests: tuple[int, ...] = ()  # for wait: the ids of the send/recv events it completes
    id: int = -1
    snapshot: np.ndarray | None = field(default=None, compare=False, repr=False)
    payload: np.ndarray | None = field(default=None, compare=False, repr=False)  # a send's data


class TracingCommunicator(Communicator):
    """A communicator that does what ``inner`` does and logs it in :attr:`events`."""

    def __init__(self, inner: Communicator, *, in_band: bool = False, payloads: bool = False):
        self.inner = inner
        self._payloads = payloads  # keep a copy of every message sent (the sparse figures)
        # by default the call's check is the all-gather, which the trace does not log, so
        # that traces show the algorithm alone; in_band logs the check's messages too
        self.receives_any_length = in_band and inner.receives_any_length
        self.rank, self.size = inner.rank, inner.size
        self.events: list[Event] = []
        self.initial: np.ndarray | None = None
        self._watched = None
        self._snapshots = False
        self._root, self._ranks, self._tags = self, tuple(range(self.size)), 0

    def split(self, colors: Sequence[int]) -> Communicator:
        """As :meth:`Communicator.split`, asking the inner communicator every time: its
        kept groups follow the same use as this trace's, and where it made a group again
        (it had let the old one go, an MPI communicator freed) the traced group is made
        again around it."""
        inner = self.inner.split(colors)
        child = super().split(colors)
        if child is not self and child.inner is not inner:
            self._groups().pop(tuple(int(c) for c in colors))
            child = super().split(colors)
        return child

    def _split(self, colors: tuple[int, ...], index: int) -> Communicator:
        """A group of the traced ranks (the inner communicator's :meth:`split`), traced too:
        its events go into this trace under this communicator's ranks, so that one trace
        shows every level of a hierarchical algorithm (chapter "Beyond one flat ring")."""
        child = TracingCommunicator(self.inner.split(colors), payloads=self._payloads)
        child.receives_any_length = self.receives_any_length
        child.events, child._root = self.events, self._root
        child._ranks = tuple(self._ranks[r] for r in members(colors, self.rank))
        child._tags = self._tags + (index + 1) * (1 << 16)  # each group's messages apart
        child.context = index
        return child

    def nodes(self) -> tuple[int, ...]:
        return self.inner.nodes()

    def watch(self, buf, *, snapshots: bool = False) -> None:
        """Record offsets relative to ``buf`` (the buffer being reduced).  With
        ``snapshots``, also keep a copy of ``buf`` now and after every wait and reduction."""
        self._watched = buf
        self._snapshots = snapshots
        self.initial = self._copy() if snapshots else None

    def _copy(self) -> np.ndarray | None:
        if not self._root._snapshots:
            return None
        buf = self._root._watched
        return buf.copy() if isinstance(buf, np.ndarray) else buf.detach().cpu().numpy().copy()

    def _offset(self, view) -> int | None:
        watched = self._root._watched
        if watched is None or arrays.count(view) == 0:
            return None
        base, here = _address(watched), _address(view)
        size = arrays.nbytes(watched)
        if not base <= here < base + size:
            return None
        return (here - base) // (arrays.nbytes(view) // arrays.count(view))

    def _log(self, kind: str, buf, peer: int, tag: int) -> int:
        payload = None
        if self._payloads and kind == "send":
            payload = buf.copy() if isinstance(buf, np.ndarray) else buf.detach().cpu().numpy().copy()
        event = Event(kind, self._ranks[self.rank], self._ranks[peer], tag + self._tags,
                      arrays.count(buf), arrays.nbytes(buf), self._offset(buf),
                      id=len(self.events), payload=payload)
        self.events.append(event)
        return event.id

    def isend(self, buf, dest: int, tag: int = 0):
        return self._log("send", buf, dest, tag), self.inner.isend(buf, dest, tag)

    def irecv(self, buf, source: int, tag: int = 0):
        return self._log("recv", buf, source, tag), self.inner.irecv(buf, source, tag)

    def waitall(self, requests) -> None:
        self.inner.waitall([request for _, request in requests])
        self._waited(tuple(i for i, _ in requests))

    # A message of unknown length is logged as one message, whatever the transport adds
    # (torch sends its length ahead of it); a receive's count is the buffer's capacity, and
    # the replay charges each message the sender's size.
    def send_any(self, buf, dest: int, tag: int = 0) -> None:
        send = self._log("send", buf, dest, tag)
        self.inner.send_any(buf, dest, tag)
        self._waited((send,))

    def recv_any(self, buf, source: int, tag: int = 0) -> bool:
        receive = self._log("recv", buf, source, tag)
        exact = self.inner.recv_any(buf, source, tag)
        self._waited((receive,))
        return exact

    def sendrecv_any(self, sendbuf, dest: int, recvbuf, source: int, tag: int = 0) -> bool:
        receive = self._log("recv", recvbuf, source, tag)
        send = self._log("send", sendbuf, dest, tag)
        exact = self.inner.sendrecv_any(sendbuf, dest, recvbuf, source, tag)
        self._waited((receive, send))
        return exact

    def _waited(self, requests: tuple[int, ...]) -> None:
        self.events.append(Event("wait", self._ranks[self.rank], requests=requests,
                                 id=len(self.events), snapshot=self._copy()))

    def barrier(self) -> None:
        self.inner.barrier()

    def reduce_local(self, op, inout, incoming, *, incoming_first: bool = False,
                     source=None) -> None:
        self.inner.reduce_local(op, inout, incoming, incoming_first=incoming_first, source=source)
        self.events.append(Event("reduce", self._ranks[self.rank], count=arrays.count(inout),
                                 nbytes=arrays.nbytes(inout), offset=self._offset(inout),
                                 id=len(self.events),
                                 snapshot=self._copy()))

    def native(self, array):
        return self.inner.native(array)

    def allgather_ints(self, values: np.ndarray) -> np.ndarray:
        return self.inner.allgather_ints(values)

    def allgather_object(self, obj: Any) -> list[Any]:
        return self.inner.allgather_object(obj)

    def trace(self, itemsize: int = 1) -> Trace:
        """Gather every rank's log (collective) and return the whole :class:`Trace`."""
        logs = self.inner.allgather_object((self.events, self.initial))
        return Trace([events for events, _ in logs], itemsize,
                     initial=[initial for _, initial in logs])


def _address(x) -> int:
    return x.__array_interface__["data"][0] if isinstance(x, np.ndarray) else x.data_ptr()


class Trace:
    """The logs of all ranks of one run."""

    def __init__(self, events_by_rank: list[list[Event]], itemsize: int = 1,
                 initial: list[np.ndarray | None] | None = None, *, give_up=None):
        """``give_up()``, if given, is asked every few thousand events of a replay; when it
        says so, the replay raises :class:`TimeoutError` (the grader's deadline)."""
        self.give_up = give_up
        self.events = events_by_rank
        self.size = len(events_by_rank)
        self.itemsize = itemsize
        self.initial = initial or [None] * self.size

    def _of(self, kind: str, rank: int) -> list[Event]:
        return [e for e in self.events[rank] if e.kind == kind]

    def messages_sent(self, rank: int) -> int:
        return sum(1 for e in self._of("send", rank) if e.count)

    def elements_sent(self, rank: int) -> int:
        return sum(e.count for e in self._of("send", rank))

    def elements_received(self, rank: int) -> int:
        return sum(e.count for e in self._of("recv", rank))

    def elements_across(self, rank: int, nodes) -> int:
        """Elements ``rank`` sent to ranks of another node (``nodes[r]``, rank r's node):
        what crosses the links between nodes (chapter "Beyond one flat ring")."""
        return sum(e.count for e in self._of("send", rank) if nodes[e.peer] != nodes[rank])

    def elements_reduced(self, rank: int) -> int:
        return sum(e.count for e in self._of("reduce", rank))

    def bytes_sent(self, rank: int) -> int:
        return sum(e.nbytes for e in self._of("send", rank))

    def total_elements_sent(self) -> int:
        return sum(self.elements_sent(r) for r in range(self.size))

    def steps(self) -> int:
        """Length of the critical path in steps, one step being one message time under the
        single-port, full-duplex model.  Empty messages take no time."""
        return round(self.critical_path(alpha=1))

    def critical_path(self, alpha: float = 0.0, beta: float = 0.0, gamma: float = 0.0, *,
                      link=None, ports: str = "rank") -> float:
        """When the last rank finishes, replaying the logs as a discrete-event simulation in
        which a message of ``m`` bytes occupies its sender's send port and its receiver's
        receive port for ``α + m·β`` each, and a reduction of ``m`` bytes occupies its rank for
        ``m·γ``.  With ``(1, 0, 0)`` this is the α-term (steps), with ``(0, 1, 0)`` the β-term
        (bytes on the critical path), with ``(0, 0, 1)`` the γ-term.  Each message is charged
        its own size, so variable-length (sparse) messages need nothing more.

        ``link(source, dest)``, if given, returns the ``(α, β)`` of the link a message takes
        instead of the global ones: a network of several levels (links inside a node and
        between nodes).  ``ports="link"`` gives each rank one send and one receive port per
        peer instead of one in all: every link is a port of its own, as NVLink's are (the
        bidirectional ring's case, chapter "Beyond one flat ring")."""
        if ports not in ("rank", "link"):
            raise ValueError(f"ports must be 'rank' or 'link', got {ports!r}")
        return max(self._replay(alpha, beta, gamma, link, ports == "link")[0], default=0.0)

    def terms(self) -> Terms:
        """The three counts of the α-β-γ model on the critical path: what a chapter's formula
        must equal (:class:`allreduce.cost.Terms`, in bytes)."""
        return Terms(self.critical_path(alpha=1), self.critical_path(beta=1),
                     self.critical_path(gamma=1))

    def finish_times(self) -> list[int]:
        """When each rank finishes, in steps (see :meth:`steps`)."""
        return [round(t) for t in self._replay(1, 0, 0)[0]]

    def event_times(self) -> list[list[int]]:
        """For every rank and every event of its log, the step at whose end the event is
        done: a send when it has left, a wait when its receives have arrived, a reduction
        when the data it combines is there (local work takes no steps in this model)."""
        return [[round(t) for t in times] for times in self._replay(1, 0, 0)[1]]

    def messages(self) -> list[tuple[int, int, int, int | None, int]]:
        """Every non-empty message as ``(step, source, dest, offset, count)``, where
        ``step`` is the step in which it is on the wire (1-based) and ``offset`` is its
        place in the sender's watched buffer."""
        times = self.event_times()
        return sorted(
            (times[rank][i], rank, e.peer, e.offset, e.count)
            for rank in range(self.size)
            for i, e in enumerate(self.events[rank])
            if e.kind == "send" and e.count
        )

    def payloads(self) -> list[tuple[int, int, int, np.ndarray]]:
        """Every non-empty message as ``(step, source, dest, data)``, for a trace recorded
        with ``TracingCommunicator(..., payloads=True)``: what was on the wire."""
        times = self.event_times()
        found = [(times[rank][i], rank, e.peer, e.payload)
                 for rank in range(self.size) for i, e in enumerate(self.events[rank])
                 if e.kind == "send" and e.count]
        if any(payload is None for *_, payload in found):
            raise ValueError("this trace kept no payloads: record it with payloads=True")
        return sorted(found, key=lambda m: m[:3])

    def states(self) -> np.ndarray:
        """What every rank's watched buffer holds after every step: an array of shape
        ``(steps + 1, size, count)`` whose row 0 is the input.  Needs a trace recorded
        with ``watch(buf, snapshots=True)``."""
        if any(initial is None for initial in self.initial):
            raise ValueError("this trace has no snapshots: record it with watch(buf, snapshots=True)")
        times = self.event_times()
        steps = self.steps()
        states = np.empty((steps + 1, self.size, len(self.initial[0])), self.initial[0].dtype)
        for rank in range(self.size):
            states[:, rank] = self.initial[rank]
            for time, event in zip(times[rank], self.events[rank]):
                if event.snapshot is not None:
                    states[time:, rank] = event.snapshot
        return states

    def _replay(self, alpha: float, beta: float, gamma: float, link=None,
                per_link: bool = False) -> tuple[list[float], list[list[float]]]:
        """Each rank's finishing time and each event's time (see :meth:`critical_path`).
        The k-th send from ``s`` to ``d`` with a tag matches the k-th receive at ``d`` from
        ``s`` with that tag.  A send leaves when its rank and its send port are free; its
        receive is done ``α + m·β`` after the receiver posted it and its receive port was
        free, and never before the message left."""
        def cost(event: Event) -> float:  # an empty message takes no time
            if not event.count:
                return 0.0
            a, b = (alpha, beta) if link is None else link(event.rank, event.peer)
            return a + event.nbytes * b

        departures: dict[tuple[int, int, int], list[tuple[float, float]]] = defaultdict(list)
        posted: dict[tuple[int, int, int], int] = defaultdict(int)  # receives posted per key
        clock = [0.0] * self.size
        send_port: dict = defaultdict(float)  # when each port is free: per rank, or per link
        recv_port: dict = defaultdict(float)
        port = (lambda rank, peer: (rank, peer)) if per_link else (lambda rank, peer: rank)
        pending: list[dict[int, tuple[Event, float, int]]] = [{} for _ in range(self.size)]
        position = [0] * self.size
        done = [False] * self.size
        times: list[list[float]] = [[] for _ in range(self.size)]
        checked = [0] * self.size  # of the wait each rank is stopped at, requests seen sent
        replayed = 0
        while not all(done):
            progressed = False
            for rank in range(self.size):
                log = self.events[rank]
                while position[rank] < len(log):
                    replayed += 1
                    if self.give_up is not None and not replayed % 4096 and self.give_up():
                        raise TimeoutError(f"the replay was stopped after {replayed} events")
                    event = log[position[rank]]
                    if event.kind == "send":
                        departure = clock[rank]
                        if event.count:
                            mine = port(rank, event.peer)
                            departure = send_port[mine] = (max(clock[rank], send_port[mine])
                                                           + cost(event))
                        departures[rank, event.peer, event.tag].append((departure, cost(event)))
                        pending[rank][event.id] = (event, departure, -1)
                        times[rank].append(departure)
                        position[rank] += 1
                        progressed = True
                        continue
                    elif event.kind == "recv":  # matched in the order receives are posted
                        key = (event.peer, rank, event.tag)
                        pending[rank][event.id] = (event, clock[rank], posted[key])
                        posted[key] += 1
                    elif event.kind == "wait":
                        if not self._complete(rank, event, pending, departures, clock,
                                              recv_port, port, checked):
                            break  # the matching send has not been replayed yet
                    elif event.kind == "reduce":
                        clock[rank] += event.nbytes * gamma
                    times[rank].append(clock[rank])
                    position[rank] += 1
                    progressed = True
                done[rank] = position[rank] == len(log)
            if not progressed and not all(done):
                raise RuntimeError("the trace cannot be replayed: a receive has no matching send")
        return clock, times

    @staticmethod
    def _complete(rank, wait, pending, departures, clock, recv_port, port, checked) -> bool:
        """Finish ``wait`` on ``rank`` if every message it waits for has been sent: the
        receive port takes them in the order they arrive.  ``checked[rank]`` requests of it
        are known sent already (a send once replayed stays so): each request is looked at
        once however often the wait is tried, so a replay is linear in the events."""
        requests = wait.requests
        while checked[rank] < len(requests):
            event, _, index = pending[rank][requests[checked[rank]]]
            if event.kind == "recv" and index >= len(departures[event.peer, rank, event.tag]):
                return False  # the matching send has not been replayed yet
            checked[rank] += 1
        checked[rank] = 0
        finish = clock[rank]
        receives = []
        for request in requests:
            event, time, index = pending[rank][request]
            if event.kind == "send":
                finish = max(finish, time)
                continue
            key = (event.peer, rank, event.tag)
            receives.append((*departures[key][index], time, event.peer))
        for departure, cost, time, peer in sorted(receives):
            if cost:
                mine = port(rank, peer)
                recv_port[mine] = max(max(time, recv_port[mine]) + cost, departure)
                finish = max(finish, recv_port[mine])
            else:
                finish = max(finish, departure)
        for request in wait.requests:
            del pending[rank][request]
        clock[rank] = finish
        return True


def record(algorithm: str, size: int, count: int, *, dtype: str = "int64", op: str = "sum",
           make=None, snapshots: bool = False,
           **options) -> tuple[Trace, list[np.ndarray]]:
    """Run ``algorithm`` on ``size`` thread ranks and return its :class:`Trace` and the
    results.  ``make(rank, count)`` gives each rank's input (by default ``rank + 1`` in
    every element); ``snapshots`` keeps the buffer after every step (:meth:`Trace.states`)."""
    from .api import allreduce

    make = make or (lambda rank, n: np.full(n, rank + 1, dtype=dtype))

    def body(comm):
        tracer = TracingCommunicator(comm)
        x = make(comm.rank, count)
        tracer.watch(x, snapshots=snapshots)
        result = allreduce(x, tracer, algorithm=algorithm, op=op, out=x, **options)
        return tracer.events, tracer.initial, result

    runs = run_threads(size, body)
    trace = Trace([events for events, _, _ in runs], np.dtype(dtype).itemsize,
                  initial=[initial for _, initial, _ in runs])
    return trace, [result for _, _, result in runs]
