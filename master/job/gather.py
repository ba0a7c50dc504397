"""One interval's Signals (master.scaling.signals) from what the master knows: records/s
and the job's progress from the datasets' counts, who came up (registered workers,
registered PS indices), each PS process's CPU from the engine, the engine's notices and
failures since the last decide.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from ..scaling.signals import Signals
from .book import JobBook, ProcState


@dataclass
class Since:
    """What happened since the last decide, per (role, market)."""

    preempted: Counter = field(default_factory=Counter)
    lost: Counter = field(default_factory=Counter)
    crashed: Counter = field(default_factory=Counter)
    failed_launches: Counter = field(default_factory=Counter)


def records_done(core) -> int:
    """Records counted done over every dataset and epoch (call under the committer's lock)."""
    return sum(stats.records_done for queue in core.datasets.values()
               for stats in queue.epochs.values())


def records_total(core) -> int:
    """Records the job trains: every dataset's records times its epochs (0 before a worker
    created one), under the committer's lock. Progress for scaling.deadline_h."""
    return sum(queue.spec.num_records * queue.spec.num_epochs
               for queue in core.datasets.values())


def came_up(core) -> tuple[set[str], dict[int, int]]:
    """Names of the live workers, and per live PS index when its primary registered (Unix
    ms), under the committer's lock."""
    names = {w.name for w in core.workers.alive.values()}
    lost = core.ps_lost
    return names, {i: row["registered_ms"] for i, row in core.ps.items() if i not in lost}


@dataclass
class Gatherer:
    """Keeps the previous reading of records and PS CPU time to turn them into rates."""

    last_records: int | None = None
    last_t: float | None = None
    last_cpu: dict[str, tuple[float, float]] = field(default_factory=dict)

    def signals(self, book: JobBook, since: Since, records: int, up: set[str],
                markets: list[str], admits: set[str], cpu: dict[str, float | None],
                now: float, total: int = 0) -> Signals:
        """`up`: names of processes that came up; `cpu`: CPU seconds per live PS name;
        `records` done and `total` to do over every dataset and epoch."""
        rps = 0.0
        if self.last_records is not None and now > self.last_t:
            rps = max(0, records - self.last_records) / (now - self.last_t)
        self.last_records, self.last_t = records, now
        running, pending, preempting = Counter(), Counter(), Counter()
        for proc in book.procs.values():
            key = (proc.role, proc.market)
            if proc.state == ProcState.PREEMPTING:
                preempting[key] += 1
            elif proc.state == ProcState.STOPPING:
                continue
            elif proc.name in up:
                running[key] += 1
            else:
                pending[key] += 1
        workers = sum(n for (role, _), n in running.items() if role == "worker")
        return Signals(records_per_s=rps, worker_rps=rps / workers if workers else 0.0,
                       ps_cpu=tuple(self._ps_cpu(cpu, now)), running=running,
                       pending=pending, preempting=preempting, preempted=since.preempted,
                       lost=since.lost, crashed=since.crashed,
                       failed_launches=since.failed_launches,
                       admits=frozenset(m for m in markets if m in admits),
                       records_done=records, records_total=total)

    def _ps_cpu(self, cpu: dict[str, float | None], now: float):
        busy = []
        for name, seconds in sorted(cpu.items()):
            if seconds is None:
                continue
            before = self.last_cpu.get(name)
            self.last_cpu[name] = (seconds, now)
            if before is not None and now > before[1]:
                busy.append(min(1.0, max(0.0, (seconds - before[0]) / (now - before[1]))))
        for name in set(self.last_cpu) - set(cpu):
            del self.last_cpu[name]
        return busy
