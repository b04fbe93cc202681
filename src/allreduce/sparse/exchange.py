"""Exchanging messages whose length the receiver does not know: the length travels first,
in a message of its own, then the message (chapter "Sparse allreduce", in preparation).
Every transport can do this with ordinary sends and receives; the price is a second,
8-byte message per exchange, which the sparse algorithms' cost formulas count."""

from __future__ import annotations

import numpy as np

from ..comm import Communicator

#: Bytes an exchange adds to its payload on the critical path: the 8-byte length message and
#: the packet's 16-byte header (:mod:`allreduce.sparse.vector`).
OVERHEAD_BYTES = 8 + 16


def sendrecv_packet(comm: Communicator, packet: np.ndarray, dest: int, source: int) -> np.ndarray:
    """Send ``packet`` (uint8) to ``dest`` while receiving one of unknown length from
    ``source``; returns the received packet."""
    mine = np.array([len(packet)], np.int64)
    theirs = np.empty(1, np.int64)
    comm.sendrecv(comm.native(mine), dest, comm.native(theirs), source)
    incoming = np.empty(int(theirs[0]), np.uint8)
    comm.sendrecv(comm.native(packet), dest, comm.native(incoming), source)
    return incoming


def send_packet(comm: Communicator, packet: np.ndarray, dest: int) -> None:
    comm.send(comm.native(np.array([len(packet)], np.int64)), dest)
    comm.send(comm.native(packet), dest)


def recv_packet(comm: Communicator, source: int) -> np.ndarray:
    length = np.empty(1, np.int64)
    comm.recv(comm.native(length), source)
    packet = np.empty(int(length[0]), np.uint8)
    comm.recv(comm.native(packet), source)
    return packet
