"""The scaling policy: `decide(spec, signals, state, now) -> (decisions, new_state)`.

Pure: no clock of its own, no I/O. The leader calls it every `scaling.interval_s`, applies the
decisions through the engine, and persists the new state. The floors (DESIGN, round 4):
workers held within [min, max] and PS within [ps.min, ps.max]; a preempted or lost process
replaced at the next interval; spot first (the first market listed), the next market when a
launch there failed or stayed pending for `spot_wait_s`, and back when the first admits
launches again; one more worker while the last one added raised records/s by at least
`min_gain` of a worker's average (no PS hot, the budget allows; at ps.max, only while the PS
set's idle CPU leaves room for that gain at a lower $ per record than the job pays), one fewer
when it did not; PS +1 when one has been hot for `ps_hot_intervals` intervals, -1 when all have
been cold as long, at most once per `ps_cooldown_s`; never above `budget_per_hour` (the spec
guarantees the floors fit in it).

With `scaling.deadline_h` (an extension of the contract, master/scaling/pace.py): while the
job is ahead of its deadline's uniform-progress line and the first market admits no launches,
the workers it took away are not replaced on a later market (workers.min is kept), those on
later markets are drained, and the PS set shrinks as it goes cold; behind the line, all of the
above holds as without a deadline.

Decisions come decreases first, so applying them in order never runs more than max processes.
"""
from __future__ import annotations

from engines.port import ProcessKind
from master.job.spec import JobSpec

from .decisions import Reason
from .draft import Draft
from .pace import ahead, running_workers, speeds, wait_pays
from .signals import Signals
from .state import Block, PolicyState, Probe

W, PS = ProcessKind.WORKER.value, ProcessKind.PS.value
MAX_BACKOFF_INTERVALS = 32   # a crash-looping command waits at most 32 intervals between tries


def decide(spec: JobSpec, signals: Signals, state: PolicyState | None,
           now: float) -> tuple[tuple[Decision, ...], PolicyState]:
    first = state is None or state.started is None
    state = _started(spec, state or PolicyState(), now)
    paced = ahead(spec, signals, state, now)
    plan = Draft(spec, signals)
    state = _watch_markets(spec, signals, state, now, plan)
    settled = not (_disturbed(signals) or signals.total(signals.pending, W))
    v, k = speeds(spec, signals, state, settled)
    state = state.with_(worker_speed=v, ps_speed=k, running_workers=running_workers(signals))
    # the wait: ahead of the deadline's line, and the first market takes no launches now
    waiting = paced and spec.workers.market_names[0] not in _usable(spec, signals, state)
    state = _plan_ps(spec, signals, state, now, plan, first)
    state = _plan_workers(spec, signals, state, now, plan, waiting)
    return plan.decisions(), state.with_(paced=paced)


def _started(spec: JobSpec, state: PolicyState, now: float) -> PolicyState:
    if state.started is not None:
        return state
    return state.with_(started=now, workers=spec.workers.min, ps=spec.ps.count)


# ---- markets: which ones the policy launches workers on

def _watch_markets(spec: JobSpec, signals: Signals, state: PolicyState, now: float,
                   plan: Draft) -> PolicyState:
    """Block a market whose launch failed or stayed pending `spot_wait_s` (its stuck pending
    launches are cancelled, to be made on the next market); unblock it when the engine says it
    admits launches again after having said it did not, or, when the engine cannot tell, after
    a quiet period (a probe). The last market is never stuck: there is nowhere better to go."""
    wait = spec.scaling.spot_wait_s
    pending_since, blocked = dict(state.pending_since), dict(state.blocked)
    strikes = dict(state.stuck_strikes)
    for market in spec.workers.market_names:
        pending = signals.pending.get((W, market), 0)
        failed = signals.failed_launches.get((W, market), 0)
        if pending:
            pending_since.setdefault(market, now)
        elif market in pending_since:
            pending_since.pop(market)
            if not failed and not signals.lost.get((W, market), 0):
                strikes.pop(market, None)  # a launch there started: the market works
        last = market == spec.workers.market_names[-1]
        stuck = (bool(wait) and pending and not last
                 and now - pending_since[market] >= wait)
        admits = signals.admits_launches(market)
        if failed or stuck:
            blocked[market] = Block(since=now, saw_closed=not admits)
            if stuck:
                plan.add(W, market, -pending, Reason.MARKET_UNAVAILABLE)
                pending_since.pop(market)
                strikes[market] = strikes.get(market, 0) + 1
        elif market in blocked:
            block = blocked[market]
            if not admits:
                blocked[market] = Block(block.since, saw_closed=True)
            elif block.saw_closed or now - block.since >= _quiet(spec, strikes.get(market, 0)):
                del blocked[market]
    return state.with_(pending_since=pending_since, blocked=blocked, stuck_strikes=strikes)


def _quiet(spec: JobSpec, strikes: int) -> float:
    """How long a blocked market that the engine never said was closed rests before it is tried
    again: `spot_wait_s` (at least an interval), doubled for each launch there cancelled as
    stuck since one last started. A `spot_wait_s` shorter than a worker's start-up would
    otherwise move the workers there and back every `spot_wait_s`."""
    base = max(spec.scaling.spot_wait_s, spec.scaling.interval_s)
    return base * min(2 ** max(strikes - 1, 0), MAX_BACKOFF_INTERVALS)


def _usable(spec: JobSpec, signals: Signals, state: PolicyState) -> list[str]:
    return [m for m in spec.workers.market_names
            if m not in state.blocked and signals.admits_launches(m)]


def _fill_market(spec: JobSpec, signals: Signals, state: PolicyState) -> str:
    """Where new workers go: the first usable market, else the last (most reliable) one."""
    usable = _usable(spec, signals, state)
    return usable[0] if usable else spec.workers.market_names[-1]


# ---- the PS set

def _plan_ps(spec: JobSpec, signals: Signals, state: PolicyState, now: float,
             plan: Draft, first: bool) -> PolicyState:
    s, market, target = spec.scaling, spec.ps.market, state.ps
    plan.ps_from = target
    if first:  # the PS set is launched like any shortfall; the cooldown starts now
        plan.ps_from = 0
        plan.add(PS, market, target, Reason.BELOW_MIN)
        return state.with_(last_ps_change=now)
    for reason, counts in ((Reason.REPLACE_PREEMPTED, signals.preempted),
                           (Reason.REPLACE_LOST, signals.lost)):
        gone = min(counts.get((PS, market), 0), target)
        if gone:  # restarted in its slot; the set's size does not change
            plan.ps_from = target - gone
            plan.add(PS, market, gone, reason)
    hot = any(c > s.ps_hot_cpu for c in signals.ps_cpu)
    hot_intervals = state.hot_intervals + 1 if hot else 0
    cooled = now - (state.last_ps_change if state.last_ps_change is not None
                    else state.started) >= s.ps_cooldown_s
    # Cold counts only while the workers run at their target: a PS idle because workers are
    # starting (after a preemption, a market swap) is no reason to shrink the set. And it
    # must last as long as hot must.
    settled = not (signals.total(signals.pending, W) or _disturbed(signals)
                   or sum(signals.live(W, m) for m in spec.workers.market_names)
                   < _wanted(state))
    cold = (settled and bool(signals.ps_cpu)
            and all(c < s.ps_cold_cpu for c in signals.ps_cpu))
    cold_intervals = state.cold_intervals + 1 if cold else 0
    new = target
    if target < spec.ps.min:
        new, reason = spec.ps.min, Reason.BELOW_MIN
    elif target > spec.ps.max:
        new, reason = spec.ps.max, Reason.ABOVE_MAX
    elif (hot_intervals >= s.ps_hot_intervals and target < spec.ps.max and cooled
          and _within_budget(spec, signals, _worker_counts(spec, plan), target + 1)):
        new, reason = target + 1, Reason.PS_HOT
    elif cold_intervals >= s.ps_hot_intervals and target > spec.ps.min and cooled:
        new, reason = target - 1, Reason.PS_COLD
    if new == target:
        return state.with_(hot_intervals=hot_intervals, cold_intervals=cold_intervals)
    plan.add(PS, market, new - target, reason)
    return state.with_(ps=new, hot_intervals=0, cold_intervals=0, last_ps_change=now)


def _wanted(state: PolicyState) -> int:
    """The workers the policy means to run now: its target, or what a deadline's wait held."""
    wanted = state.workers or 0
    return wanted if state.held is None else min(wanted, state.held)


# ---- cost

def _price(spec: JobSpec, signals: Signals, market: str) -> float:
    return signals.prices.get(market, spec.workers.price(market))


def _cost(spec: JobSpec, signals: Signals, workers: dict[str, int], ps: int) -> float:
    fixed = (1 + spec.master.standbys + ps) * _price(spec, signals, spec.ps.market)
    return fixed + sum(n * _price(spec, signals, m) for m, n in workers.items())


def _within_budget(spec: JobSpec, signals: Signals, workers: dict[str, int], ps: int) -> bool:
    budget = spec.scaling.budget_per_hour
    return not budget or _cost(spec, signals, workers, ps) <= budget + 1e-9


def _worker_counts(spec: JobSpec, plan: Draft) -> dict[str, int]:
    return {m: plan.count(W, m) for m in spec.workers.market_names}


# ---- workers

def _plan_workers(spec: JobSpec, signals: Signals, state: PolicyState, now: float,
                  plan: Draft, waiting: bool) -> PolicyState:
    state = _backoff(spec, signals, state, now)
    waiting = waiting and _wait_pays(spec, signals, state, plan)
    returning = bool(_returns(spec, signals, state, plan))
    state, target, growth, shrink = _target(spec, signals, state, now, plan, returning,
                                            waiting)
    counts = _worker_counts(spec, plan)
    have = sum(counts.values())
    if have > target:
        _drain(spec, plan, have - target, shrink if shrink else
               (Reason.ABOVE_MAX if have > spec.workers.max else Reason.NO_GAIN))
    held = _hold(spec, plan, target) if waiting else None
    if held is not None and min(have, target) > held:
        _drain(spec, plan, min(have, target) - held, Reason.AHEAD_OF_DEADLINE)
    for market, n, best in _returns(spec, signals, state, plan):
        plan.add(W, market, -n, Reason.MARKET_RETURNED)
        plan.add(W, best, n, Reason.MARKET_RETURNED)
    want = target if held is None else held
    if have < want and not _backing_off(state, now):
        _fill(spec, signals, state, plan, want - have, growth)
    if held is not None and held < target and _disturbed(signals):
        plan.keep(W, spec.workers.market_names[0], Reason.AHEAD_OF_DEADLINE)
    target = _fit_budget(spec, signals, state, plan, target)
    if growth and target <= have:
        state = state.with_(probe=None)  # the budget took the added worker back
    return state.with_(workers=target, held=None if held is None else min(held, target))


def _wait_pays(spec: JobSpec, signals: Signals, state: PolicyState, plan: Draft) -> bool:
    w = spec.workers
    target = min(max(state.workers, w.min), w.max)
    held = _hold(spec, plan, target)
    first = min(held, plan.count(W, w.market_names[0]))
    fallback = _fill_market(spec, signals, state)
    return wait_pays(spec, lambda m: _price(spec, signals, m), state, target,
                     {w.market_names[0]: first, fallback: held - first}, fallback)


def _hold(spec: JobSpec, plan: Draft, target: int) -> int:
    """What a deadline's wait runs: the workers on the first market, and later ones only to
    keep workers.min."""
    first = plan.count(W, spec.workers.market_names[0])
    return min(target, max(spec.workers.min, first))


def _backoff(spec: JobSpec, signals: Signals, state: PolicyState, now: float) -> PolicyState:
    """A command that exits before it is up is relaunched after 1, 2, 4, ... intervals, however
    long it took to fail: the streak ends only once a relaunch has gone the longest wait
    (MAX_BACKOFF_INTERVALS intervals) without a crash. Ending it when a relaunch merely
    outlived the last wait kept a command that fails 15 s in at one interval for ever."""
    crashed = signals.total(signals.crashed, W)
    if crashed:
        streak = state.crash_streak + 1
        return state.with_(crash_streak=streak, backoff_until=now + _wait(spec, streak))
    healthy = spec.scaling.interval_s * MAX_BACKOFF_INTERVALS
    if (state.crash_streak and state.backoff_until is not None
            and now - state.backoff_until >= healthy):
        return state.with_(crash_streak=0, backoff_until=None)
    return state


def _wait(spec: JobSpec, streak: int) -> float:
    return spec.scaling.interval_s * min(2 ** (streak - 1), MAX_BACKOFF_INTERVALS)


def _disturbed(signals: Signals) -> bool:
    """A worker was preempted, lost or refused since the last interval."""
    return any(signals.total(c, W) for c in (signals.preempted, signals.lost,
                                             signals.failed_launches))


def _backing_off(state: PolicyState, now: float) -> bool:
    return state.backoff_until is not None and now < state.backoff_until


def _target(spec: JobSpec, signals: Signals, state: PolicyState, now: float, plan: Draft,
            returning: bool, waiting: bool):
    """The worker target after judging the probe in flight and maybe starting one: (state,
    target, the growth reason or None, the shrink reason or None). A deadline's wait grows
    nothing: a worker added now would go to a later market."""
    w, s = spec.workers, spec.scaling
    target = min(max(state.workers, w.min), w.max)
    live = sum(signals.live(W, m) for m in w.market_names)
    disturbed = _disturbed(signals)
    pending = signals.total(signals.pending, W)
    probe = state.probe
    if probe is not None and (disturbed or live != target):
        probe = None  # a preemption or a loss spoils the measurement: judge a later one
    if probe is not None and probe.ready_at is None and not pending:
        probe = Probe(probe.base_rps, probe.base_count, now)
    if probe is not None and probe.ready_at is not None and now - probe.ready_at >= s.interval_s:
        gain = signals.records_per_s - probe.base_rps
        average = probe.base_rps / probe.base_count if probe.base_count else 0.0
        if gain > 0 and gain >= s.min_gain * average:
            state = state.with_(probe=None, last_gain=gain)
            probe = None
        else:
            state = state.with_(probe=None, hold_until=now + s.ps_cooldown_s, hold_ps=state.ps)
            if target - 1 >= w.min:
                return state, target - 1, None, Reason.NO_GAIN
            return state, target, None, None
    state = state.with_(probe=probe)
    held = (state.hold_until is not None and now < state.hold_until
            and state.hold_ps == state.ps)
    # a hot PS holds growth while the set may still grow; at ps.max the probe decides, when
    # the set's idle CPU leaves room for one (_worth_one_more)
    hot = state.ps < spec.ps.max and any(c > s.ps_hot_cpu for c in signals.ps_cpu)
    moving = returning or bool(plan.steps)  # grow once workers and the PS set settle
    if (probe is None and not held and not hot and not disturbed and not pending and not moving
            and not waiting and live == target and target < w.max
            and (signals.records_per_s > 0 or not live)
            and not _backing_off(state, now)):
        market = _fill_market(spec, signals, state)
        more = _worker_counts(spec, plan)
        more[market] += 1
        if (_within_budget(spec, signals, more, state.ps)
                and _worth_one_more(spec, signals, state, plan, market, live)):
            state = state.with_(probe=Probe(signals.records_per_s, live))
            return state, target + 1, Reason.THROUGHPUT_GAIN, None
    return state, target, None, None


def _worth_one_more(spec: JobSpec, signals: Signals, state: PolicyState, plan: Draft,
                    market: str, live: int) -> bool:
    """Whether a worker added on `market` is predicted to pay for itself, before one is launched
    to find out: the records/s it can add (a worker's average, capped by what the PS set's CPU
    leaves idle) must be at least `min_gain` of a worker's average, and cost no more per record
    than the job pays now (so its $ per record falls). Only at ps.max: below it a busy set
    grows (`ps_hot`) instead. A set at ps.max and at full CPU leaves nothing for a worker:
    without this the probe launched one, judged it `no_gain` and tried again every
    `ps_cooldown_s`, all day long."""
    rps = signals.records_per_s
    if state.ps < spec.ps.max or not live or rps <= 0:
        return True  # the PS set may still grow (ps_hot), or nothing measured yet: probe
    average = rps / live
    busy = sum(signals.ps_cpu)
    gain = average if busy <= 0 else min(average, rps * (len(signals.ps_cpu) - busy) / busy)
    if gain <= 0 or gain < spec.scaling.min_gain * average:
        return False
    paying = _cost(spec, signals, _worker_counts(spec, plan), state.ps)
    return _price(spec, signals, market) / gain <= paying / rps + 1e-12


def _returns(spec: JobSpec, signals: Signals, state: PolicyState,
             plan: Draft) -> list[tuple[str, int, str]]:
    """Workers on a later market move to an earlier one that admits launches: drained (an
    exact hand-back) and launched there in the same interval, as (from market, how many, to).
    When the engine cannot say whether a market admits launches, one worker moves per
    interval (a probe)."""
    usable = _usable(spec, signals, state)
    if not usable:
        return []
    order = spec.workers.market_names
    best, moves = usable[0], []
    # A market whose launches got stuck is trusted again only once one there starts: until
    # then one worker moves at a time, and none while that one is still starting.
    unproven = state.stuck_strikes.get(best, 0) > 0
    if unproven and signals.pending.get((W, best), 0):
        return []
    budget = None if signals.admits is not None and not unproven else 1
    for market in reversed(order[order.index(best) + 1:]):
        n = plan.count(W, market)
        if budget is not None:
            n = min(n, budget)
            budget -= n
        if n:
            moves.append((market, n, best))
    return moves


def _drain(spec: JobSpec, plan: Draft, n: int, reason: Reason) -> None:
    """Drain from the least preferred market first."""
    for market in reversed(spec.workers.market_names):
        take = min(n, plan.count(W, market))
        plan.add(W, market, -take, reason)
        n -= take


def _fill(spec: JobSpec, signals: Signals, state: PolicyState, plan: Draft, n: int,
          growth: Reason | None) -> None:
    """Launch n workers on the fill market, each attributed to what made it needed. Those a
    deadline's wait held back come back on the first market when it returns, or on the next
    once the job fell behind its line."""
    market = _fill_market(spec, signals, state)
    have = sum(_worker_counts(spec, plan).values())
    rest = Reason.REPLACE_LOST  # anything else we wanted and do not have
    if state.held is not None:
        rest = (Reason.MARKET_RETURNED if market == spec.workers.market_names[0]
                else Reason.MARKET_UNAVAILABLE)
    causes = [
        (Reason.MARKET_UNAVAILABLE, signals.total(signals.failed_launches, W)
         + sum(-d for r, _, d, why in plan.steps
               if r == W and why is Reason.MARKET_UNAVAILABLE and d < 0)),
        (Reason.REPLACE_PREEMPTED, signals.total(signals.preempted, W)),
        (Reason.REPLACE_LOST, signals.total(signals.lost, W)),
        (Reason.BELOW_MIN, max(0, spec.workers.min - have)),
        (growth or Reason.BELOW_MIN, 1 if growth else 0),
    ]
    for reason, count in causes:
        take = min(n, count)
        plan.add(W, market, take, reason)
        n -= take
    plan.add(W, market, n, rest)


def _fit_budget(spec: JobSpec, signals: Signals, state: PolicyState, plan: Draft,
                target: int) -> int:
    """Drop workers, dearest market first, until the plan costs no more than the budget (never
    below workers.min: the spec's budget covers that floor)."""
    if not spec.scaling.budget_per_hour:
        return target
    while target > spec.workers.min:
        counts = _worker_counts(spec, plan)
        if _within_budget(spec, signals, counts, state.ps):
            break
        dearest = max((m for m, n in counts.items() if n > 0),
                      key=lambda m: (_price(spec, signals, m), spec.workers.market_names.index(m)))
        if not plan.cancel_launch(W, dearest):
            plan.add(W, dearest, -1, Reason.BUDGET)
        target = min(target, sum(counts.values()) - 1)
    return target
