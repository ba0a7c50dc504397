"""The PS's side of the master's `MoveSlots` calls (ps/slots/moves.py: what they do to the store).

- IMPORT (on the PS taking slots): ask their owner for them over its data plane (a
  `slot_export`, which freezes them there), then write them here through this PS's own chain
  (a `slot_import`: with backups it goes through the replication order, so they hold the
  slots too) without owning them yet.
- ABORT: roll the move back here (the old owner thaws, the new one drops what it wrote).
- LAYOUT: own exactly the given slots as of the given layout version (the new owner starts
  serving, the old one frees what left).
- PREPARE: slots will move here soon (the master says so when a resize starts): a PS with no
  checkpoint chain yet starts its first, full file in the background, so that the first
  IMPORT finds it written (or under way) instead of writing it on the move's path.

Plain Python over the store and the chain; ps/server.py's servicer only translates.
"""
from __future__ import annotations

import logging
import os
import signal
import threading
import time
from typing import Callable

import numpy as np
import zmq

from protos import ps_pb2
from pswire.connection import dealer, refusal
from pswire.slots import decode_ranges
from rpckit.errors import Reason, ServiceError, invalid, unavailable

from . import moves
from .ownership import ranges_mask

log = logging.getLogger(__name__)

EXPORT_TIMEOUT_S = 15.0  # a batch of 64 slots of a million-row table: tens of MB
# Fault injection for the kill-mid-move tests (tests/ps/test_resize_exact.py): the PS taking
# slots waits this long between the old owner's export and writing it, the old owner frozen
# meanwhile. Never set in production.
PAUSE_ENV = "ELASTIC_PS_FAILPOINT_MOVE_PAUSE_S"
WARM_WAIT_S = 60.0  # the longest an IMPORT waits for the PS's warm-up (then it goes on cold)
# Fault injection for the kill-after-each-phase tests (tests/ps/test_move_durable.py): the PS
# taking slots SIGKILLs itself at the first point of this name: `copy` (the copy written, in
# memory), `handover` (the hand-over written and the batch durable, IMPORT not answered yet),
# `commit` (the master's LAYOUT giving it the slots arrived). Never set in production.
KILL_ENV = "ELASTIC_PS_FAILPOINT_MOVE_KILL"


def _failpoint(phase: str) -> None:
    if os.environ.get(KILL_ENV) == phase:
        log.warning("%s=%s: SIGKILLing this PS", KILL_ENV, phase)
        os.kill(os.getpid(), signal.SIGKILL)


class _Phases:
    """Seconds per phase of an IMPORT, for its log line (where a slow move spent its time)."""

    def __init__(self):
        self.last = time.perf_counter()
        self.spent: list[str] = []

    def __call__(self, phase: str) -> None:
        now = time.perf_counter()
        self.spent.append(f"{phase} {now - self.last:.3f}")
        self.last = now

    def __str__(self) -> str:
        return ", ".join(self.spent)


class SlotCalls:
    def __init__(self, store, chain, ctx: zmq.Context, token: str = "",
                 warm: threading.Event | None = None,
                 durable: Callable[[], object] | None = None,
                 chained: Callable[[], bool] | None = None):
        """chain: what serves this PS's data-plane requests after auth (a
        ps.replication.ReplicaNode, or the Handlers of a standalone PS): its `import_slots`
        writes the export through the replication order as a client's mutation would.
        warm: set once the PS loaded its compiled loops and torch's optimizers
        (ps/__main__.py's warm-up, after it listens);
        an IMPORT waits for it before it asks the owner for anything, so that loading never
        falls inside a hand-over, while the old owner's slots are frozen. durable: writes this
        PS's checkpoint (a delta when it can), called once per batch, after the hand-over's
        write, unless an in-sync backup holds it (see `_make_durable`). chained: whether this
        PS wrote or restored a checkpoint file already, so that `durable` writes a delta (else
        its first file, a full one, is written before the freeze)."""
        self.warm = warm
        self.store = store
        self.chain = chain
        self.durable = durable
        self.chained = chained
        self.ctx = ctx
        self.token = token
        # slot -> the newest IMPORT attempt begun here: an older attempt's write, late (its
        # master died and a new one moved on), is refused rather than written over it
        self._newest: dict[int, int] = {}
        self._lock = threading.Lock()
        self._first_file: threading.Thread | None = None  # PREPARE's write, while it runs

    def call(self, req: ps_pb2.MoveSlotsRequest) -> ps_pb2.MoveSlotsResponse:
        started = time.perf_counter()
        action = ps_pb2.MoveSlotsRequest.Action.Name(req.action)
        if req.action == ps_pb2.MoveSlotsRequest.IMPORT:
            out = self._import(req)
        elif req.action == ps_pb2.MoveSlotsRequest.PREPARE:
            self.prepare()
            out = ps_pb2.MoveSlotsResponse()
        elif req.action == ps_pb2.MoveSlotsRequest.ABORT:
            done = moves.abort(self.store, list(req.slots), req.attempt)
            out = ps_pb2.MoveSlotsResponse(rows=done["rows_freed"], tensors=done["tensors_freed"],
                                           slots=done["thawed"])
        elif req.action == ps_pb2.MoveSlotsRequest.LAYOUT:
            own = self.store.ownership
            try:
                owned = ranges_mask(decode_ranges(req.owned, own.num_slots), own.num_slots)
            except ValueError as exc:
                raise invalid(f"owned: {exc}") from None
            done = moves.apply_layout(self.store, owned, req.layout_version)
            if done["taken"]:
                _failpoint("commit")
            out = ps_pb2.MoveSlotsResponse(rows=done["rows_freed"], tensors=done["tensors_freed"],
                                           slots=done["released"] + done["taken"])
        else:
            raise invalid("MoveSlots needs an action: IMPORT, ABORT, LAYOUT or PREPARE")
        out.seconds = time.perf_counter() - started
        log.info("MoveSlots %s: %d slots, %d rows, %d tensors in %.3f s (layout version %d)",
                 action, out.slots, out.rows, out.tensors, out.seconds, req.layout_version)
        return out

    def _import(self, req: ps_pb2.MoveSlotsRequest) -> ps_pb2.MoveSlotsResponse:
        slots = np.asarray(req.slots, dtype=np.int64)
        if not slots.size or not req.src_data_address:
            raise invalid("an IMPORT names its slots and their owner's data address")
        with self._lock:
            for slot in req.slots:
                self._newest[slot] = max(self._newest.get(slot, 0), req.attempt)
        took = _Phases()
        sock = dealer(self.ctx, req.src_data_address, req.src_public_key)
        try:
            # the copy, while the slots serve; then the hand-over: only what changed since,
            # with the slots frozen until the master commits and says so
            export = self._export(sock, req, handover=False)
            took("copy")
            copied = self._write(req, export)
            took("copy written")
            # not made durable yet: until this IMPORT is answered the old owner is
            # authoritative and keeps everything, so one durable point after the hand-over
            # covers the batch (one checkpoint write per batch, not two)
            self._before_freeze()
            took("before the freeze")
            _failpoint("copy")
            export = self._export(sock, req, handover=True)
            took("hand-over")
        finally:
            sock.close(linger=0)
        pause = float(os.environ.get(PAUSE_ENV, "0") or 0)
        if pause > 0:
            log.warning("%s: pausing %.1f s in the middle of a slot move", PAUSE_ENV, pause)
            time.sleep(pause)
        done = self._write(req, export)
        took("hand-over written")
        how = self._make_durable()  # before the master may commit: see _make_durable
        took("durable")
        _failpoint("handover")
        log.info("moved slots held %s; seconds: %s", how, took)
        return ps_pb2.MoveSlotsResponse(rows=copied.rows + done.rows, tensors=done.tensors,
                                        slots=int(slots.size))

    def prepare(self) -> bool:
        """PREPARE: when the durable point of a first IMPORT would write this PS's first
        checkpoint file (a full one: no chain yet), start writing it now, in the background,
        off the move's path (a resize's first batches go to one new owner while the others'
        files are written). Nothing of a move depends on it: the IMPORT waits for it, or
        writes the file itself. True when a write started."""
        with self._lock:
            if not self._needs_first_file() or (
                    self._first_file is not None and self._first_file.is_alive()):
                return False
            self._first_file = threading.Thread(target=self._write_first_file,
                                                name="first-checkpoint", daemon=True)
            self._first_file.start()
            return True

    def _write_first_file(self) -> None:
        try:
            info = self.durable()
            log.info("slot moves are coming: first checkpoint file %s written ahead",
                     getattr(info, "path", None) and info.path.name)
        except Exception:  # noqa: BLE001 - the IMPORT writes it then (and says why it fails)
            log.exception("writing the first checkpoint file ahead of the slot moves failed")

    def _needs_first_file(self) -> bool:
        return (self.durable is not None and self.chained is not None and not self.chained()
                and not self._backed())

    def _before_freeze(self) -> None:
        """What is slow once and must not fall inside the hand-over, while the old owner's
        slots are frozen: the warm-up (the copy overlapped it; it loads the compiled loops the
        hand-over's write runs), and a PS's first checkpoint file, a full one, when the
        durable point would write one (after it, the one write a batch makes is a delta):
        PREPARE's, when it began one, else written here."""
        if self.warm is not None and not self.warm.wait(WARM_WAIT_S):
            log.info("slot import: the warm-up is still running after %.0f s; going on",
                     WARM_WAIT_S)
        ahead = self._first_file
        if ahead is not None:
            ahead.join()
        if self._needs_first_file():
            self.durable()

    def _backed(self) -> bool:
        """Whether an in-sync backup holds what this primary writes (no file needed)."""
        primary = getattr(self.chain, "primary", None)
        return (primary is not None and getattr(self.chain, "replicas", 0) > 0
                and primary.in_sync_count() > 0)

    def _make_durable(self) -> str:
        """Make what a move wrote here (the copy and the hand-over) as durable as it was on
        the old owner, before the master may commit the move and the old owner frees it:
        held by an in-sync backup (the writes went through the replication order, which waits
        for their acknowledgement), or else written to this PS's checkpoint directory (a
        delta on the chain when there is one: the moved rows are marked changed), which the
        restore reads (the file records the slots as incoming: ps/slots/ownership.py). Once per
        batch. Returns which."""
        if self._backed():
            return f"by {self.chain.primary.in_sync_count()} in-sync backup(s)"
        if self.durable is None:
            return "in memory only (no checkpoint directory)"
        info = self.durable()
        return f"in {getattr(info, 'path', None) and info.path.name}"

    def _export(self, sock, req: ps_pb2.MoveSlotsRequest, handover: bool):
        ask = ps_pb2.DataRequest(token=self.token, client_id=f"move-{self.store.index}",
                                 slot_export=ps_pb2.SlotMove(
                                     slots=req.slots, layout_version=req.layout_version,
                                     attempt=req.attempt, handover=handover))
        sock.send(ask.SerializeToString())
        if not sock.poll(int(EXPORT_TIMEOUT_S * 1000)):
            raise unavailable(Reason.UNAVAILABLE, f"the PS at {req.src_data_address} did not "
                              f"answer the slot export within {EXPORT_TIMEOUT_S:.0f} s")
        frames = sock.recv_multipart(copy=False)
        resp = ps_pb2.DataResponse.FromString(frames[0].bytes)
        if resp.code != 0:
            raise refusal(resp, f"the old owner at {req.src_data_address}: ")
        return frames[1:]  # the SlotExport header and its tensor frames (ps/slots/wire.py)

    def _write(self, req: ps_pb2.MoveSlotsRequest, export: list) -> ps_pb2.SlotMoveResult:
        put = ps_pb2.DataRequest(token=self.token, slot_import=ps_pb2.SlotMove(
            slots=req.slots, layout_version=req.layout_version, attempt=req.attempt))
        with self._lock:
            if any(self._newest.get(slot, 0) > req.attempt for slot in req.slots):
                raise ServiceError("ABORTED", Reason.MOVE_ABORTED, f"a newer attempt at "
                                   f"these slots began here: attempt {req.attempt} is late")
            reply = self.chain.import_slots(put, export)
        done = ps_pb2.DataResponse.FromString(bytes(reply[0]))
        if done.code != 0:
            raise refusal(done, "writing the moved slots here: ")
        return done.slot_import
