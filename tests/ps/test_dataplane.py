"""The ZeroMQ data plane in one process: concurrency, lost replies, consistency, bad input."""
from __future__ import annotations

import threading
import time

import pytest
import torch
import zmq

from protos import ps_pb2
from worker_sdk.ps.data_client import DataClient, PSUnavailable, StaleGradient
from rpckit.errors import ServiceError as PSError
from ps.store.params import ParamStore


def _client(ps, **kw) -> DataClient:
    kw.setdefault("timeout_s", 5.0)
    return DataClient([ps.endpoint] if hasattr(ps, "endpoint") else ps, **kw)


def test_round_trip_zero_copy_frames(inproc_ps):
    ps = inproc_ps()
    with _client(ps) as c:
        big = torch.arange(100_000, dtype=torch.float32)  # above the zero-copy threshold
        assert c.init_parameters({"big": big, "small": torch.ones(2, 3)}, "sgd", lr=0.5)
        assert not c.init_parameters({"big": big, "small": torch.ones(2, 3)}, "sgd", lr=0.5)
        pulled = c.pull()
        assert torch.equal(pulled["big"], big) and pulled["small"].shape == (2, 3)
        out = c.push({"big": torch.ones(100_000), "small": torch.ones(2, 3)})
        assert out.versions == {"big": 1, "small": 1} and not out.duplicate
        assert torch.equal(c.pull(["big"])["big"], big - 0.5)


def test_four_concurrent_clients_lose_no_update(inproc_ps):
    ps = inproc_ps(threads=4)
    names = [f"t{i}" for i in range(4)]
    with _client(ps) as c:
        c.init_parameters({n: torch.zeros(50_000) for n in names}, "sgd", lr=1.0)
    pushes = 25
    errors = []

    def worker(k: int) -> None:
        try:
            with _client(ps) as c:
                c.pull()
                for step in range(pushes):
                    # integers: every sum is exact in float32, whatever the order
                    grad = float(k + 1)
                    c.push({n: torch.full((50_000,), grad) for n in names})
                    if step % 5 == 0:
                        c.pull()
        except Exception as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors
    expected = -float(pushes * (1 + 2 + 3 + 4))
    with _client(ps) as c:
        pulled = c.pull()
        for n in names:
            assert c.versions[n] == 4 * pushes
            assert torch.all(pulled[n] == expected)
    assert ps.store.stats.pushes == 4 * pushes


class LossyProxy:
    """Forwards client <-> PS and drops the reply to the first Push it sees."""

    def __init__(self, target: str):
        self.ctx = zmq.Context()
        self.front = self.ctx.socket(zmq.ROUTER)
        self.port = self.front.bind_to_random_port("tcp://127.0.0.1")
        self.endpoint = f"tcp://127.0.0.1:{self.port}"
        self.target = target
        self.dropped = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        backs: dict[bytes, zmq.Socket] = {}  # one upstream socket per client connection
        poller = zmq.Poller()
        poller.register(self.front, zmq.POLLIN)
        owner: dict[zmq.Socket, bytes] = {}
        kinds: dict[bytes, str] = {}
        while not self._stop.is_set():
            for sock, _ in poller.poll(50):
                if sock is self.front:
                    ident, *parts = self.front.recv_multipart()
                    req = ps_pb2.DataRequest.FromString(parts[0])
                    kinds[ident] = req.WhichOneof("body")
                    if ident not in backs:
                        back = self.ctx.socket(zmq.DEALER)
                        back.connect(self.target)
                        backs[ident], owner[back] = back, ident
                        poller.register(back, zmq.POLLIN)
                    backs[ident].send_multipart(parts)
                else:
                    parts = sock.recv_multipart()
                    ident = owner[sock]
                    if kinds[ident] == "push" and self.dropped == 0:
                        self.dropped += 1
                        continue
                    self.front.send_multipart([ident, *parts])
        for s in [self.front, *backs.values()]:
            s.close(0)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self.ctx.term()


def test_a_lost_push_reply_is_retried_and_applied_once(inproc_ps):
    ps = inproc_ps()
    proxy = LossyProxy(ps.endpoint)
    try:
        with DataClient([proxy.endpoint], timeout_s=0.5, backoff_s=0.01) as c:
            c.init_parameters({"w": torch.zeros(10)}, "sgd", lr=1.0)
            c.pull()
            out = c.push({"w": torch.ones(10)})
            assert proxy.dropped == 1
            assert out.duplicate  # the retry found the first try applied
            assert torch.all(c.pull()["w"] == -1.0)
            assert c.versions["w"] == 1
            assert ps.store.applied.duplicates == 1
    finally:
        proxy.close()


def test_pulls_never_see_a_half_applied_push(inproc_ps):
    ps = inproc_ps(threads=3)
    size = 300_000  # zero-copy frames, several chunks on the wire
    with _client(ps) as c:
        c.init_parameters({"w": torch.zeros(size)}, "sgd", lr=1.0)
    stop = threading.Event()
    pushed = []

    def pusher() -> None:
        with _client(ps) as c:
            c.set_layout({"w": size * 4})  # a client of its own must learn the placement
            while not stop.is_set() and len(pushed) < 400:
                c.push({"w": torch.full((size,), -1.0)}, versions={"w": 0})
                pushed.append(1)

    t = threading.Thread(target=pusher)
    t.start()
    torn = pulls = 0
    try:
        with _client(ps) as c:
            deadline = time.monotonic() + 3
            while time.monotonic() < deadline and (pulls < 200 or not pushed):
                w = c.pull()["w"]
                pulls += 1
                # each push adds 1 everywhere: a torn read would mix two values
                torn += int(w.min().item() != w.max().item())
                assert w[0].item() == c.versions["w"]
    finally:
        stop.set()
        t.join(30)
    assert torn == 0
    # the test means something only if pushes really overlapped the pulls
    assert len(pushed) > 0 and ps.store.stats.pushes == len(pushed) and pulls > 0


def test_stale_push_refused_with_failed_precondition(inproc_ps):
    ps = inproc_ps(ParamStore(max_staleness=0))
    with _client(ps) as a, _client(ps) as b:
        a.init_parameters({"w": torch.zeros(4)}, "sgd", lr=1.0)
        a.pull()
        b.pull()
        a.push({"w": torch.ones(4)})
        with pytest.raises(StaleGradient) as err:
            b.push({"w": torch.ones(4)})
        assert err.value.code == "FAILED_PRECONDITION" and err.value.versions == {"w": 1}
        b.pull()
        b.push({"w": torch.ones(4)})
        assert b.pull()["w"].tolist() == [-2.0] * 4


def _raw(ps, *parts, timeout_ms: int = 3000):
    ctx = zmq.Context.instance()
    s = ctx.socket(zmq.DEALER)
    s.setsockopt(zmq.LINGER, 0)
    s.connect(ps.endpoint)
    try:
        s.send_multipart(list(parts))
        if not s.poll(timeout_ms):
            return None
        frames = s.recv_multipart()
        return ps_pb2.DataResponse.FromString(frames[0]), frames[1:]
    finally:
        s.close(0)


def _req(**kw) -> bytes:
    return ps_pb2.DataRequest(client_id="raw", seq=1, **kw).SerializeToString()


def test_garbage_and_malformed_requests_are_answered_not_fatal(inproc_ps):
    ps = inproc_ps()
    code = ps_pb2.DataResponse.Code
    with _client(ps) as c:
        c.init_parameters({"w": torch.zeros(4)}, "sgd", lr=1.0)
    meta = ps_pb2.TensorMeta(name="w", dtype="float32", shape=[4])
    cases = [
        ([b"\xff\xfe garbage \x00"], code.INVALID_ARGUMENT),
        ([_req()], code.INVALID_ARGUMENT),  # no body
        ([_req(push=ps_pb2.Push(tensors=[meta], versions=[0]))], code.INVALID_ARGUMENT),
        ([_req(push=ps_pb2.Push(tensors=[meta], versions=[0])), b"abc"], code.INVALID_ARGUMENT),
        ([_req(push=ps_pb2.Push(tensors=[ps_pb2.TensorMeta(name="w", dtype="complex64",
                                                           shape=[4])], versions=[0])),
          bytes(32)], code.INVALID_ARGUMENT),
        ([_req(push=ps_pb2.Push(tensors=[ps_pb2.TensorMeta(name="w", dtype="float32",
                                                           shape=[-4])], versions=[0])),
          bytes(16)], code.INVALID_ARGUMENT),
        ([_req(push=ps_pb2.Push(tensors=[ps_pb2.TensorMeta(name="w", dtype="float32",
                                                           shape=[2**40, 2**40])],
                                versions=[0])), bytes(16)], code.INVALID_ARGUMENT),
        ([_req(push=ps_pb2.Push(tensors=[ps_pb2.TensorMeta(name="zz", dtype="float32",
                                                           shape=[4])], versions=[0])),
          bytes(16)], code.NOT_FOUND),
        ([_req(pull=ps_pb2.Pull()), b"extra"], code.INVALID_ARGUMENT),
        ([_req(pull_rows=ps_pb2.PullRows(table="nope")), bytes(8)], code.NOT_FOUND),
        ([_req(pull_rows=ps_pb2.PullRows(table="nope")), bytes(7)], code.INVALID_ARGUMENT),
        ([_req(init_parameters=ps_pb2.InitParameters(tensors=[meta])), bytes(3)],
         code.INVALID_ARGUMENT),
    ]
    for parts, expected in cases:
        answer = _raw(ps, *parts)
        assert answer is not None, parts
        resp, frames = answer
        assert resp.code == expected, (parts, resp)
        assert resp.message and not frames
    # still serving, nothing changed
    with _client(ps) as c:
        assert c.pull()["w"].tolist() == [0.0] * 4 and c.versions["w"] == 0


def test_oversized_frames_drop_the_peer_only(inproc_ps):
    ps = inproc_ps()  # max_frame_bytes 64 MiB in the fixture
    with _client(ps) as c:
        c.init_parameters({"w": torch.zeros(4)}, "sgd", lr=1.0)
    assert _raw(ps, _req(pull=ps_pb2.Pull()), bytes((64 << 20) + 1), timeout_ms=1000) is None
    with _client(ps) as c:
        assert c.pull()["w"].tolist() == [0.0] * 4


def test_unreachable_ps_gives_up_after_bounded_retries():
    ctx = zmq.Context.instance()
    s = ctx.socket(zmq.ROUTER)
    port = s.bind_to_random_port("tcp://127.0.0.1")  # a "PS" that never answers
    try:
        c = DataClient([f"tcp://127.0.0.1:{port}"], timeout_s=0.2, max_attempts=3, backoff_s=0.01)
        c.set_layout({"w": 16})
        start = time.monotonic()
        with pytest.raises(PSUnavailable, match="3 tries"):
            c.pull(["w"])
        assert time.monotonic() - start < 3
        c.close()
    finally:
        s.close(0)


def test_refusals_raise_ps_error_with_the_code(inproc_ps):
    ps = inproc_ps()
    with _client(ps) as c:
        c.set_layout({"w": 16})
        with pytest.raises(PSError) as err:
            c.pull(["w"])
        assert err.value.code == "FAILED_PRECONDITION" and "InitParameters" in err.value.message


def test_same_host_socket_is_used_when_offered_and_dropped_when_it_fails(tmp_path, inproc_ps):
    import socket as pysocket

    from pswire.connection import Connection as _Connection

    path = tmp_path / "ps.sock"
    listener = pysocket.socket(pysocket.AF_UNIX)
    listener.bind(str(path))
    try:
        conn = _Connection(zmq.Context.instance(), "tcp://127.0.0.1:1")
        conn.offer(f"unix://{tmp_path / 'absent.sock'}")  # not on this machine: stay on TCP
        conn.offer("tcp://elsewhere:2")
        conn.offer(f"ipc://{path}")                       # not a same-host endpoint
        assert conn.current == "tcp://127.0.0.1:1"
        conn.offer(f"unix://{path}")
        assert conn.current == f"unix://{path}"
        conn.failed()                                     # no answer there: back to TCP
        assert conn.current == "tcp://127.0.0.1:1"
        conn.offer(f"unix://{path}")                      # and that path is not tried again
        assert conn.current == "tcp://127.0.0.1:1"
        off = _Connection(zmq.Context.instance(), "tcp://127.0.0.1:1", same_host=False)
        off.offer(f"unix://{path}")
        assert off.current == "tcp://127.0.0.1:1"
    finally:
        listener.close()


def test_a_ps_with_a_local_socket_is_reached_through_it(tmp_path):
    from ps.dataplane import data_plane

    plane = data_plane(ParamStore(), host="127.0.0.1", port=0, threads=1,
                      same_host_path=str(tmp_path / "d.sock"))
    port = plane.bind()
    plane.start()
    try:
        with DataClient([f"tcp://127.0.0.1:{port}"], timeout_s=5) as c:
            c.init_parameters({"w": torch.zeros(100_000)}, "sgd", lr=1.0)
            assert c.transports == [f"unix://{tmp_path / 'd.sock'}"]
            c.pull()
            c.push({"w": torch.ones(100_000)})
            assert torch.all(c.pull()["w"] == -1.0)
        with DataClient([f"tcp://127.0.0.1:{port}"], timeout_s=5, same_host=False) as c:
            c.pull()
            assert c.transports == [f"tcp://127.0.0.1:{port}"]
    finally:
        plane.stop()
    assert not (tmp_path / "d.sock").exists()


def test_trackers_of_finished_pulls_do_not_pile_up(inproc_ps):
    """A tensor pulled many times and never pushed keeps only the trackers of sends in flight
    (each one used to stay forever: 1.7 KB a pull)."""
    ps = inproc_ps()
    with _client(ps) as c:
        c.init_parameters({"w": torch.zeros(100_000)}, "sgd", lr=1.0)  # zero-copy size
        for _ in range(300):
            c.pull(["w"])
    # a tracker turns done when pyzmq's garbage thread gets to the sent frame, a little after
    # the send: a few of the last pulls may still be pending, not one per pull (300 before)
    assert len(ps.store.dense["w"].pins) <= 30


def test_an_empty_tensor_with_huge_dimensions_is_refused_not_internal(inproc_ps):
    """Found by tests/ps/test_fuzz.py: shape [0, 2**40, 2**40] is 0 bytes, but its strides
    overflow torch (it was answered INTERNAL)."""
    ps = inproc_ps()
    with _client(ps) as c:
        c.init_parameters({"w": torch.zeros(4)}, "sgd", lr=1.0)
    meta = ps_pb2.TensorMeta(name="w", dtype="float32", shape=[0, 2**40, 2**40])
    resp, _ = _raw(ps, _req(push=ps_pb2.Push(tensors=[meta], versions=[0])), b"")
    assert resp.code == ps_pb2.DataResponse.Code.INVALID_ARGUMENT, resp


def test_auto_threads_serve_with_one_handler_and_four_for_a_primary_with_backups():
    from protos import master_pb2
    from ps.dataplane import AUTO, AUTO_THREADS, Handlers, data_plane
    from ps.replication import NodeRole, ReplicaNode

    store = ParamStore()
    node = ReplicaNode(store, Handlers(store), zmq.Context.instance(), "", "instance",
                       data_address="")
    plane = data_plane(store, node=node, host="127.0.0.1", port=0, threads=AUTO)
    plane.bind()
    plane.start()
    try:
        handlers = lambda: [t for t in plane._threads if t.name != "ps-data-proxy"]  # noqa: E731
        assert len(handlers()) == 1
        assert [t.name for t in plane._threads] == ["ps-data"]  # the socket's own, no proxy
        node.on_role(NodeRole.PRIMARY, 1, master_pb2.PSInfo(), replicas=0)
        assert len(handlers()) == 1  # a primary without backups never waits in a handler
        with _client(f"tcp://127.0.0.1:{plane.bound_port}".split()) as c:
            c.init_parameters({"w": torch.zeros(3)}, "sgd", lr=1.0)
            node.on_role(NodeRole.PRIMARY, 1, master_pb2.PSInfo(), replicas=1)
            deadline = time.monotonic() + 5  # the transport reads the node's wish between polls
            while len(handlers()) < AUTO_THREADS and time.monotonic() < deadline:
                time.sleep(0.01)
            assert len(handlers()) == AUTO_THREADS and all(t.is_alive() for t in handlers())
            assert plane._threads[0].name == "ps-data-proxy" and not plane.failed
            node.on_role(NodeRole.PRIMARY, 1, master_pb2.PSInfo(), replicas=1)
            assert len(handlers()) == AUTO_THREADS  # once
            assert torch.equal(c.pull(["w"])["w"], torch.zeros(3))  # still served
    finally:
        plane.stop()
        if node.primary is not None:
            node.primary.close()


@pytest.mark.parametrize("threads", [0, 2])
def test_a_handler_thread_that_starts_after_stop_ends_quietly(threads):
    """stop() can terminate the context before a just-started handler made its socket (a
    grow() right before a stop): that thread must end without an exception and without
    marking the stopped PS as failed."""
    from ps.dataplane import data_plane

    failures = []
    plane = data_plane(ParamStore(), host="127.0.0.1", port=0, threads=threads)
    plane.on_failure = failures.append
    plane.bind()
    plane.start()
    plane.stop()
    assert plane.ctx.closed
    plane._serve()  # what a handler started just before stop() runs: raises nothing
    assert not plane.failed and failures == []
