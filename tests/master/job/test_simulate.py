"""The simulator: the policy's own code against a market trace, and the fixed baselines."""
from __future__ import annotations

import pytest

from engines.markets import MarketTrace
from master.job.simulate import Model, baseline_specs, compare, simulate
from master.job.spec import SpecError, parse_spec

SPEC = {
    "name": "sim",
    "workers": {"command": "train", "min": 1, "max": 4,
                "markets": [{"name": "spot", "price": 0.3}, {"name": "on-demand", "price": 1.0}]},
    "ps": {"count": 1, "max": 2},
}
# spot for an hour, gone for an hour, back
TRACE = MarketTrace.parse("t_s,market,capacity\n0,spot,4\n3600,spot,0\n7200,spot,4\n")
MODEL = Model(worker_rps=100.0, ps_capacity_rps=250.0)
RECORDS = 400 * 3 * 3600  # about three hours at full speed


def test_the_policy_falls_back_during_the_outage_and_returns_after_it():
    spec = parse_spec(SPEC)
    out = simulate(spec, TRACE, RECORDS, MODEL)
    assert out.finished and out.records == RECORDS and out.records_redone == 0
    assert out.decisions["replace_preempted"] >= 1 and out.decisions["market_returned"] >= 2
    # on-demand worker-hours: the outage, plus start-up and two intervals per worker at most
    slack = 4 * (MODEL.startup_s + 2 * spec.scaling.interval_s) / 3600
    assert 3.0 <= out.worker_hours["on-demand"] <= 4 * 1.0 + slack
    assert out.worker_hours["spot"] > out.worker_hours["on-demand"]


def test_the_baselines_hold_their_shape_and_the_policy_beats_spot_only_on_time():
    spec = parse_spec(SPEC)
    policy, baselines = compare(spec, TRACE, RECORDS, MODEL)
    assert set(baselines) == {"on-demand-max", "spot-only-max", "fixed-start"}
    on_demand, spot_only = baselines["on-demand-max"], baselines["spot-only-max"]
    assert set(on_demand.worker_hours) == {"on-demand"}
    assert set(spot_only.worker_hours) == {"spot"}
    assert spot_only.hours > policy.hours  # it waits out the outage
    assert policy.cost_per_million_records < on_demand.cost_per_million_records
    assert baselines["fixed-start"].hours > policy.hours  # one worker held
    for out in (policy, *baselines.values()):
        assert out.finished and out.records == RECORDS
        assert set(out.as_result()) == {"hours", "cost_per_million_records",
                                        "records_redone"}


def test_baseline_specs_leave_the_policy_nothing_to_decide():
    held = baseline_specs(parse_spec(SPEC))
    assert held["on-demand-max"].workers.market_names == ("on-demand",)
    assert held["spot-only-max"].workers.market_names == ("spot",)
    for name, spec in held.items():
        assert spec.workers.min == spec.workers.max, name
        assert spec.ps.min == spec.ps.max == spec.ps.count, name
    assert held["fixed-start"].workers.max == 1


def test_a_grace_shorter_than_the_hand_back_redoes_records():
    spec = parse_spec(SPEC)
    out = simulate(spec, TRACE, RECORDS, Model(100.0, 250.0, preempt_grace_s=0.5))
    assert out.finished and out.records_redone > 0


def test_a_run_that_cannot_finish_stops_at_max_hours_and_says_so():
    spec = parse_spec({**SPEC, "workers": {**SPEC["workers"], "markets": [
        {"name": "spot", "price": 0.3}]}, "ps": {"count": 1, "market": "spot"}})
    never = MarketTrace.parse("t_s,market,capacity\n0,spot,0\n")
    with pytest.raises(SpecError, match="ps.market"):
        compare(spec, never, RECORDS, MODEL)  # the PS's market is limited: refused
    out = simulate(spec, never, RECORDS, Model(100.0, 250.0, max_hours=2))
    assert not out.finished and out.records == 0 and out.as_result()["hours"] is None
    assert out.decisions.get("replace_preempted", 0) == 0


def test_a_spot_wait_shorter_than_the_start_up_does_not_bounce_the_workers_for_ever():
    # every launch takes 60 s to run and spot_wait_s is 20 s: a spot launch is always
    # cancelled as stuck although spot has room. The job must still train, and the policy
    # must not move the workers to spot and back every spot_wait_s (it did: 286 returns and
    # no record trained in two hours).
    spec = parse_spec({**SPEC, "workers": {**SPEC["workers"], "min": 2, "max": 2},
                       "scaling": {"interval_s": 10, "spot_wait_s": 20}})
    trace = MarketTrace.parse("t_s,market,capacity\n0,spot,8\n")
    model = Model(worker_rps=100.0, ps_capacity_rps=1e9, startup_s=60.0, max_hours=2.0)
    out = simulate(spec, trace, 10**12, model)
    assert out.records > 0.9 * 2 * model.worker_rps * 2 * 3600
    # two decisions per move; the rest doubles up to 32 * spot_wait_s: ~14 moves in 2 h
    assert out.decisions["market_returned"] <= 2 * 20


def test_a_ps_set_at_max_and_full_is_not_probed_with_workers_all_day():
    # 2 PS (ps.max) serve 310 records/s: the fourth worker would add 10, under min_gain (20)
    # of a worker's 100. The policy sees it from the PS's CPU and keeps 3 workers; it used to
    # launch the fourth, judge it no_gain and try again every ps_cooldown_s.
    spec = parse_spec({**SPEC, "ps": {"count": 2, "max": 2}})
    out = simulate(spec, TRACE, RECORDS, Model(worker_rps=100.0, ps_capacity_rps=155.0))
    assert out.finished and out.decisions.get("no_gain", 0) == 0
    assert out.decisions["throughput_gain"] == 2  # 1 -> 3 workers
