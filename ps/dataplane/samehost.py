"""The PS's same-host socket: a Unix stream socket for workers on this machine, one thread.

The message format is pswire.samehost's. A PS serves it beside its ZeroMQ socket when it runs
without TLS (`--data-ipc`; `auto_path` picks a path). One thread (`ps-data-same-host`) accepts
connections, reads requests without blocking (a client that sends half a message holds up no one), hands each
whole request to the data plane's `handle` (the same chain as the ZeroMQ socket's) and writes
the answer itself: no I/O thread, no hand-over. An answer the socket does not take at once is
kept (the buffers themselves, no copy) and written as the client reads; that connection's next
request is read only after it. A pulled tensor answered here is sent from its own memory as a
`pswire.samehost.Written`, its own tracker, done once this thread has written the answer (or
dropped it with its connection): a push meanwhile copies the tensor first, as with a ZeroMQ
frame still being sent, and making and freeing no ZeroMQ frame saves a PS about a fifth of its
CPU per Step (docs/benchmarks.md).

Bad input: a message of more frames than `max_frames` is answered TOO_LARGE and the
connection closed; a frame larger than `max_frame_bytes`, or bytes that are not this format,
close the connection (as ZeroMQ drops such a peer). More than MAX_CONNECTIONS connections: the
newest is closed (its client goes back to TCP).
"""
from __future__ import annotations

import logging
import os
import selectors
import socket
import tempfile
import threading
import uuid
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from typing import Callable

from pswire import samehost as wire

log = logging.getLogger(__name__)

SOCKET_DIR = "elastic-ps"  # under the temp directory: where `auto_path` puts sockets
MAX_PATH = 100  # sun_path is 108 bytes on Linux
MAX_CONNECTIONS = 1024
POLL_S = 1.0  # how often the thread looks at `stop` while nothing arrives (join() wakes it)


class _Conn:
    """One client connection: the request being read, the answer being written."""

    def __init__(self, sock: socket.socket):
        self.sock = sock
        self.out: list[memoryview] = []  # the rest of an answer the socket did not take
        self.refs: list = []  # what `out` is a view of (tracked frames among them)
        self.next_message()

    def next_message(self) -> None:
        """Read a new message from its start (its frame count)."""
        self.piece = 0  # 0: frame count, 1: sizes, 2: payload
        self.need = 4  # bytes of the current piece
        self.buf = bytearray(4)
        self.got = 0
        self.sizes: list[int] = []


class SameHostServer:
    def __init__(self, path: str, handle: Callable[[list], list], refuse: Callable[[int], bytes],
                 max_frames: int, max_frame_bytes: int, stop: threading.Event,
                 ended: Callable[[str], None], workers: int = 1):
        """handle(frames) -> answer parts (DataPlane.handle); refuse(limit): the answer to a
        message of too many frames; ended(what): called if the serving thread fails;
        workers: requests handled at once (`grow`)."""
        self.path = path
        self.handle = handle
        self.refuse = refuse
        self.max_frames = max_frames
        self.max_frame_bytes = max_frame_bytes
        self._stop = stop
        self._ended = ended
        self.listener: socket.socket | None = None
        self.thread: threading.Thread | None = None
        self._conns: dict[int, _Conn] = {}
        self.workers = workers
        self._pool: ThreadPoolExecutor | None = None
        self._answered: deque = deque()  # (conn, answer) from the pool, for this thread to write
        self._wake_r, self._wake_w = socket.socketpair()
        for s in (self._wake_r, self._wake_w):
            s.setblocking(False)

    def grow(self, workers: int) -> None:
        """Handle up to `workers` requests at once from now on (a primary with backups, whose
        handlers each wait for the backups' acknowledgement): the serving thread still reads
        and writes, and hands each whole request to a pool of that many threads."""
        self.workers = max(self.workers, workers)

    def bind(self) -> None:
        """Listen on `path` (OSError when it cannot)."""
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.bind(self.path)
            sock.listen(socket.SOMAXCONN)
            sock.setblocking(False)
        except OSError:
            sock.close()
            raise
        self.listener = sock

    def start(self) -> None:
        self.thread = threading.Thread(target=self._run, name="ps-data-same-host", daemon=True)
        self.thread.start()

    def join(self, timeout: float) -> None:
        """Wait for the serving thread, once `stop` is set (woken here: it sleeps up to
        POLL_S)."""
        self._wake()
        if self.thread is not None:
            self.thread.join(timeout)

    def _run(self) -> None:
        wire.WRITER.active = True  # what the handlers export here, this thread writes
        sel = selectors.DefaultSelector()
        try:
            sel.register(self.listener, selectors.EVENT_READ, None)
            sel.register(self._wake_r, selectors.EVENT_READ, self._answered)
            while not self._stop.is_set():
                for key, events in sel.select(POLL_S):
                    if key.data is None:
                        self._accept(sel)
                        continue
                    if key.data is self._answered:
                        self._write_answered(sel)
                        continue
                    conn = key.data
                    try:
                        if events & selectors.EVENT_WRITE:
                            self._flush(sel, conn)
                        elif events & selectors.EVENT_READ:
                            self._read(sel, conn)
                    except (OSError, wire.BadMessage, MemoryError) as exc:
                        log.debug("closing a same-host data connection: %s", exc)
                        self._close(sel, conn)
                    except Exception:  # noqa: BLE001 - a bug: that client goes, the rest stay
                        log.exception("internal error on a same-host data connection")
                        self._close(sel, conn)
        except BaseException:  # noqa: BLE001 - reported below: the PS is no longer healthy
            log.exception("same-host data plane handler failed")
            self._ended("the same-host data plane handler")
        finally:
            if self._pool is not None:
                self._pool.shutdown(wait=False, cancel_futures=True)
            for conn in list(self._conns.values()):
                self._close(sel, conn)
            sel.close()
            self.listener.close()
            self._wake_r.close()
            self._wake_w.close()

    def _accept(self, sel) -> None:
        try:
            sock, _ = self.listener.accept()
        except (BlockingIOError, InterruptedError, ConnectionAbortedError):
            return
        if len(self._conns) >= MAX_CONNECTIONS:
            sock.close()
            return
        sock.setblocking(False)
        wire.tune(sock)
        conn = self._conns[sock.fileno()] = _Conn(sock)
        sel.register(sock, selectors.EVENT_READ, conn)

    def _close(self, sel, conn: _Conn) -> None:
        self._conns.pop(conn.sock.fileno(), None)
        try:
            sel.unregister(conn.sock)
        except (KeyError, ValueError):
            pass
        conn.sock.close()
        wire.finish(conn.refs)  # never written: nothing reads those tensors any more
        conn.out = conn.refs = []

    def _read(self, sel, conn: _Conn) -> None:
        """Read what has arrived; answer the request once it is whole."""
        while True:
            view = memoryview(conn.buf)[conn.got:conn.need]
            try:
                k = conn.sock.recv_into(view) if view.nbytes else 0
            except (BlockingIOError, InterruptedError):
                return
            if view.nbytes and not k:
                raise ConnectionResetError("the client closed the connection")
            conn.got += k
            if conn.got < conn.need:
                continue
            if conn.piece == 0:
                n = wire.count_of(conn.buf)
                if n > self.max_frames:
                    self._answer(sel, conn, [self.refuse(self.max_frames)])
                    raise wire.BadMessage(f"a message of {n} frames")
                conn.piece, conn.need = 1, 8 * n
            elif conn.piece == 1:
                conn.sizes = wire.sizes_of(conn.buf, self.max_frame_bytes)
                conn.piece, conn.need = 2, sum(conn.sizes)
            else:
                frames = wire.split(conn.buf, conn.sizes)
                conn.next_message()
                if self.workers > 1:  # handled beside the others; its connection waits
                    if self._pool is None:
                        self._pool = ThreadPoolExecutor(self.workers, "ps-data-same-host-handler")
                    sel.unregister(conn.sock)
                    self._pool.submit(self._handle_in_pool, conn, frames)
                    return
                try:
                    reply = self.handle(frames)
                finally:
                    del frames
                self._answer(sel, conn, reply)
                return  # one request per wake-up: the others' turn
            conn.buf, conn.got = wire.buffer(conn.need), 0

    def _handle_in_pool(self, conn: _Conn, frames: list) -> None:
        wire.WRITER.active = True  # its answer is written by the serving thread
        try:
            reply = self.handle(frames)
        except BaseException:  # noqa: BLE001 - DataPlane.handle answers errors; this is a bug
            log.exception("same-host data plane handler failed")
            reply = None  # the connection is closed: its client retries on TCP
        del frames
        self._answered.append((conn, reply))
        self._wake()

    def _wake(self) -> None:
        """Wake the serving thread (an answer to write, or `stop` to look at)."""
        try:
            self._wake_w.send(b"\0")
        except OSError:  # pending wake-ups fill the pair, or the thread closed it already
            pass

    def _write_answered(self, sel) -> None:
        try:
            while self._wake_r.recv(4096):
                pass
        except BlockingIOError:
            pass
        while self._answered:
            conn, reply = self._answered.popleft()
            if conn.sock.fileno() < 0:
                wire.finish(reply or ())
                continue  # closed meanwhile (the server stopping)
            try:
                if reply is None:
                    raise wire.BadMessage("no answer")
                sel.register(conn.sock, selectors.EVENT_READ, conn)
                self._answer(sel, conn, reply)
            except (OSError, wire.BadMessage, ValueError, KeyError) as exc:
                log.debug("closing a same-host data connection: %s", exc)
                self._close(sel, conn)

    def _answer(self, sel, conn: _Conn, reply: list) -> None:
        try:
            left = wire.send_all(conn.sock, wire.framed(reply))
        except BaseException:
            wire.finish(reply)  # the connection is closed: none of it will be written
            raise
        if left:  # the client reads slower: write the rest as it does, read nothing meanwhile
            conn.out, conn.refs = left, reply
            sel.modify(conn.sock, selectors.EVENT_WRITE, conn)
        else:
            wire.finish(reply)

    def _flush(self, sel, conn: _Conn) -> None:
        conn.out = wire.send_all(conn.sock, conn.out)
        if not conn.out:
            wire.finish(conn.refs)
            conn.refs = []
            sel.modify(conn.sock, selectors.EVENT_READ, conn)


def auto_path(index: int) -> str:
    """A fresh path for the same-host socket, under the temp directory; sockets
    left by PS that are gone (killed) are removed. Empty when no usable path exists."""
    directory = os.path.join(tempfile.gettempdir(), SOCKET_DIR)
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
    return path if len(path) <= MAX_PATH else ""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True
