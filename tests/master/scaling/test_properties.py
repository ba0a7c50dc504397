"""Property tests: whatever the signals, no decision takes a role outside [min, max] or the
job over its budget (hypothesis drives random specs and random interval sequences), with or
without a deadline (scaling.deadline_h: a wait holds no fewer than workers.min)."""
from __future__ import annotations

from hypothesis import given, settings, strategies as st

from master.job.spec import parse_spec
from master.scaling.policy import decide
from master.scaling.signals import Signals

MARKETS = ("spot", "preemptible", "on-demand")


@st.composite
def specs(draw):
    n_markets = draw(st.integers(1, 3))
    prices = draw(st.lists(st.floats(0, 5, allow_nan=False), min_size=n_markets,
                           max_size=n_markets))
    lo = draw(st.integers(0, 5))
    hi = draw(st.integers(max(lo, 1), 8))
    ps_lo = draw(st.integers(1, 3))
    ps_hi = draw(st.integers(ps_lo, 5))
    doc = {
        "name": "p",
        "workers": {"command": "train", "min": lo, "max": hi,
                    "markets": [{"name": m, "price": p} for m, p in zip(MARKETS, prices)]},
        "ps": {"count": draw(st.integers(ps_lo, ps_hi)), "min": ps_lo, "max": ps_hi},
        "master": {"standbys": draw(st.integers(0, 1))},
        "scaling": {"interval_s": 10, "spot_wait_s": draw(st.sampled_from([0, 10, 60])),
                    "ps_cooldown_s": draw(st.sampled_from([0, 30, 300])),
                    "ps_hot_intervals": draw(st.integers(1, 3)),
                    "deadline_h": draw(st.sampled_from([0, 0.5, 2, 100]))},
    }
    spec = parse_spec(doc)
    if draw(st.booleans()):  # a budget from the floors up to room for every worker
        floor = spec.floor_cost_per_hour()
        budget = floor + draw(st.floats(0, 1)) * hi * max(prices)
        if budget > 0:
            doc["scaling"]["budget_per_hour"] = budget
            spec = parse_spec(doc)
    return spec


def counts(draw, markets, hi):
    return {("worker", m): draw(st.integers(0, hi)) for m in markets}


@st.composite
def signals(draw, spec):
    markets = spec.workers.market_names
    small = st.integers(0, 2)
    running = counts(draw, markets, spec.workers.max + 2)
    running[("ps", spec.ps.market)] = draw(st.integers(0, spec.ps.max + 1))
    return Signals(
        records_per_s=draw(st.floats(0, 1e4, allow_nan=False)),
        ps_cpu=tuple(draw(st.lists(st.floats(0, 1), max_size=5))),
        running=running,
        pending={("worker", m): draw(small) for m in markets},
        preempted={("worker", m): draw(small) for m in markets},
        lost={("worker", m): draw(small) for m in markets},
        crashed={("worker", m): draw(st.integers(0, 1)) for m in markets},
        failed_launches={("worker", m): draw(small) for m in markets},
        admits=draw(st.one_of(st.none(), st.frozensets(st.sampled_from(markets)))),
        records_total=1e6, records_done=draw(st.floats(0, 1e6)),
    )


def cost(spec, workers: dict[str, int], ps: int) -> float:
    fixed = (1 + spec.master.standbys + ps) * spec.workers.price(spec.ps.market)
    return fixed + sum(n * spec.workers.price(m) for m, n in workers.items())


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_no_decision_takes_a_role_outside_its_bounds_or_the_job_over_budget(data):
    spec = data.draw(specs())
    w, now = spec.workers, 10.0
    # a job some way in: any target in bounds (growth is rare under random signals)
    _, state = decide(spec, Signals(), None, 0.0)
    state = state.with_(workers=data.draw(st.integers(w.min, w.max)),
                        ps=data.draw(st.integers(spec.ps.min, spec.ps.max)))
    for _ in range(data.draw(st.integers(1, 12))):
        s = data.draw(signals(spec))
        decisions, state = decide(spec, s, state, now)
        live = {m: s.live("worker", m) for m in w.market_names}
        ceiling = max(w.max, sum(live.values()))
        for d in decisions:
            # only a deadline's wait keeps a count (what the first market took, not replaced)
            assert d.to_count >= 0 and (d.to_count != d.from_count
                                        or d.reason.value == "ahead_of_deadline")
            assert d.market in (w.market_names if d.role.value == "worker"
                                else (spec.ps.market,))
            if d.role.value == "worker":
                assert live[d.market] == d.from_count  # decisions chain per market
                live[d.market] = d.to_count
                assert sum(live.values()) <= ceiling  # decreases come first
        backing_off = state.backoff_until is not None and now < state.backoff_until
        assert sum(live.values()) <= w.max
        assert w.min <= state.workers <= w.max
        if state.held is not None:
            assert w.min <= state.held <= state.workers and state.paced
        if not backing_off:
            held = state.workers if state.held is None else state.held
            assert sum(live.values()) == held
        assert spec.ps.min <= state.ps <= spec.ps.max
        budget = spec.scaling.budget_per_hour
        if budget:
            assert cost(spec, live, state.ps) <= budget + 1e-6
        now += spec.scaling.interval_s
