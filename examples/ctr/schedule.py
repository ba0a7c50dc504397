"""The demo's schedule: what it does to the job, one step after another, each fired by the
fraction of the records trained, and where training must wait for a step.

Deciding only (no processes, no network; the clock is injected): a step's three calls are
made by `Schedule.poll` and must each return at once (examples/ctr/steps.py has the steps):

- `ready(ctx)`: "" when the step may fire now, else what it waits for (a backup in sync, the
  last resize finished);
- `fire(ctx)`: start it (send a signal, ask for a resize, start a process) and return; False
  when it could not (a master taking over): asked again at the next poll;
- `check(ctx)`: whether its effect is seen (the standby leads, the PS joined, the killed
  worker was declared lost).

One step at a time: a step fires once its fraction is reached (`at`; None: as soon as the
step before it settled) and it is ready, and the next waits until it settled. Training is held
(`hold_at`) where it would otherwise run past a step that has not fired yet: at the fraction
of the first step not fired, and at `end` while any step is unsettled, so that every step
fires with training running and has training left to show its effect, however slow the
machine is. A step that stays unready or unsettled past its timeout fails with why; so does
one whose predecessor failed, and every step still open when training ended. The demo's
claims fail with it.
"""
from __future__ import annotations

import time
from enum import Enum
from typing import Any, Callable


class State(str, Enum):
    PENDING = "pending"
    FIRED = "fired"
    SETTLED = "settled"
    FAILED = "failed"


class StepFailed(RuntimeError):
    """Raised by a step's call: it cannot happen or its effect will never be seen."""


class Step:
    """One thing the demo does to the job (subclasses: examples/ctr/steps.py)."""

    name = "step"
    part = ""                 # the summary's part whose claims it serves: churn, ha, resize
    ready_timeout_s = 120.0   # from its fraction reached to fired
    settle_timeout_s = 120.0  # from fired to its effect seen

    def __init__(self, at: float | None):
        if at is not None and not 0.0 <= at < 1.0:
            raise ValueError(f"{self.name}: at {at} is not a fraction of the records in [0, 1)")
        self.at = at
        self.state = State.PENDING
        self.waiting = ""                  # what it waits for now
        self.due_s: float | None = None    # when its fraction was reached
        self.fired_s: float | None = None
        self.settled_s: float | None = None
        self.fired_fraction: float | None = None
        self.why = ""                      # failed: why

    def ready(self, ctx: Any) -> str:
        return ""

    def fire(self, ctx: Any) -> bool:
        return True

    def check(self, ctx: Any) -> bool:
        return True

    def describe(self) -> str:
        """What it does, for the plan printed up front."""
        return self.name

    def effect(self) -> str:
        """What `check` waits to see, for the demo's log while training is held for it."""
        return "its effect"

    def done(self) -> str:
        """What `fire` did, for the demo's log."""
        return self.describe()

    @property
    def open(self) -> bool:
        return self.state in (State.PENDING, State.FIRED)

    def to_json(self) -> dict:
        return {"name": self.name, "at": self.at, "state": self.state.value,
                "fired_fraction": self.fired_fraction, "fired_s": self.fired_s,
                "settled_s": self.settled_s, "why": self.why}


class Schedule:
    """Steps in order; `poll` once per round of the demo's loop."""

    def __init__(self, steps: list[Step], end: float = 0.9,
                 clock: Callable[[], float] = time.monotonic):
        ats = [s.at for s in steps if s.at is not None]
        if ats != sorted(ats) or any(a >= end for a in ats):
            raise ValueError(f"the steps' fractions {ats} must rise and stay below end {end}")
        self.steps, self.end, self.clock = steps, end, clock
        self.started = clock()

    def now(self) -> float:
        return round(self.clock() - self.started, 3)

    def current(self) -> Step | None:
        return next((s for s in self.steps if s.open), None)

    def poll(self, fraction: float, ctx: Any) -> list[str]:
        """Move the schedule on at `fraction` of the records trained; returns what happened,
        one line per change, for the demo's log."""
        said: list[str] = []
        while (step := self.current()) is not None:
            try:
                if not self._advance(step, fraction, ctx, said):
                    break
            except StepFailed as exc:
                self._fail(step, str(exc), said)
        return said

    def _advance(self, step: Step, fraction: float, ctx: Any, said: list[str]) -> bool:
        """One step's turn; True when the next step may have its turn in this poll."""
        now = self.now()
        index = self.steps.index(step)
        if index and self.steps[index - 1].state == State.FAILED:
            raise StepFailed(f"the step before it ({self.steps[index - 1].name}) failed")
        if step.state == State.PENDING:
            if step.at is not None and fraction < step.at:
                return False
            if step.due_s is None:
                step.due_s = now
            step.waiting = step.ready(ctx)
            if step.waiting:
                if now - step.due_s > step.ready_timeout_s:
                    raise StepFailed(f"still waiting for {step.waiting} "
                                     f"{step.ready_timeout_s:g} s after it was due")
                return False
            if not step.fire(ctx):
                return False
            step.state, step.fired_s, step.fired_fraction = State.FIRED, now, round(fraction, 4)
            said.append(f"{step.name} at {fraction:.0%} of the records: {step.done()}")
        if step.check(ctx):
            step.state, step.settled_s = State.SETTLED, self.now()
            said.append(f"{step.name}: seen {step.settled_s - step.fired_s:.1f} s after it "
                        f"fired: {step.effect()}")
            return True
        if now - step.fired_s > step.settle_timeout_s:
            raise StepFailed(f"its effect was not seen {step.settle_timeout_s:g} s after it "
                             "fired")
        return False

    def _fail(self, step: Step, why: str, said: list[str]) -> None:
        step.state, step.why = State.FAILED, why
        said.append(f"{step.name}: FAILED: {why}")

    def hold_at(self) -> float | None:
        """The fraction training must not pass now (None: no limit): the first unfired
        step's own fraction, else `end` while a step is still open."""
        for step in self.steps:
            if step.state == State.PENDING and step.at is not None:
                return step.at
        return self.end if any(s.open for s in self.steps) else None

    def holding(self, fraction: float) -> bool:
        limit = self.hold_at()
        return limit is not None and fraction >= limit

    def abandon(self, why: str) -> list[str]:
        """Fail every open step (training ended, the demo timed out)."""
        said: list[str] = []
        for step in self.steps:
            if step.open:
                self._fail(step, why, said)
        return said

    @property
    def ok(self) -> bool:
        return all(s.state == State.SETTLED for s in self.steps)

    def to_json(self) -> list[dict]:
        return [s.to_json() for s in self.steps]
