"""`elastic-job`: simulate prints and writes DESIGN's JSON; a bad spec, trace or flag exits 2
naming what to fix, and nothing runs."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest
import yaml

from master.job import cli

SPEC = {
    "name": "sim",
    "workers": {"command": "train", "min": 1, "max": 3,
                "markets": [{"name": "spot", "price": 0.3}, {"name": "on-demand", "price": 1.0}]},
    "ps": {"count": 1},
}
TRACE = "# a test trace\nt_s,market,capacity\n0,spot,3\n1800,spot,0\n3600,spot,3\n"


@pytest.fixture
def files(tmp_path):
    spec, trace = tmp_path / "job.yaml", tmp_path / "trace.csv"
    spec.write_text(yaml.safe_dump(SPEC))
    trace.write_text(TRACE)
    return spec, trace, tmp_path


def run(argv, capsys) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as e:
        cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return e.value.code, out, err


def simulate_args(spec, trace, *more):
    return ["simulate", spec, "--trace", trace, "--records", 300 * 2 * 3600,
            "--worker-rps", 100, "--ps-capacity-rps", 400, *more]


def test_simulate_prints_each_run_and_writes_the_json(files, capsys):
    spec, trace, tmp = files
    code, out, err = run(simulate_args(spec, trace, "--json", tmp / "r.json"), capsys)
    assert code == 0, err
    for name in ("policy", "on-demand-max", "spot-only-max", "fixed-start"):
        assert f"\n{name} " in out
    doc = json.loads((tmp / "r.json").read_text())
    assert set(doc) == {"policy", "baselines"}
    assert {k for k in doc["baselines"]} == {"on-demand-max", "spot-only-max", "fixed-start"}
    for r in (doc["policy"], *doc["baselines"].values()):
        assert set(r) == {"hours", "cost_per_million_records", "records_redone"}
        assert r["hours"] > 0 and r["cost_per_million_records"] > 0
    assert doc["baselines"]["spot-only-max"]["hours"] > doc["policy"]["hours"]


@pytest.mark.parametrize("change, field", [
    ({"workers": {**SPEC["workers"], "min": 4}}, "workers.min"),
    ({"scaling": {"interval_s": 0}}, "scaling.interval_s"),
    ({"engine": "mesos"}, "engine"),
    ({"scaling": {"deadline_h": -1}}, "scaling.deadline_h"),
    ({"scaling": {"deadline_h": "tomorrow"}}, "scaling.deadline_h"),
])
def test_a_bad_spec_exits_2_naming_the_field(files, capsys, change, field):
    spec, trace, tmp = files
    spec.write_text(yaml.safe_dump({**SPEC, **change}))
    code, out, err = run(simulate_args(spec, trace, "--json", tmp / "r.json"), capsys)
    assert code == 2 and f"{field}: " in err and out == ""
    assert not (tmp / "r.json").exists()


@pytest.mark.parametrize("text, where", [
    ("t_s,market,capacity\n0,spot,3\n10,spot,many\n", "row 3, column capacity"),
    ("t_s,market,capacity\n0,reserved,3\n", "'reserved'"),
    ("t_s,market\n0,spot\n", "row 1"),
])
def test_a_bad_trace_exits_2_naming_the_row(files, capsys, text, where):
    spec, trace, tmp = files
    trace.write_text(text)
    code, out, err = run(simulate_args(spec, trace, "--json", tmp / "r.json"), capsys)
    assert code == 2 and where in err and out == ""
    assert not (tmp / "r.json").exists()


@pytest.mark.parametrize("flags, says", [
    (["--worker-rps", "0"], "--worker-rps"),
    (["--ps-capacity-rps", "nan"], "--ps-capacity-rps"),
    (["--records", "0"], "--records"),
    (["--max-hours", "-1"], "--max-hours"),
])
def test_bad_flags_exit_2(files, capsys, flags, says):
    spec, trace, _ = files
    code, _, err = run(simulate_args(spec, trace, *flags), capsys)
    assert code == 2 and says in err


def test_speeds_come_from_the_flags_or_a_bench_train_json(files, capsys):
    spec, trace, tmp = files
    base = ["simulate", spec, "--trace", trace, "--records", 1000]
    code, _, err = run(base, capsys)
    assert code == 2 and "--bench-train" in err
    bench = tmp / "bench.json"
    bench.write_text(json.dumps({"256": {"elastic-1w": [
        {"records_per_s": 50.0, "records": 1000, "ps_cpu_s": [1.0, 1.0]}]},
        "1024": {"elastic-1w": [
            {"records_per_s": 100.0, "records": 1000, "ps_cpu_s": [2.0, 3.0]},
            {"records_per_s": 120.0, "records": 1000, "ps_cpu_s": [2.0, 2.0]}]}}))
    code, out, err = run([*base, "--bench-train", bench], capsys)
    assert code == 0, err
    assert "a worker 110 records/s, a PS 225 records/s" in out  # medians of the 1024 runs
    bench.write_text(json.dumps({"1024": {"local-tensor": []}}))
    code, _, err = run([*base, "--bench-train", bench], capsys)
    assert code == 2 and "elastic-1w" in err


def test_run_and_manifests_validate_the_spec_first(files, capsys):
    spec, _, _ = files
    spec.write_text(yaml.safe_dump({**SPEC, "workers": {**SPEC["workers"], "command": []}}))
    for command in ("run", "manifests"):
        code, _, err = run([command, spec], capsys)
        assert code == 2 and "workers.command: " in err


def test_the_console_entry_runs_as_a_module(files):
    spec, trace, _ = files
    done = subprocess.run([sys.executable, "-m", "master.job.cli",
                           *map(str, simulate_args(spec, trace))],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "policy decisions:" in done.stdout


def test_docs_operations_names_every_simulate_flag_and_every_reason():
    import argparse

    from cluster.launch import CODE_ROOT
    from master.scaling.decisions import Reason

    doc = (CODE_ROOT / "docs" / "operations.md").read_text()
    (commands,) = [a for a in cli.parser()._actions
                   if isinstance(a, argparse._SubParsersAction)]
    simulate = commands.choices["simulate"]
    flags = [a.option_strings[-1] for a in simulate._actions
             if a.option_strings and a.option_strings[-1] != "--help"]
    assert "--bench-train" in flags
    for flag in flags:
        assert f"| `{flag}` |" in doc, flag
    for reason in Reason:
        assert f"| `{reason.value}` |" in doc, reason


def test_run_checks_its_tls_and_token_flags_before_anything_starts(files, capsys):
    from cluster.certs import make_tls_files

    spec, _, tmp = files
    spec.write_text(yaml.safe_dump({**SPEC, "engine": "local"}))
    tls = make_tls_files(tmp / "tls")
    for flags, says in (
            (["--tls-cert", tls.cert, "--tls-ca", tls.ca], "--tls-cert and --tls-key"),
            (["--tls-cert", tls.cert, "--tls-key", tls.key], "--tls-cert needs --tls-ca"),
            (["--tls-ca", tls.ca], "--tls-ca without --tls-cert"),
            (["--auth-token-file", tmp / "absent"], "auth token file"),
            (["--tls-cert", tls.cert, "--tls-key", tmp / "nokey", "--tls-ca", tls.ca],
             "--tls-key")):
        code, _, err = run(["run", spec, *flags], capsys)
        assert code == 2 and says in err, (flags, err)
        assert not (tmp / "sim-run").exists()  # nothing started


def _db_with_job(tmp, name: str, state: str) -> str:
    """A master database (the real schema) holding one job row."""
    from sqlalchemy import create_engine, insert

    from master.persistence import schema

    url = f"sqlite:///{tmp / 'master.db'}"
    engine = create_engine(url)
    schema.metadata.create_all(engine)
    with engine.begin() as conn:
        conn.execute(insert(schema.job).values(
            id=1, name=name, spec="{}", state=state, started_ms=0, changed_ms=0, policy="{}",
            targets="{}", decisions="{}", launches=0, masters=""))
    engine.dispose()
    return url


@pytest.mark.parametrize("name, state, says", [
    ("sim", "finished", "job 'sim' in master.db already finished"),
    ("sim", "stopped", "job 'sim' in master.db already stopped"),
    ("other", "running", "master.db holds job 'other', not 'sim'"),
])
def test_run_refuses_a_database_whose_job_ended_or_is_another(files, capsys, name, state,
                                                             says):
    spec, _, tmp = files
    url = _db_with_job(tmp, name, state)
    spec.write_text(yaml.safe_dump({**SPEC, "engine": "local", "master": {"db": url}}))
    code, out, err = run(["run", spec], capsys)
    assert code == 2 and says in err, err
    assert "database" in err and not out
    assert not (tmp / "sim-run").exists()  # no master started


def test_run_goes_on_with_a_job_still_running_in_its_database(files):
    from master.job.run import stored_job_problem
    from master.job.spec import load_spec

    spec, _, tmp = files
    url = _db_with_job(tmp, "sim", "running")
    spec.write_text(yaml.safe_dump({**SPEC, "engine": "local", "master": {"db": url}}))
    assert stored_job_problem(load_spec(spec)) is None  # a leader continues it
    (tmp / "master.db").unlink()
    assert stored_job_problem(load_spec(spec)) is None  # a fresh database
