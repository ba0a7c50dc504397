"""The policy's decisions while it makes them: the changes per (role, market) in the order
their reasons arose, turned into typed decisions (decreases first) once the interval's plan is
made."""
from __future__ import annotations

from dataclasses import dataclass, field

from engines.port import ProcessKind
from master.job.spec import JobSpec

from .decisions import Decision, Reason
from .signals import Signals

PS = ProcessKind.PS.value


@dataclass
class Draft:
    """The changes decided so far, per (role, market), in the order their reasons arose."""

    spec: JobSpec
    signals: Signals
    steps: list[tuple[str, str, int, Reason]] = field(default_factory=list)
    ps_from: int | None = None

    def add(self, role: str, market: str, delta: int, reason: Reason) -> None:
        if delta:
            self.steps.append((role, market, delta, reason))

    def keep(self, role: str, market: str, reason: Reason) -> None:
        """A decision that changes no count (from == to): what was taken is not replaced."""
        self.steps.append((role, market, 0, reason))

    def count(self, role: str, market: str) -> int:
        """The live count once the steps so far are applied."""
        base = self.signals.live(role, market)
        return base + sum(d for r, m, d, _ in self.steps if r == role and m == market)

    def cancel_launch(self, role: str, market: str) -> bool:
        """Take one back from the last launch planned on `market`; False when none is."""
        for i in range(len(self.steps) - 1, -1, -1):
            r, m, delta, reason = self.steps[i]
            if r == role and m == market and delta > 0:
                self.steps[i] = (r, m, delta - 1, reason)
                if delta == 1:
                    del self.steps[i]
                return True
        return False

    def decisions(self) -> tuple[Decision, ...]:
        if not self.steps:
            return ()
        seen = self.signals.summary()
        counts: dict[tuple[str, str], int] = {}
        out = []
        # Decreases first: applied in order, no prefix ever runs more than max processes.
        for role, market, delta, reason in sorted(self.steps, key=lambda s: s[2] > 0):
            key = (role, market)
            if key not in counts:
                counts[key] = (self.ps_from if role == PS and self.ps_from is not None
                               else self.signals.live(role, market))
            out.append(Decision(ProcessKind(role), market, counts[key], counts[key] + delta, reason,
                                seen))
            counts[key] += delta
        return tuple(out)
