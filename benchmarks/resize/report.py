"""bench_resize's numbers, from the driver's phases and the worker's step log: how long each
resize took, records/s during it against the steps before it, the longest step wait during
it, and the table people read."""
from __future__ import annotations

import bisect

from .run import Phase

TARGET_S, TARGET_RATIO, TARGET_WAIT_S = 10.0, 0.5, 1.0


def measure(phase: Phase, log: dict, steps_before: int) -> dict:
    """The phase's numbers. `log`: the worker's result (`end` unix time each step was
    answered, `wait` how long its call took, `push` whether it pushed; one batch each)."""
    end, wait, batch = log["end"], log["wait"], log["batch"]
    first = bisect.bisect_right(end, phase.started)
    last = bisect.bisect_right(end, phase.finished)
    lo = max(0, first - steps_before)
    before = (first - 1 - lo) * batch / (end[first - 1] - end[lo]) if first - 1 > lo else 0.0
    span = phase.finished - phase.started
    during = (last - first) * batch / span if span > 0 else 0.0
    # every step whose call overlapped the phase, the one in flight at its start included
    overlapping = [w for e, w in zip(end[first:], wait[first:]) if e - w < phase.finished]
    longest = max(overlapping, default=0.0)
    if phase.way != "live":  # the worker was paused: its wait is the whole pause
        longest = span
    out = {
        "way": phase.way, "resize": f"{phase.before} -> {phase.after}",
        "seconds": round(span, 3),
        "records_per_s_before": round(before, 1), "records_per_s_during": round(during, 1),
        "ratio": round(during / before, 3) if before else None,
        "longest_wait_s": round(longest, 3), "steps_during": last - first,
        "slots_moved": phase.slots_moved, "move_batches": phase.move_batches,
        "copy_seconds": round(phase.move_seconds, 3), "exit_codes": phase.exit_codes,
        "rows_after": phase.rows_after,
        "events": [(k, round(t - phase.started, 3), d) for k, t, d in phase.events],
    }
    joined = [t for k, t, _ in phase.events if k == "ps_registered"]
    if phase.way == "live" and joined:  # the new PS's start-up, then the moves alone
        out["joined_s"] = round(max(joined) - phase.started, 3)
        out["moving_s"] = round(phase.finished - max(joined), 3)
        # records/s once they are up: what the moves cost, without their start-up's CPU
        moving = last - bisect.bisect_right(end, max(joined))
        out["ratio_moving"] = round(moving * batch / out["moving_s"] / before, 3) \
            if before and out["moving_s"] > 0 else None
    if phase.marks:
        out["steps"] = {k: round(t - phase.started, 3) for k, t in phase.marks.items()}
    return out


def met(row: dict) -> dict:
    """Which targets a live row meets (docs/benchmarks.md)."""
    return {"seconds": row["seconds"] <= TARGET_S,
            "ratio": row["ratio"] is not None and row["ratio"] >= TARGET_RATIO,
            "longest_wait": row["longest_wait_s"] <= TARGET_WAIT_S}


def table(rows: list[dict], rows_expected: int) -> list[str]:
    lines = [f"{'way':<15} {'resize':<7} {'done in':>8} {'slots':>6} {'copy s':>7} "
             f"{'rec/s before':>12} {'rec/s during':>12} {'ratio':>6} {'longest wait':>12} "
             f"{'rows after':>11} PS exits"]
    for r in rows:
        ratio = f"{r['ratio']:.2f}" if r["ratio"] is not None else "-"
        lines.append(
            f"{r['way']:<15} {r['resize']:<7} {r['seconds']:>7.2f}s {r['slots_moved']:>6} "
            f"{r['copy_seconds']:>7.2f} {r['records_per_s_before']:>12.0f} "
            f"{r['records_per_s_during']:>12.0f} {ratio:>6} {r['longest_wait_s']:>11.3f}s "
            f"{r['rows_after']:>11} {r['exit_codes'] or '-'}")
    lines.append(f"(targets, live: done in <= {TARGET_S:g} s, ratio >= {TARGET_RATIO}, "
                 f"longest wait <= {TARGET_WAIT_S:g} s; rows after = {rows_expected})")
    for r in rows:
        if "joined_s" in r:
            lines.append(f"  {r['way']} {r['resize']}: the new PS registered "
                         f"{r['joined_s']:.2f} s after resize-ps (their start-up), the moves "
                         f"took {r['moving_s']:.2f} s from there, at {r['ratio_moving']}x the "
                         "records/s before")
        if "steps" in r:
            steps = ", ".join(f"{k} {v:.2f}" for k, v in r["steps"].items())
            lines.append(f"  {r['way']} {r['resize']}, seconds after the pause: {steps}")
    return lines


def diagnosis(d: dict) -> str:
    """The worker's diagnosis of an inexact run in a few lines: the rows' errors in pushes
    (negative: lost, positive: applied twice) by slot, the counters by steps short or over."""
    rows = d.get("rows", [])
    lost = sum(-r["error"] for r in rows if r["error"] < 0)
    doubled = sum(r["error"] for r in rows if r["error"] > 0)
    slots = sorted({r["slot"] for r in rows})
    counters = {n: c["steps"] - d["answered"] if c["steps"] is not None else None
                for n, c in sorted(d.get("counters", {}).items())}
    wrong = {n: e for n, e in counters.items() if e != 0}
    return (f"  verify rows: {len(rows)} wrong, {lost:g} pushes lost, {doubled:g} applied twice, "
            f"slots {slots}\n  counters off by (steps): {wrong or 'none'}")
