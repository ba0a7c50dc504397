"""A slot move's export on the wire (ps/slots/wire.py): a SlotExport protobuf header and raw
tensor frames (each with its CRC-32), never a pickle. A bad or truncated export (random bytes,
cut, flipped, dropped, added or reordered frames, any header field changed or removed) is
refused INVALID_ARGUMENT and changes nothing on the PS it was meant for, in the decoder and
through the real path (an IMPORT asking an old owner over ZeroMQ for the slots)."""
from __future__ import annotations

import hashlib
import io
import pickle
import threading

import numpy as np
import pytest
import torch
import zmq
from google.protobuf.descriptor import FieldDescriptor
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from protos import ps_pb2
from ps import checkpoint
from ps.dataplane.handlers import Handlers
from ps.store.params import ParamStore
from ps.slots import moves, wire
from ps.slots.calls import SlotCalls
from ps.slots.ownership import Ownership
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
# a header with marks: the format carries and checks them, though a move sends none (they stay
# with the old owner, ps/slots/moves.py)
STATE = dict(moves.export(SRC, MOVED, 2, 0, handover=True), applied=SRC.applied.export())
GOOD = [bytes(f) for f in wire.encode(STATE)]
HEADER = ps_pb2.SlotExport.FromString(GOOD[0])


def _refused(dst: ParamStore, frames: list, may_install: bool = True) -> None:
    """`frames` as a slot_import through the handlers: refused INVALID_ARGUMENT (or the model
    differs: FAILED_PRECONDITION) changing nothing, or (when `may_install`) installed whole."""
    before = fingerprint(dst)
    req = ps_pb2.DataRequest(slot_import=ps_pb2.SlotMove(slots=MOVED))
    try:
        Handlers(dst).import_slots(req, frames)
    except ServiceError as exc:
        assert exc.code in ("INVALID_ARGUMENT", "FAILED_PRECONDITION"), exc
        assert fingerprint(dst) == before
        return
    assert may_install, "a damaged export installed"
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


def test_a_good_export_round_trips_and_installs():
    src, dst = _pair()
    state = moves.export(src, MOVED, 2, 0, handover=True)
    frames = wire.encode(state)
    assert ps_pb2.SlotExport.FromString(frames[0]).format == wire.FORMAT
    done = moves.install(dst, wire.decode(frames, dst))
    assert done["tensors"] == len(state["dense"]) > 0 and done["rows"] == _moved_rows() > 0
    for d in state["dense"]:
        assert torch.equal(dst.dense[d["name"]].value, d["value"])
        assert torch.equal(dst.dense[d["name"]].optimizer.state_dict()["state"][0]["sum"],
                           d["optim"]["state"][0]["sum"])
    held = dst.tables["e"].rows()
    assert all(torch.equal(held[i][0], src.tables["e"].rows()[i][0]) for i in held)


def test_large_tensors_travel_in_frames_of_their_own_and_small_ones_packed():
    src, dst = _pair()
    src.push_rows("c", 3, "e", torch.arange(1000), torch.ones(1000, 4))  # 16 KB of weights
    big = ParamStore(index=0, num_ps=2)
    big.ownership = Ownership(0, np.ones(SLOTS, bool), 1)
    name = next(f"w{i}" for i in range(100) if big.ownership.tensor_slot(f"w{i}") in MOVED)
    big.init_parameters([(name, torch.zeros(64, 1024))], ADAGRAD, [])
    frames = wire.encode(moves.export(big, MOVED, 2, 0, handover=True))
    header = ps_pb2.SlotExport.FromString(frames[0])
    value, total = header.dense[0].value, header.dense[0].state[1].value
    assert len(frames) == 4 and value.frame == 1 and total.frame == 2  # value, sum: 256 KB each
    assert header.dense[0].state[0].key == "step" and header.dense[0].state[0].value.frame == 0
    fresh = ParamStore(index=1, num_ps=2)
    fresh.ownership = Ownership(1, np.zeros(SLOTS, bool), 1)
    moves.install(fresh, wire.decode(frames, fresh))
    assert torch.equal(fresh.dense[name].value, big.dense[name].value)
    fresh.dense[name].value.add_(1)  # the store's own memory, not the frame's
    assert not torch.equal(fresh.dense[name].value, big.dense[name].value)
    state = moves.export(src, MOVED, 2, 0, handover=True)
    installed = moves.install(dst, wire.decode(wire.encode(state), dst))
    assert installed["rows"] == int(np.isin(row_slot(np.arange(1000), SLOTS), MOVED).sum())


def test_an_export_of_a_store_never_initialized_installs():
    src, dst = ParamStore(index=0, num_ps=2), ParamStore(index=1, num_ps=2)
    src.ownership = Ownership(0, np.ones(SLOTS, bool), 1)
    dst.ownership = Ownership(1, np.zeros(SLOTS, bool), 1)
    for handover in (False, True):
        state = moves.export(src, MOVED, 2, 1, handover=handover)
        done = moves.install(dst, wire.decode(wire.encode(state), dst))
        assert done == {"rows": 0, "tensors": 0} and not dst.initialized


def test_the_copy_and_the_delta_keep_their_table_fields():
    src, dst = _pair()
    copy = wire.decode(wire.encode(moves.export(src, MOVED, 2, 3, handover=False)), dst)
    assert "delta" not in copy["tables"][0] and copy["tables"][0].get("gone") is None
    src.push_rows("c", 3, "e", torch.arange(4), -torch.ones(4, 4))
    hand = wire.decode(wire.encode(moves.export(src, MOVED, 2, 3, handover=True)), dst)
    table = hand["tables"][0]
    assert table["delta"] is True and table["gone"].dtype == torch.int64
    assert 0 < table["ids"].numel() < copy["tables"][0]["ids"].numel()


def test_at_most_once_answers_round_trip_exactly():
    answers = [
        {"code": "OK", "message": "", "versions": {"a": 3, "b": 0}, "max_staleness": 2},
        {"code": "FAILED_PRECONDITION", "reason": "STALE_GRADIENT", "message": "stale",
         "versions": {}, "max_staleness": 9},
        {"code": "OK", "message": "", "rows": 7},
        {"code": "OK", "message": "", "versions": {"a": 1}, "max_staleness": 0, "rows": [3, 0],
         "push": {"code": "OK", "message": "", "versions": {"a": 1}, "max_staleness": 0}},
        {"code": "UNAVAILABLE", "reason": "UNAVAILABLE", "message": "x", "duplicate": False},
    ]
    state = dict(STATE, applied=[[f"c{i}", i + 1, a] for i, a in enumerate(answers)])
    dst = _pair()[1]
    assert wire.decode(wire.encode(state), dst)["applied"] == state["applied"]
    assert wire.decode(wire.encode(STATE), dst)["applied"] == SRC.applied.export() != []
    with pytest.raises(ValueError, match="cannot carry"):
        wire.encode(dict(STATE, applied=[["c", 1, {"surprise": 1}]]))


def test_a_table_that_differs_is_refused_before_any_table_is_created():
    src = ParamStore(index=0, num_ps=2)
    src.ownership = Ownership(0, np.ones(SLOTS, bool), 1)
    src.init_parameters([(n, torch.zeros(3)) for n in NAMES], ADAGRAD,
                        [(TableSpec("a", 2), None), (TableSpec("e", 8, num_embeddings=1000),
                                                     None)])
    src.push_rows("c", 1, "e", torch.arange(40), -torch.ones(40, 8))
    dst = _pair()[1]
    _refused(dst, wire.encode(moves.export(src, MOVED, 2, 0, handover=True)))
    assert sorted(dst.tables) == ["e"]


class Evil:
    def __reduce__(self):
        return (print, ("a pickle ran code",))


def test_nothing_is_unpickled_and_a_pickled_export_is_refused(monkeypatch):
    """The old format (a torch.save skeleton in one frame) is refused, and decoding never
    reaches torch.load or pickle, for a good export or a bad one."""
    def never(*_, **__):
        raise AssertionError("a slot export was unpickled")

    monkeypatch.setattr(torch, "load", never)
    for name in ("load", "loads", "Unpickler"):
        monkeypatch.setattr(pickle, name, never)
    dst = _pair()[1]
    old = io.BytesIO()
    checkpoint.encode({**STATE, "slots": MOVED, "applied": [["c", 1, {"x": Evil()}]]}, old)
    for frames in ([old.getvalue()], [old.getvalue(), b""], [pickle.dumps(Evil()), b""]):
        with pytest.raises(ServiceError) as err:
            wire.decode(frames, dst)
        assert err.value.code == "INVALID_ARGUMENT"
    assert wire.decode(GOOD, dst)["slots"].tolist() == MOVED


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_damaged_frames_are_refused_and_change_nothing(data):
    dst = _pair()[1]
    frames = list(GOOD)
    how = data.draw(st.sampled_from(["random", "cut", "flip", "grow", "drop", "add", "swap"]))
    at = data.draw(st.integers(0, len(frames) - 1))
    if how == "random":
        frames[at] = data.draw(st.binary(max_size=2048))
    elif how == "cut":
        assume(frames[at])
        frames[at] = frames[at][:data.draw(st.integers(0, len(frames[at]) - 1))]
    elif how == "flip":
        assume(frames[at])
        i = data.draw(st.integers(0, len(frames[at]) - 1))
        flipped = bytes([frames[at][i] ^ data.draw(st.integers(1, 255))])
        frames[at] = frames[at][:i] + flipped + frames[at][i + 1:]
    elif how == "grow":
        frames[at] = frames[at] + data.draw(st.binary(min_size=1, max_size=64))
    elif how == "drop":
        del frames[at]
    elif how == "add":
        frames.insert(at, data.draw(st.binary(max_size=64)))
    else:
        other = data.draw(st.integers(0, len(frames) - 1))
        assume(frames[at] != frames[other])
        frames[at], frames[other] = frames[other], frames[at]
    # a tensor frame's damage is always seen (its CRC-32); a header flipped or grown may still
    # be a good header (another learning rate, say), and then installs whole
    _refused(dst, frames, may_install=at == 0 and how in ("flip", "grow"))


def _places(msg, at=()):
    """Every field of the header a mutation can reach: (path, field), a path being the
    (field name, index or None) steps from the top."""
    for fd in msg.DESCRIPTOR.fields:
        here = at + ((fd.name, None),)
        if fd.is_repeated:
            yield here, fd
            is_map = fd.message_type is not None and fd.message_type.GetOptions().map_entry
            for i, value in enumerate([] if is_map else getattr(msg, fd.name)):
                if fd.message_type is None:
                    yield at + ((fd.name, i),), fd
                else:
                    yield from _places(value, at + ((fd.name, i),))
        else:
            yield here, fd
            if fd.message_type is not None and msg.HasField(fd.name):
                yield from _places(getattr(msg, fd.name), here)


PLACES = list(_places(HEADER))
_INTS = {FieldDescriptor.TYPE_INT32: (-2**31, 2**31 - 1), FieldDescriptor.TYPE_INT64:
         (-2**63, 2**63 - 1), FieldDescriptor.TYPE_UINT32: (0, 2**32 - 1),
         FieldDescriptor.TYPE_UINT64: (0, 2**64 - 1), FieldDescriptor.TYPE_FIXED32: (0, 2**32 - 1)}


def _value(data, fd):
    if fd.type in _INTS:
        low, high = _INTS[fd.type]
        return data.draw(st.one_of(st.integers(-3, 70), st.integers(low, high)).filter(
            lambda v: low <= v <= high))
    if fd.type == FieldDescriptor.TYPE_BOOL:
        return data.draw(st.booleans())
    if fd.type == FieldDescriptor.TYPE_DOUBLE:
        return data.draw(st.floats())
    return data.draw(st.one_of(st.sampled_from(["", "float32", "float64", "int64", "bfloat16",
                                                "bool", "sgd", "adam", "e", "t1"]),
                               st.text(max_size=6)))


def _mutate(header, path, fd, data) -> None:
    parent = header
    for name, i in path[:-1]:
        parent = getattr(parent, name) if i is None else getattr(parent, name)[i]
    name, i = path[-1]
    field = getattr(parent, name)
    repeated = fd.is_repeated
    if repeated and i is not None:  # an element: dropped, or (a number, a name) replaced
        if fd.message_type is not None or data.draw(st.booleans()):
            del field[i]
        else:
            field[i] = _value(data, fd)
    elif repeated:  # the whole field: emptied, or one more element
        if data.draw(st.booleans()) or fd.message_type is not None and \
                fd.message_type.GetOptions().map_entry:
            parent.ClearField(name)
        elif fd.message_type is not None:
            field.add()
        else:
            field.append(_value(data, fd))
    elif fd.message_type is not None or data.draw(st.booleans()):
        parent.ClearField(name)
    else:
        setattr(parent, name, _value(data, fd))


@settings(max_examples=400, deadline=None, suppress_health_check=list(HealthCheck))
@given(place=st.sampled_from(PLACES), data=st.data())
def test_a_changed_header_field_installs_whole_or_is_refused_and_changes_nothing(place, data):
    """Any field of the header replaced, removed or added to: the import is refused
    INVALID_ARGUMENT (or the model differs: FAILED_PRECONDITION) and the store is as it was,
    or the export is still a good one and installs whole."""
    dst = _pair()[1]
    header = ps_pb2.SlotExport()
    header.CopyFrom(HEADER)
    _mutate(header, *place, data)
    _refused(dst, [header.SerializeToString(), *GOOD[1:]])


def _bad_slot(frames: list) -> list:
    header = ps_pb2.SlotExport.FromString(frames[0])
    header.slots[0] = SLOTS + 5
    return [header.SerializeToString(), *frames[1:]]


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
            head, *frames = self.handlers.handle("slot_export", req, [])
            self.sock.send_multipart([ident, head, *self.damage([bytes(f) for f in frames])])

    def close(self) -> None:
        self.stop.set()
        self.thread.join(5)
        self.sock.close(0)


def _import(calls: SlotCalls, src: ParamStore, damage=lambda f: f):
    """One IMPORT of the moved slots by `calls`, from an old owner serving `src`'s export
    passed through `damage`: the call's answer."""
    owner = OldOwner(src, damage)
    try:
        return calls.call(ps_pb2.MoveSlotsRequest(
            action=ps_pb2.MoveSlotsRequest.IMPORT, slots=MOVED, layout_version=2, attempt=1,
            src_data_address=owner.address))
    finally:
        owner.close()


@pytest.mark.parametrize("damage", [
    lambda f: [f[0][: len(f[0]) // 2], *f[1:]],
    lambda f: [*f[:-1], f[-1][:-1]],
    lambda f: f[:-1],
    lambda f: [bytes([f[0][0] ^ 1]) + f[0][1:], *f[1:]],
    lambda f: [b"\x00" * len(f[0]), *f[1:]],
    lambda f: [],
    _bad_slot,
], ids=["half-header", "one-byte-short", "frame-missing", "flipped-tag", "zeros", "nothing",
        "slot-out-of-range"])
def test_an_import_of_a_bad_export_fails_cleanly_and_changes_nothing(damage):
    src, dst = _pair()
    calls = SlotCalls(dst, Handlers(dst), zmq.Context.instance())
    before = fingerprint(dst)
    with pytest.raises(ServiceError) as err:
        _import(calls, src, damage)
    assert err.value.code == "INVALID_ARGUMENT"
    assert fingerprint(dst) == before


def test_an_import_of_a_good_export_through_the_real_path_installs():
    src, dst = _pair()
    calls = SlotCalls(dst, Handlers(dst), zmq.Context.instance())
    out = _import(calls, src)
    assert len(dst.tables["e"]) == _moved_rows() > 0 and out.tensors > 0
    assert dst.ownership.incoming[MOVED].all()


def _receiver() -> tuple[ParamStore, torch.Tensor]:
    """A new owner holding rows of its own (more than a move brings, so that a delta of the
    move is smaller than its tables): the store and those rows' ids."""
    dst = _store(1, ~np.isin(np.arange(SLOTS), MOVED))
    ids = np.arange(1000)
    own = torch.from_numpy(ids[~np.isin(row_slot(ids, SLOTS), MOVED)][:600])
    dst.push_rows("d", 1, "e", own, -torch.ones(len(own), 4))
    return dst, own


def test_prepare_writes_the_first_full_file_ahead_and_the_import_then_writes_a_delta(tmp_path):
    """PREPARE on a PS with no checkpoint chain starts its first, full file in the background;
    the IMPORT that follows waits for it and makes the batch durable with a delta on it, and
    the restore of that directory holds the moved rows and tensors."""
    src, _ = _pair()
    dst, own = _receiver()
    ckpt = checkpoint.Checkpointer(dst, checkpoint.CheckpointDir(tmp_path, 1, 2))
    calls = SlotCalls(dst, Handlers(dst), zmq.Context.instance(),
                      durable=lambda: ckpt.write(delta=True), chained=lambda: bool(ckpt.last))
    calls.call(ps_pb2.MoveSlotsRequest(action=ps_pb2.MoveSlotsRequest.PREPARE))
    calls._first_file.join(30)
    assert ckpt.last is not None and not ckpt.last.delta
    first = ckpt.last.path
    assert not calls.prepare()  # a chain now: nothing more to write ahead
    _import(calls, src)
    assert ckpt.last.delta and ckpt.written == 2 and first.exists()
    back = ParamStore(index=1, num_ps=2)
    checkpoint.Checkpointer(back, checkpoint.CheckpointDir(tmp_path, 1, 2)).restore()
    assert len(back.tables["e"]) == len(own) + _moved_rows() and _moved_rows() > 0
    assert sorted(back.dense) == sorted(dst.dense) and back.ownership.incoming[MOVED].all()


def test_an_import_without_prepare_still_writes_the_first_file_before_the_freeze(tmp_path):
    src, _ = _pair()
    dst, _ = _receiver()
    ckpt = checkpoint.Checkpointer(dst, checkpoint.CheckpointDir(tmp_path, 1, 2))
    calls = SlotCalls(dst, Handlers(dst), zmq.Context.instance(),
                      durable=lambda: ckpt.write(delta=True), chained=lambda: bool(ckpt.last))
    _import(calls, src)
    assert calls._first_file is None and ckpt.written == 2 and ckpt.last.delta
