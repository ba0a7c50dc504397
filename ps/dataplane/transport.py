"""The PS's data plane transport: a ZeroMQ ROUTER socket that moves tensors without copying.

A client's multipart message [DataRequest, buffer, ...] arrives on a ROUTER socket bound to
`--data-port`. One handler thread reads that socket itself (the default, and `threads=0`), or
`zmq.proxy` (C code, no GIL) hands each message over an in-process socket to one of `threads`
handler threads (a primary with backups: see AUTO). A handler decodes the header and hands the
request to the next link of the chain it was given (ps/dataplane/__init__.py: auth, the replica's role filter, replication, the
handlers, the store), then send back what that answers, [DataResponse, buffer, ...], the same
way. Received tensor frames are wrapped with `torch.frombuffer` (no copy); a pulled tensor is
sent from the tensor's own memory (no copy) and its tracker pins it until ZeroMQ has written the
bytes (see `ps.store.params`). Under TLS the socket is a CURVE server (ZeroMQ's encryption): clients
connect with the public key the PS registered. Without TLS the same requests are also served
on the same-host socket (samehost.py), and every answer names it (`local_endpoint`); under TLS
there is none, since it would carry the bytes unencrypted.

Bad input never takes the PS down: a header that does not parse is answered INVALID_ARGUMENT,
a message without a body frame is dropped, frames larger than `max_frame_bytes` make ZeroMQ
drop the peer, a message of more than `max_frames` frames is refused (TOO_LARGE) after its
first frames, its other frames discarded one by one without being kept, a request that runs
out of memory is answered RESOURCE_EXHAUSTED (OUT_OF_MEMORY) and any other unexpected error
INTERNAL (logged); the handler thread keeps serving either way. Should a handler thread still
end (a ZeroMQ failure), `on_failure` is called once, and the PS reports NOT_SERVING.
"""
from __future__ import annotations

import logging
import os
import threading
import uuid
from typing import Callable, Protocol

import zmq
from google.protobuf.message import DecodeError

from protos import ps_pb2
from pswire import samehost as wire
from pswire.connection import joined, send_parts, split_joined
from pswire.frames import error_response
from rpckit.errors import Reason, ServiceError, invalid

from ..store.limits import Limits, too_large
from .samehost import SameHostServer

log = logging.getLogger(__name__)

POLL_MS = 100
# threads=AUTO: one thread serving the ROUTER socket itself, and AUTO_THREADS handlers behind
# a proxy while this PS is a primary with backups (each mutation's handler then waits for the
# backups' acknowledgement, and the others keep serving). One handler is faster otherwise: several of them on a few cores take turns at the
# GIL for every request (bench_train and bench_ps, docs/benchmarks.md).
AUTO = -1
AUTO_THREADS = 4
# `recv_into` needs a buffer: the frames of a refused over-long message are read into this
# one byte (and so truncated and dropped) instead of each becoming an object.
_SCRATCH_BYTES = 1


class BindError(Exception):
    pass


class Next(Protocol):
    """The link a transport hands a decoded request to (ps/dataplane/__init__.py)."""

    def handle(self, kind: str | None, req: ps_pb2.DataRequest, frames: list,
               header) -> list: ...


class DataPlane:
    def __init__(self, next: Next, host: str = "0.0.0.0", port: int = 0, threads: int = AUTO,
                 max_frame_bytes: int = 2**31, same_host_path: str = "",
                 same_host_optional: bool = False,
                 curve_keypair: tuple[bytes, bytes] | None = None,
                 on_failure: Callable[[str], None] | None = None,
                 max_frames: int = Limits().max_frames,
                 more_handlers: threading.Event | None = None):
        """next: the chain's next link, handed every decoded request (`build_chain`);
        same_host_path: also serve the same-host socket there ("": none), unless under CURVE;
        same_host_optional: a path that cannot be served (or CURVE) is said and skipped, not
        a BindError; curve_keypair: (public, secret) Z85 keys to encrypt every connection with CURVE
        (zmq.curve_keypair()); on_failure(why): called once if a serving thread ends before
        `stop` (the PS turns its health NOT_SERVING); max_frames: the most frames a message
        may have (--max-request-frames); more_handlers: with threads=AUTO, once this event is
        set (a primary with backups: ps.replication.ReplicaNode.more_handlers) serve with
        AUTO_THREADS handlers."""
        self.next = next
        self.on_failure = on_failure
        self.failed = ""  # why a serving thread ended early; "" while all serve
        self.curve_keypair = curve_keypair
        self.more_handlers = more_handlers
        self.max_frames = max_frames
        self.same_host_path = same_host_path
        self.same_host_optional = same_host_optional
        self.local_endpoint = ""  # the same-host socket's endpoint (unix://PATH) once bound
        self._suffix = b""  # appended to every answer header: names local_endpoint
        self.host = host
        self.port = port
        self.auto = threads == AUTO
        self.threads = 1 if self.auto else threads
        self.max_frame_bytes = max_frame_bytes
        self.ctx = zmq.Context(io_threads=1)
        self._backend_addr = f"inproc://ps-data-{uuid.uuid4().hex}"
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._grow_lock = threading.Lock()
        self._switch = False  # asked to grow while one thread serves the socket directly
        self.frontend: zmq.Socket | None = None
        self.same_host: SameHostServer | None = None
        self.bound_port = 0

    # -- lifecycle ----------------------------------------------------------------------------

    def bind(self) -> int:
        """Bind the ROUTER socket; returns the port. Raises BindError (port in use, bad host)."""
        sock = self.ctx.socket(zmq.ROUTER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.MAXMSGSIZE, self.max_frame_bytes)
        sock.setsockopt(zmq.RCVHWM, 10_000)
        sock.setsockopt(zmq.SNDHWM, 10_000)
        if self.curve_keypair is not None:  # before bind: it applies to every connection
            sock.curve_server = True
            sock.curve_publickey, sock.curve_secretkey = self.curve_keypair
        host = f"[{self.host}]" if ":" in self.host else self.host
        if ":" in self.host:
            sock.setsockopt(zmq.IPV6, 1)
        try:
            if self.port == 0:
                sock.bind(f"tcp://{host}:*")
            else:
                sock.bind(f"tcp://{host}:{self.port}")
        except zmq.ZMQError as exc:
            sock.close(0)
            raise BindError(f"cannot listen on data port tcp://{host}:{self.port or '*'}: "
                            f"{exc}") from exc
        endpoint = sock.getsockopt(zmq.LAST_ENDPOINT).decode()
        self.bound_port = int(endpoint.rsplit(":", 1)[1])
        refused = self._bind_same_host() if self.same_host_path else ""
        if refused:
            sock.close(0)
            raise BindError(refused)
        self.frontend = sock
        return self.bound_port

    def _bind_same_host(self) -> str:
        """Listen on the same-host path (samehost.py); why not, when it cannot be served and
        is not optional ("" otherwise). Under CURVE it is not served: TLS promises
        every data-plane byte encrypted, and the same-host socket carries them as they are."""
        why = ("under TLS the data plane is served only encrypted (CURVE, over TCP), and the "
               "same-host socket is not" if self.curve_keypair is not None else "")
        if not why:
            # through the attribute at each request: a meter wraps `handle` after binding
            server = SameHostServer(self.same_host_path, lambda parts: self.handle(parts),
                                    self._too_many_frames, self.max_frames,
                                    self.max_frame_bytes, self._stop, self._ended,
                                    workers=max(1, self.threads))
            try:
                server.bind()
            except OSError as exc:
                why = f"cannot listen on {self.same_host_path}: {exc}"
            else:
                self.same_host = server
                self.local_endpoint = f"{wire.SCHEME}{self.same_host_path}"
                # protobuf merges concatenated messages: these bytes after any answer's header
                # set its local_endpoint without decoding it again
                self._suffix = ps_pb2.DataResponse(
                    local_endpoint=self.local_endpoint).SerializeToString()
                return ""
        if not self.same_host_optional:
            return f"no same-host socket ({why}): give --data-ipc auto or off"
        log.info("no same-host socket (%s); workers on this machine use TCP", why)
        self.same_host_path = ""
        return ""

    def start(self) -> None:
        assert self.frontend is not None, "bind() first"
        if self.same_host is not None:
            self.same_host.start()
        if self.threads == 0 or (self.auto and self.threads == 1):
            # one thread serves the ROUTER socket itself: no proxy thread, no hand-over over
            # an in-process socket (two thread wake-ups less per request). With AUTO that
            # thread hands the socket to a proxy and AUTO_THREADS handlers once asked to grow
            self._threads.append(threading.Thread(target=self._serve, args=(self.frontend,),
                                                  name="ps-data", daemon=True))
            self._threads[0].start()
            return
        self._start_proxied(self.threads)

    def _start_proxied(self, handlers: int) -> None:
        """The proxy over the ROUTER socket and `handlers` threads behind it."""
        backend = self._backend_socket(bind=True)
        frontend = self.frontend

        def proxy() -> None:
            try:
                zmq.proxy(frontend, backend)
            except zmq.ZMQError as exc:  # ETERM: the context is being terminated by stop()
                if exc.errno != zmq.ETERM:
                    log.exception("data plane proxy failed")
            except BaseException:  # noqa: BLE001 - reported below; nothing is served now
                log.exception("data plane proxy failed")
            finally:
                frontend.close(0)
                backend.close(0)
                self._ended("the data plane proxy")

        with self._grow_lock:
            self._threads = [threading.Thread(target=proxy, name="ps-data-proxy", daemon=True)]
            self._threads[0].start()
            self._add_handlers(handlers)

    def _add_handlers(self, n: int) -> None:
        """Under _grow_lock."""
        for _ in range(n):
            t = threading.Thread(target=self._serve, name=f"ps-data-{len(self._threads) - 1}",
                                 daemon=True)
            t.start()  # then listed: a listed handler is always one that was started
            self._threads.append(t)

    def grow(self) -> None:
        """With threads=AUTO: serve with AUTO_THREADS handlers from now on (a primary with
        backups); otherwise nothing changes. While one thread serves the socket directly, it
        makes the switch itself, between two requests (the socket is its alone)."""
        if not self.auto or self._stop.is_set():
            return
        if self.same_host is not None:
            self.same_host.grow(AUTO_THREADS)
        with self._grow_lock:
            if not self._threads:  # not serving yet: start() starts them all
                self.threads = AUTO_THREADS
                return
            if self._direct():
                self._switch = True
                return
            missing = AUTO_THREADS - (len(self._threads) - 1)  # less the proxy
            if missing > 0:  # counted and added under one lock: two calls add them once
                log.info("serving with %d data plane handler threads (a primary with "
                         "backups)", AUTO_THREADS)
                self._add_handlers(missing)

    def _direct(self) -> bool:
        return len(self._threads) == 1 and self._threads[0].name == "ps-data"

    def stop(self, timeout: float = 5.0) -> None:
        """Stop serving: handler threads finish the request in hand, then sockets close.

        Terminating the context makes the proxy and every blocked socket call raise ETERM;
        each thread then closes its socket, which lets the termination complete.
        """
        self._stop.set()
        if not self._threads and self.frontend is not None:
            self.frontend.close(0)
        term = threading.Thread(target=self.ctx.term, name="ps-data-term", daemon=True)
        term.start()
        for t in [*self._threads, term]:
            t.join(timeout)
        if self.same_host is not None:
            self.same_host.join(timeout)
            try:
                os.unlink(self.same_host_path)
            except OSError:
                pass

    def _serve(self, sock: zmq.Socket | None = None) -> None:
        if sock is None:
            try:
                sock = self._backend_socket(bind=False)
            except zmq.ZMQError:
                # A stop() that came before this new thread's first line closes the
                # context under it (ETERM, or ENOTSUP once it is closed): nothing to serve.
                if not self._stop.is_set():
                    log.exception("data plane handler failed to start")
                    self._ended(f"data plane handler {threading.current_thread().name}")
                return
        scratch = bytearray(_SCRATCH_BYTES)
        handed_over = False
        try:
            while not self._stop.is_set():
                if sock.poll(POLL_MS):
                    self._serve_one(sock, scratch)
                if self.more_handlers is not None and self.more_handlers.is_set():
                    self.more_handlers = None  # read once: grow() is idempotent
                    self.grow()
                if self._switch and sock is self.frontend:  # hand the ROUTER to a proxy
                    log.info("serving with %d data plane handler threads (a primary with "
                             "backups)", AUTO_THREADS)
                    self._start_proxied(AUTO_THREADS)
                    handed_over = True
                    return
        except zmq.ZMQError as exc:
            if exc.errno != zmq.ETERM:
                log.exception("data plane handler failed")
        except BaseException:  # noqa: BLE001 - reported below: the PS is no longer healthy
            log.exception("data plane handler failed")
        finally:
            if not handed_over:
                sock.close(0)
                self._ended(f"data plane handler {threading.current_thread().name}")

    def _backend_socket(self, bind: bool) -> zmq.Socket:
        """One end of the in-process link between the proxy (bind) and a handler (connect);
        closed again when it cannot be set up (a context stopping under it)."""
        sock = self.ctx.socket(zmq.DEALER)
        try:
            sock.setsockopt(zmq.LINGER, 0)
            sock.setsockopt(zmq.RCVHWM, 10_000)
            sock.setsockopt(zmq.SNDHWM, 10_000)
            (sock.bind if bind else sock.connect)(self._backend_addr)
        except zmq.ZMQError:
            sock.close(0)
            raise
        return sock

    def _ended(self, what: str) -> None:
        """A serving thread is done: fine while stopping, else the PS serves no longer."""
        if self._stop.is_set() or self.failed:
            return
        self.failed = f"{what} stopped"
        log.error("%s: the PS reports NOT_SERVING", self.failed)
        if self.on_failure is not None:
            self.on_failure(self.failed)

    def _serve_one(self, sock: zmq.Socket, scratch: bytearray) -> None:
        """Receive one message [identity, header, buffer, ...] and answer it.

        Frames are taken one at a time so that a message longer than the bound is refused
        before its frames become objects (2 M empty frames cost 680 MB as a list of them).
        Any failure in here answers the request if it can and leaves the thread serving.
        """
        limit = self.max_frames + 1  # + the identity frame
        frames = [sock.recv(copy=False)]
        while frames[-1].more and len(frames) <= limit:
            frames.append(sock.recv(copy=False))
        if frames[-1].more:
            self._send(sock, frames[0], [self._too_many_frames(limit - 1)])
            del frames[1:]
            while sock.rcvmore:  # drop the rest in place, one frame at a time
                sock.recv_into(scratch)
            return
        if len(frames) < 2:  # an identity and nothing else: nothing to answer
            return
        try:
            reply = self.handle(frames[1:])
        except MemoryError:
            reply = [self._out_of_memory(0)]
        self._send(sock, frames[0], reply)
        # Drop our references now: a pulled tensor stays pinned while any exist.
        del frames, reply

    @staticmethod
    def _send(sock: zmq.Socket, identity, reply: list) -> None:
        send_parts(sock, [identity, *reply])

    # -- requests -----------------------------------------------------------------------------

    def handle(self, parts: list) -> list:
        """Answer one request [header, buffer, ...] with [header, buffer, ...]."""
        try:
            header = parts[0].bytes if hasattr(parts[0], "bytes") else bytes(parts[0])
            req = ps_pb2.DataRequest.FromString(header)
        except (DecodeError, ValueError, RuntimeError) as exc:
            return [self._error(invalid(f"cannot parse the request header "
                                        f"(a DataRequest protobuf): {exc}",
                                        Reason.UNDECODABLE), 0)]
        kind = req.WhichOneof("body")
        sizes = req.frame_sizes
        joined_in = bool(sizes)
        try:
            if joined_in:  # the buffers came joined: split them, and go on as if they had not
                if len(parts) != 2:
                    raise invalid(f"frame_sizes is set but {len(parts) - 1} frames followed "
                                  "the header (the joined buffers travel as one)")
                parts = [parts[0], *split_joined(parts[1], sizes, self.max_frames)]
                req.ClearField("frame_sizes")
                header = req.SerializeToString()  # what replication forwards, with the parts
            reply = self.next.handle(kind, req, parts[1:], header)
        except ServiceError as exc:
            return [self._error(exc, req.seq)]
        except MemoryError:
            log.warning("out of memory handling %s from client %r", kind, req.client_id[:64])
            return [self._out_of_memory(req.seq)]
        except Exception:  # noqa: BLE001 - a bug; the PS keeps serving
            log.exception("internal error handling %s", kind)
            return [self._error(ServiceError("INTERNAL", Reason.INTERNAL,
                                             f"internal error handling {kind}"), req.seq)]
        if self._suffix:
            reply[0] = bytes(reply[0]) + self._suffix
        if joined_in and len(reply) > 2:  # answered as asked: small buffers joined into one frame
            got = joined(reply[1:])
            if got is not None:
                reply = [bytes(reply[0]) + ps_pb2.DataResponse(
                    frame_sizes=got[0]).SerializeToString(), got[1]]
        return reply

    def _too_many_frames(self, limit: int) -> bytes:
        return self._error(too_large(
            f"the message has more than {limit} frames (--max-request-frames); send at most "
            "that many, or split the request"), 0)

    def _out_of_memory(self, seq: int) -> bytes:
        return self._error(ServiceError(
            "RESOURCE_EXHAUSTED", Reason.OUT_OF_MEMORY,
            "the PS ran out of memory handling this request; retry later or send less at once"),
            seq)

    def _error(self, exc: ServiceError, seq: int) -> bytes:
        return error_response(exc, seq).SerializeToString() + self._suffix
