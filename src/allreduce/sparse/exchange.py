"""Moving sparse chunks (chapter {ref}`sparse`): one message per exchange, whose length the
receiver does not know.  It receives into a kept buffer as large as the longest message
can be (:func:`~allreduce.sparse.vector.packet_bound`): the chunk's dense form, or, given
``most_pairs`` (every rank's pairs together, which the call's check gathered: no message
holds more; ``topk_allreduce``'s ⌈k/p⌉), their pairs form when that is smaller, so that a
vector of 2³³ elements with a few thousand pairs needs kilobytes, not gigabytes.  It uses the communicator's ``*_any``
methods: on MPI and threads a plain message; torch sends its length ahead of it.  The ring's
all-gather of finished chunks, which three sparse algorithms end with, lives here too."""

from __future__ import annotations

import numpy as np

from ..algorithms._schedule import left, right
from ..comm import Communicator
from .vector import HEADER_BYTES, decode, encode, packet_bound, packet_length

#: Bytes a message adds to its pairs: the packet's header (its form, pair count and range).
OVERHEAD_BYTES = HEADER_BYTES


def _inbox(comm: Communicator, bounds: tuple[int, int], dtype: np.dtype,
           most_pairs: int | None) -> np.ndarray:
    return comm.scratch(packet_bound(*bounds, dtype.itemsize, most_pairs),
                        np.empty(0, np.uint8))


def exchange(comm: Communicator, packet: np.ndarray, dest: int, source: int,
             bounds: tuple[int, int], dtype: np.dtype, most_pairs: int | None = None
             ) -> np.ndarray:
    """Send ``packet`` to ``dest`` while receiving, from ``source``, a packet of the range
    ``bounds`` of at most ``most_pairs`` pairs (None: any number); returns the received
    bytes (valid until the next exchange)."""
    inbox = _inbox(comm, bounds, dtype, most_pairs)
    comm.sendrecv_any(comm.native(packet), dest, comm.native(inbox), source)
    return inbox


def send(comm: Communicator, packet: np.ndarray, dest: int) -> None:
    comm.send_any(comm.native(packet), dest)


def receive(comm: Communicator, source: int, bounds: tuple[int, int], dtype: np.dtype,
            most_pairs: int | None = None):
    """The sparse vector of the range ``bounds``, of at most ``most_pairs`` pairs, that
    ``source`` sends."""
    inbox = _inbox(comm, bounds, dtype, most_pairs)
    comm.recv_any(comm.native(inbox), source)
    return decode(inbox, dtype)


def ring_allgather(comm: Communicator, chunks: list, bounds: list[tuple[int, int]],
                   dtype: np.dtype, most_pairs: int | None = None) -> list:
    """The ring's all-gather on sparse chunks (of at most ``most_pairs`` pairs each):
    ``chunks[rank]`` is this rank's finished chunk; after ``p − 1`` steps ``chunks`` holds
    every rank's.  A received packet is forwarded as it came, not encoded again."""
    p, rank = comm.size, comm.rank
    packet = encode(*chunks[rank], *bounds[rank])
    for step in range(p - 1):  # in step s, rank r forwards chunk r − s and receives r − s − 1
        receive_chunk = (rank - step - 1) % p
        incoming = exchange(comm, packet, right(comm), left(comm), bounds[receive_chunk], dtype,
                            most_pairs)
        packet = incoming[:packet_length(incoming, dtype.itemsize)].copy()
        chunks[receive_chunk] = decode(packet, dtype)
    return chunks
