"""A job the master drives, under faults, on the local engine with real processes:

- spot capacity taken away by the market trace and given back: the spot workers get a notice
  and hand their leases back exactly, on-demand workers replace them, and once spot admits
  launches again the workers go back to it; every record trained once;
- the leader master SIGKILLed while the job runs: the standby takes over from the durable
  state and adopts the processes (none launched twice, none orphaned), and the job finishes.
"""
from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest

from engines import process

from .jobs import db_rows, events, start_run, trained, wait_until, write_spec

pytestmark = pytest.mark.slow


def registered_workers(tmp: Path) -> int:
    return db_rows(tmp, "select count(*) from workers where state = 'alive'")[0][0]


def test_spot_taken_away_and_given_back(tmp_path, launcher):
    go = tmp_path / "go"
    trace = tmp_path / "trace.csv"
    trace.write_text("t_s,market,capacity\n0,spot,2\n15,spot,0\n25,spot,2\n")
    spec = write_spec(tmp_path, records=1000, slow_until=go, trace=str(trace), grace=3.0)
    run = start_run(launcher, spec, tmp_path / "summary.json")
    wait_until(lambda: [e for e in events(tmp_path, "node_preempted")
                        if e["market"] == "spot"], "a spot worker's notice", proc=run)
    wait_until(lambda: [e for e in events(tmp_path, "node_launched")
                        if e["market"] == "on-demand" and e["role"] == "worker"],
               "an on-demand worker", proc=run)
    wait_until(lambda: any(e["reason"] == "market_returned"
                           for e in events(tmp_path, "scale_decided")),
               "the workers going back to spot", proc=run)
    go.touch()
    assert run.wait(240) == 0, run.output(4000)
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["epochs_exact"] and summary["records"] == 1000
    # every record trained exactly once: the preempted workers handed their leases back
    assert sorted(trained(tmp_path)) == list(range(1000))
    reasons = summary["decisions_by_reason"]
    assert reasons.get("market_unavailable", 0) + reasons.get("replace_preempted", 0) >= 1
    assert reasons["market_returned"] >= 1
    ends = events(tmp_path, "node_exited")
    preempted = [e for e in ends if e["cause"] == "preempted"]
    assert preempted and all(e["market"] == "spot" for e in preempted)
    assert not [e for e in ends if e["cause"] in ("crashed", "lost")]
    assert {"spot", "on-demand"} <= set(summary["cost_by_market"])
    ids = [i for (i,) in db_rows(tmp_path, "select engine_id from job_processes") if i]
    assert not [i for i in ids if process.alive(i)]


def test_the_standby_carries_on_when_the_leader_is_sigkilled(tmp_path, launcher):
    go = tmp_path / "go"
    spec = write_spec(tmp_path, records=1000, slow_until=go, standbys=1)
    run = start_run(launcher, spec, tmp_path / "summary.json")
    wait_until(lambda: registered_workers(tmp_path) == 2 and len(trained(tmp_path)) >= 10,
               "two workers training", proc=run)
    launched_before = db_rows(tmp_path, "select name from job_processes order by name")
    ((address,),) = db_rows(tmp_path, "select address from leader")
    logs = sorted((tmp_path / "t-run" / "masters").glob("master*.log"))
    leader_log = next(f for f in logs if f"leading (term 1) at {address}" in f.read_text())
    (standby_log,) = [f for f in logs if f != leader_log]
    assert process.signal_group(int(Path(f"{leader_log}.pid").read_text()), signal.SIGKILL)
    wait_until(lambda: "processes adopted" in standby_log.read_text(),
               "the standby to take the job over", proc=run)
    assert "3 processes adopted" in standby_log.read_text()
    go.touch()
    assert run.wait(240) == 0, run.output(4000)
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["epochs_exact"] and summary["records"] == 1000
    assert sorted(trained(tmp_path)) == list(range(1000))
    # nothing launched twice: the PS and both workers are the ones the first leader started
    assert db_rows(tmp_path, "select name from job_processes order by name") == launched_before
    # none orphaned: the new leader saw each of them end, with its exit status
    rows = db_rows(tmp_path, "select name, state, exit_code, cause from job_processes")
    assert all(state == "exited" for _, state, _, _ in rows), rows
    assert sorted(cause for _, _, _, cause in rows) == ["finished", "finished", "job_finished"]
    ids = [i for (i,) in db_rows(tmp_path, "select engine_id from job_processes")]
    assert not [i for i in ids if process.alive(i)]
    assert db_rows(tmp_path, "select state from job") == [("finished",)]
