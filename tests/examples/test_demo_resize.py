"""The demo's PS resize, small: the PS set grown 2 -> 3 while one worker trains and shrunk
back (real processes, no HA and no worker churn), and the summary's claims read from its
--json: each resize's events in order, the PS that left exited 0, every record exactly once,
no update lost."""
from __future__ import annotations

import pytest

from tests.examples.demo_run import run_demo

# a few PS starting on a loaded 2-core machine take minutes; the demo is interrupted first
pytestmark = [pytest.mark.slow, pytest.mark.timeout(540)]

RECORDS, EPOCHS = 20000, 2  # long enough for a grow (a PS start-up) and then a shrink


def test_the_demo_grows_and_shrinks_the_ps_set_and_nothing_is_lost(tmp_path):
    summary, returncode, out = run_demo(
        tmp_path, "--records", str(RECORDS), "--epochs", str(EPOCHS), "--shard-size", "200",
        "--batch-size", "16", "--pace-s", "20", "--no-baseline", "--no-worker-churn",
        "--no-ha", "--timeout", "300",
        # the AUC client scores once at the start and once at the end: idle for long, it
        # reads the layout again before its next call (a shrink removed a PS meanwhile)
        "--eval-every", "1000", timeout=450)
    run = summary["runs"][0]
    assert run["audit"] == {} and run["exactly_once"] and run["exit_codes"] == {"worker-1": 0}
    assert [(e["records_done"], e["records_total"]) for e in run["epochs"]] == \
        [(RECORDS, RECORDS)] * EPOCHS
    resized = summary["resize"]
    assert resized["asked"] == [[2, 3], [3, 2]] and resized["skipped"] == []
    assert [(s["before"], s["after"]) for s in resized["seen"]] == [(2, 3), (3, 2)]
    assert all(s["slots_moved"] > 0 and s["finished_s"] is not None for s in resized["seen"])
    assert resized["left"] == {"ps2": 0}
    assert resized["final_num_ps"] == 2 and resized["updates_lost"] == 0
    assert [(s["name"], s["state"]) for s in summary["steps"]] == [
        ("grow PS set", "settled"), ("shrink PS set", "settled")]
    assert summary["ok"] and returncode == 0, out
