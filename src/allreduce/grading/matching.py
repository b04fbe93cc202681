"""What the judge (:mod:`allreduce.grading.judge`) knows during one case: every rank's
posted sends and receives, matched as MPI does (in posting order per source, destination and
tag), the data that crossed, held until its receiver's wait takes it, the collectives, and
each rank's state, so that it knows a deadlock the moment every rank is waiting for something
no rank will do.  What crossed is recorded as the tracing communicator would
(:class:`allreduce.trace.Event`).  Everything here comes from a rank and is checked before
it is used: a malformed request fails the case, never the grader.
"""

from __future__ import annotations

import re
from collections import defaultdict, deque
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from ..trace import Event
from . import wire

MAX_EVENTS = 100_000  # requests one rank may make in one case: sends, receives (empty ones
# too), waits (with no ids too), collectives; each is a frame the judge reads and answers
MAX_QUEUED = 256 << 20  # bytes sent and not yet taken by their receiver's wait, in all
#: bytes of allreduce.allreduce results one case keeps for its verdict (a lab's training run
#: keeps well under 1 MiB; 100 calls of 32 MiB took 3.4 GiB of the grader's memory)
MAX_SUMS = 64 << 20
_REDUCE = {"sum": np.add, "mean": np.add, "max": np.maximum, "min": np.minimum,
           "prod": np.multiply}


class _Refused(Exception):
    """A request of one rank's that the judge refuses (a peer outside the ranks, a malformed
    frame): that rank fails, as if it had raised."""


class Failure(Exception):
    """The case failed; the message is for the student."""


def clean(text, limit: int = 600) -> str:
    """Untrusted text (from a rank, a file's name) made safe to show and to store: one line
    of printable characters, bounded; control characters (C0, DEL, C1, which a terminal
    takes as commands), line separators and bidirectional overrides become spaces, and a lone surrogate,
    which no UTF-8 file or terminal can take, becomes its escape (``\\ud800``)."""
    text = str(text)[: 4 * limit].encode("utf-8", "backslashreplace").decode("utf-8")
    text = re.sub(r"[\x00-\x1f\x7f-\x9f\u200e\u200f\u2028-\u202e\u2066-\u2069]+", " ",
                  text).strip()
    return text if len(text) <= limit else text[: limit - 3] + "..."


@dataclass
class Outcome:
    """One case: each rank's result frame, its events, and the element count of each
    ``allreduce.allreduce`` it made; ``collectives`` counts the all-gathers it asked for."""

    results: list
    events: list[list[Event]]
    allreduces: list[list[int]]
    collectives: list[int] = field(default_factory=list)
    content: str | None = None  # the first message that did not hold what it must (see Case)
    sums: list = field(default_factory=list)  # each allreduce's result, as the judge made it
    #: what each rank gave the case's first allreduce (by rank), to tell that its data crossed
    contributions: list = field(default_factory=list)


class Judge(Protocol):
    """What a case needs of the judge (:class:`allreduce.grading.judge.Judge`)."""

    size: int

    def send(self, rank: int, header: dict, blobs=()) -> None: ...


def _recast(mine: np.ndarray, wanted: bytes, dtype: str | None) -> bool:
    """Whether ``wanted``, read as the buffer's ``dtype``, holds exactly ``mine``'s values in
    another dtype (a message of the right values in the wrong dtype: float64 copies of an
    int64 buffer's chunk)."""
    if dtype is None or np.dtype(dtype) == mine.dtype:
        return False
    other = np.dtype(dtype)
    if len(wanted) != len(mine) * other.itemsize:
        return False
    theirs = np.frombuffer(wanted, other)
    with np.errstate(all="ignore"):
        return bool(np.array_equal(mine.astype(other), theirs)
                    and np.array_equal(theirs.astype(mine.dtype), mine))


def _elements(count, dtype) -> str:
    return f"{count} {dtype} element{'' if count == 1 else 's'}"


class Case:
    """What the judge knows during one case."""

    def __init__(self, judge: Judge, expected: dict | None = None, dtype: str | None = None):
        """``expected``: for each ``(source, dest)``, the bytes of each non-empty message the
        taught algorithm sends there, given this case's inputs, and the same for each other
        order of steps as right, a list of these (:func:`allreduce.lab.patterns.payloads`):
        the messages must be one of them, the first taught; ``None``: contents are not
        checked.
        ``dtype``: the buffer's, which those messages are in (to name a message in another)."""
        self.judge, size = judge, judge.size
        self.dtype = dtype
        if isinstance(expected, dict):
            expected = [expected]
        self.expected = expected
        #: the messages compared so far from each rank to each peer, and for each (order,
        #: rank, peer) the first message that misfits that order: (index, dtype, data)
        self.compared: dict[tuple[int, int], int] = defaultdict(int)
        self.misfit: dict[tuple[int, int, int], tuple[int, str, bytes]] = {}
        self.events: list[list[Event]] = [[] for _ in range(size)]
        self.kinds: list[dict[int, tuple[str, int]]] = [{} for _ in range(size)]  # id: kind, event
        self.sends: dict = defaultdict(deque)  # (source, dest, tag): sends not yet received
        self.recvs: dict = defaultdict(deque)  # (source, dest, tag): receives not yet matched
        self.arrived: list[dict[int, bytes]] = [{} for _ in range(size)]
        self.state: list = [None] * size  # None: running; else what the rank waits for
        self.allreduces: list[list[int]] = [[] for _ in range(size)]
        self.sums: list[np.ndarray] = []
        self.contributions: list[np.ndarray] = []  # the first allreduce's, by rank
        self.kept = 0  # bytes in self.sums
        self.collectives = [0] * size
        self.queued = 0  # bytes sent and not yet taken by a wait of their receiver
        self.requests = [0] * size  # frames each rank sent in this case
        self.errors: dict[int, str] = {}  # rank: why it failed (the lowest one is reported)
        #: the failed ranks whose reason does not say which case (a request the judge
        #: refused, a process lost): the judge names the case before it
        self.unlabelled: set[int] = set()

    # -- one frame
    def handle(self, rank: int, header: dict, blobs: list[bytes]) -> None:
        op = header.get("op")
        if self.state[rank] == ("error",):
            return  # what a failed rank sends next: the case fails with the lowest one's
        self.requests[rank] += 1
        if self.requests[rank] > MAX_EVENTS:
            self.unlabelled.add(rank)
            self._fail(rank, f"rank {rank} made more than {MAX_EVENTS} requests (sends, "
                             "receives, waits, collectives) in one case")
            return
        if op == "error":
            where = f" ({clean(header['where'], 120)})" if header.get("where") else ""
            self._fail(rank, clean(header.get("message")) + where)
            return
        try:
            self._take(rank, op, header, blobs)
        except _Refused as refused:  # this rank's own doing, as an error it raised:
            self.unlabelled.add(rank)  # the lowest such rank is reported
            self._fail(rank, str(refused))
            return
        self._progress()

    def _take(self, rank: int, op, header: dict, blobs: list[bytes]) -> None:
        """Record one request of a running rank's; :class:`_Refused` if the judge will not."""
        if self.state[rank] is not None:
            raise _Refused(f"rank {rank} spoke out of turn ({clean(op, 40)})")
        if op in ("isend", "irecv"):
            self._post(rank, op, header, blobs)
        elif op == "wait":
            ids = header.get("ids")
            if not isinstance(ids, list) or not all(
                    type(i) is int and i in self.kinds[rank] for i in ids):
                raise _Refused(f"rank {rank} waited for a request it never made")
            if len(set(ids)) != len(ids):
                raise _Refused(f"rank {rank} waited for one request twice in one wait")
            self.state[rank] = ("wait", ids)
        elif op in ("barrier", "allgather", "allreduce"):
            self.state[rank] = (op, header, blobs)
        elif op == "result":
            self.state[rank] = ("done", header, blobs)
        else:
            raise _Refused(f"rank {rank} sent the grader an unknown request {clean(op, 40)!r}")

    def lose(self, rank: int, why: str) -> None:
        """``rank`` is gone (its process ended, or its frames broke the protocol): it has
        failed, whatever it was doing."""
        if self.state[rank] != ("error",):
            self.unlabelled.add(rank)
            self._fail(rank, why)

    def _fail(self, rank: int, why: str) -> None:
        """``rank`` has failed: the case fails once no rank can go on, with the lowest
        failed rank's reason, so that every grading of a submission names the same rank."""
        self.errors[rank] = why
        self.state[rank] = ("error",)
        if None not in self.state:  # every rank has failed, returned or is waiting
            raise Failure(self.errors[min(self.errors)])
        self._progress()

    def _post(self, rank: int, op: str, header: dict, blobs: list[bytes]) -> None:
        peer, tag, count, dtype = (header.get(k) for k in ("peer", "tag", "count", "dtype"))
        request = header.get("id")
        if not (isinstance(peer, int) and 0 <= peer < self.judge.size):
            raise _Refused(f"rank {rank} addressed rank {clean(peer, 20)}, but the ranks are "
                           f"0..{self.judge.size - 1}")
        if not isinstance(tag, int) or not isinstance(count, int) or count < 0 \
                or dtype not in wire.DTYPES or not isinstance(request, int) \
                or request in self.kinds[rank]:
            raise _Refused(f"rank {rank} sent the grader a malformed {op}")
        nbytes = count * np.dtype(dtype).itemsize
        kind = "send" if op == "isend" else "recv"
        if kind == "send" and (len(blobs) != 1 or len(blobs[0]) != nbytes):
            raise _Refused(f"rank {rank} sent the grader a malformed isend")
        event = Event(kind, rank, peer, tag, count, nbytes, id=len(self.events[rank]))
        self.events[rank].append(event)
        self.kinds[rank][request] = (kind, event.id)
        if kind == "send":
            if count and self.expected is not None:
                self._compare(rank, peer, dtype, blobs[0])
            key = (rank, peer, tag)
            self.sends[key].append((dtype, count, blobs[0]))
            self.queued += nbytes
            if self.queued > MAX_QUEUED:  # matched or not: the judge holds them until a wait
                raise Failure(f"more than {MAX_QUEUED >> 20} MiB of messages were sent and not "
                              "received (a receive counts once its wait has returned): does "
                              "every send have its receive, and every request its wait?")
        else:
            key = (peer, rank, tag)
            self.recvs[key].append((request, dtype, count))
        self._match(key)

    def _compare(self, rank: int, peer: int, dtype: str, data: bytes) -> None:
        """Note which orders of steps this message fits (compared as it arrives: nothing of it
        is held but the first message that misfits an order, for each order and pair of
        ranks).  :meth:`_content` reads the verdict after the values and the pattern, whose
        messages say more."""
        index = self.compared[rank, peer]
        self.compared[rank, peer] += 1
        for order, messages in enumerate(self.expected):
            there = messages.get((rank, peer), [])
            if index >= len(there) or data != there[index]:
                self.misfit.setdefault((order, rank, peer), (index, dtype, data))

    def _content(self) -> str | None:
        """The first message, by rank, peer and step, that does not hold what the order of
        steps it comes closest to sends there (the taught order first among equals); the
        same whichever rank's messages came first."""
        if self.expected is None:
            return None
        misses = [sum(1 for key in self.misfit if key[0] == order)
                  for order in range(len(self.expected))]
        order = min(range(len(misses)), key=lambda o: (misses[o], o))
        if not misses[order]:
            return None
        (_, rank, peer), (index, dtype, data) = min(
            (key, found) for key, found in self.misfit.items() if key[0] == order)
        wanted = self.expected[order].get((rank, peer), [])
        what = f"rank {rank}'s message {index + 1} to rank {peer}"
        if index >= len(wanted):
            return f"{what} is one more than the taught algorithm sends there"
        item = np.dtype(dtype).itemsize
        mine = np.frombuffer(data, dtype)
        if _recast(mine, wanted[index], self.dtype):
            return (f"{what} carried {dtype} data where the taught algorithm sends "
                    f"{self.dtype}, the buffer's own dtype, with the same values: "
                    "send slices of buf (or arrays of its dtype)")
        if len(data) != len(wanted[index]):
            sizes = [f"{size} byte{'' if size == 1 else 's'}"
                     for size in (len(data), len(wanted[index]))]
            return (f"{what} held {sizes[0]} ({_elements(len(mine), dtype)}) where "
                    f"the taught algorithm sends {sizes[1]} at that step: check its "
                    "length and its dtype against the lab's")
        theirs = np.frombuffer(wanted[index][: len(wanted[index]) // item * item], dtype)
        common = min(len(mine), len(theirs))
        differ = np.flatnonzero(mine[:common] != theirs[:common])
        shown = (f" (element {differ[0]}: {mine[differ[0]].item()}, where the taught algorithm "
                 f"has {theirs[differ[0]].item()})" if len(differ) else "")
        return (f"{what} did not hold the data the taught algorithm sends at that "
                f"step{shown}: each message must carry what the taught algorithm's "
                "steps, in the taught order, have given that rank through comm, added "
                "up (another order of steps, even a correct one, sends other data; "
                "data that reached a rank any other way does not count)")

    def _match(self, key) -> None:
        source, dest, _ = key
        while self.sends[key] and self.recvs[key]:
            dtype, count, data = self.sends[key].popleft()
            request, want_dtype, want_count = self.recvs[key].popleft()
            if (dtype, count) != (want_dtype, want_count):
                same_bytes = (count * np.dtype(dtype).itemsize
                              == want_count * np.dtype(want_dtype).itemsize)
                differ = "on the chunk" if dtype == want_dtype else (
                    "on the dtype (they must use the same one)"
                    if count == want_count or same_bytes else "on the chunk and the dtype")
                # the sender's failure (the receive never completes): reported once no rank
                # can go on, as the lowest failed rank's, whichever mismatch came first
                self.errors.setdefault(source, (
                    f"rank {source} sent {_elements(count, dtype)} to rank {dest}, which posted "
                    f"a receive for {_elements(want_count, want_dtype)}: sender and receiver "
                    f"disagree {differ}"))
                self.unlabelled.add(source)
                continue
            self.arrived[dest][request] = data

    # -- moving on
    def _progress(self) -> None:
        moved = True
        while moved:
            moved = False
            for rank, state in enumerate(self.state):
                if state and state[0] == "wait" and self._try_wait(rank, state[1]):
                    moved = True
            kinds = {s[0] for s in self.state if s}
            if None not in self.state and len(kinds) == 1 and kinds <= {"barrier", "allgather",
                                                                         "allreduce"}:
                self._collective(kinds.pop())
                moved = True
        if None not in self.state and not self.finished():
            raise Failure(self.errors[min(self.errors)] if self.errors else self._deadlock())

    def _try_wait(self, rank: int, ids: list[int]) -> bool:
        """Finish ``rank``'s wait if every receive in it has arrived (``ids`` were checked
        when the wait came, and only this wait can retire them)."""
        receives = [i for i in ids if self.kinds[rank][i][0] == "recv"]
        if not all(i in self.arrived[rank] for i in receives):
            return False
        self.events[rank].append(Event("wait", rank, requests=tuple(
            self.kinds[rank][i][1] for i in ids), id=len(self.events[rank])))
        for i in ids:
            del self.kinds[rank][i]
        self.state[rank] = None
        taken = [self.arrived[rank].pop(i) for i in receives]
        self.queued -= sum(len(data) for data in taken)  # held until now: see _post
        self.judge.send(rank, {"op": "done"}, taken)
        return True

    def _collective(self, kind: str) -> None:
        headers = [s[1] for s in self.state]
        if kind == "barrier":
            replies = [({"op": "done"}, [])] * self.judge.size
        elif kind == "allgather":
            values = [h.get("value") for h in headers]
            self.collectives = [c + 1 for c in self.collectives]
            replies = [({"op": "done", "values": values}, [])] * self.judge.size
        else:
            replies = self._allreduce(headers, [s[2] for s in self.state])
        self.state = [None] * self.judge.size
        for rank, (header, blobs) in enumerate(replies):
            self.judge.send(rank, header, blobs)

    def _allreduce(self, headers, blobs):
        calls = [(h.get("dtype"), h.get("count"), h.get("reduce")) for h in headers]
        dtype, count, op = calls[0]
        if any(call != calls[0] for call in calls):
            shown = "; ".join(f"rank {r}: {clean(c[1], 20)} {clean(c[0], 10)} elements, "
                              f"{clean(c[2], 10)}" for r, c in enumerate(calls))
            raise Failure(f"the ranks' allreduce.allreduce calls disagree ({shown})")
        if not isinstance(dtype, str) or dtype not in wire.DTYPES or not isinstance(op, str) \
                or op not in _REDUCE or not isinstance(count, int):
            raise Failure(f"allreduce.allreduce was called with op {clean(op, 20)!r} on "
                          f"{clean(dtype, 20)} data, which the grader does not reduce")
        if op == "mean" and not np.issubdtype(np.dtype(dtype), np.floating):
            raise Failure("allreduce.allreduce: op='mean' needs a floating-point dtype")
        self.kept += max(count, 0) * np.dtype(dtype).itemsize
        if self.kept > MAX_SUMS:
            raise Failure(f"the allreduce.allreduce calls of this case summed more than "
                          f"{MAX_SUMS >> 20} MiB, more than the grader keeps for a check")
        arrays = []
        for rank, b in enumerate(blobs):
            if len(b) != 1 or len(b[0]) != count * np.dtype(dtype).itemsize:
                raise Failure(f"rank {rank} sent the grader a malformed allreduce")
            arrays.append(np.frombuffer(b[0], dtype=dtype))
        if not self.sums:
            self.contributions = arrays
        total = arrays[0].copy()
        for other in arrays[1:]:  # in rank order, as the library's naive algorithm adds
            _REDUCE[op](total, other, out=total)
        if op == "mean":
            total /= np.asarray(self.judge.size, dtype=dtype)
        for rank in range(self.judge.size):
            self.allreduces[rank].append(count)
        self.sums.append(total)
        return [({"op": "done"}, [total.tobytes()])] * self.judge.size

    def _deadlock(self) -> str:
        kinds = sorted({s[0] for s in self.state})
        if len(set(kinds) - {"wait", "done"}) and len(set(kinds)) > 1:
            shown = ", ".join(f"rank {r}: {s[0]}" for r, s in enumerate(self.state))
            return f"the ranks called different collectives ({shown}): every rank must make the same calls"
        stuck = []
        for rank, state in enumerate(self.state):
            if state[0] == "wait":
                missing = [self.events[rank][self.kinds[rank][i][1]] for i in state[1]
                           if self.kinds[rank][i][0] == "recv" and i not in self.arrived[rank]]
                stuck.append(f"rank {rank} waits for a message from rank {missing[0].peer} "
                             f"({missing[0].count} elements)")
            elif state[0] == "done":
                stuck.append(f"rank {rank} has returned")
            else:
                stuck.append(f"rank {rank} is in {state[0]}")
        return ("deadlock: " + "; ".join(stuck) + ". No rank can go on: a receive has no "
                "matching send")

    def finished(self) -> bool:
        return all(s is not None and s[0] == "done" for s in self.state)

    def outcome(self) -> Outcome:
        return Outcome([(s[1], s[2]) for s in self.state], self.events, self.allreduces,
                       self.collectives, self._content(), self.sums, self.contributions)
