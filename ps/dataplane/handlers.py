"""The data plane's handlers: a decoded client request in, the ParamStore called, an answer out.

`Handlers.handle(kind, req, frames, header)` serves the six client requests (InitParameters,
Pull, Push, PullRows, PushRows, Step): it checks the frames against the header, wraps them as
tensors without copying, calls the store, and encodes the answer (pulled tensors are sent from
the tensors' own memory, tracked; see `export`). It is the last link of the request chain
(ps/dataplane/__init__.py) before the store, and calls nothing but the store.
"""
from __future__ import annotations


import torch
import zmq

from protos import ps_pb2
from pswire.frames import (DTYPES, FLOAT_DTYPES, Decoder, as_buffer, check_meta,
                           code_number, decode, dtype_name, frames_of, ids_of, marks_of,
                           rows_of)
from pswire import samehost
from pswire.optimizers import config_from_pb
from pswire.tables import spec_from_pb
from rpckit.errors import invalid

from ..slots import moves, wire
from ..store.params import ParamStore
from ..store.requests import MovedAfterApplied
from ..store.steps import StepParts

# Below this size a tensor is copied into the reply (cheaper than a tracked zero-copy frame).
ZERO_COPY_MIN_BYTES = 64 * 1024
CLIENT_KINDS = frozenset({"init_parameters", "pull", "push", "pull_rows", "push_rows", "step"})
# PullResult metas by the pulled tensors (name, dtype, shape, packed): a worker pulls the same
# few sets every step; the bound only keeps odd clients from growing it
_PULL_METAS: dict[tuple, bytes] = {}
MAX_PULL_METAS = 256


def export(t: torch.Tensor):
    """Payload for a pulled tensor: its own memory, tracked, or a small copy. Tracked by the
    same-host server itself when it is the one answering (pswire.samehost.Written), else by
    ZeroMQ."""
    if t.numel() * t.element_size() < ZERO_COPY_MIN_BYTES:
        return bytes(as_buffer(t)), None
    if samehost.writes_itself():
        written = samehost.Written(as_buffer(t))
        return written, written
    frame = zmq.Frame(as_buffer(t), copy=False, track=True)
    return frame, frame.tracker



class Handlers:
    def __init__(self, store: ParamStore):
        self.store = store
        # a client's Step metas, checked once while they repeat; its packed gradients copied
        # into views kept per handler thread (nothing keeps a push's gradients past its answer)
        self._grads = Decoder(FLOAT_DTYPES, reuse=True)

    def handle(self, kind: str, req, frames: list, header=None, replicated: bool = False) -> list:
        """Serve one decoded client request (no replication here: see ps/replication).
        `replicated`: a primary's mutation applied by its backup (the primary checked the
        slots' ownership; a backup learns the layout later)."""
        if kind == "slot_export":
            return self._slot_export(req, frames)
        if kind == "slot_import":
            if not replicated:  # this PS's own import is `import_slots`, never a request
                raise invalid("slot_import is sent by a PS to itself during a slot move")
            return self._slot_import(req, frames)
        if kind not in CLIENT_KINDS:
            raise invalid(f"{kind} is for PS replicas; this PS serves no replication")
        # the store's request scope: its slots' ownership (`_owns`) cannot change until the
        # answer is made
        with self.store.requests.begin(check_owner=not replicated):
            try:
                reply = getattr(self, "_" + kind)(req, frames)
            except MovedAfterApplied as exc:
                resp = ps_pb2.DataResponse(code=code_number(exc.code), reason=exc.reason,
                                           message=exc.message, seq=req.seq,
                                           layout_version=exc.layout_version)
                body = {"push": resp.push, "push_rows": resp.push_rows,
                        "step": resp.step.push}.get(kind)
                if body is not None:
                    body.duplicate = True
                return [resp.SerializeToString()]
        if kind == "init_parameters":  # new table bounds: filed before the answer, gate released
            self.store.file_tables_now()
        return reply

    def _owns(self, req, tensors_w=(), rows_w=(), tensors_r=(), rows_r=(),
              mutation: bool = True) -> None:
        """The store's request scope checks the slots the request touches
        (ps/store/requests.py)."""
        self.store.requests.owns(req.client_id, req.seq, tensors_w, rows_w, tensors_r, rows_r,
                                 mutation)

    def _owned_tensors(self) -> list[str]:
        """The tensors of the slots this PS owns, sorted (a whole pull's; a new owner may hold
        tensors of slots it does not serve yet)."""
        own = self.store.ownership
        return [n for n in sorted(self.store.dense) if own.owned[own.tensor_slot(n)]]

    def _slot_export(self, req, frames) -> list:
        state = moves.export(self.store, list(req.slot_export.slots),
                             req.slot_export.layout_version, req.slot_export.attempt,
                             req.slot_export.handover)
        resp = ps_pb2.DataResponse(code=0, seq=req.seq)
        resp.slot_export.rows = sum(int(t["ids"].numel()) for t in state["tables"])
        resp.slot_export.tensors = len(state["dense"])
        return [resp.SerializeToString(), *wire.encode(state)]

    def import_slots(self, req, frames: list) -> list:
        """Write a slot move's export (`frames`: its SlotExport header and tensor frames) into
        this store: the new owner's own call (ps/slots/calls.py), as a primary's backups
        replay it."""
        return self._slot_import(req, frames)

    def _slot_import(self, req, frames) -> list:
        state = wire.decode(frames, self.store)  # refused before any change
        done = moves.install(self.store, state)
        resp = ps_pb2.DataResponse(code=0, seq=req.seq)
        resp.slot_import.rows, resp.slot_import.tensors = done["rows"], done["tensors"]
        return [resp.SerializeToString()]

    @staticmethod
    def _tensors(metas, frames, allowed=tuple(DTYPES)) -> list[tuple[str, torch.Tensor]]:
        return decode(metas, frames, 0, allowed)[0]

    @staticmethod
    def _pulled(result, pulled, out: list) -> None:
        """Answer a pull into `result` (a PullResult) and `out` (the frames after the header):
        `pulled` as ParamStore.pull_packed gives it ([(name, payload, version, tensor)],
        packed flat tensor or None) or as ParamStore.pull does (the list alone)."""
        entries, flat = pulled if isinstance(pulled, tuple) else (pulled, None)
        result.SetInParent()
        if flat is not None:
            out.append(as_buffer(flat))
        # the metas (names, dtypes, shapes, packed_count) are those of the last pull of the
        # same tensors: parsed from their bytes, one C call where each meta took one with
        # keywords (PullResult's fields merge: the versions are added after)
        key = tuple([(name, tensor.dtype, tensor.shape, payload is None)
                     for name, payload, _, tensor in entries])
        metas = _PULL_METAS.get(key)
        if metas is None:
            if len(_PULL_METAS) >= MAX_PULL_METAS:
                _PULL_METAS.clear()
            metas = ps_pb2.PullResult(packed_count=sum(p for *_, p in key) if flat is not None
                                      else 0)
            for name, _, _, tensor in entries:
                metas.tensors.add(name=name, dtype=dtype_name(tensor), shape=tensor.shape)
            metas = _PULL_METAS[key] = metas.SerializeToString()
        result.MergeFromString(metas)
        result.versions.extend([version for _, _, version, _ in entries])
        out += [payload for _, payload, _, _ in entries if payload is not None]

    def _init_parameters(self, req, frames) -> list:
        body = req.init_parameters
        tensors = self._tensors(body.tensors, frames, FLOAT_DTYPES)
        tables = []
        for spec in body.tables:
            cfg = config_from_pb(spec.optimizer) if spec.optimizer.name else None
            tables.append((spec_from_pb(spec), cfg))
        self._owns(req, tensors_w=[n for n, _ in tensors], mutation=False)
        initialized, versions, message, changed = self.store.init_parameters(
            tensors, config_from_pb(body.optimizer), tables)
        resp = ps_pb2.DataResponse(code=0, message=message, seq=req.seq)
        resp.init_parameters.initialized = initialized
        resp.init_parameters.tables_changed = changed
        resp.init_parameters.staleness_checked = self.store.max_staleness >= 0
        resp.init_parameters.versions.update(versions)
        return [resp.SerializeToString()]

    def _pull(self, req, frames) -> list:
        if frames:
            raise invalid("a Pull carries no buffer frames")
        names = list(req.pull.names)
        if not names and not self.store.ownership.all_owned:  # every tensor of its slots
            names = self._owned_tensors()
            if not names:
                resp = ps_pb2.DataResponse(code=0, seq=req.seq)
                resp.pull.SetInParent()
                resp.pull.staleness_checked = self.store.max_staleness >= 0
                return [resp.SerializeToString()]
        self._owns(req, tensors_r=names, mutation=False)
        pulled = (self.store.pull_packed(names, export) if req.pull.packed else
                  self.store.pull(names, export))
        resp = ps_pb2.DataResponse(code=0, seq=req.seq)
        out = [None]
        self._pulled(resp.pull, pulled, out)
        resp.pull.staleness_checked = self.store.max_staleness >= 0
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
            self._owns(req, tensors_r=[n for n, _, _ in metas], mutation=False)
            answer = self.store.check_push(metas, list(req.push.versions))
        else:
            grads, flat = decode(req.push.tensors, frames, req.push.packed_count, FLOAT_DTYPES,
                                 "gradient")
            self._owns(req, tensors_w=[n for n, _ in grads])
            answer = self.store.push(req.client_id, req.seq, grads, list(req.push.versions),
                                     req.push.checked, flat, req.push.packed_count)
        resp = ps_pb2.DataResponse(code=code_number(answer["code"]), message=answer["message"],
                              reason=answer.get("reason", ""),
                                   seq=req.seq)
        resp.push.versions.update(answer.get("versions", {}))
        resp.push.max_staleness = answer.get("max_staleness", 0)
        resp.push.duplicate = answer.get("duplicate", False)
        return [resp.SerializeToString()]

    def _pull_rows(self, req, frames) -> list:
        if len(frames) != 1:
            raise invalid(f"a PullRows carries exactly one frame (the int64 ids), got {len(frames)}")
        ids, table = ids_of(frames[0]), req.pull_rows.table
        stateful = self.store.table(table).spec.stateful_reads
        self._owns(req, rows_w=[(table, ids)] if stateful else (),
                   rows_r=() if stateful else [(table, ids)], mutation=stateful)
        rows, created = self.store.pull_rows(table, ids)
        resp = ps_pb2.DataResponse(code=0, seq=req.seq)
        resp.pull_rows.dim = rows.shape[1]
        resp.pull_rows.created = created
        return [resp.SerializeToString(), as_buffer(rows)]

    def _push_rows(self, req, frames) -> list:
        if len(frames) != 2:
            raise invalid("a PushRows carries exactly two frames (int64 ids, float32 "
                          f"gradients), got {len(frames)}")
        ids = ids_of(frames[0])
        table = self.store.table(req.push_rows.table)
        grads = rows_of(frames[1], len(ids), table.spec.dim,
                        f"gradients of table {req.push_rows.table!r}")
        self._owns(req, rows_w=[(req.push_rows.table, ids)])
        answer = self.store.push_rows(req.client_id, req.seq, req.push_rows.table, ids, grads)
        resp = ps_pb2.DataResponse(code=code_number(answer["code"]), message=answer["message"],
                              reason=answer.get("reason", ""),
                                   seq=req.seq)
        resp.push_rows.rows = answer.get("rows", 0)
        resp.push_rows.duplicate = answer.get("duplicate", False)
        return [resp.SerializeToString()]

    def _step(self, req, frames) -> list:
        parts = self._step_parts(req.client_id, req.step, frames)
        if parts.pull == [] and not self.store.ownership.all_owned:  # every tensor of its slots
            parts.pull = self._owned_tensors()
        stateful, plain = [], []  # row pulls that change their table count as writes
        for table, ids in parts.pull_rows:
            (stateful if self.store.table(table).spec.stateful_reads else plain).append(
                (table, ids))
        self._owns(req, tensors_w=[n for n, _ in parts.grads or ()],
                   rows_w=[(t, ids) for t, ids, _ in parts.rows] + stateful,
                   tensors_r=parts.pull or (), rows_r=plain,
                   mutation=parts.mutates or bool(stateful))
        answer = self.store.step(req.client_id, req.seq, parts, export)
        resp = ps_pb2.DataResponse(code=code_number(answer["code"]), message=answer["message"],
                              reason=answer.get("reason", ""), seq=req.seq)
        result = resp.step
        pushed = answer.get("push")
        if pushed is not None:
            versions = result.push.versions
            for name, version in pushed.get("versions", {}).items():
                versions[name] = version  # the map's update() is Python code per item
            result.push.max_staleness = pushed.get("max_staleness", 0)
        result.push.duplicate = answer.get("duplicate", False)
        for count in answer.get("rows", ()):
            result.push_rows.add(rows=count, duplicate=answer.get("duplicate", False))
        out = [None]
        if "pulled" in answer:
            self._pulled(result.pull, answer["pulled"], out)
            result.pull.staleness_checked = self.store.max_staleness >= 0
        states = []
        for rows, created, *state in answer.get("pulled_rows", ()):
            result.pull_rows.add(dim=rows.shape[1], created=created, state=bool(state))
            out.append(as_buffer(rows))
            states += state
        out += [as_buffer(s) for s in states]  # after every row frame (protos/ps.proto)
        out[0] = resp.SerializeToString()
        return out

    def _step_parts(self, client_id: str, step, frames) -> StepParts:
        """The Step's parts over its frames (see protos/ps.proto), checked for shape only."""
        push = step.push if step.HasField("push") else None
        pushed = frames_of(len(push.tensors), push.packed_count) if push is not None else 0
        pull_rows = step.pull_rows[:]
        marked = [entry.marked for entry in pull_rows]
        expected = pushed + 2 * len(step.push_rows) + len(pull_rows) + sum(marked)
        if len(frames) != expected:
            raise invalid(f"the Step describes {expected} buffer frames ({pushed} for the "
                          "gradients, 2 per row push, 1 per row pull, 1 per marked row pull) "
                          f"but {len(frames)} followed")
        parts = StepParts()
        if push is not None:
            if push.check_only:
                raise invalid("a Step's push cannot be check_only; send the check as a Push")
            parts.grads, parts.packed = self._grads.decode(client_id, push.tensors,
                                                           frames[:pushed], push.packed_count,
                                                           "gradient")
            parts.packed_count = push.packed_count
            parts.versions = push.versions[:]  # a list, copied in C (see check_meta)
            parts.checked = push.checked
        at = pushed
        for entry in step.push_rows[:]:
            table = self.store.table(entry.table)
            ids = ids_of(frames[at])
            grads = rows_of(frames[at + 1], len(ids), table.spec.dim,
                            f"gradients of table {entry.table!r}")
            parts.rows.append((entry.table, ids, grads))
            at += 2
        if step.HasField("pull"):
            parts.pull = step.pull.names[:]
            parts.pull_packed = step.pull.packed
        for entry in pull_rows:
            parts.pull_rows.append((entry.table, ids_of(frames[at])))
            at += 1
        if any(marked):  # the masks follow every ids frame
            for (table, ids), is_marked in zip(parts.pull_rows, marked):
                parts.pull_marks.append(
                    marks_of(frames[at], len(ids), f"the state mask of table {table!r}")
                    if is_marked else None)
                at += is_marked
        return parts
