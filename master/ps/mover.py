"""Drives a resize's slot moves while the PS serve (docs/ps.md, "Slots and resize").

The leader runs one `SlotMover`. Each round it takes a batch of PLANNED moves (at most
`batch` slots, all from one PS index to one other, both registered and alive) and moves it:

1. phase COPYING, committed (master/ps/layout.py);
2. `MoveSlots(IMPORT)` on the new owner: it asks the old owner for the slots (frozen there:
   writes to them wait) and writes them into itself, without serving them;
3. the commit point: under the core's lock, if neither index changed primary since step 1 and
   the move is still COPYING, the layout takes the new owners in one new version
   (`PSLayout.moved`, `ps_slots_moved`); otherwise the move rolls back;
4. `MoveSlots(LAYOUT)` to the new owner (it serves the slots) and then to the old owner (it
   frees them and refuses requests for them with WRONG_OWNER). A PS this misses takes the
   layout from its next ListPS (ps/registrar.py).

Every new owner of the plan is told once, before the first batch (`MoveSlots(PREPARE)`, a hint
answered at once): a PS with no checkpoint file yet writes its first, full one in the
background then, while the first batches move, instead of on its own first batch's path.

Any failure before step 3 rolls the batch back to PLANNED and tells both sides
(`MoveSlots(ABORT)`: the old owner thaws, the new one drops what it wrote); the batch is tried
again after a pause. A new leader rolls back every COPYING move it finds the same way, so a
master SIGKILLed in the middle of a move loses nothing: before step 3 the old owner is
authoritative, after it the layout is durable.
"""
from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass

import grpc

from protos import ps_pb2, ps_pb2_grpc
from pswire.slots import encode_ranges
from rpckit import auth

from ..states import EventKind, MovePhase
from .layout import resize_waits

log = logging.getLogger(__name__)

BATCH_SLOTS = 128       # a batch's hand-over pauses its slots' writes: keep it short
PACE_S = 0.15           # between batches: the copy competes with training for CPU too
IMPORT_TIMEOUT_S = 120.0
CALL_TIMEOUT_S = 10.0
PREPARE_TIMEOUT_S = 2.0  # a hint answered at once: never hold the moves up for long
RETRY_AFTER_S = 1.0     # after a failed batch
MAX_CHANNELS = 64


@dataclass(frozen=True)
class Batch:
    slots: list[int]
    src: int
    dst: int
    src_generation: int
    dst_generation: int
    src_data: str
    src_key: str
    dst_grpc: str
    version: int  # the layout version the batch makes


class SlotMover:
    def __init__(self, core, committer, tls_ca: str = "", token: str = "",
                 batch: int = BATCH_SLOTS, interval: float = 0.2, pace: float = PACE_S):
        self.core = core
        self.committer = committer
        self.tls_ca = tls_ca
        self.token = token
        self.batch = batch
        self.interval = interval
        self.pace = pace
        self.stop = threading.Event()
        self._retry_at = 0.0
        self.failures = 0
        self.attempt = 0
        self._stubs: dict[str, tuple] = {}  # PS address -> (channel, stub)
        self._said: tuple = ()  # the waits last told (ps_resize_waiting)
        self._prepared: set[tuple] = set()  # (index, generation, address) told PREPARE

    def start(self) -> None:
        threading.Thread(target=self._run, name="slot-mover", daemon=True).start()

    def _run(self) -> None:
        self._recover()
        while not self.stop.is_set():
            try:
                moved = self.step()
            except Exception:  # noqa: BLE001 - logged; the next round tries again
                if getattr(self.committer, "fatal", None) is not None:
                    return
                log.exception("slot move round failed")
                moved = False
            # after a batch, let the writes its hand-over paused catch up before the next one
            self.stop.wait(self.pace if moved else self.interval)
        self.close_channels()

    # -- one batch ----------------------------------------------------------------------------

    def step(self) -> bool:
        """Move one batch; True when one was moved (look again at once)."""
        if time.monotonic() < self._retry_at:
            return False
        batch = self.committer.read(self._next_batch)
        if batch is None:
            self._say_waits()
            if not self.committer.read(lambda: self.core.layout.resizing):
                self._prepared.clear()  # the next resize tells its new owners again
            return False
        self._said = ()
        self._prepare()
        self.committer.call(lambda: self.core.layout.set_phase(batch.slots, MovePhase.COPYING))
        started = time.perf_counter()
        # grows with every attempt, across leaders (wall clock: a new leader is later): the
        # PS refuse a late export or write of an attempt rolled back (ps/slots/moves.py)
        self.attempt = max(self.attempt + 1, time.time_ns())
        try:
            self._call(batch.dst_grpc, ps_pb2.MoveSlotsRequest(
                action=ps_pb2.MoveSlotsRequest.IMPORT, slots=batch.slots,
                layout_version=batch.version, src_data_address=batch.src_data,
                src_public_key=batch.src_key, attempt=self.attempt), IMPORT_TIMEOUT_S)
        except grpc.RpcError as exc:
            self._fail(batch, f"PS {batch.dst} could not take the slots: "
                       f"{exc.code().name}: {exc.details()}")
            return False
        seconds = time.perf_counter() - started
        if not self.committer.call(lambda: self._commit(batch, seconds)):
            self._fail(batch, "a PS of the move changed primary meanwhile")
            return False
        self.failures = 0
        self._tell_layout(batch.dst)
        self._tell_layout(batch.src)
        # a finished shrink: the indices it removed (told their empty share just now) leave
        self.committer.call(lambda: None if self.core.layout.resizing
                            else self.core.ps_set.forget_removed())
        return True

    def _next_batch(self) -> Batch | None:
        layout = self.core.layout
        planned = [m for m in sorted(layout.moves.values(), key=lambda m: m.slot)
                   if m.phase == MovePhase.PLANNED]
        for first in planned:
            src, dst = self._alive(first.src), self._alive(first.dst)
            if src is None or dst is None or not src["data_address"]:
                continue
            slots = [m.slot for m in planned if (m.src, m.dst) == (first.src, first.dst)]
            return Batch(slots[: self.batch], first.src, first.dst,
                         self.core.replicas.generation(first.src),
                         self.core.replicas.generation(first.dst),
                         src["data_address"], src.get("data_public_key", ""), dst["address"],
                         layout.version + 1)
        return None

    def _prepare(self) -> None:
        """PREPARE to each alive new owner of the planned moves not told yet (since it
        registered), all at once before the first batch: their first files are written while
        the first batches move, and before a later receiver's batches begin (told a batch
        later instead, a receiver wrote its file beside the first receiver's second batch,
        which then took longer). A hint: a PS that misses it does the same on its first
        IMPORT."""
        def targets():
            layout, out = self.core.layout, []
            for dst in sorted({m.dst for m in layout.moves.values()
                               if m.phase == MovePhase.PLANNED}):
                row = self._alive(dst)
                if row is not None:
                    out.append((dst, self.core.replicas.generation(dst), row["address"]))
            return out

        for told in self.committer.read(targets):
            if told in self._prepared:
                continue
            self._prepared.add(told)
            try:
                self._call(told[2], ps_pb2.MoveSlotsRequest(
                    action=ps_pb2.MoveSlotsRequest.PREPARE), PREPARE_TIMEOUT_S)
            except grpc.RpcError as exc:  # an older PS, or one going down: IMPORT decides
                log.info("PS %d did not take PREPARE (%s)", told[0], exc.code().name)

    def _say_waits(self) -> None:
        """A `ps_resize_waiting` event when what holds the planned moves up changed (once per
        change, not per round): which move waits for which PS, and why."""
        core = self.core
        waits = self.committer.read(lambda: tuple(
            line for line in resize_waits(core.layout, core.ps_set.rows, core.ps_lost)
            if " wait for PS " in line))
        if waits == self._said:
            return
        self._said = waits
        if waits:
            for line in waits:
                log.warning("resize waiting: %s", line)
            self.committer.call(lambda: core.journal.event(
                EventKind.PS_RESIZE_WAITING, cause="ps_down", detail="; ".join(waits)[:1000]))

    def _alive(self, index: int) -> dict | None:
        row = self.core.ps_set.rows.get(index)
        if row is None or index in self.core.ps_lost or not row.get("address"):
            return None
        return row

    def _commit(self, batch: Batch, seconds: float) -> bool:
        layout = self.core.layout
        same = (self.core.replicas.generation(batch.src) == batch.src_generation
                and self.core.replicas.generation(batch.dst) == batch.dst_generation
                and all(s in layout.moves and layout.moves[s].phase == MovePhase.COPYING
                        for s in batch.slots)
                and layout.version + 1 == batch.version)
        if not same:
            return False
        layout.moved(batch.slots, seconds)
        return True

    def _fail(self, batch: Batch, why: str) -> None:
        self.failures += 1
        log.warning("slot move of %d slots PS %d -> PS %d rolled back: %s", len(batch.slots),
                    batch.src, batch.dst, why)
        self._abort(batch.slots, [batch.src, batch.dst])
        pause = min(10.0, RETRY_AFTER_S * self.failures)

        def roll_back():
            self.core.layout.roll_back(batch.slots, "failed", why)
            self.core.layout.refusal = (
                f"the last batch ({len(batch.slots)} slots PS {batch.src} -> PS {batch.dst}) "
                f"failed {self.failures} time(s) in a row: {why}; tried again in {pause:.0f} s"
            )[:400]

        self.committer.call(roll_back)
        self._retry_at = time.monotonic() + pause

    # -- recovery and telling the PS ------------------------------------------------------------

    def _recover(self) -> None:
        """A new leader: every move caught COPYING rolls back (before the commit the old owner
        is authoritative), and both sides are told."""
        caught = self.committer.read(lambda: [
            (m.slot, m.src, m.dst) for m in self.core.layout.moves.values()
            if m.phase == MovePhase.COPYING])
        if not caught:
            return
        log.warning("rolling back %d slot moves a previous master left half-way", len(caught))
        indices = sorted({i for _, s, d in caught for i in (s, d)})
        self._abort([slot for slot, _, _ in caught], indices)
        self.committer.call(lambda: self.core.layout.roll_back(
            [s for s, _, _ in caught], "recovered", "a previous master left them half-way"))

    def _abort(self, slots: list[int], indices: list[int]) -> None:
        for index in indices:
            row = self.committer.read(lambda: self._alive(index))
            if row is None:
                continue
            try:
                self._call(row["address"], ps_pb2.MoveSlotsRequest(
                    action=ps_pb2.MoveSlotsRequest.ABORT, slots=slots,
                    attempt=max(self.attempt, time.time_ns())), CALL_TIMEOUT_S)
            except grpc.RpcError as exc:  # it learns from the layout, or restarted anyway
                log.warning("PS %d did not take the roll-back: %s", index, exc.code().name)

    def _tell_layout(self, index: int) -> None:
        def what():
            row = self._alive(index)
            layout = self.core.layout
            return row, layout.version, encode_ranges(layout.ranges(index))

        row, version, owned = self.committer.read(what)
        if row is None:
            return
        try:
            self._call(row["address"], ps_pb2.MoveSlotsRequest(
                action=ps_pb2.MoveSlotsRequest.LAYOUT, layout_version=version, owned=owned),
                CALL_TIMEOUT_S)
        except grpc.RpcError as exc:  # its next ListPS brings it the layout
            log.warning("PS %d did not take layout version %d now (%s); it will from ListPS",
                        index, version, exc.code().name)

    def _call(self, address: str, request, timeout: float):
        # one channel per PS address, kept: the calls that end a hand-over are on the path of
        # the writes it pauses (a new channel costs a connection each time)
        stub = self._stubs.get(address)
        if stub is None:
            if len(self._stubs) >= MAX_CHANNELS:
                self.close_channels()
            channel = auth.channel(address, tls_ca=self.tls_ca or None,
                                   token=self.token or None)
            stub = self._stubs[address] = (channel, ps_pb2_grpc.ParameterServerStub(channel))
        try:
            return stub[1].MoveSlots(request, timeout=timeout)
        except grpc.RpcError as exc:
            if exc.code() == grpc.StatusCode.UNAVAILABLE:  # a PS gone: forget its channel
                self._stubs.pop(address, (None, None))[0].close()
            raise

    def close_channels(self) -> None:
        for channel, _ in self._stubs.values():
            channel.close()
        self._stubs.clear()
