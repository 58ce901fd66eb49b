"""The frame format of a local worker's socket, both directions: an 8-byte length, then the pickle.

The local pool and each of its worker processes share a socket pair; this module is the
one place that writes and reads it. The pool's end never blocks (`PoolEnd`): what the
socket does not take now waits in a `FrameWriter`, so a worker stuck in run() with a full
socket never stops the loop that enforces its deadline, and a `FrameReader` turns whatever
bytes have come into the whole messages among them. The worker's end blocks (`WorkerEnd`),
as a worker has nothing else to do while it waits. The messages are protocol.py's.
"""

from __future__ import annotations

import pickle
import select
import socket
import struct
from typing import Any, Protocol

_HEADER = struct.Struct("!Q")
_CHUNK = 1 << 16


def encode(message: object) -> bytes:
    """One frame: the length of the pickle, then the pickle."""
    data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    return _HEADER.pack(len(data)) + data


class FrameReader:
    """Bytes in, in pieces of any size; whole messages out, in order."""

    def __init__(self) -> None:
        self._buffer = bytearray()

    def feed(self, data: bytes | bytearray) -> list[Any]:
        """Add `data`; returns the messages it completed (a partial frame waits for the rest)."""
        self._buffer += data
        messages, start = [], 0
        with memoryview(self._buffer) as view:
            while len(view) - start >= _HEADER.size:
                (size,) = _HEADER.unpack_from(view, start)
                end = start + _HEADER.size + size
                if end > len(view):
                    break
                messages.append(pickle.loads(view[start + _HEADER.size : end]))
                start = end
        del self._buffer[:start]
        return messages


class _Sender(Protocol):
    def send(self, data: bytes | bytearray, flags: int = ..., /) -> int: ...


class FrameWriter:
    """Frames the socket did not take yet, written as it takes them."""

    def __init__(self) -> None:
        self.unsent = bytearray()

    def add(self, message: object) -> None:
        self.unsent += encode(message)

    def write(self, sender: _Sender) -> bool:
        """Send what `sender` takes now, never blocking; True while some waits (watch for POLLOUT)."""
        if self.unsent:
            try:
                sent = sender.send(self.unsent, socket.MSG_DONTWAIT)
            except BlockingIOError:
                sent = 0
            except OSError:  # the worker died just now; its sentinel reports the loss
                sent = len(self.unsent)
            del self.unsent[:sent]
        return bool(self.unsent)


class PoolEnd:
    """The pool's end of one worker's socket: sends are queued, reads take what has come."""

    def __init__(self, sock: socket.socket):
        sock.setblocking(False)
        self._sock = sock
        self._reader = FrameReader()
        self._writer = FrameWriter()
        self._eof = False

    def fileno(self) -> int:
        return self._sock.fileno()

    def send(self, message: object) -> bool:
        """Queue `message` and write what the socket takes; True while some waits."""
        self._writer.add(message)
        return self.flush()

    def flush(self) -> bool:
        """Write what the socket takes of the queued frames; True while some waits."""
        return self._writer.write(self._sock)

    def receive(self) -> list[Any]:
        """Every whole message that has come. EOFError once the worker's end is closed and all is read;
        OSError when the socket broke."""
        data = bytearray()
        while not self._eof:
            try:
                chunk = self._sock.recv(_CHUNK)
            except BlockingIOError:
                break
            self._eof = not chunk
            data += chunk
        messages = self._reader.feed(data)
        if self._eof and not messages:
            raise EOFError
        return messages

    def close(self) -> None:
        self._sock.close()


class WorkerEnd:
    """A worker's end of its socket: whole messages, blocking."""

    def __init__(self, sock: socket.socket):
        self._sock = sock
        self._reader = FrameReader()
        self._pending: list[Any] = []
        self._inbox = select.poll()  # registered once: a selector per look would cost more
        self._inbox.register(sock.fileno(), select.POLLIN)

    def send(self, message: object) -> None:
        self._sock.sendall(encode(message))

    def recv(self) -> Any:
        """The next message, waiting for it; EOFError when the pool's end is closed."""
        while not self._pending:
            chunk = self._sock.recv(_CHUNK)
            if not chunk:
                raise EOFError
            self._pending += self._reader.feed(chunk)
        return self._pending.pop(0)

    def waiting(self) -> bool:
        """Whether a message (or the start of one) has come, so `recv` will not wait for the pool."""
        return bool(self._pending) or bool(self._inbox.poll(0))
