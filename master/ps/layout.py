"""The job's PS layout: which index owns each hash slot, a resize's target and its slot moves.

Plain Python on the journal, like the registry (master/ps/registry.py). The slot map itself is
a `pswire.slots.Layout` value (the one every process computes placements with); this module
keeps it durable and decides what changes it. Durable in three tables
(master/persistence/schema.py): `ps_layout` (one row: `--ps-slots`, the version, the size,
the target, the current resize's counts), `ps_slot_ranges` (each index's ranges as text) and
`ps_slot_moves` (one row per pending slot move: slot, from, to, phase). Every change goes into
the calling call's batch, so it is committed before that call is answered.

What it decides:

- `fit(index, asked)`: whether a registering PS belongs to the layout, and the PS count it
  runs with (`pswire.slots.size_for`): an index of the layout, or one a grow adds; a
  `--num-ps` that is neither the layout's size nor (for an added index) the target is
  refused FAILED_PRECONDITION / LAYOUT_MISMATCH with the fix (`elastic-ctl resize-ps N`).
  No registration ever replaces the layout.
- `create(num_ps)`: the first layout, from the first PS's count (or from resize-ps).
- `resize(target)`: records the target and plans the slot moves (`plan_resize`: only surplus
  slots move), replacing a plan none of whose moves has started.

What the live move calls (master/ps/mover.py): `set_phase(slots, phase)` walks a pending
move PLANNED -> COPYING, `roll_back(slots)` returns moves that have not been committed to
PLANNED (a PS or the master failed before the commit: the old owner is still authoritative;
`ps_slots_rolled_back`), and `moved(slots,
seconds)` hands slots over: the layout takes the new owners in one new version, the move rows
go, `ps_slots_moved` is recorded, and `ps_resize_finished` once the layout reached its target.
"""
from __future__ import annotations

from dataclasses import dataclass

from pswire.slots import (Layout, LayoutMismatch, Move, SlotRange, decode_ranges,
                          encode_ranges, plan_resize, size_for)
from rpckit.errors import Reason, invalid, precondition
from ..limits import MAX_NUM_PS
from ..persistence.journal import Journal
from ..states import EventKind, MovePhase

META_KEY = 1  # the one ps_layout row


class SlotsMismatch(ValueError):
    """The master's --ps-slots differs from the count the job's layout was made with."""


@dataclass
class PendingMove:
    """A slot move the current resize planned and has not finished."""

    slot: int
    src: int
    dst: int
    phase: MovePhase
    planned_ms: int
    changed_ms: int

    def row(self) -> dict:
        return dict(slot=self.slot, src=self.src, dst=self.dst, phase=str(self.phase),
                    planned_ms=self.planned_ms, changed_ms=self.changed_ms)


@dataclass(frozen=True)
class Resized:
    """resize's answer."""

    changed: bool  # False: the target was already this
    version: int
    num_ps: int
    target: int
    moves_planned: int
    moves_pending: int


class PSLayout:
    def __init__(self, journal: Journal, ps_slots: int, meta: list[dict] = (),
                 ranges: list[dict] = (), moves: list[dict] = ()):
        """Rebuilt from the stored rows; raises SlotsMismatch when the job's layout was made
        with another --ps-slots, ValueError when the stored ranges are not an exact cover."""
        self.journal = journal
        self.ps_slots = ps_slots
        self.layout: Layout | None = None
        self.target = 0
        self.moves_planned = 0
        self.resize_started_ms = 0
        self.moves: dict[int, PendingMove] = {}
        self._stored: dict[int, str] = {}  # ps_slot_ranges as committed (or pending)
        # the last batch's failure (a PS refusing, not answering), until a batch commits: in
        # memory (the event ps_slots_rolled_back has it durably)
        self.refusal = ""
        if not meta:
            return
        (row,) = meta
        if row["ps_slots"] != ps_slots:
            raise SlotsMismatch(
                f"--ps-slots {ps_slots} but this job's PS layout (version {row['version']}) "
                f"has {row['ps_slots']} slots: the slot count is fixed for a job, since rows "
                f"and tensors are placed by slot. Start the master with --ps-slots "
                f"{row['ps_slots']}, or give a new job a new --db")
        self._stored = {r["idx"]: r["ranges"] for r in ranges}
        self.layout = Layout.from_ranges(
            {i: decode_ranges(text, ps_slots) for i, text in self._stored.items()},
            ps_slots, row["version"])
        self.target = row["target_num_ps"]
        self.moves_planned = row["moves_planned"]
        self.resize_started_ms = row["resize_started_ms"]
        for m in moves:
            move = PendingMove(m["slot"], m["src"], m["dst"], MovePhase(m["phase"]),
                               m["planned_ms"], m["changed_ms"])
            if self.layout.owner(move.slot) != move.src:
                raise ValueError(f"stored slot move {move.slot}: PS {move.src} -> {move.dst}, "
                                 f"but PS {self.layout.owner(move.slot)} owns the slot")
            self.moves[move.slot] = move

    # ---- reads ------------------------------------------------------------------------------

    @property
    def version(self) -> int:
        return self.layout.version if self.layout is not None else 0

    @property
    def num_ps(self) -> int:
        return self.layout.num_ps if self.layout is not None else 0

    @property
    def resizing(self) -> bool:
        return self.layout is not None and (self.target != self.num_ps or bool(self.moves))

    def ranges(self, index: int) -> list[SlotRange]:
        return self.layout.ranges(index) if self.layout is not None else []

    def member(self, index: int) -> bool:
        """`index` is one of the layout's (ListPS `ps`), not only a grow's (`joining`)."""
        return index < self.num_ps

    def phases(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for move in self.moves.values():
            counts[str(move.phase)] = counts.get(str(move.phase), 0) + 1
        return counts

    def waits(self, state_of) -> list[str]:
        """Why planned moves do not go, one line per (from, to) pair held up (at most 16):
        `state_of(index)` says what keeps a PS index from a move ('' when it can take part),
        and the last batch's failure follows."""
        pairs: dict[tuple[int, int], int] = {}
        for m in self.moves.values():
            if m.phase == MovePhase.PLANNED:
                pairs[(m.src, m.dst)] = pairs.get((m.src, m.dst), 0) + 1
        out = []
        for (src, dst), n in sorted(pairs.items()):
            for index in (src, dst):
                state = state_of(index)
                if state:
                    out.append(f"{n} slot moves PS {src} -> PS {dst} wait for PS {index}: "
                               f"{state}")
                    break
        if self.refusal and pairs:
            out.append(self.refusal)
        return out[:16]

    def index_state(self, index: int, row: dict | None, lost: bool) -> str:
        """What keeps PS `index` (its registry row, whether it is lost) from a move: ''
        when nothing; else the state and the fix."""
        start = (f"start elastic-ps --index {index} (--num-ps left out, or the count it was "
                 "started with)")
        if row is None:
            return f"not registered: {start}"
        if lost:
            return f"down (lost): {start}"
        if not row.get("data_address"):
            return "registered without a data address"
        return ""

    def fit(self, index: int, asked: int) -> int:
        """The PS count PS `index` started with `--num-ps asked` (0: left out) runs with;
        refused (LAYOUT_MISMATCH) when it does not fit. Changes nothing."""
        try:
            size = size_for(index, asked, self.num_ps, self.target, self.resizing)
        except LayoutMismatch as exc:
            raise precondition(Reason.LAYOUT_MISMATCH, str(exc)) from None
        if self.layout is None and size > self.ps_slots:
            raise precondition(
                Reason.LAYOUT_MISMATCH,
                f"--num-ps {size} is more than the job's {self.ps_slots} slots (--ps-slots on "
                "the master): every PS must own a slot. Start the master with more --ps-slots")
        return size

    # ---- changes ----------------------------------------------------------------------------

    def create(self, num_ps: int) -> Layout:
        """The job's first layout: `num_ps` contiguous blocks, version 1."""
        assert self.layout is None, "a layout is only ever created once"
        self.layout = Layout.initial(num_ps, self.ps_slots)
        self.target = num_ps
        self.journal.batch.insert("ps_layout", META_KEY, self._meta())
        self._save_ranges()
        return self.layout

    def resize(self, target: int) -> Resized:
        """Set the target PS count and plan the slot moves (stored, phase PLANNED)."""
        high = min(MAX_NUM_PS, self.ps_slots)
        if not 1 <= target <= high:
            raise invalid(f"resize-ps {target}: the PS count must be in 1..{high} (at most "
                          f"{MAX_NUM_PS}, and at most the job's {self.ps_slots} slots)")
        if self.layout is None:  # before any PS: the layout is made at this size
            self.create(target)
            self._event(EventKind.PS_RESIZE_STARTED, "no_layout",
                        f"layout version 1 made: {self.ps_slots} slots over {target} PS")
            self._event(EventKind.PS_RESIZE_FINISHED, "no_layout", f"{target} PS")
            return self._resized(True)
        if target == self.target:
            return self._resized(False)
        started = [m for m in self.moves.values() if m.phase != MovePhase.PLANNED]
        if started:
            raise precondition(
                Reason.RESIZE_IN_PROGRESS,
                f"the resize to {self.target} PS is handing {len(started)} slot(s) over; run "
                f"`elastic-ctl resize-ps {target}` again once they moved (elastic-ctl status "
                "shows the moves)")
        replaced, before = self.target, self.resizing
        for slot in self.moves:
            self.journal.batch.delete("ps_slot_moves", slot)
        self.moves.clear()
        plan = plan_resize(self.layout, target)
        now = self.journal.now_ms()
        for m in plan:
            move = PendingMove(m.slot, m.src, m.dst, MovePhase.PLANNED, now, now)
            self.moves[m.slot] = move
            self.journal.batch.insert("ps_slot_moves", m.slot, move.row())
        self.target = target
        self.moves_planned = len(plan)
        self.resize_started_ms = now
        kind = "grow" if target > self.num_ps else "shrink" if target < self.num_ps else "back"
        self._event(EventKind.PS_RESIZE_STARTED, kind,
                    f"{self.num_ps} -> {target} PS: {len(plan)} of {self.ps_slots} slots to "
                    f"move; layout version {self.version}"
                    + (f"; replaces the resize to {replaced}" if before else ""))
        self._finish_if_done("cancelled" if before else "nothing_to_move")
        self._save_meta()
        return self._resized(True)

    def set_phase(self, slots: list[int], phase: MovePhase) -> None:
        """Hook for the live move: pending moves of `slots` enter `phase` (forward only)."""
        order = list(MovePhase)
        now = self.journal.now_ms()
        for slot in slots:
            move = self.moves[slot]
            if order.index(phase) < order.index(move.phase):
                raise ValueError(f"slot {slot} is in {move.phase}: it cannot go back to "
                                 f"{phase} (roll_back does that before a hand-over)")
            move.phase, move.changed_ms = phase, now
            self.journal.batch.update("ps_slot_moves", slot,
                                      dict(phase=str(phase), changed_ms=now))

    def roll_back(self, slots: list[int] | None = None, cause: str = "failed",
                  why: str = "") -> list[int]:
        """Moves of `slots` (default: all) that have not reached HANDOVER go back to PLANNED
        (`ps_slots_rolled_back` says why); returns the slots rolled back."""
        back = [s for s in (self.moves if slots is None else slots)
                if s in self.moves and self.moves[s].phase == MovePhase.COPYING]
        if back:
            pairs = sorted({(self.moves[s].src, self.moves[s].dst) for s in back})
            self._event(EventKind.PS_SLOTS_ROLLED_BACK, cause,
                        f"{len(back)} slots (" + ", ".join(f"{a}->{b}" for a, b in pairs[:8])
                        + f") back to planned: {why}"[:400])
        now = self.journal.now_ms()
        for slot in back:
            self.moves[slot].phase, self.moves[slot].changed_ms = MovePhase.PLANNED, now
            self.journal.batch.update("ps_slot_moves", slot,
                                      dict(phase=str(MovePhase.PLANNED), changed_ms=now))
        return back

    def moved(self, slots: list[int], seconds: float = 0.0) -> Layout:
        """Hook for the live move: `slots` were handed over to their new owners. One new
        layout version for all of them; `ps_resize_finished` when the target is reached."""
        missing = [s for s in slots if s not in self.moves]
        if missing or not slots:
            raise ValueError(f"no pending move for slots {missing[:8]}" if missing
                             else "no slots given")
        moves = [self.moves.pop(s) for s in slots]
        self.refusal = ""
        self.layout = self.layout.with_moves([Move(m.slot, m.src, m.dst) for m in moves])
        for m in moves:
            self.journal.batch.delete("ps_slot_moves", m.slot)
        self._save_ranges()
        pairs = sorted({(m.src, m.dst) for m in moves})
        self._event(EventKind.PS_SLOTS_MOVED, "handover",
                    f"{len(moves)} slots in {seconds:.3f} s ("
                    + ", ".join(f"{a}->{b}" for a, b in pairs[:8])
                    + f"); layout version {self.version}; {len(self.moves)} moves pending")
        self._finish_if_done("done")
        self._save_meta()
        return self.layout

    # ---- helpers ----------------------------------------------------------------------------

    def _finish_if_done(self, cause: str) -> None:
        if self.moves or self.num_ps != self.target or not self.resize_started_ms:
            return
        took = (self.journal.now_ms() - self.resize_started_ms) / 1000
        self._event(EventKind.PS_RESIZE_FINISHED, cause,
                    f"{self.num_ps} PS, layout version {self.version}, {self.moves_planned} "
                    f"slots moved in {took:.1f} s")
        self.resize_started_ms = 0

    def _resized(self, changed: bool) -> Resized:
        return Resized(changed, self.version, self.num_ps, self.target, self.moves_planned,
                       len(self.moves))

    def _meta(self) -> dict:
        return dict(id=META_KEY, ps_slots=self.ps_slots, version=self.version,
                    num_ps=self.num_ps, target_num_ps=self.target,
                    moves_planned=self.moves_planned, resize_started_ms=self.resize_started_ms,
                    changed_ms=self.journal.now_ms())

    def _save_meta(self) -> None:
        self.journal.batch.update("ps_layout", META_KEY, self._meta())

    def _save_ranges(self) -> None:
        """Write the ranges of every index whose ranges changed (and the meta row)."""
        now = {i: encode_ranges(self.layout.ranges(i)) for i in range(self.num_ps)}
        for index in sorted(set(now) | set(self._stored)):
            text = now.get(index)
            if text == self._stored.get(index):
                continue
            if text is None:
                self.journal.batch.delete("ps_slot_ranges", index)
            elif index in self._stored:
                self.journal.batch.update("ps_slot_ranges", index, dict(ranges=text))
            else:
                self.journal.batch.insert("ps_slot_ranges", index, dict(idx=index, ranges=text))
        self._stored = now
        self._save_meta()

    def _event(self, kind: EventKind, cause: str, detail: str) -> None:
        self.journal.event(kind, cause=cause, detail=detail)


def resize_waits(layout: PSLayout, rows: dict, lost) -> list[str]:
    """Why the resize's planned moves do not go (status, the mover's events): `rows` the
    registry's primaries by index, `lost` the indices lost."""
    if not layout.resizing:
        return []
    return layout.waits(lambda index: layout.index_state(index, rows.get(index), index in lost))
