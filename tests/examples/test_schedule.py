"""The demo's schedule (examples/ctr/schedule.py): steps fire in order by fraction once ready,
training is held where a step has not fired or the last has not settled, and a step that
cannot happen fails with why (pure: a fake clock, steps driven by flags)."""
from __future__ import annotations

import pytest

from examples.ctr.schedule import Schedule, State, Step, StepFailed


class Clock:
    def __init__(self):
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


class Flag(Step):
    """Ready and settled when the test says so."""

    def __init__(self, name: str, at: float | None, ready: bool = True, seen: bool = False):
        super().__init__(at)
        self.name, self.is_ready, self.seen, self.fired = name, ready, seen, 0

    def ready(self, ctx) -> str:
        return "" if self.is_ready else "a flag"

    def fire(self, ctx) -> bool:
        self.fired += 1
        return True

    def check(self, ctx) -> bool:
        return self.seen


def test_steps_fire_in_order_by_fraction_and_the_next_waits_for_the_last_to_settle():
    clock = Clock()
    a, b = Flag("a", 0.1), Flag("b", 0.2)
    schedule = Schedule([a, b], end=0.9, clock=clock)
    schedule.poll(0.05, None)
    assert a.state == State.PENDING and schedule.hold_at() == 0.1
    clock.t += 1
    said = schedule.poll(0.1, None)
    assert a.state == State.FIRED and a.fired_fraction == 0.1 and a.fired_s == 1.0
    assert said == ["a at 10% of the records: a"]
    assert schedule.hold_at() == 0.2 and schedule.holding(0.2) and not schedule.holding(0.19)
    schedule.poll(0.5, None)  # past b's fraction, but a has not settled: b waits
    assert b.state == State.PENDING and b.fired == 0
    a.seen = True
    clock.t += 2
    schedule.poll(0.5, None)
    assert a.state == State.SETTLED and a.settled_s == 3.0
    assert b.state == State.FIRED and b.fired_fraction == 0.5
    assert schedule.hold_at() == 0.9  # the end, until the last step settled
    b.seen = True
    schedule.poll(0.6, None)
    assert schedule.ok and schedule.hold_at() is None and not schedule.holding(0.99)


def test_a_step_without_a_fraction_fires_as_soon_as_the_one_before_settled():
    first, after = Flag("kill", 0.5, seen=True), Flag("rejoin", None)
    schedule = Schedule([first, after, Flag("shrink", 0.7)], clock=Clock())
    schedule.poll(0.5, None)
    assert first.state == State.SETTLED and after.state == State.FIRED
    assert after.fired_fraction == 0.5 and schedule.hold_at() == 0.7


def test_training_is_held_at_a_step_that_is_due_but_not_ready():
    clock = Clock()
    step = Flag("ps", 0.4, ready=False)
    schedule = Schedule([step], clock=clock)
    schedule.poll(0.45, None)
    assert step.state == State.PENDING and step.waiting == "a flag" and step.due_s == 0.0
    assert schedule.holding(0.45)
    step.is_ready = True
    schedule.poll(0.45, None)
    assert step.fired == 1 and not schedule.holding(0.45)


def test_a_step_that_never_gets_ready_or_never_settles_fails_and_so_does_the_next():
    clock = Clock()
    stuck, never, later = Flag("a", 0.1, ready=False), Flag("b", 0.2), Flag("c", 0.3)
    schedule = Schedule([stuck, never, later], clock=clock)
    schedule.poll(0.1, None)
    clock.t += stuck.ready_timeout_s + 1
    said = schedule.poll(0.1, None)
    assert stuck.state == State.FAILED and "still waiting for a flag" in stuck.why
    assert said[0].startswith("a: FAILED")
    # the next one does not run after a failure (it may depend on it)
    assert never.state == State.FAILED and "the step before it (a) failed" in never.why
    assert later.state == State.FAILED and not schedule.ok
    assert schedule.hold_at() is None  # nothing left open: training may finish


def test_a_fired_step_whose_effect_is_never_seen_fails_after_its_timeout():
    clock = Clock()
    step = Flag("a", 0.1)
    schedule = Schedule([step], clock=clock)
    schedule.poll(0.1, None)
    clock.t += step.settle_timeout_s + 1
    schedule.poll(0.2, None)
    assert step.state == State.FAILED and "not seen" in step.why


def test_a_step_raising_step_failed_fails_with_its_reason():
    class Impossible(Flag):
        def ready(self, ctx) -> str:
            raise StepFailed("no standby master is running")

    step = Impossible("master", 0.1)
    schedule = Schedule([step], clock=Clock())
    schedule.poll(0.2, None)
    assert step.state == State.FAILED and step.why == "no standby master is running"


def test_steps_still_open_when_training_ended_fail_and_the_schedule_is_not_ok():
    a, b = Flag("a", 0.1, seen=True), Flag("b", 0.5)
    schedule = Schedule([a, b], clock=Clock())
    schedule.poll(0.2, None)
    said = schedule.abandon("training ended first")
    assert said == ["b: FAILED: training ended first"]
    assert a.state == State.SETTLED and b.state == State.FAILED and not schedule.ok
    assert [s["state"] for s in schedule.to_json()] == ["settled", "failed"]


def test_fractions_must_rise_and_stay_below_the_end():
    with pytest.raises(ValueError):
        Schedule([Flag("a", 0.5), Flag("b", 0.2)])
    with pytest.raises(ValueError):
        Schedule([Flag("a", 0.95)], end=0.9)
    with pytest.raises(ValueError):
        Flag("a", 1.5)
