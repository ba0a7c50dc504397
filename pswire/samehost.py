"""The same-host transport: data-plane messages over a Unix stream socket, without ZeroMQ.

ZeroMQ moves every message through an I/O thread of its own on each side: a request wakes
the worker's I/O thread to write it and the PS's to read it, then the PS's handler thread; the
answer wakes two more. On the two cores a worker and its PS share, those wake-ups were 11 % of
the worker's CPU and 15 % of each PS's (docs/benchmarks.md). Over this socket the caller's
thread writes its message itself and the kernel wakes the one thread that reads it.

A PS running without TLS serves it beside its ZeroMQ socket (ps/dataplane/samehost.py) and
announces `unix://PATH` in every answer (`DataResponse.local_endpoint`); a client on the same
machine sends there (`pswire.connection.Connection`, through `SameHostTransport`). Under TLS a
PS serves no same-host socket: TLS promises every data-plane byte encrypted (CURVE), and this
socket carries them as they are.

A message is its frame count, each frame's size and the frames' bytes, back to back:

    uint32 n | uint64 size[0] ... size[n-1] | frame[0] | ... | frame[n-1]     (little-endian)

as [header, buffer, ...] of the ZeroMQ data plane (frame 0 the DataRequest / DataResponse).
One request is answered at a time per connection, in order. Sizes are checked before anything
is allocated: at most `MAX_FRAMES` frames, each at most the receiver's frame bound.
"""
from __future__ import annotations

import socket
import struct
import threading

import numpy as np
import zmq

from .transport import Transport

SCHEME = "unix://"
MAX_FRAMES = 1 << 20  # a Step's answer has a few; the PS bounds a request's by --max-request-frames
MAX_MESSAGE_BYTES = 1 << 40  # a claim past any memory: refused, not tried (numpy would raise)
IO_TIMEOUT_S = 5.0  # a client's blocking write or read of one message: a peer stopped mid-way
MAX_IOV = 512  # buffers per sendmsg (Linux allows 1024)
# A Unix stream socket holds about 200 KB by default: a 40 MB message would cross in some 200
# turns of writer and reader, each a wake-up. Both ends ask for this much (the kernel caps it
# at net.core.wmem_max); only what is in flight is allocated.
SOCKET_BUFFER_BYTES = 4 << 20
ZEROED_BELOW = 1 << 20  # a larger receive buffer is not zeroed first (it is written over)

_COUNT = struct.Struct("<I")


class BadMessage(ValueError):
    """The bytes on the socket are not a message of this format, or one over the bounds."""


# Set in the threads of a server that writes its answers itself (ps/dataplane/samehost.py):
# a payload handed out there is `Written`, not a ZeroMQ frame
WRITER = threading.local()


def writes_itself() -> bool:
    """Whether this thread's answers are written by a same-host server (`WRITER`)."""
    return WRITER.__dict__.get("active", False)


class Written:
    """A payload sent from its own memory by a server that writes it itself, and its tracker:
    `done` once every byte is written or the answer dropped (`finish`). A tracked zero-copy
    ZeroMQ frame would do the same at a cost: its making, and its freeing through pyzmq's
    garbage-collector thread (a wake-up and the GIL, per frame)."""

    __slots__ = ("view", "nbytes", "done")

    def __init__(self, buffer) -> None:
        self.view = memoryview(buffer)
        self.nbytes = self.view.nbytes
        self.done = False


def finish(parts) -> None:
    """An answer's bytes are written (or will never be): its `Written` payloads are done."""
    for part in parts:
        if type(part) is Written:
            part.done = True


def prefix(sizes: list[int]) -> bytes:
    return _COUNT.pack(len(sizes)) + struct.pack(f"<{len(sizes)}Q", *sizes)


def buffers(parts) -> list[memoryview]:
    """Byte views of a message's parts (bytes, buffers, numpy arrays, zmq.Frame), no copy."""
    out = []
    for part in parts:
        kind = type(part)
        view = part.view if kind is Written else part.buffer if kind is zmq.Frame \
            else memoryview(part)
        out.append(view if view.format == "B" and view.ndim == 1 else view.cast("B"))
    return out


def framed(parts) -> list[memoryview]:
    """The buffers to write for a message of `parts`: its prefix, then the parts."""
    views = buffers(parts)
    return [memoryview(prefix([v.nbytes for v in views])), *views]


def count_of(head) -> int:
    n = _COUNT.unpack(head)[0]
    if not 1 <= n <= MAX_FRAMES:
        raise BadMessage(f"a message of {n} frames (1 to {MAX_FRAMES})")
    return n


def sizes_of(raw, max_frame_bytes: int) -> list[int]:
    sizes = list(struct.unpack(f"<{len(raw) // 8}Q", raw))
    if any(s > max_frame_bytes for s in sizes):
        raise BadMessage(f"a frame of {max(sizes)} bytes; at most {max_frame_bytes}")
    if sum(sizes) > MAX_MESSAGE_BYTES:
        raise BadMessage(f"a message of {sum(sizes)} bytes; at most {MAX_MESSAGE_BYTES}")
    return sizes


def tune(sock: socket.socket) -> None:
    for opt in (socket.SO_SNDBUF, socket.SO_RCVBUF):
        sock.setsockopt(socket.SOL_SOCKET, opt, SOCKET_BUFFER_BYTES)


def buffer(n: int):
    """A writable buffer of n bytes to receive into: bytearray, or for a large one memory
    that is not zeroed first (zeroing 40 MB costs as much as receiving it)."""
    return bytearray(n) if n < ZEROED_BELOW else np.empty(n, dtype=np.uint8)


def split(buf, sizes: list[int]) -> list[memoryview]:
    view, out, at = memoryview(buf), [], 0
    for n in sizes:
        out.append(view[at:at + n])
        at += n
    return out


def send_all(sock: socket.socket, views: list[memoryview]) -> list[memoryview]:
    """Write as much of `views` as the socket takes (blocking or not); returns what is left
    (empty once all is written)."""
    views = [v for v in views if v.nbytes]
    at = 0  # the first view not wholly written (an index: popping the front is quadratic)
    while at < len(views):
        try:
            sent = sock.sendmsg(views[at:at + MAX_IOV])
        except (BlockingIOError, InterruptedError):
            return views[at:]
        while sent:
            if sent >= views[at].nbytes:
                sent -= views[at].nbytes
                at += 1
            else:
                views[at] = views[at][sent:]
                sent = 0
    return []


def path_of(endpoint: str) -> str:
    """The socket path of a `unix://PATH` endpoint; "" for any other endpoint."""
    return endpoint[len(SCHEME):] if endpoint.startswith(SCHEME) else ""


class SameHostTransport(Transport):
    """A client's connection to one PS's same-host socket. The caller's thread writes and
    reads itself, blocking at most IO_TIMEOUT_S; an OSError (the PS gone, a stop mid-message)
    or a BadMessage means the connection is no longer usable."""

    def __init__(self, endpoint: str, max_frame_bytes: int = 1 << 40):
        """endpoint: unix://PATH."""
        self.endpoint = endpoint
        self.max_frame_bytes = max_frame_bytes
        self.sock: socket.socket | None = None

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            tune(sock)
            sock.settimeout(IO_TIMEOUT_S)
            sock.connect(path_of(self.endpoint))
        except OSError:
            sock.close()
            raise
        self.sock = sock

    @property
    def pollable(self) -> int:
        return self.sock.fileno()

    def send(self, parts) -> None:
        if send_all(self.sock, framed(parts)):  # only a non-blocking socket leaves some
            raise OSError("the PS's socket took only part of the message")

    def recv(self) -> list[memoryview]:
        n = count_of(self._exactly(_COUNT.size))
        sizes = sizes_of(self._exactly(8 * n), self.max_frame_bytes)
        return split(self._exactly(sum(sizes)), sizes)

    def _exactly(self, n: int):
        buf = buffer(n)
        view, got = memoryview(buf), 0
        while got < n:
            k = self.sock.recv_into(view[got:])
            if not k:
                raise ConnectionResetError("the PS closed the connection")
            got += k
        return buf

    def close(self) -> None:
        if self.sock is not None:
            self.sock.close()
