"""Helpers of the job tests: a spec that trains tests.master.job.job_worker, `elastic-job run`
as a child process, and the master's database read after the job."""
from __future__ import annotations

import json
import re
import sqlite3
import urllib.request
import sys
import time
from pathlib import Path

import yaml
from prometheus_client.parser import text_string_to_metric_families

from cluster.launch import Launcher, Proc

RUN = [sys.executable, "-m", "master.job.cli", "run"]  # elastic-job run


def write_spec(tmp: Path, *, records: int = 300, workers: tuple[int, int] = (2, 2),
               standbys: int = 0, trace: str | None = None, slow_until: Path | None = None,
               grace: float = 5.0, interval: float = 0.5, step_s: float = 0.005,
               extra_worker_args: str = "") -> Path:
    out = tmp / "trained"
    out.mkdir(exist_ok=True)
    command = (f"{sys.executable} -m tests.master.job.job_worker --out {out} "
               f"--records {records} --step-s {step_s}")
    if slow_until is not None:
        command += f" --slow-until {slow_until} --slow-step-s 0.05"
    spec = {
        "name": "t",
        "engine": "local",
        "engine_options": {"preempt_grace_s": grace,
                           **({"market_trace": trace} if trace else {})},
        "master": {"db": f"sqlite:///{tmp / 'master.db'}", "port": 0, "standbys": standbys},
        "ps": {"count": 1},
        "workers": {"command": command + extra_worker_args, "min": workers[0],
                    "max": workers[1],
                    "markets": [{"name": "spot", "price": 0.3},
                                {"name": "on-demand", "price": 1.0}]},
        "scaling": {"interval_s": interval, "spot_wait_s": 30.0},
    }
    path = tmp / "job.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def start_run(launcher: Launcher, spec: Path, json_path: Path) -> Proc:
    return launcher.launch(Proc([*RUN, str(spec), "--json", str(json_path)],
                                launcher.log_path("elastic-job"), ready=None))


def db_rows(tmp: Path, sql: str) -> list[tuple]:
    with sqlite3.connect(tmp / "master.db") as conn:
        return conn.execute(sql).fetchall()


def events(tmp: Path, kind: str) -> list[dict]:
    return [dict(json.loads(detail), cause=cause) for cause, detail in
            db_rows(tmp, f"select cause, detail from events where kind = '{kind}' order by seq")]


def wait_until(predicate, what: str, timeout: float = 90.0, proc: Proc | None = None):
    """Poll (bounded) until `predicate()` is truthy; its value. Fails early when `proc` ends."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            value = predicate()
        except sqlite3.OperationalError:
            value = None  # the database is being created
        if value:
            return value
        if proc is not None and not proc.alive:
            raise AssertionError(f"elastic-job exited ({proc.returncode}) before {what}:\n"
                                 f"{proc.output(4000)}")
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.2)


def trained(tmp: Path) -> list[int]:
    """Every record id the job's workers wrote (one per line, each file a worker's)."""
    return [int(x) for f in sorted((tmp / "trained").glob("*.records"))
            for x in f.read_text().split()]


def metrics_url(proc: Proc) -> str:
    port = re.search(r"metrics (?:on )?http://\S+?:(\d+)/metrics", proc.output()).group(1)
    return f"http://127.0.0.1:{port}/metrics"


def scrape(url: str) -> dict[tuple[str, tuple], float]:
    """{(sample name, sorted labels): value} of one scrape."""
    with urllib.request.urlopen(url, timeout=10) as reply:
        text = reply.read().decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def value(samples, name: str, **labels) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)
