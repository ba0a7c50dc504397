"""One connection to one PS's data plane, as every client of it opens it.

The worker SDK (worker_sdk/ps), a backup copying its primary and a primary forwarding
mutations to its backups (ps/replication) all talk to a PS the same way: a DEALER socket with
LINGER 0, encrypted with CURVE when the PS registered a public key, a `DataRequest` header
carrying the token, and a `DataResponse` whose non-zero code is a refusal with a reason.

`ZmqTransport` is that socket behind the `pswire.transport.Transport` interface; `Connection`
is a worker's connection to one PS index: ZeroMQ over TCP, or the PS's same-host socket
(`pswire.samehost`) once the PS announced one this machine can reach.
"""
from __future__ import annotations

import os
import stat

import zmq

from protos import ps_pb2
from rpckit.errors import Reason, ServiceError, invalid

from . import samehost
from .frames import buffer_of, code_name
from .transport import Transport


# pyzmq's own copy_threshold: a smaller part sent with copy=False is copied anyway, after a Frame
# object was built around it
COPY_BELOW = 65536


def send_parts(sock: zmq.Socket, parts, flags: int = 0) -> None:
    """`sock.send_multipart(parts, copy=False, flags=flags)`, cheaper: a part under 64 KiB is
    copied straight into its message (pyzmq copies it too under copy=False, but builds a
    Frame first: about 10 us less for a Step's five frames), a larger one or a Frame (a
    tracked export, a received identity) is sent from its own memory as before."""
    last = len(parts) - 1
    for i, part in enumerate(parts):
        if isinstance(part, zmq.Frame):
            copy = False
        else:
            copy = (len(part) if isinstance(part, bytes) else memoryview(part).nbytes) < COPY_BELOW
        sock.send(part, flags | zmq.SNDMORE if i < last else flags, copy=copy)


def joined(parts: list) -> tuple[list[int], bytes] | None:
    """(sizes, one buffer of them all) for the buffers of a message after its header, when
    there are two or more and each is under COPY_BELOW (so `send_parts` would copy it anyway)
    and none is a Frame (a tracked export must go from its own memory); else None. One part
    costs about 3 us to send and again to receive, more than copying a few KB."""
    if len(parts) < 2:
        return None
    sizes = []
    for part in parts:
        if isinstance(part, zmq.Frame):
            return None
        n = len(part) if isinstance(part, bytes) else memoryview(part).nbytes
        if n >= COPY_BELOW:
            return None
        sizes.append(n)
    return sizes, b"".join(parts)


def split_joined(frame, sizes, max_parts: int) -> list[memoryview]:
    """The buffers a `joined` frame holds, as views of it (no copy). INVALID_ARGUMENT when
    the sizes do not add up to the frame, RESOURCE_EXHAUSTED (TOO_LARGE) when there are more
    than `max_parts`."""
    buf = buffer_of(frame)
    if len(sizes) > max_parts:
        raise ServiceError("RESOURCE_EXHAUSTED", Reason.TOO_LARGE,
                           f"frame_sizes lists {len(sizes)} buffers; at most {max_parts}")
    sizes = sizes[:]
    if sum(sizes) != buf.nbytes:
        raise invalid(f"frame_sizes add up to {sum(sizes)} bytes but the frame has "
                      f"{buf.nbytes}")
    out, at = [], 0
    for n in sizes:
        out.append(buf[at:at + n])
        at += n
    return out


def dealer(ctx: zmq.Context, endpoint: str, server_key: str = "",
           client_keys: tuple[bytes, bytes] | None = None, sndhwm: int | None = None) -> zmq.Socket:
    """A DEALER socket connected to `endpoint`: CURVE-encrypted when `server_key` (the PS's
    Z85 public key) is given, with `client_keys` (public, secret) or a fresh pair."""
    s = ctx.socket(zmq.DEALER)
    s.setsockopt(zmq.LINGER, 0)  # a dead PS must never hold a close or a context's term
    if sndhwm is not None:
        s.setsockopt(zmq.SNDHWM, sndhwm)
    if server_key:
        s.curve_serverkey = server_key.encode()
        s.curve_publickey, s.curve_secretkey = client_keys or zmq.curve_keypair()
    s.connect(endpoint)
    return s


def refusal(resp: ps_pb2.DataResponse, prefix: str = "") -> ServiceError:
    """The refusal a non-OK `DataResponse` carries, as the error clients branch on (by
    `reason`, never by message)."""
    return ServiceError(code_name(resp.code), resp.reason or Reason.INTERNAL,
                        prefix + resp.message)


class ZmqTransport(Transport):
    """A DEALER socket to one PS (`dealer`), as a `Transport`."""

    joins_buffers = True

    def __init__(self, ctx: zmq.Context, endpoint: str, server_key: str = "",
                 client_keys: tuple[bytes, bytes] | None = None):
        self.ctx = ctx
        self.endpoint = endpoint
        self.server_key = server_key
        self.client_keys = client_keys
        self.socket: zmq.Socket | None = None

    def connect(self) -> None:
        self.socket = dealer(self.ctx, self.endpoint, self.server_key, self.client_keys)

    @property
    def pollable(self) -> zmq.Socket:
        return self.socket

    def send(self, parts: list) -> None:
        send_parts(self.socket, parts)

    def recv(self) -> list:
        return self.socket.recv_multipart(copy=False)

    def close(self) -> None:
        if self.socket is not None:
            self.socket.close(0)
            self.socket = None


class Connection:
    """A worker's connection to one PS index, made lazily and thrown away on a timeout.

    `endpoint` is the PS's registered (TCP) address, reached over ZeroMQ. When the PS
    announces a same-host endpoint (unix://PATH) that exists on this machine, later requests
    go there; if it ever fails to answer, the connection goes back to TCP and does not use that
    path again.
    """

    def __init__(self, ctx: zmq.Context, endpoint: str, same_host: bool = True,
                 server_key: str = "", client_keys: tuple[bytes, bytes] | None = None):
        self.ctx = ctx
        self.endpoint = endpoint
        self.server_key = server_key    # the PS's CURVE public key: encrypt, else plaintext
        self.client_keys = client_keys  # this client's (public, secret) CURVE keys
        self.use_same_host = same_host
        self.generation = 0  # the PS generation this connection's endpoint serves
        self.same_host = ""  # the PS's same-host endpoint in use ("": TCP)
        self._refused: set[str] = set()
        self.transport: Transport | None = None

    @property
    def current(self) -> str:
        return self.same_host or self.endpoint

    @property
    def joins_buffers(self) -> bool:
        """Whether the transport requests go on next joins small buffers (ZeroMQ)."""
        return not self.same_host

    def send(self, parts: list) -> Transport:
        """Send a request; returns the transport its answer comes on. A same-host socket that
        cannot take it (the PS gone, or stopped with its socket full) is given up for TCP, as
        one that does not answer is."""
        if self.same_host:
            try:
                if self.transport is None:
                    self.transport = self._open(samehost.SameHostTransport(self.same_host))
                self.transport.send(parts)
                return self.transport
            except OSError:
                self.failed()
        if self.transport is None:
            self.transport = self._open(ZmqTransport(self.ctx, self.endpoint, self.server_key,
                                                     self.client_keys))
        self.transport.send(parts)
        return self.transport

    @staticmethod
    def _open(transport: Transport) -> Transport:
        transport.connect()
        return transport

    def reset(self) -> None:
        if self.transport is not None:
            self.transport.close()
            self.transport = None

    def failed(self) -> None:
        """No answer in time: start over, on TCP if the same-host socket was in use."""
        if self.same_host:
            self._refused.add(self.same_host)
            self.same_host = ""
        self.reset()

    def moved(self, endpoint: str, server_key: str = "") -> None:
        self.reset()
        self.endpoint = endpoint
        self.server_key = server_key
        self.same_host = ""

    def offer(self, endpoint: str) -> None:
        """The PS said it also listens on `endpoint` (unix://PATH): use it if that socket is
        on this host."""
        path = samehost.path_of(endpoint)
        if (not self.use_same_host or not path or endpoint == self.same_host
                or endpoint in self._refused):
            return
        try:
            if not stat.S_ISSOCK(os.stat(path).st_mode):
                return
        except OSError:
            return  # another machine (or a PS that is gone): stay on TCP
        self.reset()
        self.same_host = endpoint
