"""Honest accounting of a PS that came back from a checkpoint without a backup.

Such a PS lost every update applied after its checkpoint's snapshot was taken (`taken_ms`)
and before it started again (`started_ms`): nothing could be applied to it in between. It says
so when it registers (`RegisterPSRequest.restored`); `record` writes a `ps_restored` event
naming that window, in the same commit as the registration. A PS with no checkpoint to restore
(killed before its first one) says `empty`: where the layout says its index held state
(`held_state`), the window is everything before its start. `updates_lost` derives, from those
events and the durable lease history, the records whose updates are gone: **every record
acknowledged on a lease held during a lost window** (DONE: the whole lease; taken back or still
held: its acknowledged part). That errs toward lost, never toward trained: a lease trained
partly before the snapshot, or partly after the restart, counts whole. Windows of one PS are
merged and a record is counted once per PS, and once in the total however many PS lost it.
"""
from __future__ import annotations

import json

from rpckit.errors import invalid, quote

from ..limits import MAX_ID, check_int
from ..persistence.journal import Journal

KIND = "ps_restored"
MAX_MARKS = 256  # applied marks kept in the event (the PS sends at most this many)
CLOCK_SKEW_MS = 86_400_000  # a PS's clock may run this far ahead of the master's
MAX_NAMES = 64  # tensor and table names kept in the event (the PS sends at most 256 each)


def held_state(registry, index: int) -> bool:
    """Whether the master's layout says PS `index` held state before this registration: the
    index was registered before (a process served it) and owns slots. A PS that starts empty
    there lost everything it held; one that starts empty anywhere else (a first start, an
    index a grow adds before any slot moved to it) lost nothing."""
    return index in registry.rows and bool(registry.layout.ranges(index))


def record(journal: Journal, index: int, restored) -> None:
    """Journal the `ps_restored` event of PS `index` (a RestoredCheckpoint message). An empty
    start's window begins at 0: everything acknowledged before it is counted (it errs toward
    lost: the index may have held part of it only)."""
    check(restored, journal.now_ms())
    journal.event(KIND, cause="empty" if restored.empty else "checkpoint",
                  detail=json.dumps(dict(
                      index=index, from_ms=restored.taken_ms, to_ms=restored.started_ms,
                      checkpoint=restored.number, empty=bool(restored.empty),
                      lost_s=round((restored.started_ms - restored.taken_ms) / 1000, 3),
                      applied={k[:64]: int(v) for k, v in sorted(restored.applied.items())},
                      tensors=[n[:128] for n in restored.tensors[:MAX_NAMES]],
                      tables=[n[:128] for n in restored.tables[:MAX_NAMES]],
                  ), sort_keys=True))


def check(restored, now_ms: int) -> None:
    """Refuse a window that cannot be recorded or lies in the future (past the master's clock
    `now_ms` by more than CLOCK_SKEW_MS); called before the registration changes anything, so
    a refused one leaves no trace."""
    if not 0 <= restored.taken_ms <= restored.started_ms:
        raise invalid(f"restored checkpoint window [{restored.taken_ms}, "
                      f"{restored.started_ms}] ms is not ordered (taken_ms <= started_ms)")
    if restored.started_ms > now_ms + CLOCK_SKEW_MS:
        raise invalid(f"restored checkpoint window ends at {restored.started_ms} ms, more than "
                      f"a day after the master's clock ({now_ms} ms)")
    check_int("restored checkpoint number", restored.number, 0, MAX_ID)
    if len(restored.applied) > MAX_MARKS:
        raise invalid(f"{len(restored.applied)} applied marks; send at most {MAX_MARKS}")
    negative = [k for k, v in restored.applied.items() if v < 0]
    if negative:
        raise invalid(f"applied mark of client {quote(negative[0])} is negative")
    for what in ("tensors", "tables"):
        if len(getattr(restored, what)) > MAX_MARKS:
            raise invalid(f"{len(getattr(restored, what))} restored {what}; send at most "
                          f"{MAX_MARKS}")
    if restored.empty and restored.taken_ms:
        raise invalid("an empty start restored no checkpoint: its taken_ms is 0")


def _spans(events: list[dict]) -> dict[int, list[tuple[int, int]]]:
    raw: dict[int, list[tuple[int, int]]] = {}
    for row in events:
        try:
            d = json.loads(row["detail"])
            raw.setdefault(int(d["index"]), []).append((int(d["from_ms"]), int(d["to_ms"])))
        except (ValueError, KeyError, TypeError):
            continue  # a detail this version does not read
    return raw


def windows(events: list[dict]) -> dict[int, list[tuple[int, int]]]:
    """Per PS index, its lost windows (from the ps_restored events), merged and sorted."""
    raw = _spans(events)
    merged = {}
    for index, spans in raw.items():
        out: list[list[int]] = []
        for start, end in sorted(spans):
            if out and start <= out[-1][1]:
                out[-1][1] = max(out[-1][1], end)
            else:
                out.append([start, end])
        merged[index] = [(a, b) for a, b in out]
    return merged


def updates_lost(events: list[dict], leases_between) -> tuple[int, list[dict]]:
    """(records lost on any PS, per PS index {index, records, restores, from_ms, to_ms}).
    `leases_between(from_ms, to_ms)` answers {lease_id: acknowledged records} of the leases
    held during that window."""
    restores = {index: len(spans) for index, spans in _spans(events).items()}
    everywhere: dict[int, int] = {}
    per_ps = []
    for index, spans in sorted(windows(events).items()):
        lost: dict[int, int] = {}
        for start, end in spans:
            lost.update(leases_between(start, end))
        everywhere.update(lost)
        per_ps.append(dict(index=index, records=sum(lost.values()),
                           restores=restores.get(index, 0),
                           from_ms=spans[-1][0], to_ms=spans[-1][1]))
    return sum(everywhere.values()), per_ps
