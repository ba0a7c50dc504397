"""The PS's data plane: a ZeroMQ ROUTER socket that moves tensors without copying them.

A client's multipart message [DataRequest, buffer, ...] arrives on a ROUTER socket bound to
`--data-port`; `zmq.proxy` (C code, no GIL) hands it over an in-process socket to one of
`threads` handler threads, which decode it, call the `ParamStore`, and send back
[DataResponse, buffer, ...] the same way. Received tensor frames are wrapped with
`torch.frombuffer` (no copy); a pulled tensor is sent from the tensor's own memory (no copy)
and its tracker pins it until ZeroMQ has written the bytes (see `ps.params`).

With a token (`--auth-token`) every request must carry it in `DataRequest.token`; one that does
not is answered UNAUTHENTICATED before anything else is looked at. Under TLS the socket is a
CURVE server (ZeroMQ's encryption): clients connect with the public key the PS registered.

Bad input never takes the PS down: a header that does not parse is answered INVALID_ARGUMENT,
a message without a body frame is dropped, frames larger than `max_frame_bytes` make ZeroMQ
drop the peer, a message of more than `limits.max_frames` frames is refused (TOO_LARGE) after
its first frames, its other frames discarded one by one without being kept, a request that
runs out of memory is answered RESOURCE_EXHAUSTED (OUT_OF_MEMORY) and any other unexpected
error INTERNAL (logged); the handler thread keeps serving either way. Should a handler thread
still end (a ZeroMQ failure), `on_failure` is called once, and the PS reports NOT_SERVING.
"""
from __future__ import annotations

import logging
import os
import tempfile
import threading
import uuid
from typing import Callable

import torch
import zmq
from google.protobuf.message import DecodeError

from protos import ps_pb2

from .embedding import TableSpec
from rpckit import auth
from rpckit.errors import Reason, ServiceError, invalid
from .limits import Limits, too_large
from .optim import config_from_pb
from .params import ParamStore
from .steps import StepParts
from .wire import (DTYPES, FLOAT_DTYPES, as_buffer, check_meta, code_number, error_response,
                   from_frame, meta_of)

log = logging.getLogger(__name__)

# Below this size a tensor is copied into the reply (cheaper than a tracked zero-copy frame).
ZERO_COPY_MIN_BYTES = 64 * 1024
POLL_MS = 100
# threads=AUTO: one handler thread, and AUTO_THREADS while this PS is a primary with backups
# (each mutation's handler then waits for the backups' acknowledgement, and the others keep
# serving). One handler is faster otherwise: several of them on a few cores take turns at the
# GIL for every request (bench_train and bench_ps, docs/benchmarks.md).
AUTO = -1
AUTO_THREADS = 4
CLIENT_KINDS = frozenset({"init_parameters", "pull", "push", "pull_rows", "push_rows", "step"})
# `recv_into` needs a buffer: the frames of a refused over-long message are read into this
# one byte (and so truncated and dropped) instead of each becoming an object.
_SCRATCH_BYTES = 1


class BindError(Exception):
    pass


LOCAL_DIR = "elastic-ps"
MAX_UNIX_PATH = 100  # sun_path is 108 bytes on Linux


def auto_ipc_path(index: int) -> str:
    """A fresh Unix socket path for the same-host endpoint, under the temp directory; sockets
    left by PS that are gone (killed) are removed. Empty when no usable path exists."""
    directory = os.path.join(tempfile.gettempdir(), LOCAL_DIR)
    try:
        os.makedirs(directory, exist_ok=True)
        if not os.access(directory, os.W_OK):
            return ""
        for name in os.listdir(directory):
            parts = name.split("-")
            if name.endswith(".sock") and len(parts) == 4 and parts[2].isdigit():
                if not _alive(int(parts[2])):
                    try:
                        os.unlink(os.path.join(directory, name))
                    except OSError:
                        pass
    except OSError:
        return ""
    path = os.path.join(directory, f"ps-{index}-{os.getpid()}-{uuid.uuid4().hex[:8]}.sock")
    return path if len(path) <= MAX_UNIX_PATH else ""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True


def _export(t: torch.Tensor):
    """Payload for a pulled tensor: its own memory, tracked, or a small copy."""
    if t.numel() * t.element_size() < ZERO_COPY_MIN_BYTES:
        return bytes(as_buffer(t)), None
    frame = zmq.Frame(as_buffer(t), copy=False, track=True)
    return frame, frame.tracker


class DataPlane:
    def __init__(self, store: ParamStore, host: str = "0.0.0.0", port: int = 0, threads: int = AUTO,
                 max_frame_bytes: int = 2**31, ipc_path: str = "", ipc_optional: bool = False,
                 token: str = "", curve_keypair: tuple[bytes, bytes] | None = None,
                 replica=None, on_failure: Callable[[str], None] | None = None):
        """token: when set, every request must carry it (DataRequest.token); curve_keypair:
        (public, secret) Z85 keys to encrypt every connection with CURVE (zmq.curve_keypair());
        on_failure(why): called once if a serving thread ends before `stop` (the PS turns its
        health NOT_SERVING). The frame bound is the store's `limits.max_frames`."""
        self.token = token
        self.on_failure = on_failure
        self.failed = ""  # why a serving thread ended early; "" while all serve
        self.curve_keypair = curve_keypair
        # ps.replica.ReplicaNode: decides by this PS's role what is served (None: standalone)
        self.replica = replica
        if replica is not None:
            replica.bind(self.dispatch, self.grow)
        self.ipc_path = ipc_path
        self.ipc_optional = ipc_optional
        self.local_endpoint = ""
        self.store = store
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
        self.frontend: zmq.Socket | None = None
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
        if self.ipc_path:
            try:
                sock.bind(f"ipc://{self.ipc_path}")
                self.local_endpoint = f"ipc://{self.ipc_path}"
            except zmq.ZMQError as exc:
                if not self.ipc_optional:
                    sock.close(0)
                    raise BindError(f"cannot listen on ipc://{self.ipc_path}: {exc}") from exc
                log.warning("no same-machine endpoint (cannot listen on ipc://%s: %s); workers "
                            "here use TCP", self.ipc_path, exc)
                self.ipc_path = ""
        self.frontend = sock
        return self.bound_port

    def start(self) -> None:
        assert self.frontend is not None, "bind() first"
        if self.threads == 0:  # one thread serves the ROUTER socket itself: no hand-over
            self._threads.append(threading.Thread(target=self._serve, args=(self.frontend,),
                                                  name="ps-data", daemon=True))
            self._threads[0].start()
            return
        backend = self.ctx.socket(zmq.DEALER)
        backend.setsockopt(zmq.LINGER, 0)
        backend.setsockopt(zmq.RCVHWM, 10_000)
        backend.setsockopt(zmq.SNDHWM, 10_000)
        backend.bind(self._backend_addr)
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

        self._threads.append(threading.Thread(target=proxy, name="ps-data-proxy", daemon=True))
        self._threads[0].start()
        with self._grow_lock:
            self._add_handlers(self.threads)

    def _add_handlers(self, n: int) -> None:
        """Under _grow_lock."""
        for _ in range(n):
            t = threading.Thread(target=self._serve, name=f"ps-data-{len(self._threads) - 1}",
                                 daemon=True)
            self._threads.append(t)
            t.start()

    def grow(self) -> None:
        """With threads=AUTO: serve with AUTO_THREADS handlers from now on (a primary with
        backups); otherwise nothing changes."""
        if not self.auto or self._stop.is_set():
            return
        with self._grow_lock:
            if not self._threads:  # not serving yet: start() starts them all
                self.threads = AUTO_THREADS
                return
            missing = AUTO_THREADS - (len(self._threads) - 1)  # less the proxy
            if missing > 0:  # counted and added under one lock: two calls add them once
                log.info("serving with %d data plane handler threads (a primary with "
                         "backups)", AUTO_THREADS)
                self._add_handlers(missing)

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
        if self.ipc_path:
            try:
                os.unlink(self.ipc_path)
            except OSError:
                pass

    def _serve(self, sock: zmq.Socket | None = None) -> None:
        if sock is None:
            sock = self.ctx.socket(zmq.DEALER)
            sock.setsockopt(zmq.LINGER, 0)
            sock.setsockopt(zmq.RCVHWM, 10_000)
            sock.setsockopt(zmq.SNDHWM, 10_000)
            sock.connect(self._backend_addr)
        scratch = bytearray(_SCRATCH_BYTES)
        try:
            while not self._stop.is_set():
                if sock.poll(POLL_MS):
                    self._serve_one(sock, scratch)
        except zmq.ZMQError as exc:
            if exc.errno != zmq.ETERM:
                log.exception("data plane handler failed")
        except BaseException:  # noqa: BLE001 - reported below: the PS is no longer healthy
            log.exception("data plane handler failed")
        finally:
            sock.close(0)
            self._ended(f"data plane handler {threading.current_thread().name}")

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
        limit = self.store.limits.max_frames + 1  # + the identity frame
        frames = [sock.recv(copy=False)]
        while frames[-1].more and len(frames) <= limit:
            frames.append(sock.recv(copy=False))
        if frames[-1].more:
            self._send(sock, frames[0], [self._error(too_large(
                f"the message has more than {limit - 1} frames (--max-request-frames); send "
                "at most that many, or split the request"), 0)])
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
        sock.send_multipart([identity, *reply], copy=False)

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
        if self.token and not auth.token_matches(req.token, self.token):
            return [self._error(auth.unauthenticated(
                "no auth token" if not req.token else "wrong auth token"), req.seq)]
        kind = req.WhichOneof("body")
        try:
            if kind is None:
                raise invalid("the request has no body: set one of init_parameters, pull, "
                              "push, pull_rows, push_rows, step")
            if self.replica is not None:
                return self.replica.handle(kind, req, parts)
            return self.dispatch(kind, req, parts[1:])
        except ServiceError as exc:
            return [self._error(exc, req.seq)]
        except MemoryError:
            log.warning("out of memory handling %s from client %r", kind, req.client_id[:64])
            return [self._out_of_memory(req.seq)]
        except Exception:  # noqa: BLE001 - a bug; the PS keeps serving
            log.exception("internal error handling %s", kind)
            return [self._response(code=code_number("INTERNAL"), seq=req.seq,
                                   reason=Reason.INTERNAL.value,
                                   message=f"internal error handling {kind}").SerializeToString()]

    def dispatch(self, kind: str, req, frames: list) -> list:
        """Serve one decoded client request (no replication: see ps.replica)."""
        if kind not in CLIENT_KINDS:
            raise invalid(f"{kind} is for PS replicas; this PS serves no replication")
        return getattr(self, "_" + kind)(req, frames)

    def _out_of_memory(self, seq: int) -> bytes:
        return self._error(ServiceError(
            "RESOURCE_EXHAUSTED", Reason.OUT_OF_MEMORY,
            "the PS ran out of memory handling this request; retry later or send less at once"),
            seq)

    def _response(self, **fields) -> ps_pb2.DataResponse:
        return ps_pb2.DataResponse(local_endpoint=self.local_endpoint, **fields)

    def _error(self, exc: ServiceError, seq: int) -> bytes:
        resp = error_response(exc, seq)
        resp.local_endpoint = self.local_endpoint
        return resp.SerializeToString()

    @staticmethod
    def _tensors(metas, frames, allowed=tuple(DTYPES)) -> list[tuple[str, torch.Tensor]]:
        if len(frames) != len(metas):
            raise invalid(f"the header describes {len(metas)} tensors but {len(frames)} "
                          "buffer frames followed")
        out = []
        for meta, frame in zip(metas, frames):
            dtype, shape, _ = check_meta(meta, allowed)
            out.append((meta.name, from_frame(frame, dtype, shape, f"tensor {meta.name!r}")))
        return out

    def _init_parameters(self, req, frames) -> list:
        body = req.init_parameters
        tensors = self._tensors(body.tensors, frames, FLOAT_DTYPES)
        tables = []
        for spec in body.tables:
            cfg = config_from_pb(spec.optimizer) if spec.optimizer.name else None
            tables.append((TableSpec(name=spec.name, dim=spec.dim,
                                     initializer=spec.initializer or "normal",
                                     init_a=spec.init_a, init_b=spec.init_b, seed=spec.seed,
                                     num_embeddings=spec.num_embeddings,
                                     max_rows=spec.max_rows, admit_after=spec.admit_after or 1,
                                     ttl_s=spec.ttl_s, ttl_steps=spec.ttl_steps,
                                     evict=spec.evict or "lru"), cfg))
        initialized, versions, message = self.store.init_parameters(
            tensors, config_from_pb(body.optimizer), tables)
        resp = self._response(code=0, message=message, seq=req.seq)
        resp.init_parameters.initialized = initialized
        resp.init_parameters.staleness_checked = self.store.max_staleness >= 0
        resp.init_parameters.versions.update(versions)
        return [resp.SerializeToString()]

    def _pull(self, req, frames) -> list:
        if frames:
            raise invalid("a Pull carries no buffer frames")
        pulled = self.store.pull(list(req.pull.names), _export)
        resp = self._response(code=0, seq=req.seq)
        resp.pull.SetInParent()
        resp.pull.staleness_checked = self.store.max_staleness >= 0
        out = [None]
        for name, payload, version, tensor in pulled:
            resp.pull.tensors.append(meta_of(name, tensor))
            resp.pull.versions.append(version)
            out.append(payload)
        out[0] = resp.SerializeToString()
        return out

    def _push(self, req, frames) -> list:
        if req.push.check_only:  # phase one of a push split over several PS: apply nothing
            if frames:
                raise invalid("a Push with check_only carries no buffer frames")
            metas = []
            for meta in req.push.tensors:
                dtype, shape, _ = check_meta(meta, FLOAT_DTYPES)
                metas.append((meta.name, shape, dtype))
            answer = self.store.check_push(metas, list(req.push.versions))
        else:
            grads = self._tensors(req.push.tensors, frames, FLOAT_DTYPES)
            answer = self.store.push(req.client_id, req.seq, grads, list(req.push.versions),
                                     req.push.checked)
        resp = self._response(code=code_number(answer["code"]), message=answer["message"],
                              reason=answer.get("reason", ""),
                                   seq=req.seq)
        resp.push.versions.update(answer.get("versions", {}))
        resp.push.max_staleness = answer.get("max_staleness", 0)
        resp.push.duplicate = answer.get("duplicate", False)
        return [resp.SerializeToString()]

    @staticmethod
    def _ids(frame) -> torch.Tensor:
        n = frame.buffer.nbytes if hasattr(frame, "buffer") else memoryview(frame).nbytes
        if n % 8:
            raise invalid(f"the ids frame has {n} bytes, not a whole number of int64")
        return from_frame(frame, torch.int64, (n // 8,), "ids")

    def _pull_rows(self, req, frames) -> list:
        if len(frames) != 1:
            raise invalid(f"a PullRows carries exactly one frame (the int64 ids), got {len(frames)}")
        rows, created = self.store.pull_rows(req.pull_rows.table, self._ids(frames[0]))
        resp = self._response(code=0, seq=req.seq)
        resp.pull_rows.dim = rows.shape[1]
        resp.pull_rows.created = created
        return [resp.SerializeToString(), as_buffer(rows)]

    def _push_rows(self, req, frames) -> list:
        if len(frames) != 2:
            raise invalid("a PushRows carries exactly two frames (int64 ids, float32 "
                          f"gradients), got {len(frames)}")
        ids = self._ids(frames[0])
        table = self.store.table(req.push_rows.table)
        grads = from_frame(frames[1], torch.float32, (ids.numel(), table.spec.dim),
                           f"gradients of table {req.push_rows.table!r}")
        answer = self.store.push_rows(req.client_id, req.seq, req.push_rows.table, ids, grads)
        resp = self._response(code=code_number(answer["code"]), message=answer["message"],
                              reason=answer.get("reason", ""),
                                   seq=req.seq)
        resp.push_rows.rows = answer.get("rows", 0)
        resp.push_rows.duplicate = answer.get("duplicate", False)
        return [resp.SerializeToString()]

    def _step(self, req, frames) -> list:
        parts = self._step_parts(req.step, frames)
        answer = self.store.step(req.client_id, req.seq, parts, _export)
        resp = self._response(code=code_number(answer["code"]), message=answer["message"],
                              reason=answer.get("reason", ""), seq=req.seq)
        result = resp.step
        pushed = answer.get("push")
        if pushed is not None:
            result.push.versions.update(pushed.get("versions", {}))
            result.push.max_staleness = pushed.get("max_staleness", 0)
        result.push.duplicate = answer.get("duplicate", False)
        for count in answer.get("rows", ()):
            result.push_rows.add(rows=count, duplicate=answer.get("duplicate", False))
        out = [None]
        if "pulled" in answer:
            result.pull.SetInParent()
            result.pull.staleness_checked = self.store.max_staleness >= 0
            for name, payload, version, tensor in answer["pulled"]:
                result.pull.tensors.append(meta_of(name, tensor))
                result.pull.versions.append(version)
                out.append(payload)
        for rows, created in answer.get("pulled_rows", ()):
            result.pull_rows.add(dim=rows.shape[1], created=created)
            out.append(as_buffer(rows))
        out[0] = resp.SerializeToString()
        return out

    def _step_parts(self, step, frames) -> StepParts:
        """The Step's parts over its frames (see protos/ps.proto), checked for shape only."""
        pushed = len(step.push.tensors) if step.HasField("push") else 0
        expected = pushed + 2 * len(step.push_rows) + len(step.pull_rows)
        if len(frames) != expected:
            raise invalid(f"the Step describes {expected} buffer frames ({pushed} gradients, "
                          f"2 per row push, 1 per row pull) but {len(frames)} followed")
        parts = StepParts()
        if step.HasField("push"):
            if step.push.check_only:
                raise invalid("a Step's push cannot be check_only; send the check as a Push")
            parts.grads = self._tensors(step.push.tensors, frames[:pushed], FLOAT_DTYPES)
            parts.versions = list(step.push.versions)
            parts.checked = step.push.checked
        at = pushed
        for entry in step.push_rows:
            table = self.store.table(entry.table)
            ids = self._ids(frames[at])
            grads = from_frame(frames[at + 1], torch.float32, (ids.numel(), table.spec.dim),
                               f"gradients of table {entry.table!r}")
            parts.rows.append((entry.table, ids, grads))
            at += 2
        if step.HasField("pull"):
            parts.pull = list(step.pull.names)
        for entry in step.pull_rows:
            parts.pull_rows.append((entry.table, self._ids(frames[at])))
            at += 1
        return parts
