"""The deadline's pace (`scaling.deadline_h`, an extension of the round-4 contract), after
"Can't Be Late" (Wu et al., NSDI 2024): its Uniform Progress rule keeps a job on spot while
its progress is ahead of the straight line from nothing at the start to everything at the
deadline, and falls back to on-demand as soon as it is not.

Pure: the fraction of the job's records done (the lease ledger's, in the signals) against the
line, with a safety margin. The margin is the longest the policy takes to bring the job back
to full speed once it falls back: a launch stuck pending on the first market (`spot_wait_s`),
the interval that sees the job behind, `ps_hot_intervals` intervals to find a PS hot, and one
`ps_cooldown_s` for each PS the wait may have shrunk the set by (ps.max - ps.min). A job that
is ahead of the line by that long reaches the line no earlier than it is back at full speed,
and at full speed (if the deadline is feasible at all) it moves faster than the line: it gets
ahead again and finishes by the deadline. A wait starts only twice that far ahead, so a job at
the line does not drain and relaunch its on-demand workers every other interval.
"""
from __future__ import annotations

import math

from master.job.spec import JobSpec

from .signals import Signals
from .state import PolicyState

PAYS_BY = 0.05


def margin_s(spec: JobSpec) -> float:
    s = spec.scaling
    return (s.spot_wait_s + s.interval_s * (1 + s.ps_hot_intervals)
            + s.ps_cooldown_s * (spec.ps.max - spec.ps.min))


def line(spec: JobSpec, state: PolicyState, now: float, lead_s: float) -> float:
    """The fraction of the records the uniform-progress line asks for `lead_s` from now."""
    deadline = spec.scaling.deadline_h * 3600.0
    return min(1.0, (now - state.started + lead_s) / deadline)


def ahead(spec: JobSpec, signals: Signals, state: PolicyState, now: float) -> bool:
    """Whether the job may wait for the first market: a deadline is set, the job's size is
    known, and its progress is ahead of the line by the margin (twice it to start a wait).
    Never once the line, so advanced, reaches the end: the job must then run flat out."""
    if (not spec.scaling.deadline_h or signals.records_total <= 0
            or state.started is None):
        return False
    lead = margin_s(spec) * (1 if state.paced else 2)
    want = line(spec, state, now, lead)
    return want < 1.0 and signals.records_done >= want * signals.records_total


def speeds(spec: JobSpec, signals: Signals, state: PolicyState,
           settled: bool) -> tuple[float | None, float | None]:
    """Records/s per running worker and per PS at full CPU, read while the job runs settled
    and ran the same workers over the whole interval the rates cover (kept from the last such
    reading: during an outage there may be no worker to read). A worker's own speed only
    while no PS is hot: workers a busy set throttles read slow, and the estimate of what a
    wait saves would swing with the set's size."""
    v, k = state.worker_speed, state.ps_speed
    busy = sum(signals.ps_cpu)
    steady = settled and running_workers(signals) == state.running_workers
    if not steady or signals.records_per_s <= 0 or busy <= 0:
        return v, k
    if signals.worker_rps > 0 and max(signals.ps_cpu) <= spec.scaling.ps_hot_cpu:
        v = signals.worker_rps
    return v, signals.records_per_s / busy


def running_workers(signals: Signals) -> int:
    return signals.total(signals.running, "worker")


def wait_pays(spec: JobSpec, price, state: PolicyState, target: int, held: dict[str, int],
              fallback: str) -> bool:
    """Whether holding `held` workers (per market) is cheaper than the fallback to `target`,
    counting the records the wait defers at the job's $ per record at full speed on the first
    market (they are trained later, after the first market returns). With the PS set as it is,
    a deferred worker's records cost its later market's price per record of a worker; the wait
    gains more when the workers it holds leave the set cold enough to shrink. A partial dip
    that leaves the set warm rarely pays: the fallback's workers on on-demand cost less per
    record than the job at full speed, whose master and PS set run on on-demand either way.
    Each side is priced with the PS set its workers settle it at, not the set of the moment
    (which a wait shrank, or a return is regrowing). Without a speed read yet: the wait."""
    v, k = state.worker_speed, state.ps_speed
    if not v or not k:
        return True
    markets = spec.workers.market_names
    ps_now = state.ps or spec.ps.count
    ps_f = _settled_ps(spec, ps_now, target * v, k)
    rate_f = min(target * v, ps_f * k)
    per_record = (spec.fixed_cost_per_hour(ps_f) + target * price(markets[0])) / rate_f
    have = sum(held.values())
    ps_w = _settled_ps(spec, ps_now, have * v, k)
    rate_w = min(have * v, ps_w * k)
    cost_w = spec.fixed_cost_per_hour(ps_w) + sum(n * price(m) for m, n in held.items())
    first = held.get(markets[0], 0)
    cost_f = (spec.fixed_cost_per_hour(ps_f) + first * price(markets[0])
              + (target - first) * price(fallback))
    # a wait starts only when it saves PAYS_BY of the fallback's hour, and ends only when it
    # costs that much more: near the break-even (a dip) estimates that move by a percent
    # would otherwise drain and relaunch on-demand workers every interval
    slack = PAYS_BY if state.held is not None else -PAYS_BY
    return cost_w + max(0.0, rate_f - rate_w) * per_record < cost_f * (1 + slack)


def _settled_ps(spec: JobSpec, ps_now: int, demand: float, k: float) -> int:
    """The PS count the hot and cold rules move the set to under `demand` records/s, a PS
    serving `k` at full CPU: it grows while a PS is above ps_hot_cpu, shrinks while all are
    below ps_cold_cpu (growth first, as the policy checks it first)."""
    s = spec.scaling
    low = math.ceil(demand / (k * s.ps_hot_cpu))
    high = math.floor(demand / (k * s.ps_cold_cpu)) if s.ps_cold_cpu else ps_now
    n = max(low, min(ps_now, high))
    return max(spec.ps.min, min(spec.ps.max, n))
