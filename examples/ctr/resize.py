"""The demo's PS resize (issue 25): the PS set grown by an index while training runs and shrunk
back (the schedule's steps `Grow` and `Shrink`, examples/ctr/schedule.py), and what the
summary claims about it, each claim a value a test reads from `--json`.

Growing: `resize-ps N` and the new indices started (with their backups when the master asks
for them, once the new index registered); the master moves slots to them live. Shrinking:
`resize-ps N`; the master moves the slots of the indices above N to the others, and those PS
(and their backups) exit 0 on their own. The proof, from the master's events: each resize
started (`ps_resize_started`, saying from and to how many PS), slots moved (`ps_slots_moved`)
and it finished (`ps_resize_finished`), in that order; and from the processes: every PS that
left exited 0.
"""
from __future__ import annotations

import re
import subprocess
import time
from dataclasses import dataclass, field

import grpc

from examples.ctr import failover
from examples.ctr.schedule import Step, StepFailed
from examples.ctr.steps import Context, listening

STARTED = re.compile(r"(?P<before>\d+) -> (?P<after>\d+) PS")
MOVED = re.compile(r"(?P<slots>\d+) slots in (?P<seconds>[\d.]+) s")


@dataclass
class Resize:
    """One resize the demo asked for: its target, when (ms), and the PS that left it."""
    before: int
    after: int
    at_ms: int
    exit_codes: dict = field(default_factory=dict)  # PS process name -> exit code


class Grow(Step):
    """`resize-ps N` and the new indices started (their backups once they registered); the
    master moves slots to them live. Settled: the layout has N PS, no move pending, and every
    new index has its backups in sync."""

    name = "grow PS set"
    part = "resize"
    settle_timeout_s = 180.0  # a PS and its backup starting on a loaded machine, then moves

    def __init__(self, at: float | None, target: int):
        super().__init__(at)
        self.target = target
        self.resize: Resize | None = None
        self.new: list = []
        self.backups: list = []

    def describe(self) -> str:
        return f"resize-ps {self.target} (a PS and its backup start, slots move to it)"

    def done(self) -> str:
        return (f"resize-ps {self.target}; " + ", ".join(p.name for p in self.new) + " start "
                "(a backup each once registered)")

    def effect(self) -> str:
        return (f"{self.target} PS in the layout, the slots moved, every new PS with its "
                "backup in sync")

    def ready(self, ctx: Context) -> str:
        layout = ctx.layout()
        return "a master answering and no resize under way" if layout is None or \
            layout.resizing else ""

    def fire(self, ctx: Context) -> bool:
        layout = ctx.layout()
        if layout is None or layout.resizing:
            return False
        try:
            ctx.cluster.resize_ps(self.target)
        except grpc.RpcError:
            return False
        self.resize = Resize(layout.num_ps, self.target, int(time.time() * 1000))
        ctx.run.resizes.append(self.resize)
        for index in range(layout.num_ps, self.target):
            proc = ctx.cluster.launcher.ps(ctx.cluster.master_address, index=index, num_ps=0,
                                           checkpoint_dir=f"ps{index}", wait=False)
            ctx.cluster.ps.append(proc)
            self.new.append(proc)
        return True

    def check(self, ctx: Context) -> bool:
        if not all([listening(p) for p in self.new]):
            return False
        listing = ctx.ps_list()
        if listing is None:
            return False
        replicas = ctx.cluster.ps_replicas
        if replicas and not self.backups:
            listed = {i.index for i in list(listing.ps) + list(listing.joining)}
            if not all(p.index in listed for p in self.new):
                return False  # a backup joins only once its primary registered
            for proc in self.new:
                for r in range(1, replicas + 1):
                    backup = ctx.cluster.launcher.ps(
                        ctx.cluster.master_address, index=proc.index, num_ps=0,
                        checkpoint_dir=f"ps{proc.index}-backup{r}", wait=False)
                    ctx.cluster.backups.append(backup)
                    self.backups.append(backup)
        if not all([listening(p) for p in self.backups]):
            return False
        if listing.num_ps != self.target or listing.target_num_ps != self.target:
            return False
        layout = ctx.layout()
        if layout is None or layout.resizing:
            return False
        infos = {i.index: i for i in listing.ps}
        return all(p.index in infos and sum(b.state == failover.IN_SYNC
                                            for b in infos[p.index].backups) >= replicas
                   for p in self.new)


class Shrink(Step):
    """`resize-ps N`: the slots of the indices above N move back; those PS and their
    backups exit 0 on their own. Settled: the layout has N PS, no move pending."""

    name = "shrink PS set"
    part = "resize"
    settle_timeout_s = 180.0

    def __init__(self, at: float | None, target: int):
        super().__init__(at)
        self.target = target
        self.resize: Resize | None = None

    def describe(self) -> str:
        return f"resize-ps {self.target} (slots move back, the PS above exit 0)"

    def done(self) -> str:
        return f"resize-ps {self.target}"

    def effect(self) -> str:
        return f"{self.target} PS in the layout, the slots moved back"

    def ready(self, ctx: Context) -> str:
        layout = ctx.layout()
        if layout is None or layout.resizing:
            return "a master answering and no resize under way"
        if layout.num_ps <= self.target:
            raise StepFailed(f"the layout has {layout.num_ps} PS: nothing to shrink to "
                             f"{self.target}")
        return ""

    def fire(self, ctx: Context) -> bool:
        layout = ctx.layout()
        if layout is None or layout.resizing:
            return False
        try:
            ctx.cluster.resize_ps(self.target)
        except grpc.RpcError:
            return False
        self.resize = Resize(layout.num_ps, self.target, int(time.time() * 1000))
        ctx.run.resizes.append(self.resize)
        return True

    def check(self, ctx: Context) -> bool:
        # the PS that left exit on their own a little later (after a final checkpoint);
        # their exit codes are read once training ended (resize.settle)
        layout = ctx.layout()
        return layout is not None and not layout.resizing and layout.num_ps == self.target


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
