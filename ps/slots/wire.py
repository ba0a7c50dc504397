"""A slot move's export on the wire: a typed header and raw tensor frames, checked whole on arrival.

The old owner's `moves.export` state travels as a `SlotExport` protobuf header (protos/ps.proto)
naming every table (its spec, row optimizer, and the frames of its ids, weights, accumulators
and row metadata), every dense tensor (name, version, its value's and its optimizer state's
frames), the at-most-once marks (checked, though `moves.export` sends none since they stay
with the old owner) and the layout fields, then the tensors' raw bytes in frames
after it, as the data plane sends tensors (pswire/frames.py): a tensor of `PACK_BELOW_BYTES` or
more in a frame of its own, sent from its own memory; the smaller ones one after the other (each
at a multiple of 8 bytes) in the first frame; the header holds each frame's CRC-32, so a frame
damaged on the way is refused rather than installed. Nothing of the sender's choosing is
unpickled: the header is a protobuf, the frames raw bytes of the dtypes the header names.

`decode` translates it back into the state dict `moves.install` reads, checking every field
for type, dtype, shape and range and that the frames are exactly the bytes the header names,
and builds the dense tensors' optimizers, so that whatever an export holds either installs
whole or is refused INVALID_ARGUMENT before the store changes.
"""
from __future__ import annotations

import math
import zlib
from dataclasses import asdict

import numpy as np
import torch
from google.protobuf.message import DecodeError

from protos import ps_pb2
from pswire.frames import (DTYPE_NAMES, DTYPES, FLOAT_DTYPES, MAX_DIMS, PACK_BELOW_BYTES,
                           as_buffer, buffer_of)
from pswire.optimizers import config_from_pb, config_to_pb, make_dense, validate_dense
from pswire.slots import row_slot
from pswire.tables import TableSpec, spec_from_pb, spec_to_pb
from rpckit.errors import ServiceError, invalid

from ..store.dense import Dense
from ..store.optim import RowOptimizer, restore_dense, step_dense

FORMAT = 1
ROW_META = {"counts": torch.int64, "steps": torch.int64, "ticks": torch.int64,
            "touched": torch.float64}
MAX_NAME = 1024
ALIGN = 8  # a packed tensor starts at a multiple of this many bytes
_FLOATS = frozenset(DTYPES[n] for n in FLOAT_DTYPES)
# an applied mark's answer (ps/store/params.py, ps/store/steps.py): the keys a header can carry
_ANSWER_TEXT = ("code", "message", "reason")


class BadExport(ValueError):
    pass


# -- encode (the old owner) --------------------------------------------------------------------

class _Frames:
    """The tensor frames of an export being written: small tensors packed into frame 0."""

    def __init__(self):
        self.packed = bytearray()
        self.frames: list = [b""]

    def ref(self, t: torch.Tensor) -> ps_pb2.ExportedFrame:
        t = t.detach()
        ref = ps_pb2.ExportedFrame(dtype=DTYPE_NAMES[t.dtype], shape=list(t.shape))
        nbytes = t.numel() * t.element_size()
        if nbytes >= PACK_BELOW_BYTES:
            ref.frame = len(self.frames)
            self.frames.append(as_buffer(t))
            return ref
        self.packed += bytes(-len(self.packed) % ALIGN)
        ref.offset = len(self.packed)
        self.packed += memoryview(as_buffer(t)).cast("B")
        return ref

    def done(self) -> list:
        self.frames[0] = bytes(self.packed)
        return self.frames


def encode(state: dict) -> list:
    """The frames of an export (`moves.export`'s state): the SlotExport header, then the
    tensor frames it names."""
    out = _Frames()
    msg = ps_pb2.SlotExport(format=FORMAT, slots=[int(s) for s in state["slots"]],
                            layout_version=int(state["version"]),
                            initialized=bool(state["initialized"]))
    if state["optimizer"] is not None:
        msg.optimizer.CopyFrom(config_to_pb(state["optimizer"]))
    for row in state["tables"]:
        msg.tables.append(_table_pb(row, out))
    for row in state["dense"]:
        msg.dense.append(_dense_pb(row, out))
    for client, seq, answer in state["applied"]:
        msg.applied.add(client_id=client, seq=int(seq)).answer.CopyFrom(_answer_pb(answer))
    frames = out.done()
    msg.crc32.extend(zlib.crc32(f) for f in frames)
    return [msg.SerializeToString(), *frames]


def _table_pb(row: dict, out: _Frames) -> ps_pb2.ExportedTable:
    msg = ps_pb2.ExportedTable(spec=spec_to_pb(TableSpec(**row["spec"])),
                               optimizer=config_to_pb(row["optimizer"]))
    for key in ("ids", "weights", *ROW_META):
        getattr(msg, key).CopyFrom(out.ref(row[key]))
    if row.get("accum") is not None:
        msg.accum.CopyFrom(out.ref(row["accum"]))
    if "delta" in row:
        msg.delta = bool(row["delta"])
    if row.get("gone") is not None:
        msg.gone.CopyFrom(out.ref(row["gone"]))
    return msg


def _dense_pb(row: dict, out: _Frames) -> ps_pb2.ExportedTensor:
    # the param groups stay behind: a dense optimizer's hyperparameters are the model's
    # (nothing retunes them), so the new owner makes them from the optimizer config
    msg = ps_pb2.ExportedTensor(name=row["name"], value=out.ref(row["value"]),
                                version=int(row["version"]), pushes=int(row["pushes"]))
    entry = row["optim"]["state"].get(0)
    msg.stateful = entry is not None
    for key, value in (entry or {}).items():
        item = msg.state.add(key=key)
        if value is not None:
            item.value.CopyFrom(out.ref(torch.as_tensor(value)))
    return msg


def _answer_pb(answer: dict) -> ps_pb2.AppliedAnswer:
    msg = ps_pb2.AppliedAnswer()
    for key, value in answer.items():
        if key in _ANSWER_TEXT:
            setattr(msg, key, value)
        elif key == "versions":
            msg.versions.SetInParent()
            msg.versions.of.update(value)
        elif key == "max_staleness":
            msg.max_staleness = value
        elif key == "duplicate":
            msg.duplicate = value
        elif key == "rows" and isinstance(value, (list, tuple)):
            msg.row_counts.counts.extend(value)
        elif key == "rows":
            msg.row_count = value
        elif key == "push":
            msg.push.CopyFrom(_answer_pb(value))
        else:  # a new kind of answer: ps/slots/wire.py and protos/ps.proto learn it first
            raise ValueError(f"an applied mark's answer has a key the export cannot carry: "
                             f"{key!r}")
    return msg


# -- decode (the new owner) --------------------------------------------------------------------

def decode(frames: list, store) -> dict:
    """The state in an export's frames (the header, then its tensor frames), checked against
    `store` (its slot count, its optimizer), with each dense tensor built (`Dense`);
    INVALID_ARGUMENT if anything is wrong with it."""
    try:
        _need(len(frames) >= 2, "an export is a header and at least the packed frame")
        try:
            msg = ps_pb2.SlotExport.FromString(bytes(buffer_of(frames[0])))
        except DecodeError as exc:
            raise BadExport(f"the header is not a SlotExport: {exc}") from None
        _need(msg.format == FORMAT, f"format {msg.format}; this PS reads {FORMAT}")
        tensors = _Tensors(frames[1:])
        _need(len(msg.crc32) == len(tensors.buffers), f"{len(msg.crc32)} checksums for "
              f"{len(tensors.buffers)} tensor frames")
        for i, (buf, crc) in enumerate(zip(tensors.buffers, msg.crc32)):
            _need(zlib.crc32(buf) == crc, f"tensor frame {i} does not match its checksum: "
                  "damaged")
        state = _state(msg, tensors)
        tensors.check_tiled()
        return _checked(state, store)
    except ServiceError:
        raise
    except BadExport as exc:
        raise invalid(f"a bad slot export: {exc}") from None
    except Exception as exc:  # noqa: BLE001 - a malformed value any check above let through
        raise invalid(f"a bad slot export: {type(exc).__name__}: {exc}") from None


class _Tensors:
    """The tensor frames of an export being read: each tensor the header names, wrapped
    without a copy, and a record of the bytes named, to check they tile the frames."""

    def __init__(self, frames: list):
        self.buffers = [buffer_of(f).cast("B") for f in frames]
        self.spans: list[list[tuple[int, int]]] = [[] for _ in frames]

    def take(self, ref: ps_pb2.ExportedFrame, what: str) -> torch.Tensor:
        _need(ref.dtype in DTYPES, f"{what}: dtype {ref.dtype!r} is not one of "
              f"{', '.join(DTYPES)}")
        dtype, shape = DTYPES[ref.dtype], tuple(ref.shape)
        _need(len(shape) <= MAX_DIMS and all(0 <= d < 2**40 for d in shape),
              f"{what}: shape {list(shape)} is not a tensor's")
        _need(ref.frame < len(self.buffers), f"{what}: frame {ref.frame} of "
              f"{len(self.buffers)}")
        nbytes = math.prod(shape) * dtype.itemsize
        buf = self.buffers[ref.frame]
        _need(ref.offset + nbytes <= buf.nbytes, f"{what}: {nbytes} bytes at {ref.offset} "
              f"pass the end of frame {ref.frame} ({buf.nbytes} bytes): truncated")
        self.spans[ref.frame].append((ref.offset, nbytes))
        if not nbytes:
            return torch.empty(shape, dtype=dtype)
        flat = torch.frombuffer(buf, dtype=dtype, count=nbytes // dtype.itemsize,
                                offset=ref.offset)
        return flat.view(*shape) if shape else flat.view(())

    def check_tiled(self) -> None:
        """The tensors named fill the frames exactly: frame 0 packed (each tensor at the first
        multiple of ALIGN after the one before), every other frame one tensor's."""
        for frame, (buf, spans) in enumerate(zip(self.buffers, self.spans)):
            _need(frame == 0 or len(spans) == 1, f"frame {frame} holds {len(spans)} tensors, "
                  "not one")
            end = 0
            for offset, nbytes in sorted(spans):
                _need(offset == end + -end % ALIGN, f"frame {frame}: a tensor at byte "
                      f"{offset}, where {end + -end % ALIGN} was next")
                end = offset + nbytes
            _need(end == buf.nbytes, f"frame {frame} has {buf.nbytes} bytes, the tensors "
                  f"named in it {end}")


def _state(msg: ps_pb2.SlotExport, tensors: _Tensors) -> dict:
    """The header and frames as the state dict `moves.export` made (`_checked` checks it)."""
    return {"slots": list(msg.slots), "version": msg.layout_version,
            "initialized": msg.initialized,
            "optimizer": config_from_pb(msg.optimizer) if msg.HasField("optimizer") else None,
            "tables": [_table_of(t, tensors) for t in msg.tables],
            "dense": [_dense_of(d, tensors) for d in msg.dense],
            "applied": [[m.client_id, m.seq, _answer_of(m.answer)] for m in msg.applied]}


def _table_of(msg: ps_pb2.ExportedTable, tensors: _Tensors) -> dict:
    _need(msg.HasField("spec") and msg.HasField("optimizer"),
          "a table needs its spec and optimizer")
    name = msg.spec.name
    row = {"spec": asdict(spec_from_pb(msg.spec)), "optimizer": config_from_pb(msg.optimizer)}
    for key in ("ids", "weights", *ROW_META):
        _need(msg.HasField(key), f"table {name!r} without its {key}")
        row[key] = tensors.take(getattr(msg, key), f"table {name!r}'s {key}")
    row["accum"] = tensors.take(msg.accum, f"table {name!r}'s accumulators") \
        if msg.HasField("accum") else None
    if msg.HasField("delta"):
        row["delta"] = msg.delta
    if msg.HasField("gone"):
        row["gone"] = tensors.take(msg.gone, f"table {name!r}'s evicted ids")
    return row


def _dense_of(msg: ps_pb2.ExportedTensor, tensors: _Tensors) -> dict:
    _need(msg.HasField("value"), f"tensor {msg.name!r} without its value")
    what = f"tensor {msg.name!r}'s optimizer state"
    entry = {}
    for item in msg.state:
        _need(item.key not in entry, f"{what}: {item.key!r} twice")
        entry[item.key] = tensors.take(item.value, f"{what} {item.key!r}") \
            if item.HasField("value") else None
    _need(msg.stateful or not entry, f"{what}: entries without the entry")
    return {"name": msg.name, "value": tensors.take(msg.value, f"tensor {msg.name!r}"),
            "version": msg.version, "pushes": msg.pushes,
            "optim": {"state": {0: entry} if msg.stateful else {}}}


def _answer_of(msg: ps_pb2.AppliedAnswer) -> dict:
    answer: dict = {}
    for key in _ANSWER_TEXT + ("max_staleness", "duplicate"):
        if msg.HasField(key):
            answer[key] = getattr(msg, key)
    if msg.HasField("versions"):
        answer["versions"] = dict(msg.versions.of)
    which = msg.WhichOneof("rows")
    if which == "row_count":
        answer["rows"] = msg.row_count
    elif which == "row_counts":
        answer["rows"] = list(msg.row_counts.counts)
    if msg.HasField("push"):
        answer["push"] = _answer_of(msg.push)
    return answer


def _need(ok: bool, what: str) -> None:
    if not ok:
        raise BadExport(what)


def _int(v, what: str, low: int = 0, high: int = 2**63 - 1) -> int:
    _need(type(v) is int and low <= v <= high, f"{what} must be an int in {low}..{high}")
    return v


def _name(v, what: str) -> str:
    _need(isinstance(v, str) and 0 < len(v) <= MAX_NAME, f"{what} must be a name")
    return v


def _tensor(v, what: str, dtypes, shape: tuple | None = None, ndim: int | None = None):
    _need(isinstance(v, torch.Tensor) and v.dtype in dtypes, f"{what} must be a tensor of "
          f"{sorted(str(d) for d in dtypes)}")
    _need(ndim is None or v.dim() == ndim, f"{what} must have {ndim} dimension(s)")
    _need(shape is None or tuple(v.shape) == shape, f"{what} must have shape {shape}")
    return v


def _checked(state: dict, store) -> dict:
    own = store.ownership
    slots = state["slots"]
    _need(0 < len(slots) <= own.num_slots, f"slots must be 1..{own.num_slots} slots")
    for s in slots:
        _int(s, "a slot", 0, own.num_slots - 1)
    state["slots"] = np.unique(np.asarray(slots, dtype=np.int64))
    mask = np.zeros(own.num_slots, dtype=bool)
    mask[state["slots"]] = True
    _int(state["version"], "layout_version")
    if state["initialized"]:  # a store never initialized exports no optimizer
        _need(state["optimizer"] is not None, "an initialized export without its optimizer")
        validate_dense(state["optimizer"])
    for client, seq, _ in state["applied"]:
        _name(client, "an applied mark's client")
        _int(seq, "an applied mark's seq")
    cfg = state["optimizer"] if state["initialized"] else store.optimizer_cfg
    state["dense"] = [_dense(row, cfg, own, mask) for row in state["dense"]]
    _need(len({d.name for d in state["dense"]}) == len(state["dense"]), "a tensor twice")
    for row in state["tables"]:
        _table(row, own.num_slots, mask)
    _need(len({r["spec"]["name"] for r in state["tables"]}) == len(state["tables"]),
          "a table twice")
    return state


def _dense(row: dict, cfg, own, mask) -> Dense:
    name = _name(row["name"], "a dense tensor's name")
    _need(bool(mask[own.tensor_slot(name)]), f"tensor {name!r} is in none of the moved slots")
    # copies: the store updates them in place, and the frames are the network's
    value = _tensor(row["value"], f"tensor {name!r}", _FLOATS).clone()
    _need(isinstance(cfg, dict) and bool(cfg), f"tensor {name!r} without an optimizer")
    validate_dense(cfg)
    _optim_state(row["optim"]["state"], cfg, value, name)
    state = {0: {k: None if v is None else v.clone() for k, v in row["optim"]["state"][0].items()}
             } if row["optim"]["state"] else {}
    groups = make_dense(cfg, value.new_empty(0)).state_dict()["param_groups"]
    try:
        optim = restore_dense(cfg, value, {"state": state, "param_groups": groups})
    except Exception as exc:  # noqa: BLE001 - torch's own checks of a state dict
        raise BadExport(f"tensor {name!r}'s optimizer state: {exc}") from None
    return Dense(name, value, optim, version=_int(row["version"], "a tensor's version"),
                 pushes=_int(row["pushes"], "a tensor's pushes"))


def _optim_state(state: dict, cfg: dict, value: torch.Tensor, name: str) -> None:
    """A torch.optim state of one tensor as `cfg`'s optimizer makes it: the entries it holds
    before its first step or after, tensors of the tensor's shape and dtype (a scalar step)."""
    what = f"tensor {name!r}'s optimizer state"
    _need(frozenset(state.get(0, {})) in _state_keys(cfg), f"{what}: its entries")
    for k, v in state.get(0, {}).items():
        if k == "step":
            _need(isinstance(v, torch.Tensor) and v.dim() == 0 and v.dtype in _FLOATS
                  and bool(torch.isfinite(v)) and float(v) >= 0, f"{what}: step")
        else:
            _need(v is None and k == "momentum_buffer" or isinstance(v, torch.Tensor)
                  and v.shape == value.shape and v.dtype == value.dtype, f"{what}: {k!r}")


_STATE_KEYS: dict[str, tuple] = {}


def _state_keys(cfg: dict) -> tuple:
    """The entries `cfg`'s optimizer holds for a tensor before its first step and after."""
    key = repr(sorted(cfg.items()))
    if key not in _STATE_KEYS:
        if len(_STATE_KEYS) >= 64:  # configs come from peers: kept bounded
            _STATE_KEYS.clear()
        param = torch.zeros(1)
        optim = make_dense(cfg, param)
        before = frozenset(optim.state.get(param, {}))
        # the undecorated step: torch.optim's own wrapper imports for a second on its first
        # call, and this runs inside a hand-over, while the old owner's slots are frozen
        step_dense(optim, param, torch.zeros(1))
        _STATE_KEYS[key] = (before, frozenset(optim.state[param]))
    return _STATE_KEYS[key]


def _table(row: dict, num_slots: int, mask: np.ndarray) -> None:
    spec = TableSpec(**row["spec"])
    problem = spec.problem()
    _need(problem is None, f"table spec: {problem}")
    _need(row["optimizer"].get("name") in ("sgd", "adagrad"), "a table's optimizer name")
    row_optim = RowOptimizer.from_config(row["optimizer"])
    ids = _tensor(row["ids"], "a table's ids", {torch.int64}, ndim=1)
    n = int(ids.numel())
    keys = ids.numpy()
    _need(not n or int(keys.min()) >= 0, "a table's ids must be non-negative")
    _need(not n or not spec.num_embeddings or int(keys.max()) < spec.num_embeddings,
          "a table's ids must be below num_embeddings")
    _need(np.unique(keys).size == n, "a table's ids must be distinct")
    _need(bool(mask[row_slot(keys, num_slots)].all()), "a row is in none of the moved slots")
    _tensor(row["weights"], "a table's weights", {torch.float32}, (n, spec.dim))
    if row["accum"] is not None or row_optim.has_accumulator:
        _tensor(row["accum"], "a table's accumulators", {torch.float32}, (n, spec.dim))
    for key, dtype in ROW_META.items():
        _tensor(row[key], f"a table's {key}", {dtype}, (n,))
    if row.get("gone") is not None:
        _tensor(row["gone"], "a table's evicted ids", {torch.int64}, ndim=1)
