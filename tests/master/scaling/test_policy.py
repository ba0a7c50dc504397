"""The policy on synthetic signals and a fake clock: one test per reason, and the floors."""
from __future__ import annotations

import json

from master.scaling.decisions import Reason
from master.scaling.policy import decide
from master.scaling.signals import Signals
from master.scaling.state import Block, PolicyState, Probe

from .helpers import brief, signals, spec, workers

SPEC = spec()


def started(**changes) -> PolicyState:
    """A job that started at t=0 with 3 workers wanted and 2 PS."""
    _, state = decide(SPEC, Signals(), None, 0.0)
    return state.with_(**{"workers": 3, **changes})


def test_the_first_call_launches_the_ps_set_and_min_workers_on_the_first_market():
    decisions, state = decide(SPEC, Signals(), None, 0.0)
    assert sorted(brief(decisions)) == [("ps", "on-demand", 0, 2, "below_min"),
                                        ("worker", "spot", 0, 1, "below_min")]
    assert (state.started, state.workers, state.ps) == (0.0, 1, 2)


def test_a_preempted_worker_is_replaced_at_the_next_interval_on_the_first_market():
    s = signals(workers(spot=2), preempted=workers(spot=1), preempting=workers(spot=1))
    decisions, _ = decide(SPEC, s, started(), 10.0)
    assert brief(decisions) == [("worker", "spot", 2, 3, "replace_preempted")]


def test_a_preempted_worker_goes_to_the_next_market_when_the_first_admits_nothing():
    s = signals(workers(spot=2), preempted=workers(spot=1), admits={"on-demand"})
    decisions, _ = decide(SPEC, s, started(), 10.0)
    assert brief(decisions) == [("worker", "on-demand", 0, 1, "replace_preempted")]


def test_a_lost_worker_is_replaced():
    s = signals(workers(spot=2), lost=workers(spot=1))
    decisions, _ = decide(SPEC, s, started(), 10.0)
    assert brief(decisions) == [("worker", "spot", 2, 3, "replace_lost")]


def test_a_failed_launch_moves_to_the_next_market_and_blocks_the_first():
    s = signals(workers(spot=2), failed_launches=workers(spot=1), admits={"on-demand"})
    decisions, state = decide(SPEC, s, started(), 10.0)
    assert brief(decisions) == [("worker", "on-demand", 0, 1, "market_unavailable")]
    assert state.blocked["spot"].saw_closed
    # still blocked while the engine says the market admits nothing: growth goes on-demand
    s = signals(workers(spot=2, on_demand=1), admits={"on-demand"})
    decisions, state = decide(SPEC, s, state, 20.0)
    assert brief(decisions) == [("worker", "on-demand", 1, 2, "throughput_gain")]
    assert "spot" in state.blocked


def test_a_launch_pending_for_spot_wait_s_is_cancelled_and_made_on_the_next_market():
    state = started()
    s = signals(workers(spot=2), pending=workers(spot=1))
    for now in (10.0, 40.0, 69.0):
        decisions, state = decide(SPEC, s, state, now)
        assert brief(decisions) == [], now
    decisions, state = decide(SPEC, s, state, 70.0)  # pending since 10: 60 s = spot_wait_s
    assert brief(decisions) == [("worker", "spot", 3, 2, "market_unavailable"),
                                ("worker", "on-demand", 0, 1, "market_unavailable")]
    assert "spot" in state.blocked


def test_workers_return_to_the_first_market_when_it_admits_launches_again():
    state = started(blocked={"spot": Block(since=10.0, saw_closed=True)})
    s = signals(workers(spot=1, on_demand=2), admits={"spot", "on-demand"})
    decisions, state = decide(SPEC, s, state, 20.0)
    assert brief(decisions) == [("worker", "on-demand", 2, 0, "market_returned"),
                                ("worker", "spot", 1, 3, "market_returned")]
    assert state.blocked == {}


def test_an_engine_that_cannot_tell_gets_a_probe_after_spot_wait_s_one_worker_at_a_time():
    state = started(workers=4, blocked={"spot": Block(since=10.0, saw_closed=False)})
    s = signals(workers(on_demand=4))  # admits=None: the engine cannot say
    decisions, state = decide(SPEC, s, state, 30.0)
    assert brief(decisions) == []  # 20 s < spot_wait_s
    decisions, state = decide(SPEC, s, state, 70.0)
    assert brief(decisions) == [("worker", "on-demand", 4, 3, "market_returned"),
                                ("worker", "spot", 0, 1, "market_returned")]


def test_one_more_worker_while_the_last_one_added_paid_for_itself():
    state = started(workers=2)
    decisions, state = decide(SPEC, signals(workers(spot=2), records_per_s=200.0), state, 10.0)
    assert brief(decisions) == [("worker", "spot", 2, 3, "throughput_gain")]
    assert state.probe == Probe(200.0, 2, None)
    decisions, state = decide(SPEC, signals(workers(spot=2), pending=workers(spot=1),
                                            records_per_s=200.0), state, 20.0)
    assert brief(decisions) == []  # still starting
    decisions, state = decide(SPEC, signals(workers(spot=3), records_per_s=260.0), state, 30.0)
    assert brief(decisions) == [] and state.probe.ready_at == 30.0  # judged an interval on
    # +90 records/s >= 0.2 of the 100 a worker made: kept, and one more
    decisions, state = decide(SPEC, signals(workers(spot=3), records_per_s=290.0), state, 40.0)
    assert brief(decisions) == [("worker", "spot", 3, 4, "throughput_gain")]
    assert state.last_gain == 90.0 and state.workers == 4


def test_one_fewer_when_it_did_not_and_no_new_probe_until_the_cooldown():
    state = started(workers=3, probe=Probe(200.0, 2, 30.0))
    decisions, state = decide(SPEC, signals(workers(spot=3), records_per_s=210.0), state, 40.0)
    assert brief(decisions) == [("worker", "spot", 3, 2, "no_gain")]
    assert state.workers == 2 and state.hold_until == 340.0
    decisions, state = decide(SPEC, signals(workers(spot=2), records_per_s=200.0), state, 50.0)
    assert brief(decisions) == []
    decisions, _ = decide(SPEC, signals(workers(spot=2), records_per_s=200.0), state, 340.0)
    assert brief(decisions) == [("worker", "spot", 2, 3, "throughput_gain")]


def test_no_worker_is_added_while_a_ps_is_hot_and_the_set_may_still_grow():
    state = started(workers=2)
    s = signals(workers(spot=2), ps_cpu=(0.95, 0.5))
    decisions, _ = decide(SPEC, s, state, 10.0)
    assert brief(decisions) == []
    # at ps.max no PS can be added: the throughput probe alone says whether a worker helps
    decisions, _ = decide(SPEC, s, state.with_(ps=3), 10.0)
    assert brief(decisions) == [("worker", "spot", 2, 3, "throughput_gain")]


def test_no_probe_at_ps_max_when_the_ps_set_has_no_room_for_another_worker():
    # 3 PS (ps.max) at 0.99 of their CPU serve 300 records/s: what they leave idle is 3
    # records/s, under min_gain (0.2) of the 100 a worker makes: no worker launched to find out
    state = started(workers=3, ps=3)
    full = signals(workers(spot=3), ps_cpu=(0.99, 0.99, 0.99))
    for now in (10.0, 20.0, 400.0):
        decisions, state = decide(SPEC, full, state, now)
        assert brief(decisions) == [] and state.probe is None, now
    # at 0.9 they leave 33 records/s idle: worth a probe
    roomy = signals(workers(spot=3), ps_cpu=(0.9, 0.9, 0.9))
    decisions, state = decide(SPEC, roomy, state, 410.0)
    assert brief(decisions) == [("worker", "spot", 3, 4, "throughput_gain")]
    # one worker with every PS at 0.88 (not hot): 13.6 records/s of room, under 20. At ps.max
    # no probe; below it the probe judges the worker as before (the set grows once hot)
    busy = signals(workers(spot=1), ps_cpu=(0.88, 0.88, 0.88))
    decisions, _ = decide(SPEC, busy, started(workers=1, ps=3), 10.0)
    assert brief(decisions) == []
    busy = signals(workers(spot=1), ps_cpu=(0.88, 0.88))
    decisions, _ = decide(SPEC, busy, started(workers=1, ps=2), 10.0)
    assert brief(decisions) == [("worker", "spot", 1, 2, "throughput_gain")]


def test_no_probe_for_a_worker_whose_predicted_cost_per_record_is_above_the_job_s():
    # the same 33 records/s of room: a spot worker (0.3/h) makes them cheaper than the job's
    # (4 + 0.9) / 300 per record-hour; an on-demand one (1.0/h) dearer than (4 + 3) / 300
    state = started(workers=3, ps=3)
    s = signals(workers(on_demand=3), ps_cpu=(0.9, 0.9, 0.9), admits={"on-demand"})
    decisions, _ = decide(SPEC, s, state, 10.0)
    assert brief(decisions) == []
    # with the PS set's room for a whole worker, the on-demand one pays for itself
    s = signals(workers(on_demand=3), ps_cpu=(0.5, 0.5, 0.5), admits={"on-demand"})
    decisions, _ = decide(SPEC, s, state, 10.0)
    assert brief(decisions) == [("worker", "on-demand", 3, 4, "throughput_gain")]


def test_ps_plus_one_after_ps_hot_intervals_hot_intervals_and_the_cooldown():
    state = started(workers=4)  # at workers.max: no growth to tell apart
    hot = signals(workers(spot=4), ps_cpu=(0.95, 0.4))
    for now in (290.0, 300.0):
        decisions, state = decide(SPEC, hot, state, now)
        assert brief(decisions) == []
    decisions, state = decide(SPEC, hot, state, 310.0)  # the third hot interval, cooled
    assert brief(decisions) == [("ps", "on-demand", 2, 3, "ps_hot")]
    assert (state.ps, state.last_ps_change, state.hot_intervals) == (3, 310.0, 0)
    for now in (320.0, 330.0, 340.0, 600.0):  # hot again, but within the cooldown
        decisions, state = decide(SPEC, hot, state, now)
        assert brief(decisions) == []
    decisions, state = decide(SPEC, hot, state, 620.0)
    assert brief(decisions) == []  # ps.max = 3


def test_ps_minus_one_when_every_ps_is_cold_not_below_min():
    state = started(workers=4)  # at workers.max: no growth to tell apart
    cold = signals(workers(spot=4), ps_cpu=(0.1, 0.2))
    decisions, state = decide(SPEC, cold, state, 100.0)
    assert brief(decisions) == []  # the cooldown counts from the start
    for now in (280.0, 290.0):
        decisions, state = decide(SPEC, cold, state, now)
        assert brief(decisions) == []
    decisions, state = decide(SPEC, signals(workers(spot=4), ps_cpu=(0.5, 0.2)), state, 295.0)
    assert state.cold_intervals == 0  # one warm PS ends the cold stretch
    for now in (300.0, 310.0):
        decisions, state = decide(SPEC, cold, state, now)
        assert brief(decisions) == []
    decisions, state = decide(SPEC, cold, state, 320.0)  # the third cold interval in a row
    assert brief(decisions) == [("ps", "on-demand", 2, 1, "ps_cold")]
    decisions, state = decide(SPEC, signals(workers(spot=4), ps_cpu=(0.1,)), state, 900.0)
    assert brief(decisions) == []  # ps.min = 1


def test_never_above_the_budget_dearest_market_drained_first():
    # floors: (master + 3 PS) * 1.0 + 1 worker * 1.0 = 5.0 per hour
    tight = spec(scaling={"budget_per_hour": 6.0})
    state = started(workers=3, ps=3)
    s = signals(workers(spot=1, on_demand=2), admits={"on-demand"})  # after a fallback
    decisions, state = decide(tight, s, state, 10.0)  # 4 + 0.3 + 2 = 6.3
    assert brief(decisions) == [("worker", "on-demand", 2, 1, "budget")]
    assert state.workers == 2
    # a replacement that fits is made; one that would go over it is not
    s = signals(workers(spot=1), preempted=workers(spot=1), admits={"on-demand"})
    decisions, state = decide(tight, s, state.with_(workers=2), 20.0)
    assert brief(decisions) == [("worker", "on-demand", 0, 1, "replace_preempted")]
    s = signals(workers(on_demand=1), preempted=workers(spot=2), admits={"on-demand"})
    decisions, state = decide(tight, s, state.with_(workers=3), 30.0)
    assert brief(decisions) == [("worker", "on-demand", 1, 2, "replace_preempted")]
    assert state.workers == 2


def test_a_worker_is_not_added_when_the_budget_does_not_allow_it():
    tight = spec(scaling={"budget_per_hour": 6.0})
    s = signals(workers(on_demand=2), admits={"on-demand"})  # 4 + 2 = 6: full
    decisions, _ = decide(tight, s, started(workers=2, ps=3), 10.0)
    assert brief(decisions) == []
    decisions, _ = decide(spec(), s, started(workers=2, ps=3), 10.0)
    assert brief(decisions) == [("worker", "on-demand", 2, 3, "throughput_gain")]


def test_above_max_drains_the_least_preferred_market_first():
    state = started(workers=6)  # e.g. a standby taking over from a spec with a larger max
    decisions, state = decide(SPEC, signals(workers(spot=4, on_demand=2)), state, 10.0)
    assert brief(decisions) == [("worker", "on-demand", 2, 0, "above_max")]
    assert state.workers == 4


def test_a_command_that_exits_at_once_is_relaunched_with_a_growing_back_off():
    state = started(workers=2)
    crash = signals(workers(spot=1), lost=workers(spot=1), crashed=workers(spot=1))
    decisions, state = decide(SPEC, crash, state, 10.0)
    assert brief(decisions) == [] and state.backoff_until == 20.0
    decisions, state = decide(SPEC, signals(workers(spot=1)), state, 20.0)
    assert brief(decisions) == [("worker", "spot", 1, 2, "replace_lost")]
    decisions, state = decide(SPEC, crash, state, 30.0)
    assert brief(decisions) == [] and state.backoff_until == 50.0  # doubled
    decisions, state = decide(SPEC, signals(workers(spot=1)), state, 40.0)
    assert brief(decisions) == []


def test_min_is_held_and_the_reasons_are_the_design_s():
    assert {r.value for r in Reason} == {
        "below_min", "replace_preempted", "replace_lost", "market_unavailable",
        "market_returned", "throughput_gain", "no_gain", "ps_hot", "ps_cold", "budget",
        "above_max", "ahead_of_deadline"}  # the last: scaling.deadline_h, an extension
    held = spec(workers={"min": 3})
    decisions, _ = decide(held, signals(workers(spot=1)), started(workers=3), 10.0)
    assert brief(decisions) == [("worker", "spot", 1, 3, "below_min")]


def test_the_state_survives_a_json_round_trip():
    state = started(blocked={"spot": Block(10.0, True)}, probe=Probe(1.0, 2, None),
                    pending_since={"spot": 5.0}, stuck_strikes={"spot": 2})
    again = PolicyState.from_dict(json.loads(json.dumps(state.to_dict())))
    assert again == state


def test_every_decision_carries_the_signals_it_saw():
    s = signals(workers(spot=2), lost=workers(spot=1))
    (decision,), _ = decide(SPEC, s, started(), 10.0)
    event = decision.as_event()
    assert event["reason"] == "replace_lost" and event["signals"]["lost"] == {"worker/spot": 1}
    assert json.loads(json.dumps(event)) == event


def test_a_ps_change_ends_the_hold_after_no_gain():
    state = started(workers=2, hold_until=400.0, hold_ps=2)
    s = signals(workers(spot=2))
    decisions, _ = decide(SPEC, s, state, 100.0)
    assert brief(decisions) == []  # held
    decisions, _ = decide(SPEC, s, state.with_(ps=3), 100.0)  # the set grew: try again
    assert brief(decisions) == [("worker", "spot", 2, 3, "throughput_gain")]


def test_spot_wait_s_zero_waits_on_pending_launches_for_ever():
    patient = spec(scaling={"spot_wait_s": 0})
    state = started()
    s = signals(workers(spot=2), pending=workers(spot=1))
    for now in (10.0, 1000.0, 5000.0):
        decisions, state = decide(patient, s, state, now)
        assert brief(decisions) == [] and state.blocked == {}


def test_a_preemption_spoils_the_throughput_probe():
    state = started(workers=3, probe=Probe(200.0, 2, 30.0))
    s = signals(workers(spot=2), preempted=workers(spot=1))
    decisions, state = decide(SPEC, s, state, 40.0)
    assert brief(decisions) == [("worker", "spot", 2, 3, "replace_preempted")]
    assert state.probe is None and state.workers == 3  # not judged: no no_gain


def test_a_market_whose_launch_got_stuck_is_retried_one_worker_at_a_time_after_a_growing_rest():
    # spot_wait_s shorter than a worker's start-up: the launch is still starting, not refused
    quick = spec(workers={"min": 3, "max": 3}, scaling={"spot_wait_s": 20})
    state = started()
    s = signals(workers(spot=2), pending=workers(spot=1), admits={"spot", "on-demand"})
    _, state = decide(quick, s, state, 10.0)
    decisions, state = decide(quick, s, state, 30.0)
    assert ("worker", "spot", 3, 2, "market_unavailable") in brief(decisions)
    assert state.stuck_strikes == {"spot": 1}
    # the engine still says spot admits launches: that alone is no return before the rest
    moved = signals(workers(spot=2, on_demand=1), admits={"spot", "on-demand"})
    decisions, state = decide(quick, moved, state, 40.0)
    assert brief(decisions) == []
    decisions, state = decide(quick, moved, state, 50.0)  # 20 s after the block
    assert brief(decisions) == [("worker", "on-demand", 1, 0, "market_returned"),
                                ("worker", "spot", 2, 3, "market_returned")]
    # stuck again: blocked again, and the rest before the next try doubles
    s = signals(workers(spot=2), pending=workers(spot=1), admits={"spot", "on-demand"})
    _, state = decide(quick, s, state, 60.0)
    decisions, state = decide(quick, s, state, 80.0)
    assert ("worker", "spot", 3, 2, "market_unavailable") in brief(decisions)
    assert state.stuck_strikes == {"spot": 2}
    decisions, state = decide(quick, moved, state, 110.0)  # 30 s < 2 * 20
    assert brief(decisions) == []
    decisions, state = decide(quick, moved, state, 120.0)
    assert brief(decisions)[0][-1] == "market_returned"


def test_a_stuck_market_takes_one_worker_until_a_launch_there_starts_then_the_rest():
    state = started(workers=4, blocked={"spot": Block(since=0.0)}, stuck_strikes={"spot": 1})
    on_demand = signals(workers(on_demand=4), admits={"spot", "on-demand"})
    decisions, state = decide(SPEC, on_demand, state, 60.0)  # the rest (60 s) is over
    assert brief(decisions) == [("worker", "on-demand", 4, 3, "market_returned"),
                                ("worker", "spot", 0, 1, "market_returned")]
    starting = signals(workers(on_demand=3), pending=workers(spot=1),
                       admits={"spot", "on-demand"})
    decisions, state = decide(SPEC, starting, state, 70.0)
    assert brief(decisions) == []  # nothing more moves while the one on spot is starting
    up = signals(workers(on_demand=3, spot=1), admits={"spot", "on-demand"})
    decisions, state = decide(SPEC, up, state, 80.0)
    assert state.stuck_strikes == {}
    assert brief(decisions) == [("worker", "on-demand", 3, 0, "market_returned"),
                                ("worker", "spot", 1, 4, "market_returned")]


def test_a_launch_pending_on_the_last_market_is_never_cancelled():
    state = started(blocked={"spot": Block(since=0.0, saw_closed=True)})
    s = signals(workers(on_demand=2), pending=workers(on_demand=1), admits={"on-demand"})
    for now in (10.0, 70.0, 200.0):
        decisions, state = decide(SPEC, s, state, now)
        assert brief(decisions) == [], now


def _relaunch_waits(fails_after_s: float, crashes: int) -> list[float]:
    """The waits between a crash and the relaunch, for a command that fails `fails_after_s`
    after each launch (before it is up), on the fake clock with the default 10 s interval."""
    two = spec(workers={"min": 2, "max": 2})  # no growth probe in the way
    state, now, waits = started(workers=2), 0.0, []
    launched, crashed_at = 0.0, None  # the second worker's launch, its last crash
    while len(waits) < crashes and now < 100_000:
        now += 10.0
        crash = launched is not None and now - launched >= fails_after_s
        if crash:
            s = signals(workers(spot=1), lost=workers(spot=1), crashed=workers(spot=1))
            crashed_at, launched = now, None
        else:
            s = signals(workers(spot=1 if launched is None else 2))
        decisions, state = decide(two, s, state, now)
        if any(d.role.value == "worker" and d.delta > 0 for d in decisions):
            launched = now
            waits.append(now - crashed_at)
    return waits


def test_a_command_that_fails_a_while_after_its_start_still_backs_off():
    # fails 15 s in: more than the first wait (10 s), which used to end the streak every time
    waits = _relaunch_waits(15.0, 8)
    assert waits[:3] == [10.0, 20.0, 40.0]
    assert waits[-1] == 10.0 * 32  # up to the cap, never back to one interval


def test_the_crash_streak_ends_once_a_relaunch_runs_the_longest_wait_without_a_crash():
    state = started(workers=2)
    crash = signals(workers(spot=1), lost=workers(spot=1), crashed=workers(spot=1))
    _, state = decide(SPEC, crash, state, 10.0)
    _, state = decide(SPEC, crash, state, 30.0)
    assert state.crash_streak == 2 and state.backoff_until == 50.0
    _, state = decide(SPEC, signals(workers(spot=2)), state, 50.0 + 319.0)
    assert state.crash_streak == 2  # 319 s up: not yet
    _, state = decide(SPEC, signals(workers(spot=2)), state, 50.0 + 320.0)
    assert state.crash_streak == 0 and state.backoff_until is None
    decisions, state = decide(SPEC, crash, state, 400.0)
    assert state.backoff_until == 410.0  # a fresh streak: one interval
