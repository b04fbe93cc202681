"""The communicator interface that every algorithm is written against.

An algorithm sees a :class:`Communicator` and nothing else: its rank and size, point-to-point
transfers of contiguous 1-D buffers (blocking and non-blocking), a local reduction, and
scratch-buffer allocation.  Three transports implement it:

* :class:`allreduce.transports.mpi.MPICommunicator` wraps an mpi4py intracommunicator and
  moves numpy buffers with the buffer API (upper-case methods: no pickling);
* :class:`allreduce.transports.torchdist.TorchCommunicator` wraps a torch.distributed process
  group: gloo for CPU tensors, nccl for CUDA tensors;
* :class:`allreduce.transports.threads.ThreadCommunicator` runs ranks as threads of one
  process.  The book uses it to record traces at build time; the unit tests use it to
  check every algorithm at world sizes up to 16 in a second.

:func:`allreduce.transports.as_communicator` turns whatever the user passed as ``comm``
into one of these.
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any

import numpy as np

from . import ops as _ops
from .arrays import copy_into


class Communicator(ABC):
    """A group of ``size`` ranks that can exchange contiguous 1-D buffers.

    Buffers are the transport's native arrays (see :meth:`native`).  Sends and receives
    between a pair of ranks with the same tag are matched in the order they are posted,
    as in MPI.  Both sides of a transfer always agree on its length: the algorithms derive
    every length from the element count, which every rank checks.  The one exception is
    :meth:`recv_any`, with which the check itself travels (:mod:`allreduce.validation`) and
    the sparse allreduce's messages, whose lengths depend on the data (:mod:`allreduce.sparse`).
    """

    rank: int
    size: int

    # -- point to point ---------------------------------------------------------------
    @abstractmethod
    def isend(self, buf, dest: int, tag: int = 0) -> Any:
        """Start sending ``buf`` to ``dest``; ``buf`` must not change until the wait."""

    @abstractmethod
    def irecv(self, buf, source: int, tag: int = 0) -> Any:
        """Start receiving into ``buf`` from ``source``."""

    @abstractmethod
    def waitall(self, requests: Sequence[Any]) -> None:
        """Wait until every request from :meth:`isend`/:meth:`irecv` has completed."""

    def wait(self, request: Any) -> None:
        self.waitall([request])

    def send(self, buf, dest: int, tag: int = 0) -> None:
        self.wait(self.isend(buf, dest, tag))

    def recv(self, buf, source: int, tag: int = 0) -> None:
        self.wait(self.irecv(buf, source, tag))

    def sendrecv(self, sendbuf, dest: int, recvbuf, source: int, tag: int = 0) -> None:
        """Send to ``dest`` and receive from ``source`` at the same time (one step)."""
        receive = self.irecv(recvbuf, source, tag)
        send = self.isend(sendbuf, dest, tag)
        self.waitall([receive, send])

    # -- messages whose length the receiver does not know ------------------------------
    #: True when :meth:`recv_any` takes a plain :meth:`send` of any length, with no message
    #: ahead of it (MPI, threads), so that a call's check can travel in the same messages as
    #: its data (see :func:`allreduce.validation.agree_in_band`).  Elsewhere (torch) the
    #: three ``_any`` methods below send each message's length ahead of it.
    receives_any_length = False

    def send_any(self, buf, dest: int, tag: int = 0) -> None:
        """Send ``buf`` so that :meth:`recv_any` can take it without knowing its length.  This
        base form sends its length first, then ``buf``; a transport that can receive unknown
        lengths sends ``buf`` alone."""
        self.send(self._length_of(buf), dest, tag)
        self.send(buf, dest, tag)

    def recv_any(self, buf, source: int, tag: int = 0) -> bool:
        """Receive a message of *any* length from ``source`` (sent with :meth:`send_any`) into
        ``buf``: a shorter one fills a prefix, a longer one is cut to fit.  Returns True when
        it filled ``buf`` exactly.  This base form reads the length :meth:`send_any` sent."""
        length = self._length_of(buf)
        self.recv(length, source, tag)
        count = int(length[0])
        if count <= len(buf):
            self.recv(buf[:count], source, tag)
        else:  # a longer message: take it whole, keep what fits
            whole = self.empty(count, buf)
            self.recv(whole, source, tag)
            self.copy(buf, whole[:len(buf)])
        return count == len(buf)

    def sendrecv_any(self, sendbuf, dest: int, recvbuf, source: int, tag: int = 0) -> bool:
        """:meth:`sendrecv` whose incoming message may be of any length, as in :meth:`recv_any`
        (the outgoing one sent as by :meth:`send_any`).  This base form crosses the lengths
        first, then the messages."""
        mine, theirs = self._length_of(sendbuf), self._length_of(recvbuf)
        self.sendrecv(mine, dest, theirs, source, tag)
        count = int(theirs[0])
        incoming = recvbuf[:count] if count <= len(recvbuf) else self.empty(count, recvbuf)
        self.sendrecv(sendbuf, dest, incoming, source, tag)
        if count > len(recvbuf):
            self.copy(recvbuf, incoming[:len(recvbuf)])
        return count == len(recvbuf)

    def _length_of(self, buf):
        """A one-element int64 buffer, beside ``buf`` (same kind and device), holding its
        length: the message that :meth:`send_any` sends first."""
        if isinstance(buf, np.ndarray):
            return np.array([len(buf)], np.int64)
        import torch

        return torch.tensor([len(buf)], dtype=torch.int64, device=buf.device)

    @abstractmethod
    def barrier(self) -> None:
        """Return once every rank has called it."""

    # -- local work ---------------------------------------------------------------------
    def reduce_local(self, op: _ops.Op, inout, incoming, *, incoming_first: bool = False,
                     source=None) -> None:
        """``inout = inout (op) incoming`` in place, or ``source (op) incoming`` when
        ``source`` is given.  It goes through the communicator so that a trace can count
        the elements reduced (the γ term of the cost model)."""
        _ops.combine(op, inout, incoming, incoming_first=incoming_first, source=source)

    def empty(self, count: int, like):
        """A new contiguous 1-D buffer of ``count`` elements, of ``like``'s dtype and device."""
        if isinstance(like, np.ndarray):
            return np.empty(count, dtype=like.dtype)
        import torch

        return torch.empty(count, dtype=like.dtype, device=like.device)

    def scratch(self, count: int, like, purpose: str = ""):
        """A contiguous 1-D buffer of ``count`` elements, of ``like``'s dtype and device, kept
        from call to call: valid until this thread's next :meth:`scratch` of that dtype,
        device and ``purpose``.  An algorithm asks for one per call; a caller that holds one
        across an allreduce (which takes its own) names a ``purpose``.

        Each thread keeps the largest it has been asked for (:func:`release_scratch` frees
        them), as NCCL keeps its own buffers: a fresh 64 MiB buffer costs page
        faults on every call, measured here at 29 ms to fill against 9 ms for a kept one."""
        # numpy's dtype is its own key (str() of it cost about 5 us a call, measured)
        key = like.dtype if isinstance(like, np.ndarray) else (like.dtype, like.device)
        if purpose:
            key = (purpose, key)
        kept = _scratch.__dict__.get(key)
        if kept is None or len(kept) < count:
            kept = _scratch.__dict__[key] = None  # let the old one go before allocating
            kept = _scratch.__dict__[key] = self.empty(count, like)
        return kept[:count]

    def copy(self, dst, src) -> None:
        """``dst[:] = src`` without allocating."""
        copy_into(dst, src)

    # -- what the library needs beyond point to point -------------------------------------
    @abstractmethod
    def native(self, array):
        """``array`` as the buffer type this transport moves, sharing its memory.

        Raises ``TypeError`` when the transport cannot move this kind of array (a CUDA
        tensor over MPI, a CPU buffer over nccl)."""

    @abstractmethod
    def allgather_ints(self, values: np.ndarray) -> np.ndarray:
        """Gather a small int64 vector from every rank: an array of shape (size, len)."""

    @abstractmethod
    def allgather_object(self, obj: Any) -> list[Any]:
        """Gather one picklable object from every rank (used on error paths only)."""

    # -- groups of ranks (chapter "Beyond one flat ring") ----------------------------------
    def split(self, colors: Sequence[int]) -> Communicator:
        """The ranks whose colour equals this rank's, as a communicator of their own, ranked
        in this communicator's order.  ``colors`` holds one colour per rank, the same on every
        rank; the call is collective.  Each colouring is split once and the group kept: the
        same colours give back the same object (a torch ``new_group`` takes a rendezvous, an
        MPI ``Comm_split`` a collective).  All ranks of one colour: this communicator itself.

        Groups are kept for the :data:`KEPT_GROUPS` colourings used last; a colouring used
        after more others than that is split again, and the group let go (an MPI
        communicator freed: MPICH has room for about two thousand), so a program that
        cycles through many node layouts keeps a bounded number.  Every rank splits the
        same colourings in the same order, so every rank lets the same group go at the
        same call.  A group held by the caller is valid until then: split the colours
        again rather than keep it.

        This base form builds each group on this communicator's own messages
        (:class:`SubCommunicator`); the transports make groups of their own kind instead."""
        colors = tuple(int(c) for c in colors)
        if len(colors) != self.size:
            raise ValueError(f"split needs one colour per rank ({self.size}), got {len(colors)}")
        kept = self._groups()
        group = kept.pop(colors, None)
        if group is not None:
            kept[colors] = group  # put back last: the most recently used
            return group
        group = self if len(set(colors)) == 1 else self._split(colors, _unused_context(kept))
        kept[colors] = group
        made = [key for key in kept if isinstance(key, tuple)]  # (MPI keeps "nodes" there too)
        for oldest in made[:max(0, len(made) - KEPT_GROUPS)]:
            self._let_go(kept.pop(oldest))
        return group

    def _groups(self) -> dict:
        """Where :meth:`split` keeps its groups: on this object, by default."""
        return self.__dict__.setdefault("_kept_groups", {})

    def _split(self, colors: tuple[int, ...], index: int) -> Communicator:
        """A new group for this rank's colour (``index``: a number no kept group of this
        communicator has, which keeps its messages apart)."""
        return SubCommunicator(self, members(colors, self.rank), index)

    def _let_go(self, group: Communicator) -> None:
        """What :meth:`split` does with a group it no longer keeps: nothing, by default (the
        MPI transport frees its communicator)."""

    def nodes(self) -> tuple[int, ...]:
        """The node (machine) every rank runs on, one id per rank: equal ids share a node.
        Collective.  This base form knows of one node; MPI asks ``COMM_TYPE_SHARED`` and
        torch.distributed the launcher's agent (:mod:`allreduce.topology`)."""
        return (0,) * self.size


#: How many colourings :meth:`Communicator.split` keeps groups for.
KEPT_GROUPS = 64


def _unused_context(kept: dict) -> int:
    """The smallest context no kept group has (a group let go frees its own)."""
    used = {getattr(group, "context", None) for group in kept.values()}
    return next(index for index in range(len(used) + 1) if index not in used)


def members(colors: Sequence[int], rank: int) -> tuple[int, ...]:
    """The ranks that have ``rank``'s colour, in order."""
    return tuple(r for r, color in enumerate(colors) if color == colors[rank])


class SubCommunicator(Communicator):
    """A group of ``parent``'s ranks (``ranks``, in order) that talks through ``parent``'s own
    point-to-point messages: rank ``i`` here is ``ranks[i]`` there, and tags are moved into
    a range of their own (``context``) so that no message of the group meets one of
    another group or of ``parent``.  What :meth:`Communicator.split` makes by default."""

    TAG_STRIDE = 1 << 16

    def __init__(self, parent: Communicator, ranks: Sequence[int], context: int):
        self.parent, self.ranks = parent, tuple(ranks)
        self.rank, self.size = self.ranks.index(parent.rank), len(self.ranks)
        self.context = context
        self._tag = (context + 1) * self.TAG_STRIDE
        self.receives_any_length = parent.receives_any_length

    def isend(self, buf, dest: int, tag: int = 0):
        return self.parent.isend(buf, self.ranks[dest], tag + self._tag)

    def irecv(self, buf, source: int, tag: int = 0):
        return self.parent.irecv(buf, self.ranks[source], tag + self._tag)

    def waitall(self, requests: Sequence[Any]) -> None:
        self.parent.waitall(requests)

    def send_any(self, buf, dest: int, tag: int = 0) -> None:
        self.parent.send_any(buf, self.ranks[dest], tag + self._tag)

    def recv_any(self, buf, source: int, tag: int = 0) -> bool:
        return self.parent.recv_any(buf, self.ranks[source], tag + self._tag)

    def sendrecv_any(self, sendbuf, dest: int, recvbuf, source: int, tag: int = 0) -> bool:
        return self.parent.sendrecv_any(sendbuf, self.ranks[dest], recvbuf, self.ranks[source],
                                        tag + self._tag)

    def barrier(self) -> None:  # a token around the group, on the group's own messages
        token = np.zeros(1, np.int8)
        if self.size > 1:
            for _ in range(2):
                self.sendrecv(self.native(token), (self.rank + 1) % self.size,
                              self.native(token.copy()), (self.rank - 1) % self.size,
                              tag=self.TAG_STRIDE - 1)

    def reduce_local(self, op, inout, incoming, *, incoming_first: bool = False,
                     source=None) -> None:
        self.parent.reduce_local(op, inout, incoming, incoming_first=incoming_first,
                                 source=source)

    def native(self, array):
        return self.parent.native(array)

    def allgather_ints(self, values: np.ndarray) -> np.ndarray:
        return np.array(self.allgather_object(np.asarray(values, np.int64).tolist()), np.int64)

    def allgather_object(self, obj: Any) -> list[Any]:
        """Only this group's ranks take part: a pickle from each, sent round the group."""
        import pickle

        found = [obj] * self.size
        mine = np.frombuffer(pickle.dumps(obj), np.uint8).copy()  # (writable: torch's view)
        move = self.native  # numpy here; a torch parent moves tensors (the same memory)
        for step in range(1, self.size):  # everyone sends to everyone, one step at a time
            dest, source = (self.rank + step) % self.size, (self.rank - step) % self.size
            lengths = np.array([len(mine)], np.int64), np.zeros(1, np.int64)
            self.sendrecv(move(lengths[0]), dest, move(lengths[1]), source,
                          tag=self.TAG_STRIDE - 2)
            theirs = np.empty(int(lengths[1][0]), np.uint8)
            self.sendrecv(move(mine), dest, move(theirs), source, tag=self.TAG_STRIDE - 2)
            found[source] = pickle.loads(theirs.tobytes())
        return found


_scratch = threading.local()  # (dtype, device) → this thread's scratch buffer


def release_scratch() -> None:
    """Free the scratch buffers that :meth:`Communicator.scratch` keeps for this thread."""
    _scratch.__dict__.clear()
