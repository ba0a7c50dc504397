"""Nothing a job launched outlives `elastic-job run`, on the local engine, with real processes:

- every master SIGKILLed while the job runs (leader and standby): elastic-job stops the PS
  and workers the leader launched, says so (its output, `--json` state `masters_lost`) and
  exits 1; a new `elastic-job run` on the same database continues the job to an exact end;
- elastic-job itself SIGKILLed: its masters see it gone (`--job-owner`), stop the job as
  Ctrl-C would (workers hand their leases back exactly) and exit.

Every process of the job is checked by the identity the engine reported (pid and start time,
from the job's database and the masters' pid files), and any left by a failing test is killed
by that identity, never by name.
"""
from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest

from engines import process

from .jobs import db_rows, events, start_run, trained, wait_until, write_spec

pytestmark = pytest.mark.slow


def master_ids(tmp: Path) -> list[str]:
    """The identity of each master's process group leader (its wrapper), from its pid file."""
    files = sorted((tmp / "t-run" / "masters").glob("master*.log.pid"))
    return [process.identity(int(f.read_text())) for f in files]


def job_ids(tmp: Path) -> list[str]:
    return [i for (i,) in db_rows(tmp, "select engine_id from job_processes") if i]


def alive(ids: list[str]) -> list[str]:
    return [i for i in ids if process.alive(i)]


def kill_left(ids: list[str]) -> None:
    """A failing test leaves nothing of its own running (their groups, by identity)."""
    for ident in alive(ids):
        process.signal_group(int(ident.partition(":")[0]), signal.SIGKILL)


def training(tmp: Path) -> bool:
    workers = db_rows(tmp, "select count(*) from workers where state = 'alive'")[0][0]
    running = db_rows(tmp, "select role from job_processes where state = 'running'")
    return workers == 2 and sorted(r for (r,) in running) == ["ps", "worker", "worker"] \
        and len(trained(tmp)) >= 10


def test_every_master_sigkilled_elastic_job_stops_what_the_job_launched(tmp_path, launcher):
    go = tmp_path / "go"
    spec = write_spec(tmp_path, records=600, slow_until=go, standbys=1)
    run = start_run(launcher, spec, tmp_path / "summary.json")
    ids: list[str] = []
    try:
        wait_until(lambda: training(tmp_path), "the PS and two workers training", proc=run)
        masters = master_ids(tmp_path)
        running = {name: ident for name, ident in db_rows(
            tmp_path, "select name, engine_id from job_processes where state = 'running'")}
        ids = masters + list(running.values())
        assert len(masters) == 2 and len(alive(ids)) == 5
        for ident in masters:  # the leader and the standby, a moment apart
            assert process.signal_group(int(ident.partition(":")[0]), signal.SIGKILL)

        assert run.wait(180) == 1, run.output(4000)
        out = run.output()
        assert "every master exited before the job ended" in out
        assert "masters_lost: 3 processes" in out, out[-3000:]
        summary = json.loads((tmp_path / "summary.json").read_text())
        assert summary["state"] == "masters_lost"
        assert {p["name"]: p["id"] for p in summary["stopped"]} == running
        assert not alive(ids + job_ids(tmp_path))
        # recorded as a leader would: their rows ended, a node_exited event each
        ended = db_rows(tmp_path, "select name, state, cause from job_processes")
        assert {n for n, state, cause in ended if (state, cause) == ("exited", "masters_lost")} \
            == set(running)
        lost = [e for e in events(tmp_path, "node_exited") if e["cause"] == "masters_lost"]
        assert sorted(e["name"] for e in lost) == sorted(running)
        # the job itself still runs in the database: a new run continues it to an exact end
        go.touch()
        again = start_run(launcher, spec, tmp_path / "summary.json")
        assert again.wait(240) == 0, again.output(4000)
        summary = json.loads((tmp_path / "summary.json").read_text())
        assert summary["state"] == "finished" and summary["epochs_exact"]
        assert set(trained(tmp_path)) == set(range(600))
        ids += master_ids(tmp_path) + job_ids(tmp_path)
        assert not alive(ids)
    finally:
        kill_left(ids + job_ids(tmp_path))


def test_elastic_job_sigkilled_its_masters_stop_the_job_and_exit(tmp_path, launcher):
    go = tmp_path / "go"  # never created: the workers train slowly until stopped
    spec = write_spec(tmp_path, records=2000, slow_until=go, standbys=1)
    run = start_run(launcher, spec, tmp_path / "summary.json")
    ids: list[str] = []
    try:
        wait_until(lambda: training(tmp_path), "the PS and two workers training", proc=run)
        ids = master_ids(tmp_path) + job_ids(tmp_path)
        assert len(alive(ids)) == 5
        run.signal(signal.SIGKILL)  # elastic-job alone: its masters run in sessions of their own
        assert run.wait(30) == -signal.SIGKILL

        wait_until(lambda: db_rows(tmp_path, "select state from job") == [("stopped",)],
                   "the masters to stop the job", timeout=120)
        wait_until(lambda: not alive(ids + job_ids(tmp_path)),
                   "every master and process of the job to exit", timeout=120)
        # stopped as Ctrl-C would: the workers handed their leases back, none trained twice
        workers = [e for e in events(tmp_path, "node_exited") if e["role"] == "worker"]
        assert len(workers) == 2 and all(e["cause"] == "job_stopped" for e in workers)
        assert len(set(trained(tmp_path))) == len(trained(tmp_path))
        logs = "".join(f.read_text() for f in (tmp_path / "t-run" / "masters").glob("*.log"))
        assert logs.count("the job has ended and elastic-job") == 2
    finally:
        kill_left(ids + job_ids(tmp_path))
