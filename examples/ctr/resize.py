"""The demo's PS resize (issue 25): the PS set grown by an index while training runs and shrunk
back, and what the summary claims about it, each claim a value a test reads from `--json`.

Growing: `resize-ps N` and the new indices started (with their backups when the master asks
for them); the master moves slots to them live. Shrinking: `resize-ps N`; the master moves the
slots of the indices above N to the others, and those PS (and their backups) exit 0 on their
own. The proof, from the master's events: each resize started (`ps_resize_started`, saying
from and to how many PS), slots moved (`ps_slots_moved`) and it finished
(`ps_resize_finished`), in that order; and from the processes: every PS that left exited 0.
"""
from __future__ import annotations

import re
import subprocess
import time
from dataclasses import dataclass, field

STARTED = re.compile(r"(?P<before>\d+) -> (?P<after>\d+) PS")
MOVED = re.compile(r"(?P<slots>\d+) slots in (?P<seconds>[\d.]+) s")


@dataclass
class Resize:
    """One resize the demo asked for: its target, when (ms), and the PS that left it."""
    before: int
    after: int
    at_ms: int
    exit_codes: dict = field(default_factory=dict)  # PS process name -> exit code


def grow(cluster, target: int) -> Resize:
    before = len(cluster.ps)
    resize = Resize(before, target, int(time.time() * 1000))
    cluster.resize_ps(target)
    for index in range(before, target):
        cluster.add_ps(index)
    return resize


def shrink(cluster, target: int) -> Resize:
    resize = Resize(len(cluster.ps), target, int(time.time() * 1000))
    cluster.resize_ps(target)
    return resize


def settle(cluster, resizes: list[Resize], timeout: float = 120.0) -> None:
    """Once training is over: wait until the layout reached the last target (the master
    says it is not resizing), then for the PS that a shrink took out to exit, recording their
    exit codes (None: still running after `timeout`)."""
    if not resizes:
        return
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status = cluster.status()
        if status is not None and not status.layout.resizing and \
                status.layout.num_ps == resizes[-1].after:
            break
        time.sleep(0.2)
    for resize in resizes:
        if resize.after >= resize.before:
            continue
        for proc in cluster.ps + cluster.backups:
            if proc.index >= resize.after and proc.starts and proc.name not in \
                    resize.exit_codes:
                try:
                    resize.exit_codes[proc.name] = proc.wait(max(0.1, deadline -
                                                                 time.monotonic()))
                except subprocess.TimeoutExpired:  # still running: the claim fails
                    resize.exit_codes[proc.name] = None


def claims(resizes: list[Resize], events, final_num_ps: int | None, skipped: list[str],
           updates_lost: int | None) -> dict:
    """What the resize part claims: per resize, its events in order (started with the sizes
    asked, slots moved, finished) and the exit codes of the PS that left."""
    seen = []  # per ps_resize_started: {before, after, slots, batches, seconds, finished}
    for e in sorted(events, key=lambda e: e.seq):
        if e.kind == "ps_resize_started":
            m = STARTED.search(e.detail)
            seen.append({"before": int(m["before"]) if m else None,
                         "after": int(m["after"]) if m else None, "started_ms": e.time_ms,
                         "slots_moved": 0, "batches": 0, "finished_s": None})
        elif e.kind == "ps_slots_moved" and seen:
            m = MOVED.search(e.detail)
            seen[-1]["slots_moved"] += int(m["slots"]) if m else 0
            seen[-1]["batches"] += 1
        elif e.kind == "ps_resize_finished" and seen and seen[-1]["finished_s"] is None:
            seen[-1]["finished_s"] = round((e.time_ms - seen[-1]["started_ms"]) / 1000, 3)
    asked = [(r.before, r.after) for r in resizes]
    done = [(s["before"], s["after"]) for s in seen]
    return {
        "asked": asked, "seen": seen, "skipped": skipped,
        "every_resize_started_moved_and_finished": bool(asked) and done == asked and all(
            s["slots_moved"] > 0 and s["finished_s"] is not None for s in seen),
        "left": {n: c for r in resizes for n, c in r.exit_codes.items()},
        "every_ps_that_left_exited_0": all(c == 0 for r in resizes
                                           for c in r.exit_codes.values())
        and any(r.exit_codes for r in resizes if r.after < r.before),
        "final_num_ps": final_num_ps,
        "back_to_the_first_size": bool(asked) and final_num_ps == asked[0][0],
        "updates_lost": updates_lost,
    }


def ok(c: dict) -> bool:
    return bool(c["every_resize_started_moved_and_finished"]
                and c["every_ps_that_left_exited_0"] and c["back_to_the_first_size"]
                and not c["skipped"] and c["updates_lost"] == 0)


def describe(c: dict) -> list[str]:
    lines = ["  PS resize while training (resize-ps, slots moved live):"]
    for s in c["seen"]:
        finished = f"{s['finished_s']:.2f} s" if s["finished_s"] is not None else "never"
        lines.append(f"    {s['before']} -> {s['after']} PS: ps_resize_started, "
                     f"{s['slots_moved']} slots moved in {s['batches']} batches "
                     f"(ps_slots_moved), ps_resize_finished {finished} after the start")
    lines += [f"    resize skipped: {why}" for why in c["skipped"]]
    lines.append(f"    asked {c['asked']}, seen {[(s['before'], s['after']) for s in c['seen']]}"
                 f": each started, moved and finished: "
                 f"{c['every_resize_started_moved_and_finished']}")
    lines.append(f"    PS that left exited 0: {c['every_ps_that_left_exited_0']} ({c['left']}); "
                 f"{c['final_num_ps']} PS at the end; updates lost {c['updates_lost']}")
    return lines
