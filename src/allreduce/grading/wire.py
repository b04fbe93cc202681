"""The messages between the judge (outside the sandbox) and the ranks (inside): a frame is a
4-byte length, a JSON header, then the binary blobs the header lists.  Arrays travel as raw
bytes with a dtype from a short list; nothing is ever unpickled, so a rank cannot run code
in the judge by what it sends, and the sizes are capped, so it cannot exhaust its memory."""

from __future__ import annotations

import json
import socket
import struct
from collections import deque

import numpy as np

MAX_HEADER = 1 << 20  # bytes of JSON in one frame
MAX_BLOB = 64 << 20  # bytes in one array
MAX_BLOBS = 64  # arrays in one frame
MAX_FRAME = 128 << 20  # bytes of arrays in one frame
DTYPES = ("float16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8", "bool")


class WireError(RuntimeError):
    """A frame the judge will not read (too large, malformed): the rank broke the protocol.
    ``frames``: the whole frames that came before it in the same data."""

    frames: list = []


def pack(header: dict, blobs=()) -> bytes:
    blobs = [bytes(b) for b in blobs]
    header = dict(header, blobs=[len(b) for b in blobs])
    text = json.dumps(header, separators=(",", ":")).encode()
    return struct.pack("!I", len(text)) + text + b"".join(blobs)


class Reader:
    """Cuts a byte stream into frames, checking every size before keeping anything."""

    def __init__(self):
        self._buffer = bytearray()
        self._header: dict | None = None
        self.ready: deque = deque()  # frames cut but not yet taken (see receive)

    def feed(self, data: bytes) -> list[tuple[dict, list[bytes]]]:
        """The frames ``data`` completes.  The buffer is cut once per call, not once per
        frame: 1 MiB of tiny frames is about 30,000 of them, and cutting each one off the
        front moved the whole buffer each time (quadratic)."""
        self._buffer += data
        frames: list = []
        try:
            return self._cut(self._buffer, frames)
        except WireError as error:
            error.frames = frames
            raise

    def _cut(self, buffer: bytearray, frames: list) -> list:
        at = 0
        while True:
            if self._header is None:
                if len(buffer) - at < 4:
                    break
                (length,) = struct.unpack_from("!I", buffer, at)
                if length > MAX_HEADER:
                    raise WireError(f"a header of {length} bytes")
                if len(buffer) - at < 4 + length:
                    break
                try:
                    header = json.loads(bytes(buffer[at + 4:at + 4 + length]))
                    sizes = header["blobs"]
                    if (not isinstance(header, dict) or not isinstance(sizes, list)
                            or len(sizes) > MAX_BLOBS
                            or sum(s for s in sizes if isinstance(s, int)) > MAX_FRAME
                            or not all(isinstance(s, int) and 0 <= s <= MAX_BLOB for s in sizes)):
                        raise ValueError(sizes)
                except (ValueError, KeyError, TypeError, RecursionError) as error:
                    # RecursionError: JSON nested deeper than the parser goes
                    raise WireError(f"a malformed header ({type(error).__name__}: "
                                    f"{str(error)[:100]})") from None
                at += 4 + length
                self._header = header
            need = sum(self._header["blobs"])
            if len(buffer) - at < need:
                break
            blobs = []
            for size in self._header["blobs"]:
                blobs.append(bytes(buffer[at:at + size]))
                at += size
            frames.append((self._header, blobs))
            self._header = None
        del buffer[:at]
        return frames


def send(sock: socket.socket, header: dict, blobs=()) -> None:
    sock.sendall(pack(header, blobs))


def receive(sock: socket.socket, reader: Reader) -> tuple[dict, list[bytes]]:
    """The next frame from ``sock`` (blocking); ``EOFError`` when it closes."""
    while not reader.ready:
        data = sock.recv(1 << 20)
        if not data:
            raise EOFError
        reader.ready.extend(reader.feed(data))
    return reader.ready.popleft()


# -- values with arrays in them ------------------------------------------------------------------

def encode(value, blobs: list) -> object:
    """``value`` as JSON, its arrays appended to ``blobs`` (for the rank's results)."""
    if isinstance(value, (bool, int, float, str)) or value is None:
        return value
    if isinstance(value, np.generic):
        return value.item()
    if type(value).__module__.startswith("torch"):
        try:
            value = value.detach().cpu().numpy()
        except (AttributeError, RuntimeError, TypeError):
            return {"__unreadable__": type(value).__name__}
    if isinstance(value, np.ndarray):
        if value.dtype.name not in DTYPES or value.nbytes > MAX_BLOB:
            return {"__unreadable__": f"array of {value.dtype}"}
        blobs.append(np.ascontiguousarray(value).tobytes())
        return {"__array__": len(blobs) - 1, "dtype": value.dtype.name, "shape": list(value.shape)}
    if isinstance(value, (list, tuple)):
        return [encode(v, blobs) for v in value]
    if isinstance(value, dict) and all(isinstance(k, str) for k in value):
        return {k: encode(v, blobs) for k, v in value.items()}
    return {"__unreadable__": type(value).__name__}


class Unreadable:
    """What a rank returned that cannot travel (a function, an object): shown by its type."""

    def __init__(self, what: str):
        self.what = str(what)[:80]

    def __repr__(self) -> str:
        return f"<a {self.what}>"


def array(description: dict, blobs: list[bytes]) -> np.ndarray:
    dtype, shape, index = description.get("dtype"), description.get("shape"), description.get("__array__")
    if dtype not in DTYPES or not isinstance(index, int) or not 0 <= index < len(blobs) \
            or not isinstance(shape, list) or not all(isinstance(s, int) and s >= 0 for s in shape):
        raise WireError("a malformed array")
    data = np.frombuffer(blobs[index], dtype=dtype)
    if data.size != int(np.prod(shape, dtype=np.int64)):
        raise WireError("an array whose shape does not match its bytes")
    return data.reshape(shape)


def decode(value, blobs: list[bytes], depth: int = 0):
    """The inverse of :func:`encode`, for what a rank sent (never trusted: only JSON and
    arrays come out)."""
    if depth > 32:
        raise WireError("a value nested too deep")
    if isinstance(value, list):
        return [decode(v, blobs, depth + 1) for v in value]
    if isinstance(value, dict):
        if "__array__" in value:
            return array(value, blobs)
        if "__unreadable__" in value:
            return Unreadable(value["__unreadable__"])
        return {k: decode(v, blobs, depth + 1) for k, v in value.items()}
    return value
