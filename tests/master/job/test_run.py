"""`elastic-job run` end to end on the local engine: real masters, PS and workers.

The job finishes with every record trained once and its summary agrees with what the master
answers afterwards (GetPlan, GetLedger, GetStatus); a master without a job launches nothing
and says so (NO_JOB); SIGTERM stops the job as a preemption would and exits 143."""
from __future__ import annotations

import json
import signal

import grpc
import pytest

from engines import process
from protos import master_pb2 as pb
from rpckit.errors import reason_of

from .jobs import (RUN, db_rows, events, metrics_url, scrape, start_run, trained, value,
                   wait_until, write_spec)

pytestmark = pytest.mark.slow


def no_process_left(tmp) -> None:
    ids = [i for (i,) in db_rows(tmp, "select engine_id from job_processes") if i]
    assert ids and not [i for i in ids if process.alive(i)]


def test_a_job_runs_to_the_end_and_its_summary_agrees_with_the_master(tmp_path, launcher):
    spec = write_spec(tmp_path, records=300)
    run = start_run(launcher, spec, tmp_path / "summary.json")
    assert run.wait(240) == 0, run.output(4000)
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["state"] == "finished" and summary["epochs_exact"]
    assert summary["records"] == 300 and sorted(trained(tmp_path)) == list(range(300))
    assert summary["decisions_by_reason"]["below_min"] >= 1
    no_process_left(tmp_path)
    assert db_rows(tmp_path, "select state from job") == [("finished",)]
    launched = events(tmp_path, "node_launched")
    assert {(e["role"], e["market"]) for e in launched} == {("ps", "on-demand"),
                                                            ("worker", "spot")}
    # running it again on the same database says the job already finished, starts nothing
    again = launcher.run(*RUN[1:], str(spec))
    assert again.returncode == 2 and "already finished" in again.stderr, again.stderr
    assert db_rows(tmp_path, "select state from job") == [("finished",)]

    # the same database under a master with the job: what it answers is what was summarized
    master = launcher.master("--job", str(spec), "--metrics-port", "0",
                             db=f"sqlite:///{tmp_path / 'master.db'}")
    plan = master.stub().GetPlan(pb.GetPlanRequest(ended=True), timeout=10)
    assert plan.state == "finished"
    assert dict(plan.decisions_by_reason) == summary["decisions_by_reason"]
    assert len(plan.processes) == summary["launches"] == len(launched)
    ledger = master.stub().GetLedger(pb.GetLedgerRequest(), timeout=10)
    spot = next(x for x in ledger.worker_seconds if x.label == "market=spot")
    assert summary["cost_by_market"]["spot"] == pytest.approx(
        spot.worker_seconds / 3600 * 0.3, abs=1e-6)
    assert summary["records"] == sum(e.records_done for ds in master.status().datasets
                                     for e in ds.epochs)
    ctl = ("-m", "master.ctl", "--master", master.address)
    shown = launcher.run(*ctl, "plan", "--json", "--ended")
    assert shown.returncode == 0, shown.stderr
    plan_json = json.loads(shown.stdout)
    assert plan_json["state"] == "finished"
    assert plan_json["decisions_by_reason"] == summary["decisions_by_reason"]
    assert {(t["role"], t["market"]) for t in plan_json["targets"]} >= {("worker", "spot")}
    assert all(d["reason"] and "running" in d["signals"] for d in plan_json["decisions"])
    text = launcher.run(*ctl, "plan")
    assert text.returncode == 0 and "LAST DECISIONS" in text.stdout
    cost = launcher.run(*ctl, "cost")  # no --price: the job's prices, by market label
    assert cost.returncode == 0, cost.stderr
    spot_line = next(line for line in cost.stdout.splitlines() if line.startswith("market=spot"))
    assert spot_line.split()[2] == "0.3000"
    assert float(spot_line.split()[3]) == pytest.approx(summary["cost_by_market"]["spot"],
                                                        abs=1e-4)
    samples = scrape(metrics_url(master))
    for reason, n in summary["decisions_by_reason"].items():
        assert value(samples, "elasticps_scaler_decisions_total", reason=reason) == n
    assert value(samples, "elasticps_scaler_target", role="worker", market="spot") == 2
    master.terminate()

    # and a master without the job launches nothing: it drives no job
    plain = launcher.master(db=f"sqlite:///{tmp_path / 'master.db'}")
    with pytest.raises(grpc.RpcError) as err:
        plain.stub().GetPlan(pb.GetPlanRequest(), timeout=10)
    assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert reason_of(err.value) == "NO_JOB"
    # bad input is refused as such, before anything else
    for call, request in ((plain.stub().GetPlan, pb.GetPlanRequest(decisions=-1)),
                          (plain.stub().StopJob, pb.StopJobRequest(reason="no spaces please"))):
        with pytest.raises(grpc.RpcError) as err:
            call(request, timeout=10)
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert db_rows(tmp_path, "select count(*) from job_processes") == [(len(launched),)]


def test_sigterm_stops_the_job_as_a_preemption_would(tmp_path, launcher):
    go = tmp_path / "go"  # never created: the workers train slowly until stopped
    spec = write_spec(tmp_path, records=2000, slow_until=go)
    run = start_run(launcher, spec, tmp_path / "summary.json")
    wait_until(lambda: len(trained(tmp_path)) >= 20, "the workers to train", proc=run)
    run.signal(signal.SIGTERM)
    assert run.wait(120) == 143, run.output(4000)
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["state"] == "stopped" and not summary["epochs_exact"]
    no_process_left(tmp_path)
    # workers handed their leases back exactly: every record counted was trained, once
    done = summary["records"]
    assert 0 < done <= len(trained(tmp_path))
    assert len(set(trained(tmp_path))) == len(trained(tmp_path))
    ends = {e["name"]: e for e in events(tmp_path, "node_exited")}
    workers = [e for e in ends.values() if e["role"] == "worker"]
    assert workers and all(e["cause"] == "job_stopped" for e in workers)
    assert db_rows(tmp_path, "select state from job") == [("stopped",)]


def test_a_worker_command_that_exits_at_once_is_relaunched_ever_more_slowly(tmp_path,
                                                                           launcher):
    spec = write_spec(tmp_path, workers=(1, 1), extra_worker_args=" --fail-at-once")
    run = start_run(launcher, spec, tmp_path / "summary.json")
    wait_until(lambda: len([e for e in events(tmp_path, "node_exited")
                            if e["cause"] == "crashed"]) >= 6, "six crashes", proc=run)
    run.signal(signal.SIGTERM)
    assert run.wait(120) == 143, run.output(4000)
    launches = [t for (t, detail) in db_rows(
        tmp_path, "select time_ms, detail from events where kind = 'node_launched' order by seq")
        if json.loads(detail)["role"] == "worker"]
    gaps = [b - a for a, b in zip(launches, launches[1:])]
    # backed off, not a tight loop: the k-th relaunch waits at least 2**(k-1) intervals (0.5 s)
    # after the crash it answers, however long the machine took to start the command (a
    # lower bound, so load cannot fail it; a relaunch at once fails it from the 2nd gap on)
    assert len(gaps) >= 5, gaps
    assert all(gap >= 500 * 2 ** k - 50 for k, gap in enumerate(gaps[:5])), gaps
    crashed = [e for e in events(tmp_path, "node_exited") if e["cause"] == "crashed"]
    assert all(e["code"] == 3 for e in crashed)
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["crashed_at_start"] == len(crashed) and summary["state"] == "stopped"
    no_process_left(tmp_path)


def test_a_job_runs_over_tls_with_the_token_passed_on_to_every_process(tmp_path, launcher):
    from cluster.certs import make_tls_files
    from cluster.launch import Proc

    tls = make_tls_files(tmp_path / "tls")
    token_file = tmp_path / "token"
    token_file.write_text("a-test-token-of-32-characters-xx\n")
    token_file.chmod(0o600)
    spec = write_spec(tmp_path, records=120, workers=(1, 1))
    run = launcher.launch(Proc([*RUN, str(spec), "--json", str(tmp_path / "summary.json"),
                                "--tls-cert", tls.cert, "--tls-key", tls.key, "--tls-ca",
                                tls.ca, "--auth-token-file", str(token_file)],
                               launcher.log_path("elastic-job"), ready=None))
    assert run.wait(240) == 0, run.output(4000)  # the PS and the worker reached the masters
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["state"] == "finished" and summary["epochs_exact"]
    assert sorted(trained(tmp_path)) == list(range(120))
    # the masters served TLS and required the token (so the PS and the worker, which trained
    # every record, reached them with the CA and the token passed on)
    settings = (tmp_path / "t-run" / "masters" / "master.log").read_text()
    assert f"tls_cert={tls.cert}" in settings and f"auth_token_file={token_file}" in settings
