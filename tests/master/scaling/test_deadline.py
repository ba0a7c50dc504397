"""scaling.deadline_h on a fake clock: ahead of the uniform-progress line the workers spot takes
are not replaced on on-demand (workers.min kept) and the PS set shrinks cold; behind it, the
fallback as without a deadline; the line crossed both ways; a wait that does not pay."""
from __future__ import annotations

from master.scaling import pace
from master.scaling.policy import decide
from master.scaling.signals import Signals

from .helpers import brief, signals, spec, workers

# 10 h to finish; margin: spot_wait 60 + 10 s x (1 + 3 hot intervals) + 300 s x (3 - 1) PS
SPEC = spec(scaling={"deadline_h": 10})
MARGIN = 700.0
TOTAL = 36_000_000  # records: the line asks 1000 records a second
NOW = 3600.0


def test_the_margin_is_the_way_back_to_full_speed():
    assert pace.margin_s(SPEC) == MARGIN


def started(**changes):
    _, state = decide(SPEC, Signals(), None, 0.0)
    return state.with_(**{"workers": 3, **changes})


def at(done: float, running, **kw) -> Signals:
    return signals(running, records_done=done, records_total=TOTAL, **kw)


def ahead_by(seconds: float) -> float:
    """Records done that put the job `seconds` ahead of the line at NOW."""
    return (NOW + seconds) / 36_000 * TOTAL


def spot_gone(done: float, on_spot: int = 1, on_demand: int = 0) -> Signals:
    return at(done, workers(spot=on_spot, on_demand=on_demand),
              preempted=workers(spot=3 - on_spot), admits={"on-demand"})


def test_ahead_of_the_line_preempted_workers_are_not_replaced_on_a_later_market():
    decisions, state = decide(SPEC, spot_gone(ahead_by(3 * MARGIN)), started(), NOW)
    assert brief(decisions) == [("worker", "spot", 1, 1, "ahead_of_deadline")]
    assert (state.paced, state.held, state.workers) == (True, 1, 3)  # the target is kept


def test_behind_the_line_the_policy_falls_back_as_without_a_deadline():
    decisions, state = decide(SPEC, spot_gone(ahead_by(0)), started(), NOW)
    assert brief(decisions) == [("worker", "on-demand", 0, 2, "replace_preempted")]
    assert (state.paced, state.held) == (False, None)
    plain, _ = decide(spec(), spot_gone(ahead_by(0)), started(), NOW)
    assert brief(plain) == brief(decisions)


def test_workers_min_is_kept_on_the_next_market_while_waiting():
    held = spec(workers={"min": 2}, scaling={"deadline_h": 10})
    _, state = decide(held, Signals(), None, 0.0)
    s = at(ahead_by(3 * MARGIN), {}, preempted=workers(spot=3), admits={"on-demand"})
    decisions, state = decide(held, s, state.with_(workers=3), NOW)
    assert sorted(brief(decisions)) == [("worker", "on-demand", 0, 2, "replace_preempted"),
                                        ("worker", "spot", 0, 0, "ahead_of_deadline")]
    assert state.held == 2


def test_crossing_the_line_both_ways():
    state = started()
    _, state = decide(SPEC, spot_gone(ahead_by(3 * MARGIN)), state, NOW)
    # an hour on, one worker has not kept the job ahead: the held ones go to on-demand
    later = NOW + 3600
    behind = at((later + MARGIN / 2) / 36_000 * TOTAL, workers(spot=1), admits={"on-demand"})
    decisions, state = decide(SPEC, behind, state, later)
    assert brief(decisions) == [("worker", "on-demand", 0, 2, "market_unavailable")]
    assert (state.paced, state.held) == (False, None)
    # ahead again (by twice the margin, to start a wait): the on-demand workers are drained
    again = at((later + 10 + 3 * MARGIN) / 36_000 * TOTAL, workers(spot=1, on_demand=2),
               admits={"on-demand"})
    decisions, state = decide(SPEC, again, state, later + 10)
    assert brief(decisions) == [("worker", "on-demand", 2, 0, "ahead_of_deadline")]
    assert state.held == 1
    # spot admits launches again: the held-back workers come back there
    back = at((later + 20 + 3 * MARGIN) / 36_000 * TOTAL, workers(spot=1))
    decisions, state = decide(SPEC, back, state, later + 20)
    assert brief(decisions) == [("worker", "spot", 1, 3, "market_returned")]
    assert state.held is None


def test_a_wait_starts_twice_the_margin_ahead_and_ends_the_margin_ahead():
    between = spot_gone(ahead_by(1.5 * MARGIN))
    decisions, state = decide(SPEC, between, started(), NOW)
    assert not state.paced and ("worker", "on-demand", 0, 2, "replace_preempted") in \
        brief(decisions)
    decisions, state = decide(SPEC, between, started(paced=True), NOW)
    assert state.paced and state.held == 1


def test_no_wait_once_the_advanced_line_reaches_the_end_or_without_a_size():
    near_end = 36_000 - MARGIN / 2  # the line a margin on is past the deadline
    done_all_but_one = at(TOTAL - 1, workers(spot=1), preempted=workers(spot=2),
                          admits={"on-demand"})
    _, state = decide(SPEC, done_all_but_one, started(paced=True), near_end)
    assert not state.paced
    unknown = Signals(running=workers(spot=1), preempted=workers(spot=2),
                      admits={"on-demand"}, records_done=5)  # no dataset yet: total 0
    _, state = decide(SPEC, unknown, started(), NOW)
    assert not state.paced and state.held is None


def test_the_ps_set_shrinks_cold_while_the_wait_holds_fewer_workers():
    state = started(paced=True)
    _, state = decide(SPEC, spot_gone(ahead_by(3 * MARGIN)), state, NOW)
    cold = at(ahead_by(3 * MARGIN), workers(spot=1), ps_cpu=(0.1, 0.1), admits={"on-demand"})
    for i in range(1, 4):  # ps_hot_intervals intervals in a row
        decisions, state = decide(SPEC, cold, state, NOW + 10 * i)
    assert brief(decisions) == [("ps", "on-demand", 2, 1, "ps_cold")]
    assert state.workers == 3 and state.held == 1


def test_a_dip_that_leaves_the_ps_set_warm_is_not_waited_out():
    # 7 workers at 431,000 records/s on 4 PS of 763,000: spot down to 3 keeps the PS at 0.42 of
    # their CPU (not cold); on-demand workers then cost less per record than the job at full
    # speed, whose master and PS run on on-demand either way: the fallback is cheaper
    big = spec(workers={"max": 7}, ps={"count": 4, "min": 1, "max": 4},
               scaling={"deadline_h": 30})
    _, state = decide(big, Signals(), None, 0.0)
    state = state.with_(workers=7, paced=True, worker_speed=431_000.0, ps_speed=763_000.0)
    done = 0.5 * 240e9
    dip = Signals(running=workers(spot=3), preempted=workers(spot=4), admits={"on-demand"},
                  records_done=done, records_total=240e9, ps_cpu=(0.42,) * 4)
    decisions, after = decide(big, dip, state, NOW)
    assert brief(decisions) == [("worker", "on-demand", 0, 4, "replace_preempted")]
    assert after.held is None
    outage = Signals(running={}, preempted=workers(spot=7), admits={"on-demand"},
                     records_done=done, records_total=240e9, ps_cpu=(0.0,) * 4)
    decisions, after = decide(big, outage, state, NOW)
    assert sorted(brief(decisions)) == [("worker", "on-demand", 0, 1, "replace_preempted"),
                                        ("worker", "spot", 0, 0, "ahead_of_deadline")]
    assert after.held == 1


def test_speeds_are_read_only_over_an_interval_of_the_same_workers_and_no_hot_ps():
    state = started(running_workers=3, worker_speed=100.0, ps_speed=500.0)
    same = Signals(running=workers(spot=3), records_per_s=330.0, worker_rps=110.0,
                   ps_cpu=(0.33, 0.33))
    assert pace.speeds(SPEC, same, state, settled=True) == (110.0, 500.0)
    changed = Signals(running=workers(spot=4), records_per_s=330.0, worker_rps=82.5,
                      ps_cpu=(0.33, 0.33))
    assert pace.speeds(SPEC, changed, state, settled=True) == (100.0, 500.0)
    assert pace.speeds(SPEC, same, state, settled=False) == (100.0, 500.0)
    hot = Signals(running=workers(spot=3), records_per_s=300.0, worker_rps=100.0,
                  ps_cpu=(0.95, 0.95))  # throttled workers: the PS speed only
    assert pace.speeds(SPEC, hot, state, settled=True) == (100.0, 300.0 / 1.9)


def test_a_wait_starts_when_it_saves_5_percent_and_ends_when_it_costs_5_percent_more():
    # a dip at the break-even: 5 of 7 workers on spot at 431,000 records/s, 4 PS of 763,000
    big = spec(workers={"max": 7}, ps={"count": 4, "min": 1, "max": 4},
               scaling={"deadline_h": 30})
    _, state = decide(big, Signals(), None, 0.0)
    state = state.with_(workers=7, worker_speed=431_000.0, ps_speed=763_000.0)
    price = {"spot": 0.3, "on-demand": 1.0}.get
    held = {"spot": 5, "on-demand": 0}
    assert not pace.wait_pays(big, price, state, 7, held, "on-demand")
    assert pace.wait_pays(big, price, state.with_(held=1), 7, held, "on-demand")
    outage = {"spot": 0, "on-demand": 1}
    assert pace.wait_pays(big, price, state, 7, outage, "on-demand")
