"""Ordered output of bytes and file ranges on a Twisted TCP transport, the file ranges
sent with sendfile(2): stored batches go from the page cache to the socket without
passing through Python (how a Kafka Fetch answer is sent, docs/architecture.md
section 6).

Twisted has no sendfile, so this writes to the socket itself, and only while the
transport's own buffer is empty (so bytes written through the transport and through
this object stay in order). When the socket is full it registers as the transport's
pull producer: Twisted calls ``resumeProducing`` once its buffer has drained and the
socket is writable again.

    out = FileOutput(transport, on_error=lambda reason: ...)
    out.write([b"header", FileSpan(path, position, size), b"more"])
    out.close()   # on connection loss or abort: drops what is left, closes the file

On a transport without a socket of its own (TLS), file ranges are read and written as
bytes.
"""

from __future__ import annotations

import os
import socket
from collections import deque
from typing import Any, Callable, Iterable, Protocol, cast

from twisted.internet import tcp

from ..core.types import FileSpan


Chunk = bytes | memoryview | FileSpan


def read_span(span: FileSpan) -> bytes:
    fd = os.open(span.path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        data = os.pread(fd, span.size, span.position)
    finally:
        os.close(fd)
    if len(data) != span.size:
        raise OSError(f"{span.path} is shorter than {span.position + span.size} bytes")
    return data


class FileOutput:
    def __init__(self, transport: Any, on_error: Callable[[str], None]) -> None:
        self.t = transport
        self.on_error = on_error
        direct = isinstance(transport, tcp.Connection) and hasattr(os, "sendfile")
        self.sock: socket.socket | None = transport.socket if direct else None
        self.fileno = transport.fileno() if direct else -1
        self._items: deque[Chunk] = deque()
        self._fd = -1  # the open file of _items[0] while it is a FileSpan
        self._registered = False
        self._pumping = False
        self._closed = False

    def write(self, chunks: Iterable[Chunk]) -> None:
        if self._closed:
            return
        chunks = list(chunks)
        if self.sock is None:
            try:
                data = b"".join(c if not isinstance(c, FileSpan) else read_span(c) for c in chunks)
            except OSError as e:
                return self._fail(f"cannot read stored records: {e}")
            self.t.write(data)
            return
        if not self._items and not any(isinstance(c, FileSpan) for c in chunks):
            self.t.writeSequence(chunks)  # no file range: the transport keeps the order
            return
        self._items.extend(chunks)
        self._pump()

    @property
    def pending(self) -> int:
        """Chunks not yet handed to the kernel."""
        return len(self._items)

    def _transport_buffered(self) -> bool:
        t = self.t  # Twisted's FileDescriptor buffers (no public accessor)
        return bool(len(t.dataBuffer) - t.offset or t._tempDataLen)

    def _pump(self) -> None:
        if self._pumping or self._closed:
            return
        self._pumping = True
        try:
            self._send()
        finally:
            self._pumping = False

    def _send(self) -> None:
        items = self._items
        sock = self.sock
        assert sock is not None
        while items:
            if self._transport_buffered():
                return self._wait()
            item = items[0]
            try:
                if isinstance(item, FileSpan):
                    if self._fd < 0:
                        self._fd = os.open(item.path, os.O_RDONLY | os.O_CLOEXEC)
                    n = os.sendfile(self.fileno, self._fd, item.position, item.size)
                    if n == 0:
                        return self._fail(f"{item.path} ended before {item.position + item.size} bytes")
                    if n < item.size:
                        items[0] = FileSpan(item.path, item.position + n, item.size - n)
                        continue  # sendfile stops short of a full socket; try until EAGAIN
                    os.close(self._fd)
                    self._fd = -1
                else:
                    n = sock.send(item, socket.MSG_MORE if len(items) > 1 else 0)
                    if n < len(item):
                        items[0] = memoryview(item)[n:]
                        continue
            except BlockingIOError:
                return self._wait()
            except OSError as e:
                return self._fail(f"sending a response failed: {e}")
            items.popleft()
        if self._registered:
            self._registered = False
            self.t.unregisterProducer()

    def _wait(self) -> None:
        """Resume once the transport's buffer is empty and the socket is writable."""
        if not self._registered:
            self._registered = True
            self.t.registerProducer(self, False)  # calls resumeProducing: _pumping guards
        self.t.startWriting()

    def _fail(self, reason: str) -> None:
        self.close()
        self.on_error(reason)

    # -- IPullProducer (Twisted calls these) ------------------------------------------

    def resumeProducing(self) -> None:
        self._pump()

    def stopProducing(self) -> None:
        self.close()

    def close(self) -> None:
        """Drop what is left (the connection is going) and close the open file."""
        self._closed = True
        self._items.clear()
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
        if self._registered:
            self._registered = False
            self.t.unregisterProducer()


class Counted(Protocol):
    bytes_out: int  # a connection's record (core.types.ConnectionRecord)


def direct_writer(t: Any, counted: Counted | None = None) -> Callable[[bytes], None]:
    """``t.write``, except that while Twisted holds nothing for the socket the bytes go
    straight to it. Through ``t.write`` each turn's output cost a second reactor
    iteration and two ``epoll_ctl`` calls (register for writable, then unregister); what
    the socket does not take goes to ``t.write`` and keeps its order there. Transports
    without a socket of their own (TLS) just use ``t.write``. ``counted.bytes_out``
    counts the bytes given to write."""
    if not isinstance(t, tcp.Connection):
        plain = cast(Callable[[bytes], None], t.write)
        if counted is None:
            return plain

        def counting(data: bytes) -> None:
            counted.bytes_out += len(data)
            plain(data)

        return counting
    sock = t.socket
    write = t.write

    def send(data: bytes) -> None:
        if counted is not None:
            counted.bytes_out += len(data)
        if t.disconnecting or t.disconnected or len(t.dataBuffer) - t.offset or t._tempDataLen:
            write(data)  # queued behind Twisted's buffer (or dropped, when it is closing)
            return
        try:
            n = sock.send(data)
        except BlockingIOError:
            n = 0
        except OSError:
            write(data)  # Twisted meets the same error and reports it as connection loss
            return
        if n < len(data):
            write(data[n:])

    return send


_TCP_QUICKACK = getattr(socket, "TCP_QUICKACK", None)  # Linux only


def quick_ack(t: Any) -> Callable[[], None] | None:
    """A function that makes the kernel acknowledge (at the TCP level) what the peer has
    sent so far at once, instead of holding the ACK for our next reply; None where that
    cannot be done (no TCP socket under ``t``, or not Linux).

    For a connection whose reply waits for the disk: a client with Nagle's algorithm on
    (paho-mqtt and libmosquitto do not set TCP_NODELAY) holds its next small packet until
    its last one is acknowledged, and Linux delays that ACK to ride on our reply, so the
    client's next PUBLISH would wait for the previous one's fdatasync. TLS and WebSocket
    transports wrap the TCP one (``.transport``)."""
    for _ in range(4):
        if isinstance(t, tcp.Connection) or t is None:
            break
        t = getattr(t, "transport", None)
    if _TCP_QUICKACK is None or not isinstance(t, tcp.Connection):
        return None
    setsockopt = t.socket.setsockopt
    level, option = socket.IPPROTO_TCP, _TCP_QUICKACK

    def ack_now() -> None:
        try:
            setsockopt(level, option, 1)
        except OSError:
            pass  # closing: nothing left to acknowledge

    return ack_now
