"""`elastic-job simulate`: the policy's own code on a simulated clock against a market trace.

A job of N records runs on a model of the cluster: each running worker makes `worker_rps`
records/s, the PS set serves at most `ps_capacity_rps` per PS (a PS's CPU is the share of that
it serves), a launch takes `startup_s` to run, and a market holds at most what the trace allows:
a launch beyond it fails, and what runs beyond it gets a notice, hands its leases back (exact:
nothing is redone when the hand-back fits in the grace) and goes. The policy runs every
`scaling.interval_s` on the signals this model yields; so do three fixed baselines, each the
same policy on a spec that leaves it nothing to decide:

- `on-demand-max`: every worker on the last (most reliable) market, workers.max and ps.max;
- `spot-only-max`: every worker on the first market, no fallback, workers.max and ps.max;
- `fixed-start`: the start size (workers.min, at least 1; ps.count) held, spot first with the
  fallback.

The baselines run without `scaling.deadline_h` (nothing waits); the policy's run with it, the
job's progress (records done of `records`) in its signals as the ledger's are in a real job's.

The PS set and the master run on `ps.market` and are not preempted here (a trace that limits
that market is refused). Event-driven: the clock jumps from one change to the next, so a day
runs in a second or two.
"""
from __future__ import annotations

import dataclasses
from collections import Counter
from dataclasses import dataclass, field
from typing import Callable, Mapping

from engines.markets import MarketTrace

from ..scaling.policy import decide
from ..scaling.signals import Signals
from .errors import SpecError
from .spec import JobSpec, PSSpec, ScalingSpec

W, PS = "worker", "ps"
BASELINES = ("on-demand-max", "spot-only-max", "fixed-start")


@dataclass(frozen=True)
class Model:
    worker_rps: float
    ps_capacity_rps: float
    startup_s: float = 30.0
    preempt_grace_s: float = 30.0
    handback_s: float = 2.0     # SIGTERM to leases handed back: the batch in flight finishes
    max_hours: float = 72.0


@dataclass(frozen=True)
class Outcome:
    """One run: finished or not, its hours (to finish, or all it ran), records trained, the
    money spent, records trained twice, decisions by reason and worker-hours by market."""

    name: str
    finished: bool
    hours: float
    records: float
    cost: float
    records_redone: float
    decisions: Mapping[str, int]
    worker_hours: Mapping[str, float]

    @property
    def cost_per_million_records(self) -> float | None:
        return self.cost / self.records * 1e6 if self.records else None

    def as_result(self) -> dict:
        """DESIGN's R: hours (null when the run did not finish), $ per million records,
        records redone."""
        per_million = self.cost_per_million_records
        return {"hours": round(self.hours, 4) if self.finished else None,
                "cost_per_million_records": None if per_million is None
                else round(per_million, 6),
                "records_redone": int(round(self.records_redone))}


@dataclass
class _Proc:
    role: str
    market: str
    ready_at: float
    gone_at: float | None = None   # set by a notice: when it has handed back and exited


@dataclass
class _Cluster:
    """The simulated processes and what happened since the last interval."""

    spec: JobSpec
    prices: Mapping[str, float]
    trace: MarketTrace
    model: Model
    procs: list[_Proc] = field(default_factory=list)
    preempted: Counter = field(default_factory=Counter)
    failed: Counter = field(default_factory=Counter)
    redone: float = 0.0

    def live(self, market: str) -> list[_Proc]:
        return [p for p in self.procs if p.role == W and p.market == market and p.gone_at is None]

    def admits(self, market: str, t: float) -> bool:
        cap = self.trace.capacity(market, t)
        return cap is None or len(self.live(market)) < cap

    def launch(self, role: str, market: str, t: float) -> None:
        if role == W and not self.admits(market, t):
            self.failed[market] += 1
            return
        self.procs.append(_Proc(role, market, t + self.model.startup_s))

    def stop(self, role: str, market: str, n: int, t: float) -> None:
        """Drain n: not-yet-running ones first, then the newest (an exact hand-back)."""
        mine = [p for p in self.procs if p.role == role and p.market == market
                and p.gone_at is None]
        for p in sorted(mine, key=lambda p: (p.ready_at > t, p.ready_at), reverse=True)[:n]:
            self.procs.remove(p)

    def enforce(self, t: float) -> None:
        """What runs beyond a market's capacity gets a notice; the newest go first."""
        for market in self.trace.markets:
            cap = self.trace.capacity(market, t)
            live = self.live(market)
            if cap is None or len(live) <= cap:
                continue
            m = self.model
            for p in sorted(live, key=lambda p: p.ready_at)[cap:]:
                p.gone_at = t + min(m.handback_s, m.preempt_grace_s)
                self.preempted[market] += 1
                if p.ready_at <= t and m.handback_s > m.preempt_grace_s:
                    self.redone += m.worker_rps * m.handback_s  # killed mid-batch

    def running(self, role: str, t: float) -> list[_Proc]:
        return [p for p in self.procs if p.role == role and p.gone_at is None and p.ready_at <= t]

    def rate(self, t: float) -> float:
        workers, ps = len(self.running(W, t)), len(self.running(PS, t))
        return min(workers * self.model.worker_rps, ps * self.model.ps_capacity_rps)

    def price_per_hour(self) -> float:
        master = (1 + self.spec.master.standbys) * self.prices[self.spec.ps.market]
        return master + sum(self.prices[p.market] for p in self.procs)

    def next_event(self, t: float) -> float | None:
        times = [p.ready_at for p in self.procs if p.ready_at > t]
        times += [p.gone_at for p in self.procs if p.gone_at is not None and p.gone_at > t]
        change = self.trace.next_change(t)
        if change is not None:
            times.append(change)
        return min(times, default=None)

    def advance(self, t: float) -> None:
        self.procs = [p for p in self.procs if p.gone_at is None or p.gone_at > t]

    def signals(self, t: float, records_per_s: float, done: float, records: int) -> Signals:
        running, pending, preempting = Counter(), Counter(), Counter()
        for p in self.procs:
            key = (p.role, p.market)
            if p.gone_at is not None:
                preempting[key] += 1
            elif p.ready_at <= t:
                running[key] += 1
            else:
                pending[key] += 1
        workers = len(self.running(W, t))
        ps = len(self.running(PS, t))
        demand = workers * self.model.worker_rps
        cpu = min(1.0, demand / (ps * self.model.ps_capacity_rps)) if ps else 0.0
        s = Signals(
            records_per_s=records_per_s,
            worker_rps=records_per_s / workers if workers else 0.0,
            ps_cpu=(cpu,) * ps, running=running, pending=pending, preempting=preempting,
            preempted={(W, m): n for m, n in self.preempted.items()},
            failed_launches={(W, m): n for m, n in self.failed.items()},
            admits={m for m in self.spec.workers.market_names if self.admits(m, t)},
            records_done=done, records_total=records,
        )
        self.preempted.clear()
        self.failed.clear()
        return s


def simulate(spec: JobSpec, trace: MarketTrace, records: int, model: Model,
             prices: Mapping[str, float] | None = None, name: str = "policy",
             policy: Callable = decide) -> Outcome:
    """Run one job to its end (or model.max_hours) and say what it took."""
    prices = prices or {m.name: m.price for m in spec.workers.markets}
    cluster = _Cluster(spec, prices, trace, model)
    interval, horizon = spec.scaling.interval_s, model.max_hours * 3600.0
    t, ticks, done, cost, since_tick, state = 0.0, 0, 0.0, 0.0, 0.0, None
    reasons: Counter = Counter()
    worker_s: Counter = Counter()
    while done < records and t < horizon:
        if t >= ticks * interval:
            span = t - (ticks - 1) * interval if ticks else 0.0
            signals = cluster.signals(t, since_tick / span if span else 0.0, done, records)
            decisions, state = policy(spec, signals, state, t)
            for d in decisions:
                reasons[d.reason.value] += 1
                if d.delta > 0:
                    for _ in range(d.delta):
                        cluster.launch(d.role.value, d.market, t)
                elif d.delta < 0:
                    cluster.stop(d.role.value, d.market, -d.delta, t)
            ticks, since_tick = ticks + 1, 0.0
        cluster.enforce(t)
        rate = cluster.rate(t)
        candidates = [ticks * interval, horizon, cluster.next_event(t)]
        if rate > 0:
            candidates.append(t + (records - done) / rate)
        nxt = min(c for c in candidates if c is not None and c > t)
        dt = nxt - t
        done = min(float(records), done + rate * dt)
        since_tick += rate * dt
        cost += cluster.price_per_hour() * dt / 3600.0
        for p in cluster.procs:
            if p.role == W:
                worker_s[p.market] += dt
        t = nxt
        cluster.advance(t)
    return Outcome(name=name, finished=done >= records, hours=t / 3600.0, records=done,
                   cost=cost, records_redone=cluster.redone, decisions=dict(reasons),
                   worker_hours={m: s / 3600.0 for m, s in worker_s.items()})


def baseline_specs(spec: JobSpec) -> dict[str, JobSpec]:
    """The fixed baselines: the same policy with nothing left to decide."""
    w, ps = spec.workers, spec.ps
    still = ScalingSpec(**{**dataclasses.asdict(spec.scaling), "budget_per_hour": 0.0,
                           "deadline_h": 0.0})
    at_max = PSSpec(count=ps.max, min=ps.max, max=ps.max, replicas=ps.replicas,
                    market=ps.market, args=ps.args)
    start = max(w.min, 1)

    def held(markets, n, ps_spec):
        workers = dataclasses.replace(w, markets=markets, min=n, max=n)
        return dataclasses.replace(spec, workers=workers, ps=ps_spec, scaling=still)

    return {
        "on-demand-max": held(w.markets[-1:], w.max, at_max),
        "spot-only-max": held(w.markets[:1], w.max, at_max),
        "fixed-start": held(w.markets, start, dataclasses.replace(
            ps, min=ps.count, max=ps.count)),
    }


def compare(spec: JobSpec, trace: MarketTrace, records: int,
            model: Model) -> tuple[Outcome, dict[str, Outcome]]:
    """The policy and each baseline on the same trace, model and prices."""
    if spec.ps.market in trace.markets:
        raise SpecError("ps.market", f"the trace limits {spec.ps.market!r}; simulate runs the "
                                     "PS and the master on an unlimited market (put them on one "
                                     "the trace does not name)")
    prices = {m.name: m.price for m in spec.workers.markets}
    policy = simulate(spec, trace, records, model, prices)
    return policy, {name: simulate(s, trace, records, model, prices, name)
                    for name, s in baseline_specs(spec).items()}


def table(spec: JobSpec, records: int, model: Model, policy: Outcome,
          baselines: Mapping[str, Outcome]) -> str:
    """What `elastic-job simulate` prints: one line per run, then the policy's decisions."""
    lines = [f"{spec.name}: {records:,} records; a worker {model.worker_rps:g} records/s, a PS "
             f"{model.ps_capacity_rps:g} records/s; start-up {model.startup_s:g} s",
             f"{'run':15s} {'hours':>8s} {'$/M records':>12s} {'cost $':>9s} "
             f"{'redone':>8s}  worker-hours by market"]
    for o in (policy, *baselines.values()):
        hours = f"{o.hours:8.2f}" if o.finished else f">{o.hours:6.0f}h"
        per_m = o.cost_per_million_records
        by_market = ", ".join(f"{m} {h:.1f}" for m, h in sorted(o.worker_hours.items()))
        lines.append(f"{o.name:15s} {hours:>8s} {per_m if per_m is None else f'{per_m:.4g}':>12} "
                     f"{o.cost:9.2f} {o.records_redone:8.0f}  {by_market or '-'}"
                     + ("" if o.finished else f"  (did not finish: "
                        f"{o.records / records:.0%} done)"))
    ref = baselines.get("on-demand-max")
    if ref is not None and ref.finished and policy.finished:
        cost = policy.cost_per_million_records / ref.cost_per_million_records
        lines.append(f"policy / on-demand-max: {cost:.2f}x the $ per million records, "
                     f"{policy.hours / ref.hours:.2f}x the hours")
    lines.append("policy decisions: " + (", ".join(
        f"{r} {n}" for r, n in sorted(policy.decisions.items())) or "none"))
    return "\n".join(lines)
