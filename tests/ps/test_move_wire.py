"""A slot move's export on the wire (ps/slots/wire.py): no pickle of the sender's choosing is
loaded, and a bad or truncated export (random bytes, cut or flipped bytes, a field of the wrong
type, dtype, shape or range) is refused INVALID_ARGUMENT and changes nothing on the PS it was
meant for, in the decoder and through the real path (an IMPORT asking an old owner over
ZeroMQ for the slots)."""
from __future__ import annotations

import hashlib
import io
import threading

import numpy as np
import pytest
import torch
import zmq
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from protos import ps_pb2
from ps import checkpoint
from ps.slots import moves, wire as move_wire
from ps.dataplane.handlers import Handlers
from ps.slots.ownership import Ownership
from ps.params import ParamStore
from ps.slots.calls import SlotCalls
from pswire.optimizers import make_config
from pswire.slots import row_slot
from pswire.tables import TableSpec
from rpckit.errors import ServiceError

SLOTS = 16
ADAGRAD = make_config("adagrad", lr=0.5)
NAMES = [f"t{i}" for i in range(6)]
MOVED = list(range(0, SLOTS, 2))


def _store(index: int, owned: np.ndarray) -> ParamStore:
    s = ParamStore(index=index, num_ps=2)
    s.ownership = Ownership(index, owned, 1)
    s.init_parameters([(n, torch.zeros(3)) for n in NAMES], ADAGRAD,
                      [(TableSpec("e", 4, initializer="zeros", num_embeddings=1000), None)])
    return s


def _pair() -> tuple[ParamStore, ParamStore]:
    src, dst = _store(0, np.ones(SLOTS, bool)), _store(1, np.zeros(SLOTS, bool))
    src.push_rows("c", 1, "e", torch.arange(40), -torch.ones(40, 4))
    src.push("c", 2, [(n, -torch.ones(3)) for n in NAMES], [0] * len(NAMES))
    return src, dst


def _moved_rows() -> int:
    return int(np.isin(row_slot(np.arange(40), SLOTS), MOVED).sum())


def fingerprint(s: ParamStore) -> tuple:
    h = hashlib.sha256()
    for n, d in sorted(s.dense.items()):
        h.update(n.encode() + d.value.numpy().tobytes() + str(d.version).encode())
    tables = []
    for n, t in sorted(s.tables.items()):
        rows = t.rows()
        for i in sorted(rows):
            h.update(str(i).encode() + rows[i][0].numpy().tobytes())
        tables.append((n, len(t), repr(t.spec)))
    return (h.hexdigest(), tuple(tables), s.initialized, repr(s.optimizer_cfg), len(s.applied),
            s.ownership.incoming.tobytes(), s.ownership.owned.tobytes())


SRC, _ = _pair()
STATE = moves.export(SRC, MOVED, 2, 0, handover=True)
GOOD = bytes(move_wire.encode(STATE))


def _refused(dst: ParamStore, frame) -> None:
    """`frame` as a slot_import through the handlers: refused INVALID_ARGUMENT, or installed."""
    before = fingerprint(dst)
    req = ps_pb2.DataRequest(slot_import=ps_pb2.SlotMove(slots=MOVED))
    try:
        Handlers(dst).import_slots(req, [frame])
    except ServiceError as exc:
        assert exc.code in ("INVALID_ARGUMENT", "FAILED_PRECONDITION"), exc
        assert fingerprint(dst) == before
        return
    _serves(dst)


def _serves(dst: ParamStore) -> None:
    """An export that installed leaves a store that serves the moved slots."""
    moves.apply_layout(dst, np.isin(np.arange(SLOTS), MOVED), 2)
    names = sorted(dst.dense)
    dst.push("d", 10, [(n, -torch.ones(3)) for n in names], [dst.dense[n].version for n in names])
    ids = torch.tensor([i for i in range(40) if row_slot(np.array([i]), SLOTS)[0] in MOVED])
    dst.push_rows("d", 11, "e", ids, -torch.ones(ids.numel(), 4))
    for n in names:
        assert torch.isfinite(dst.dense[n].value).all()
        return
    raise AssertionError("accepted")


def test_a_good_export_round_trips_and_installs():
    src, dst = _pair()
    state = moves.export(src, MOVED, 2, 0, handover=True)
    done = moves.install(dst, move_wire.decode(move_wire.encode(state), dst))
    assert done["tensors"] == len(state["dense"]) > 0 and done["rows"] == _moved_rows() > 0
    for d in state["dense"]:
        assert torch.equal(dst.dense[d["name"]].value, d["value"])
        assert torch.equal(dst.dense[d["name"]].optimizer.state_dict()["state"][0]["sum"],
                           d["optim"]["state"][0]["sum"])


def test_an_export_of_a_store_never_initialized_installs():
    src, dst = ParamStore(index=0, num_ps=2), ParamStore(index=1, num_ps=2)
    src.ownership = Ownership(0, np.ones(SLOTS, bool), 1)
    dst.ownership = Ownership(1, np.zeros(SLOTS, bool), 1)
    for handover in (False, True):
        state = moves.export(src, MOVED, 2, 1, handover=handover)
        done = moves.install(dst, move_wire.decode(move_wire.encode(state), dst))
        assert done == {"rows": 0, "tensors": 0} and not dst.initialized


def test_a_table_that_differs_is_refused_before_any_table_is_created():
    src = ParamStore(index=0, num_ps=2)
    src.ownership = Ownership(0, np.ones(SLOTS, bool), 1)
    src.init_parameters([(n, torch.zeros(3)) for n in NAMES], ADAGRAD,
                        [(TableSpec("a", 2), None), (TableSpec("e", 8, num_embeddings=1000),
                                                     None)])
    src.push_rows("c", 1, "e", torch.arange(40), -torch.ones(40, 8))
    dst = _pair()[1]
    _refused(dst, move_wire.encode(moves.export(src, MOVED, 2, 0, handover=True)))
    assert sorted(dst.tables) == ["e"]


class Evil:
    def __reduce__(self):
        return (print, ("a pickle ran code",))


def test_a_skeleton_naming_any_class_is_refused():
    dst = _pair()[1]
    for bad in (Evil(), np.arange(3), {1, 2}):
        state = dict(STATE, applied=[["c", 1, {"x": bad}]])
        _refused(dst, move_wire.encode(state))


@settings(max_examples=120, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_damaged_bytes_are_refused_and_change_nothing(data):
    dst = _pair()[1]
    how = data.draw(st.sampled_from(["random", "cut", "flip", "grow"]))
    if how == "random":
        frame = data.draw(st.binary(max_size=2048))
        if data.draw(st.booleans()):
            frame = checkpoint.MAGIC2 + frame
    elif how == "cut":
        frame = GOOD[:data.draw(st.integers(0, len(GOOD) - 1))]
    elif how == "flip":
        at = data.draw(st.integers(0, len(GOOD) - 1))
        frame = GOOD[:at] + bytes([GOOD[at] ^ data.draw(st.integers(1, 255))]) + GOOD[at + 1:]
    else:
        frame = GOOD + data.draw(st.binary(min_size=1, max_size=64))
    _refused(dst, frame)


def _raw(state: dict) -> bytes:
    """`state` in the export's encoding as is (move_wire.encode expects a well-formed one)."""
    buf = io.BytesIO()
    checkpoint.encode(state, buf)
    return buf.getvalue()


def _paths(obj, at=()):
    """Every place in the state a value can be replaced at (dict keys and list indexes)."""
    if isinstance(obj, dict):
        items = obj.items()
    elif isinstance(obj, list):
        items = enumerate(obj)
    else:
        return
    for k, v in items:
        yield at + (k,)
        yield from _paths(v, at + (k,))


def _copy(obj):
    if isinstance(obj, dict):
        return {k: _copy(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_copy(v) for v in obj]
    return obj


PATHS = list(_paths({**STATE, "slots": [int(s) for s in STATE["slots"]]}))
BAD_VALUES = st.one_of(
    st.none(), st.booleans(), st.integers(-2**70, 2**70), st.floats(), st.text(max_size=4),
    st.lists(st.integers(-3, SLOTS + 3), max_size=4), st.dictionaries(st.text(max_size=3),
                                                                      st.integers(), max_size=2),
    st.sampled_from([torch.zeros(3), torch.zeros(3, dtype=torch.int64), torch.zeros(2, 4),
                     torch.zeros(20, 4, dtype=torch.float64), torch.full((20,), -1),
                     torch.arange(20) * 10**6, torch.zeros(0), torch.zeros(1, 0, 5),
                     torch.tensor(float("nan")), torch.zeros(20, dtype=torch.int32)]))


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(path=st.sampled_from(PATHS), value=BAD_VALUES, delete=st.booleans())
def test_a_changed_field_installs_whole_or_is_refused_and_changes_nothing(path, value, delete):
    """Any field replaced (or removed): the import is refused INVALID_ARGUMENT (or the model
    differs: FAILED_PRECONDITION) and the store is as it was, or the export is still a good
    one and installs whole."""
    dst = _pair()[1]
    state = _copy({**STATE, "slots": [int(s) for s in STATE["slots"]]})
    parent = state
    for k in path[:-1]:
        parent = parent[k]
    if delete and isinstance(parent, dict):
        del parent[path[-1]]
    else:
        parent[path[-1]] = value
    _refused(dst, _raw(state))


class OldOwner:
    """A data-plane endpoint answering slot_export with the real export of `src`, passed
    through `damage` first."""

    def __init__(self, src: ParamStore, damage):
        self.ctx = zmq.Context.instance()
        self.sock = self.ctx.socket(zmq.ROUTER)
        self.sock.setsockopt(zmq.LINGER, 0)
        port = self.sock.bind_to_random_port("tcp://127.0.0.1")
        self.address = f"tcp://127.0.0.1:{port}"
        self.handlers, self.damage = Handlers(src), damage
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        for _ in range(1000):
            if self.stop.is_set():
                return
            if not self.sock.poll(50):
                continue
            ident, raw = self.sock.recv_multipart()
            req = ps_pb2.DataRequest.FromString(raw)
            head, frame = self.handlers.handle("slot_export", req, [])
            self.sock.send_multipart([ident, head, self.damage(bytes(frame))])

    def close(self) -> None:
        self.stop.set()
        self.thread.join(5)
        self.sock.close(0)


@pytest.mark.parametrize("damage", [
    lambda b: b[: len(b) // 2],
    lambda b: b[:-1],
    lambda b: b[:100] + bytes([b[100] ^ 1]) + b[101:],
    lambda b: b"\x00" * len(b),
    lambda b: move_wire.encode(dict(STATE, slots=[SLOTS + 5])),
], ids=["half", "one-byte-short", "flipped", "zeros", "slot-out-of-range"])
def test_an_import_of_a_bad_export_fails_cleanly_and_changes_nothing(damage):
    src, dst = _pair()
    owner = OldOwner(src, damage)
    calls = SlotCalls(dst, Handlers(dst), zmq.Context.instance())
    before = fingerprint(dst)
    try:
        with pytest.raises(ServiceError) as err:
            calls.call(ps_pb2.MoveSlotsRequest(
                action=ps_pb2.MoveSlotsRequest.IMPORT, slots=MOVED, layout_version=2,
                attempt=1, src_data_address=owner.address))
    finally:
        owner.close()
    assert err.value.code == "INVALID_ARGUMENT"
    assert fingerprint(dst) == before


def test_an_import_of_a_good_export_through_the_real_path_installs():
    src, dst = _pair()
    owner = OldOwner(src, lambda b: b)
    calls = SlotCalls(dst, Handlers(dst), zmq.Context.instance())
    try:
        out = calls.call(ps_pb2.MoveSlotsRequest(
            action=ps_pb2.MoveSlotsRequest.IMPORT, slots=MOVED, layout_version=2, attempt=1,
            src_data_address=owner.address))
    finally:
        owner.close()
    assert len(dst.tables["e"]) == _moved_rows() > 0 and out.tensors > 0
    assert dst.ownership.incoming[MOVED].all()
