"""The demo's PS resize, small: the PS set grown 2 -> 3 while one worker trains and shrunk
back (real processes, no HA and no worker churn), and the summary's claims read from its
--json: each resize's events in order, the PS that left exited 0, every record exactly once,
no update lost."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from cluster.launch import CODE_ROOT, child_env

pytestmark = pytest.mark.slow

RECORDS, EPOCHS = 20000, 2  # long enough for a grow (a PS start-up) and then a shrink


def test_the_demo_grows_and_shrinks_the_ps_set_and_nothing_is_lost(tmp_path):
    summary_path = tmp_path / "summary.json"
    proc = subprocess.run(
        [sys.executable, "-m", "examples.ctr.demo", "--records", str(RECORDS),
         "--epochs", str(EPOCHS), "--shard-size", "200", "--batch-size", "16",
         # the AUC client scores once at the start and once at the end: idle for long, it
         # reads the layout again before its next call (a shrink removed a PS meanwhile)
         "--pace-s", "20", "--no-baseline", "--no-worker-churn", "--no-ha", "--eval-every", "1000",
         "--workdir", str(tmp_path / "run"), "--json", str(summary_path), "--timeout", "200"],
        cwd=CODE_ROOT, env=child_env(), capture_output=True, text=True, timeout=280)
    assert summary_path.exists(), proc.stdout[-3000:] + proc.stderr[-3000:]
    summary = json.loads(summary_path.read_text())
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
    assert summary["ok"] and proc.returncode == 0, proc.stdout[-3000:]
