"""pswire.samehost: the same-host message format, its bounds and partial writes (no PS)."""
from __future__ import annotations

import socket
import struct
import threading

import numpy as np
import pytest
import zmq

from pswire import samehost


def _peer(path: str) -> samehost.SameHostTransport:
    peer = samehost.SameHostTransport(f"{samehost.SCHEME}{path}")
    peer.connect()
    return peer


def _listener(tmp_path):
    path = str(tmp_path / "s.sock")
    lst = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    lst.bind(path)
    lst.listen(1)
    return path, lst


def test_a_message_round_trips_with_every_kind_of_part(tmp_path):
    path, lst = _listener(tmp_path)
    peer = _peer(path)
    server, _ = lst.accept()
    try:
        frame = zmq.Frame(b"z" * 70_000, copy=False, track=True)
        parts = [b"head", memoryview(b"mv"), np.arange(6, dtype=np.float32), b"", frame]
        peer.send(parts)
        back = samehost.SameHostTransport.__new__(samehost.SameHostTransport)  # read the server's side the same way
        back.sock, back.max_frame_bytes = server, 1 << 20
        got = back.recv()
        assert [bytes(g) for g in got] == [b"head", b"mv", np.arange(6, dtype=np.float32)
                                           .tobytes(), b"", b"z" * 70_000]
        assert samehost.send_all(server, samehost.framed([b"answer", b"x" * 10])) == []
        assert [bytes(g) for g in peer.recv()] == [b"answer", b"x" * 10]
    finally:
        peer.close()
        server.close()
        lst.close()


@pytest.mark.parametrize("count", [0, samehost.MAX_FRAMES + 1])
def test_a_frame_count_out_of_bounds_is_refused(count):
    with pytest.raises(samehost.BadMessage):
        samehost.count_of(struct.pack("<I", count))


def test_a_frame_over_the_bound_is_refused_before_anything_is_allocated():
    raw = struct.pack("<2Q", 10, 1 << 40)
    assert samehost.sizes_of(struct.pack("<2Q", 10, 20), 20) == [10, 20]
    with pytest.raises(samehost.BadMessage):
        samehost.sizes_of(raw, 1 << 30)
    many = struct.pack("<3Q", *([1 << 39] * 3))  # each within its bound, together past any memory
    with pytest.raises(samehost.BadMessage):
        samehost.sizes_of(many, 1 << 40)


def test_a_peer_that_closes_mid_message_is_an_oserror(tmp_path):
    path, lst = _listener(tmp_path)
    peer = _peer(path)
    server, _ = lst.accept()
    try:
        server.sendall(struct.pack("<I", 1) + struct.pack("<Q", 100) + b"only part")
        server.close()
        with pytest.raises(OSError):
            peer.recv()
    finally:
        peer.close()
        lst.close()


def test_send_all_returns_what_a_full_socket_did_not_take_and_the_rest_follows():
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    a.setblocking(False)
    payload = bytes(range(256)) * 40_000  # 10 MB: more than a socket buffer
    try:
        left = samehost.send_all(a, samehost.framed([b"h", payload]))
        assert left and sum(v.nbytes for v in left) < len(payload)
        received = bytearray()
        done = threading.Event()

        def read():
            while len(received) < 4 + 16 + 1 + len(payload):
                received.extend(b.recv(1 << 20))
            done.set()

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        while left:
            left = samehost.send_all(a, left)
        assert done.wait(20)
        n, = struct.unpack_from("<I", received)
        sizes = struct.unpack_from("<2Q", received, 4)
        assert n == 2 and sizes == (1, len(payload))
        assert bytes(received[20:21]) == b"h" and bytes(received[21:]) == payload
    finally:
        a.close()
        b.close()


def test_a_peer_to_a_path_where_nobody_listens_raises(tmp_path):
    path = str(tmp_path / "dead.sock")
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(path)  # the file exists, nobody listens: as a PS killed without cleaning up
    try:
        with pytest.raises(OSError):
            _peer(path)
    finally:
        s.close()
