"""bench_resize's numbers from a step log (benchmarks/resize/report.py) and the counter replay
its exactness check compares against (benchmarks/resize/worker.py); no process is started."""
from __future__ import annotations

import math

from benchmarks.resize import report
from benchmarks.resize.run import Phase
from benchmarks.resize.worker import LR, counter_steps, replay_counter


def log(ends, waits, batch=10):
    return {"end": ends, "wait": waits, "batch": batch}


def test_a_live_phase_counts_its_steps_against_those_before_and_its_longest_wait():
    # 100 steps/s until t=10, then a 2 s resize at 25 steps/s with one 0.6 s wait
    ends = [i / 100 for i in range(1, 1001)]
    during = [10 + 0.04 * k for k in range(1, 51)]
    waits = [0.005] * 1000 + [0.01] * 50
    waits[1000 + 10] = 0.6
    phase = Phase("live", 2, 4, started=10.0, finished=12.0)
    phase.events = [("ps_registered", 10.5, ""), ("ps_resize_finished", 12.0, "")]
    row = report.measure(phase, log(ends + during, waits), steps_before=100)
    assert row["records_per_s_before"] == 1000.0
    assert row["steps_during"] == 50 and row["records_per_s_during"] == 250.0
    assert row["ratio"] == 0.25 and row["longest_wait_s"] == 0.6
    assert row["joined_s"] == 0.5 and row["moving_s"] == 1.5
    assert row["ratio_moving"] == round(38 * 10 / 1.5 / 1000, 3)  # steps 13..50 end after 10.5 s
    assert report.met(row) == {"seconds": True, "ratio": False, "longest_wait": True}


def test_a_step_in_flight_when_the_phase_starts_counts_as_a_wait_during_it():
    ends = [1.0, 2.0, 3.5, 4.0]
    row = report.measure(Phase("live", 2, 4, started=3.0, finished=3.2),
                         log(ends, [0.1, 0.1, 1.2, 0.1]), steps_before=2)
    assert row["longest_wait_s"] == 1.2


def test_stop_the_world_waits_the_whole_pause():
    ends = [1.0, 2.0, 3.0, 9.0]
    phase = Phase("stop-the-world", 2, 4, started=3.0, finished=9.0)
    phase.marks = {"paused": 3.1, "first_step": 9.0}
    row = report.measure(phase, log(ends, [0.1] * 4), steps_before=2)
    assert row["longest_wait_s"] == 6.0 and row["steps"] == {"paused": 0.1, "first_step": 6.0}
    assert any("seconds after the pause" in line for line in report.table([row], 100))


def test_the_counter_replay_is_adagrad_on_gradients_of_minus_one():
    # Adagrad: sum = k after k steps, each step adds lr / sqrt(k) (eps 1e-10)
    expected = sum(LR / (math.sqrt(k) + 1e-10) for k in range(1, 51))
    assert abs(replay_counter(50) - expected) < 1e-5 and replay_counter(0) == 0.0


def test_an_inexact_run_says_which_pushes_were_lost_or_doubled_and_where():
    # a counter's value read back as the steps that made it, one short of those answered
    assert counter_steps(replay_counter(40), 41) == 40
    assert counter_steps(replay_counter(40) + 1.0, 41) is None
    d = {"answered": 41, "rows": [{"row": 3, "slot": 9, "error": -1.0},
                                  {"row": 8, "slot": 2, "error": 1.0}],
         "counters": {"count.0": {"got": 0.0, "steps": 40}, "count.1": {"got": 0.0, "steps": 41}}}
    text = report.diagnosis(d)
    assert "1 pushes lost, 1 applied twice, slots [2, 9]" in text
    assert "'count.0': -1" in text and "count.1" not in text
