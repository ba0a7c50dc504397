"""The demo's plan: its schedule without the parts turned off, and the job scaled to the
machine up front (never a step silently dropped)."""
from __future__ import annotations

from examples.ctr.demo import DRIVER_GIB, SERVERS_GIB, WORKER_GIB, fit, steps_for


def need(workers: int) -> float:
    return workers * WORKER_GIB + SERVERS_GIB + DRIVER_GIB


def test_the_full_schedule_in_order_and_each_part_can_be_turned_off():
    names = [s.name for s in steps_for(4, churn=True, ha=True, grow=True)]
    assert names == ["scale-up", "grow PS set", "SIGKILL worker", "SIGKILL master leader",
                     "SIGTERM worker", "SIGKILL PS primary", "old primary rejoins",
                     "shrink PS set"]
    assert steps_for(4, True, True, True)[0].count == 3
    assert [s.part for s in steps_for(4, False, True, False)] == ["ha"] * 3
    assert [s.part for s in steps_for(3, True, False, False)] == ["churn"] * 3
    assert steps_for(3, False, False, False) == []


def test_a_machine_that_holds_the_schedule_runs_it_unscaled():
    assert fit(4, 2, need(4) + 0.1) == (4, [])
    assert fit(4, 2, None) == (4, [])  # memory unknown: as asked


def test_a_small_machine_is_told_and_the_job_scaled_to_three_workers():
    workers, notes = fit(4, 1, need(4) + 1)
    assert workers == 3 and "1 CPU" in notes[0]
    workers, notes = fit(4, 2, need(3) + 0.01)
    assert workers == 3 and "scaled to 3 workers" in notes[0]


def test_a_machine_too_small_for_three_workers_gets_no_schedule():
    workers, notes = fit(4, 2, need(3) - 0.1)
    assert workers == 0 and "needs about" in notes[0]
