"""The client's side of a slot move, against ZeroMQ stand-ins of a PS that answer WRONG_OWNER
and SLOT_MOVING as the PS does (docs/ps.md, "Slots and resize")."""
import logging
import threading
import time

import numpy as np
import pytest
import torch
import zmq

from protos import ps_pb2
from pswire.connection import split_joined
from pswire.slots import Layout
from rpckit.errors import Reason
from worker_sdk import metrics
from worker_sdk.ps import exchange as exchange_mod
from worker_sdk.ps import reroute, retry
from worker_sdk.ps.data_client import DataClient, PSError, PSUnavailable
from worker_sdk.ps.routes import Placement, Route

DIM = 2
TWO = Layout.initial(2)  # "a" hashes to PS 0, "b" to PS 1
ONE = Layout(np.zeros(1024, dtype=np.int32), version=2)  # everything moved to PS 0
assert (TWO.owner_of_tensor("a"), TWO.owner_of_tensor("b")) == (0, 1)


class StandIn:
    """A ROUTER that answers each request with what `answer(n, req, frames)` returns:
    (DataResponse, frames, delay_s); it keeps receiving while answers wait for their delay."""

    def __init__(self, ctx, answer):
        self.answer = answer
        self.sock = ctx.socket(zmq.ROUTER)
        self.sock.setsockopt(zmq.LINGER, 0)
        port = self.sock.bind_to_random_port("tcp://127.0.0.1")
        self.endpoint = f"tcp://127.0.0.1:{port}"
        self.got: list[tuple[float, ps_pb2.DataRequest, list]] = []  # (when, request, frames)
        self.answered: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self):
        due = []
        while not self._stop.is_set():
            if self.sock.poll(5):
                ident, header, *frames = self.sock.recv_multipart()
                req = ps_pb2.DataRequest.FromString(header)
                if req.frame_sizes:  # the client joined its buffers: read them as the PS does
                    frames = [bytes(b) for b in split_joined(frames[0], req.frame_sizes, 1000)]
                    req.ClearField("frame_sizes")
                self.got.append((time.monotonic(), req, frames))
                resp, out, delay = self.answer(len(self.got), req, frames)
                resp.seq = req.seq
                due.append((time.monotonic() + delay, [ident, resp.SerializeToString(), *out]))
            now = time.monotonic()
            for item in [d for d in due if d[0] <= now]:
                due.remove(item)
                self.answered.append(now)
                self.sock.send_multipart(item[1])
        self.sock.close(0)

    def close(self):
        self._stop.set()
        self._thread.join(5)


def serve(req, frames):
    """What a PS holding everything asked answers: dense tensors valued 1, rows valued by id."""
    resp, out = ps_pb2.DataResponse(), []
    step = req.step
    resp.step.SetInParent()
    for meta in step.push.tensors:
        resp.step.push.versions[meta.name] = 1
    for _ in step.push_rows:
        resp.step.push_rows.add(rows=1)
    for name in step.pull.names:
        resp.step.pull.tensors.add(name=name, dtype="float32", shape=[1])
        resp.step.pull.versions.append(1)
        out.append(np.ones(1, dtype=np.float32).tobytes())
    for entry, ids in zip(step.pull_rows, frames[len(frames) - len(step.pull_rows):]):
        resp.step.pull_rows.add(dim=DIM)
        keys = np.frombuffer(ids, dtype=np.int64)
        out.append(np.repeat(keys.astype(np.float32), DIM).tobytes())
    return resp, out


def wrong_owner(version, duplicate=False):
    resp = ps_pb2.DataResponse(code=ps_pb2.DataResponse.FAILED_PRECONDITION,
                               reason=Reason.WRONG_OWNER.value, layout_version=version,
                               message="slot moved")
    resp.step.push.duplicate = duplicate
    return resp


@pytest.fixture
def ctx():
    c = zmq.Context()
    yield c
    c.term()


def _client(monkeypatch, ctx, stand_ins, layouts, **kw):
    """A DataClient routed by a fake master that lists `layouts` one ListPS after another
    (the last one for good)."""
    routes = {i: Route(s.endpoint) for i, s in enumerate(stand_ins)}
    listings = list(layouts)
    asked = []

    def placement(master, timeout_s=30.0, poll_s=0.2, *, min_version=0, **_):
        asked.append(min_version)
        layout = listings.pop(0) if len(listings) > 1 else listings[0]
        assert layout.version >= min_version
        return Placement(routes, layout)

    monkeypatch.setattr(exchange_mod, "master_placement", placement)
    monkeypatch.setattr(exchange_mod.Exchange, "_master_stub", lambda self: None)
    # these tests count ListPS reads: a slow first call (torch warming up) must not read one
    # as idle (test_an_idle_client_reads_the_layout_before_its_next_call covers that)
    monkeypatch.setattr(exchange_mod, "IDLE_REFRESH_S", kw.pop("idle_refresh_s", 3600.0))
    client = DataClient(master="fake-master:1", context=ctx, timeout_s=5, **kw)
    client.set_layout({"a": 4, "b": 4})
    client.staleness_checked = {0: False, 1: False}  # no check phase: one Step per PS
    return client, asked


def _step(client, ids):
    return client.step({"a": torch.ones(1), "b": torch.ones(1)},
                       rows=[("t", ids, torch.ones(ids.numel(), DIM))], pull=["a", "b"],
                       pull_rows={"t": ids})


def test_a_refused_part_goes_to_the_new_owner_with_a_fresh_seq_after_every_part_answered(
        monkeypatch, ctx, caplog):
    a = StandIn(ctx, lambda n, req, frames: (*serve(req, frames), 0.3 if n == 1 else 0))
    b = StandIn(ctx, lambda n, req, frames: (wrong_owner(2), [], 0))
    client, asked = _client(monkeypatch, ctx, [a, b], [TWO, ONE])
    before = metrics.reroutes
    try:
        ids = torch.arange(40, dtype=torch.int64)
        with caplog.at_level(logging.INFO, logger=reroute.__name__):
            out = _step(client, ids)
        (first_b,) = b.got
        assert len(a.got) == 2
        seq = a.got[0][1].seq
        assert first_b[1].seq == seq and a.got[1][1].seq > seq  # a fresh seq for the re-send
        assert a.got[1][0] >= a.answered[0]  # sent only once PS 0 answered the first seq
        resent = a.got[1][1].step
        assert [m.name for m in resent.push.tensors] == ["b"] and list(resent.pull.names) == ["b"]
        assert len(resent.push_rows) == 1 and len(resent.pull_rows) == 1
        # merged: both tensors, every row in the order asked, the counts of both rounds
        assert sorted(out.dense) == ["a", "b"] and out.push.versions == {"a": 1, "b": 1}
        assert torch.equal(out.rows["t"], ids.float().repeat_interleave(DIM).view(-1, DIM))
        assert out.rows_updated == 2 and not out.duplicate
        # (PS 0's slow answer made the client look for a new primary, which found v2 already)
        assert client.exchange.layout.version == 2
        assert metrics.reroutes == before + 1
        assert "PS 1 refused WRONG_OWNER at layout v2; re-routed 2 tensors and" in caplog.text
        # the next call is routed by the new layout: no refusal, one PS
        _step(client, ids)
        assert len(b.got) == 1 and len(a.got) == 3
    finally:
        client.close()
        a.close()
        b.close()


def test_a_refusal_marked_duplicate_resends_only_the_reads(monkeypatch, ctx):
    a = StandIn(ctx, lambda n, req, frames: (*serve(req, frames), 0))
    b = StandIn(ctx, lambda n, req, frames: (wrong_owner(2, duplicate=True), [], 0))
    client, asked = _client(monkeypatch, ctx, [a, b], [TWO, ONE])
    try:
        ids = torch.arange(40, dtype=torch.int64)
        out = _step(client, ids)
        assert asked == [0, 2]  # the master asked for a layout as new as the refusal's
        resent = a.got[1][1].step
        assert not resent.HasField("push") and len(resent.push_rows) == 0  # applied already
        assert list(resent.pull.names) == ["b"] and len(resent.pull_rows) == 1
        assert out.duplicate and out.push.duplicate and sorted(out.dense) == ["a", "b"]
        assert out.rows["t"][:, 0].tolist() == ids.float().tolist()
    finally:
        client.close()
        a.close()
        b.close()


def test_without_a_master_wrong_owner_is_an_error(ctx):
    b = StandIn(ctx, lambda n, req, frames: (wrong_owner(3), [], 0))
    client = DataClient([b.endpoint], context=ctx, timeout_s=5)
    try:
        client.set_layout({"a": 4})
        with pytest.raises(PSError) as err:
            client.step({"a": torch.ones(1)})
        assert err.value.reason == Reason.WRONG_OWNER.value and "master" in err.value.message
    finally:
        client.close()
        b.close()


def test_re_routes_are_bounded(monkeypatch, ctx):
    a = StandIn(ctx, lambda n, req, frames: (wrong_owner(1), [], 0))
    client, _ = _client(monkeypatch, ctx, [a], [Layout.initial(1)])
    try:
        with pytest.raises(PSUnavailable, match="WRONG_OWNER"):
            client.step({"a": torch.ones(1)})
        assert len(a.got) == retry.MAX_RESPLITS + 1
        assert len({req.seq for _, req, _ in a.got}) == len(a.got)
    finally:
        client.close()
        a.close()


def test_slot_moving_is_retried_soon_with_the_same_seq_and_spends_no_tries(ctx):
    def answer(n, req, frames):
        if n <= 5:
            return ps_pb2.DataResponse(code=ps_pb2.DataResponse.UNAVAILABLE,
                                       reason=Reason.SLOT_MOVING.value, message="moving"), [], 0
        return (*serve(req, frames), 0)

    a = StandIn(ctx, answer)
    client = DataClient([a.endpoint], context=ctx, timeout_s=5, max_attempts=2, backoff_s=1.0)
    try:
        client.set_layout({"a": 4})
        started = time.monotonic()
        out = client.step({"a": torch.ones(1)}, pull=["a"])
        assert time.monotonic() - started < 1.0  # not the 1 s backoff of a silent PS
        assert out.push.versions == {"a": 1} and len(a.got) == 6
        assert len({req.seq for _, req, _ in a.got}) == 1
    finally:
        client.close()
        a.close()


def serve_plain(req, frames):
    """The other requests, answered as a PS holding everything."""
    resp, out = ps_pb2.DataResponse(), []
    kind = req.WhichOneof("body")
    if kind == "push":
        for meta in req.push.tensors:
            resp.push.versions[meta.name] = 0 if req.push.check_only else 1
        resp.push.SetInParent()
    elif kind == "pull_rows":
        resp.pull_rows.dim = DIM
        out.append(np.repeat(np.frombuffer(frames[0], np.int64).astype(np.float32), DIM)
                   .tobytes())
    elif kind == "push_rows":
        resp.push_rows.rows = len(np.unique(np.frombuffer(frames[0], np.int64)))
    elif kind == "init_parameters":
        resp.init_parameters.initialized = True
        resp.init_parameters.staleness_checked = True
        for meta in req.init_parameters.tensors:
            resp.init_parameters.versions[meta.name] = 0
    return resp, out


def test_checks_pushes_rows_and_init_are_re_routed(monkeypatch, ctx):
    """A staleness check refused WRONG_OWNER is checked again at the new owner; row pulls
    and pushes and InitParameters follow the slot too, merged back in the order asked."""
    def refuse_first(n, req, frames):
        if n == 1:
            resp = ps_pb2.DataResponse(code=ps_pb2.DataResponse.FAILED_PRECONDITION,
                                       reason=Reason.WRONG_OWNER.value, layout_version=2)
            return resp, [], 0
        return (*serve_plain(req, frames), 0)

    for call in ("init", "push", "pull_rows", "push_rows"):
        a = StandIn(ctx, lambda n, req, frames: (*serve_plain(req, frames), 0))
        b = StandIn(ctx, refuse_first)  # still up, and would serve a second request
        client, _ = _client(monkeypatch, ctx, [a, b], [TWO, ONE])
        client.staleness_checked = {}  # unknown: a push over two PS is checked first
        try:
            ids = torch.arange(30, dtype=torch.int64)
            if call == "init":
                assert client.init_parameters({"a": torch.zeros(1), "b": torch.zeros(1)})
                assert [m.name for m in a.got[1][1].init_parameters.tensors] == ["b"]
            elif call == "push":
                out = client.push({"a": torch.ones(1), "b": torch.ones(1)})
                assert out.versions == {"a": 1, "b": 1}
                kinds = [(req.push.check_only, [m.name for m in req.push.tensors])
                         for _, req, _ in a.got]
                # the check of "b" was re-checked at PS 0, then the push went there whole
                assert kinds == [(True, ["a"]), (True, ["b"]), (False, ["a", "b"])]
            elif call == "pull_rows":
                rows = client.pull_rows("t", ids.flip(0))
                assert rows[:, 1].tolist() == ids.flip(0).float().tolist()
            else:
                assert client.push_rows("t", ids, torch.ones(30, DIM)) == 30
            assert len(b.got) == 1  # b's part went to PS 0 instead
            assert a.got[-1][1].seq > b.got[0][1].seq
        finally:
            client.close()
            a.close()
            b.close()


def test_an_idle_client_reads_the_layout_before_its_next_call(monkeypatch, ctx):
    """A client idle for IDLE_REFRESH_S reads ListPS before it splits its next call: one that
    slept through a shrink does not route to a PS that has exited."""
    a = StandIn(ctx, lambda n, req, frames: (*serve_plain(req, frames), 0))
    b = StandIn(ctx, lambda n, req, frames: (wrong_owner(2), [], 0))
    client, asked = _client(monkeypatch, ctx, [a, b], [TWO, ONE], idle_refresh_s=0.0)
    try:
        assert client.push_rows("t", torch.arange(30), torch.ones(30, DIM)) == 30
        assert len(asked) == 2 and not b.got  # routed by the newer layout from the start
    finally:
        client.close()
        a.close()
        b.close()


def serve_marked(req, frames):
    """A Step's row pulls answered as a PS holding everything: rows valued by id, and for a
    pull that marks some ids their state valued id + 0.5, in the order of its ids."""
    resp, rows, states = ps_pb2.DataResponse(), [], []
    step = req.step
    resp.step.SetInParent()
    marked = [entry.marked for entry in step.pull_rows]
    tail = frames[len(frames) - len(marked) - sum(marked):]
    masks = iter(tail[len(marked):])
    for entry, ids in zip(step.pull_rows, tail):
        resp.step.pull_rows.add(dim=DIM, state=entry.marked)
        keys = np.frombuffer(ids, dtype=np.int64)
        rows.append(np.repeat(keys.astype(np.float32), DIM).tobytes())
        if entry.marked:
            mask = np.frombuffer(next(masks), dtype=np.uint8).astype(bool)
            states.append(np.repeat(keys[mask].astype(np.float32) + 0.5, DIM).tobytes())
    return resp, rows + states


def test_marked_state_of_parts_joined_at_the_new_owner_lands_by_rank(monkeypatch, ctx):
    """Both PS refuse WRONG_OWNER; their parts, re-split to the third PS, go there as one
    request whose ids are the two parts' one after the other (not in the call's order). The
    state rows it answers in that order land at each marked id's place among the call's."""
    refuse = [StandIn(ctx, lambda n, req, frames: (wrong_owner(2), [], 0)) for _ in range(2)]
    third = StandIn(ctx, lambda n, req, frames: (*serve_marked(req, frames), 0))
    moved = Layout(np.full(1024, 2, dtype=np.int32), version=2)
    client, _ = _client(monkeypatch, ctx, [*refuse, third], [TWO, moved])
    try:
        ids = torch.arange(60, dtype=torch.int64)
        mask = ids.numpy() % 3 == 0
        out = client.step(pull_rows={"t": ids}, marks={"t": mask})
        (joined,) = [frames for _, _, frames in third.got]
        sent = np.frombuffer(joined[0], dtype=np.int64)
        assert sorted(sent.tolist()) == ids.tolist() and np.any(np.diff(sent) < 0)
        assert torch.equal(out.rows["t"], ids.float().repeat_interleave(DIM).view(-1, DIM))
        marked = ids[torch.from_numpy(mask)].float() + 0.5
        assert torch.equal(out.states["t"], marked.repeat_interleave(DIM).view(-1, DIM))
    finally:
        client.close()
        for s in (*refuse, third):
            s.close()
