"""The PS's same-host socket (ps/dataplane/samehost.py): served alongside ZeroMQ, used by
same-host clients, and safe against clients that send bad, partial or unread messages."""
from __future__ import annotations

import socket
import struct
import time

import pytest
import torch
import zmq

from protos import ps_pb2
from ps.dataplane import BindError, data_plane
from ps.store.params import ParamStore
from pswire import samehost
from pswire.connection import Connection, ZmqTransport
from rpckit.errors import Reason
from worker_sdk.ps.data_client import DataClient

BIG = 1_000_000  # floats: a 4 MB pull answer, more than a socket buffer holds


@pytest.fixture
def plane(tmp_path):
    store = ParamStore()
    p = data_plane(store, host="127.0.0.1", port=0, threads=1,
                   same_host_path=str(tmp_path / "d.sock"))
    port = p.bind()
    p.start()
    p.tcp = f"tcp://127.0.0.1:{port}"
    p.path = str(tmp_path / "d.sock")
    p.store = store
    yield p
    p.stop()


def _request(seq: int, **body) -> bytes:
    return ps_pb2.DataRequest(client_id="raw", seq=seq, **body).SerializeToString()


def _peer(path: str) -> samehost.SameHostTransport:
    peer = samehost.SameHostTransport(f"{samehost.SCHEME}{path}")
    peer.connect()
    return peer


def _answer(peer: samehost.SameHostTransport) -> tuple[ps_pb2.DataResponse, list]:
    frames = peer.recv()
    return ps_pb2.DataResponse.FromString(bytes(frames[0])), frames[1:]


def _closed(sock: socket.socket, timeout: float = 5.0) -> bool:
    sock.settimeout(timeout)
    try:
        while True:
            if not sock.recv(1 << 16):
                return True
    except OSError:
        return True


def _serves(p, n: int = 3) -> None:
    """The PS still answers same-host clients, over its socket."""
    with DataClient([p.tcp], timeout_s=5) as c:
        c.init_parameters({"w": torch.zeros(n)}, "sgd", lr=1.0)
        c.pull()
        assert c.transports == [f"unix://{p.path}"]
        assert torch.equal(c.pull()["w"], torch.zeros(n))


def test_a_same_host_client_trains_over_the_plain_socket(plane):
    assert plane.local_endpoint == f"unix://{plane.path}"
    with DataClient([plane.tcp], timeout_s=5) as c:
        c.init_parameters({"w": torch.zeros(BIG), "b": torch.zeros(3)}, "sgd", lr=1.0)
        c.pull()  # the first answer names the socket; from here on it is used
        assert c.transports == [f"unix://{plane.path}"]
        for _ in range(3):
            c.push({"w": torch.ones(BIG), "b": torch.full((3,), 2.0)})
        got = c.pull()
        assert torch.all(got["w"] == -3.0) and torch.equal(got["b"], torch.full((3,), -6.0))
    assert plane.same_host.thread.is_alive()


def test_bad_bytes_close_only_that_connection(plane):
    for raw in (struct.pack("<I", 0),                               # no frames
                struct.pack("<I", 1) + struct.pack("<Q", 1 << 40)):  # a frame over the bound
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect(plane.path)
        s.sendall(raw)
        assert _closed(s)
        s.close()
    _serves(plane)


def test_a_message_of_too_many_frames_is_answered_too_large(plane):
    peer = _peer(plane.path)
    try:
        peer.send([_request(1, pull=ps_pb2.Pull())] + [b""] * plane.max_frames)
        resp, _ = _answer(peer)
        assert resp.code == ps_pb2.DataResponse.RESOURCE_EXHAUSTED
        assert resp.reason == Reason.TOO_LARGE
        assert _closed(peer.sock)
    finally:
        peer.close()
    _serves(plane)


def test_an_undecodable_header_is_answered_invalid_and_the_connection_kept(plane):
    peer = _peer(plane.path)
    try:
        peer.send([b"\xff\xff not a protobuf"])
        resp, _ = _answer(peer)
        assert resp.code == ps_pb2.DataResponse.INVALID_ARGUMENT
        assert resp.reason == Reason.UNDECODABLE
        peer.send([_request(2, pull=ps_pb2.Pull())])  # the same connection goes on
        resp, _ = _answer(peer)
        assert resp.code == ps_pb2.DataResponse.FAILED_PRECONDITION  # not initialised yet
    finally:
        peer.close()


def test_half_a_message_holds_up_no_other_client(plane):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(plane.path)
    try:
        s.sendall(struct.pack("<I", 2) + struct.pack("<2Q", 10, 1000) + b"partial")
        _serves(plane)
    finally:
        s.close()


def test_an_answer_not_read_holds_up_no_other_client_and_arrives_whole(plane):
    with DataClient([plane.tcp], timeout_s=5) as c:
        c.init_parameters({"w": torch.arange(BIG, dtype=torch.float32)}, "sgd", lr=1.0)
    slow = _peer(plane.path)
    try:
        slow.send([_request(1, pull=ps_pb2.Pull(names=["w"]))])
        time.sleep(0.2)  # the PS wrote what the socket took and keeps the rest
        with DataClient([plane.tcp], timeout_s=5) as c:  # served meanwhile, and its push
            c.pull()                                        # changes w (copy on write)
            c.push({"w": torch.ones(BIG)})
            assert c.transports == [f"unix://{plane.path}"]  # no timeout sent it to TCP
        resp, frames = _answer(slow)
        assert resp.code == 0 and resp.pull.tensors[0].name == "w"
        pulled = torch.frombuffer(frames[0], dtype=torch.float32)
        assert torch.equal(pulled, torch.arange(BIG, dtype=torch.float32))  # as it was pulled
    finally:
        slow.close()


def test_answers_written_whole_leave_no_send_in_flight(plane):
    """Over the socket a pulled tensor goes from its own memory, tracked by the server that
    writes it (no ZeroMQ frame made and freed through pyzmq's garbage thread): once the
    answer is written its send is done, so a push that follows neither copies nor waits."""
    with DataClient([plane.tcp], timeout_s=5) as c:
        c.init_parameters({"w": torch.zeros(BIG)}, "sgd", lr=1.0)
        c.pull()
        assert c.transports == [f"unix://{plane.path}"]
        for _ in range(20):
            c.pull(["w"])
        dense = plane.store.dense["w"]
        assert dense.pins and all(type(p) is samehost.Written and p.done for p in dense.pins)
        c.push({"w": torch.ones(BIG)})
        assert plane.store.stats.copies_on_write == 0 and plane.store.stats.waited_for_send == 0
        assert torch.all(c.pull()["w"] == -1.0)


def test_under_curve_there_is_no_same_host_socket(tmp_path):
    """TLS promises every data-plane byte encrypted: an 'auto' path is skipped (workers here
    use TCP, under CURVE), an explicit one refuses to start."""
    path = tmp_path / "c.sock"
    p = data_plane(ParamStore(), host="127.0.0.1", port=0, threads=1, same_host_path=str(path),
                   same_host_optional=True, curve_keypair=zmq.curve_keypair())
    p.bind()
    try:
        assert p.local_endpoint == "" and p.same_host is None and not path.exists()
    finally:
        p.stop()
    q = data_plane(ParamStore(), host="127.0.0.1", port=0, threads=1, same_host_path=str(path),
                   curve_keypair=zmq.curve_keypair())
    with pytest.raises(BindError, match="under TLS"):
        q.bind()
    assert not path.exists() and q.frontend is None


def test_a_client_falls_back_to_tcp_when_the_socket_is_gone(plane, tmp_path):
    dead = tmp_path / "dead.sock"
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(str(dead))  # a socket file nobody listens on: a PS killed without cleaning up
    try:
        conn = Connection(zmq.Context.instance(), plane.tcp)
        conn.offer(f"unix://{dead}")
        assert conn.current == f"unix://{dead}"
        sent = conn.send([_request(1, pull=ps_pb2.Pull())])
        assert isinstance(sent, ZmqTransport) and conn.current == plane.tcp
        assert sent.pollable.poll(5000)
        resp = ps_pb2.DataResponse.FromString(sent.recv()[0].bytes)
        assert resp.seq == 1
        conn.offer(f"unix://{dead}")  # not tried again
        assert conn.current == plane.tcp
        conn.reset()
    finally:
        s.close()


def test_a_socket_that_breaks_after_the_request_is_retried_on_tcp_at_once(plane, tmp_path):
    """The same-host peer closes without answering (a PS killed mid-request): the call goes
    back to TCP on its next try, without waiting out the try's timeout."""
    import threading

    fake = str(tmp_path / "fake.sock")
    lst = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    lst.bind(fake)
    lst.listen(1)
    took = []

    def take_one_and_close():
        s, _ = lst.accept()
        took.append(s.recv(1 << 16))
        s.close()

    server = threading.Thread(target=take_one_and_close, daemon=True)
    server.start()
    try:
        with DataClient([plane.tcp], timeout_s=20) as c:
            c.init_parameters({"w": torch.zeros(3)}, "sgd", lr=1.0)
            c.exchange._conns[0].offer(f"unix://{fake}")
            started = time.monotonic()
            assert torch.equal(c.pull()["w"], torch.zeros(3))
            assert time.monotonic() - started < 10  # not the try's 20 s
            assert took and took[0]  # the request did go to the broken socket first
            # answered over TCP, whose answer names the PS's real socket: used from now on
            assert c.transports == [f"unix://{plane.path}"]
    finally:
        server.join(5)
        lst.close()


@pytest.mark.parametrize("threads", [1, 4])
def test_with_several_handlers_a_slow_request_holds_up_no_other(tmp_path, threads):
    """A primary with backups (or --threads N) handles N same-host requests at once, as its
    ZeroMQ handlers do: one waiting (here: slowed) does not hold up another client's. With
    one handler they are answered one after the other."""
    import threading

    p = data_plane(ParamStore(), host="127.0.0.1", port=0, threads=threads,
                   same_host_path=str(tmp_path / "t.sock"))
    p.bind()
    handle, entered = p.same_host.handle, threading.Event()

    def slowed(frames):
        if ps_pb2.DataRequest.FromString(bytes(frames[0])).client_id == "slow":
            entered.set()
            time.sleep(1.0)
        return handle(frames)

    p.same_host.handle = slowed
    p.start()
    slow, quick = _peer(p.same_host.path), _peer(p.same_host.path)
    try:
        slow.send([ps_pb2.DataRequest(client_id="slow", seq=1, pull=ps_pb2.Pull())
                   .SerializeToString()])
        assert entered.wait(5)
        started = time.monotonic()
        quick.send([_request(1, pull=ps_pb2.Pull())])
        resp, _ = _answer(quick)
        waited = time.monotonic() - started
        assert resp.seq == 1 and (waited < 0.5 if threads > 1 else waited > 0.5)
        assert _answer(slow)[0].seq == 1
    finally:
        slow.close()
        quick.close()
        p.stop()


def test_a_primary_with_backups_grows_its_same_host_handlers(tmp_path):
    from ps.dataplane import AUTO, AUTO_THREADS

    p = data_plane(ParamStore(), host="127.0.0.1", port=0, threads=AUTO,
                   same_host_path=str(tmp_path / "g.sock"))
    p.bind()
    p.start()
    try:
        assert p.same_host.workers == 1
        p.grow()
        assert p.same_host.workers == AUTO_THREADS
        _serves_at(p)
    finally:
        p.stop()


def _serves_at(p) -> None:
    with DataClient([f"tcp://127.0.0.1:{p.bound_port}"], timeout_s=5) as c:
        c.init_parameters({"w": torch.zeros(3)}, "sgd", lr=1.0)
        for _ in range(3):
            c.push({"w": torch.ones(3)})
        assert c.transports == [p.local_endpoint]
        assert torch.equal(c.pull()["w"], torch.full((3,), -3.0))


def test_over_the_plain_socket_buffers_travel_as_they_are_not_joined(plane):
    """Joining small buffers into one frame saves ZeroMQ a few us a frame; a plain socket
    writes them all in one call, so a request there is not joined (no copy, no frame_sizes;
    the PS answers a request as it came)."""
    from pswire.tables import TableSpec

    seen = []
    handle = plane.same_host.handle

    def recording(frames):
        req = ps_pb2.DataRequest.FromString(bytes(frames[0]))
        seen.append((req.WhichOneof("body"), len(frames), list(req.frame_sizes)))
        return handle(frames)

    plane.same_host.handle = recording
    table = TableSpec("emb", 4, "normal", 0.0, 0.1, seed=1)
    with DataClient([plane.tcp], timeout_s=5) as c:
        c.init_parameters({"w": torch.zeros(3)}, "sgd", lr=1.0, tables=[table])
        c.pull()  # over TCP; its answer names the socket
        ids = torch.tensor([1, 5, 9])
        c.push_rows("emb", ids, torch.ones(3, 4))
        rows = c.pull_rows("emb", ids)
        assert c.transports == [f"unix://{plane.path}"]
    assert ("push_rows", 3, []) in seen  # header, ids, gradients: three frames
    assert rows.shape == (3, 4)
