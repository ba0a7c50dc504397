"""The demo's high-availability path, small: the master leader and a PS primary SIGKILLed
during training (real processes), and the summary's exactness claims read from its --json."""
from __future__ import annotations

import pytest

from tests.examples.demo_run import run_demo

# a few PS starting on a loaded 2-core machine take minutes; the demo is interrupted first
pytestmark = [pytest.mark.slow, pytest.mark.timeout(540)]

RECORDS, EPOCHS = 8000, 2


def test_the_demo_kills_the_leader_and_a_primary_and_nothing_is_lost(tmp_path):
    summary, returncode, out = run_demo(
        tmp_path, "--records", str(RECORDS), "--epochs", str(EPOCHS), "--shard-size", "200",
        "--batch-size", "16", "--pace-s", "20", "--no-baseline", "--no-worker-churn",
        "--no-resize", "--leader-lease-s", "2", "--eval-every", "5", "--timeout", "300",
        timeout=450)
    run = summary["runs"][0]
    # every record of every epoch counted done exactly once, from the lease history
    assert run["audit"] == {}
    assert [(e["records_done"], e["records_total"]) for e in run["epochs"]] == \
        [(RECORDS, RECORDS)] * EPOCHS
    assert run["exactly_once"] and run["exit_codes"] == {"worker-1": 0}

    ha = summary["ha"]
    assert [k["role"] for k in ha["kills"]] == ["master", "ps"] and ha["skipped"] == []
    assert ha["updates_lost"] == 0
    master, primary = ha["kills"]
    # the leader changed, to the standby
    assert ha["leaders"][0] == master["victim"] != ha["leaders"][1] == master["successor"]
    # the killed index's generation went up by one, the other's did not move
    before = {int(i): g for i, g in ha["generations_before"].items()}
    after = {int(i): g for i, g in ha["generations_after"].items()}
    assert after == {i: g + (i == primary["index"]) for i, g in before.items()}
    assert primary["generation"] == before[primary["index"]]
    # training flowed again after each kill, after the takeover the master recorded
    for kill in ha["kills"]:
        assert kill["takeover_s"] is not None and kill["flowing_s"] is not None, kill
        assert 0 < kill["takeover_s"] <= kill["flowing_s"], kill
    # the old primary, started again, serves as a backup of the new generation (never as a
    # second primary); it and the other index's backup hold exactly what their primaries hold
    assert (primary["rejoined_role"], primary["rejoined_generation"]) == \
        ("backup", primary["generation"] + 1)
    assert ha["backups_compared"] == 2 and ha["backups_differ"] == []
    # the schedule: the two kills and the rejoin, each fired in order and its effect seen
    assert [(s["name"], s["state"]) for s in summary["steps"]] == [
        ("SIGKILL master leader", "settled"), ("SIGKILL PS primary", "settled"),
        ("old primary rejoins", "settled")]
    assert summary["every_step_fired_and_settled"]
    assert summary["ok"] and returncode == 0, out
