"""scaling.deadline_h reaches the leader's policy: `elastic-job run` reads it from the YAML, and
the driver's signals carry the job's progress from a real core's ledger (every dataset's
records times its epochs), so the policy the leader runs waits ahead of the line."""
from __future__ import annotations

import yaml

from engines.local import LocalEngine
from master.datasets.spec import DatasetSpec
from master.job.book import JobBook
from master.job.driver import JobDriver
from master.job.spec import load_spec
from master.scaling.policy import decide
from master.scaling.signals import Signals

SPEC = {"name": "t", "workers": {"command": "true", "min": 1, "max": 3,
                                 "markets": [{"name": "spot", "price": 0.3},
                                             {"name": "on-demand", "price": 1.0}]},
        "scaling": {"deadline_h": 2}}


def test_the_deadline_and_the_ledger_s_progress_reach_the_leader_s_policy(tmp_path,
                                                                           leader_parts):
    _, core, committer = leader_parts
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(SPEC))
    spec = load_spec(path)  # as elastic-job run reads it
    assert spec.scaling.deadline_h == 2.0
    committer.call(lambda: core.create_dataset(DatasetSpec("d", 1000, 100, num_epochs=3)))
    book = committer.call(lambda: JobBook(core.journal))
    committer.call(lambda: book.begin("t", "{}", "127.0.0.1:1"))
    engine = LocalEngine(tmp_path / "run")
    try:
        driver = JobDriver(spec, core, committer, book, engine, masters="m:1",
                           workdir=tmp_path / "run")
        signals = driver._signals(100.0)
        assert (signals.records_done, signals.records_total) == (0, 3000)
        assert signals.summary()["records_total"] == 3000
        # nothing done yet: behind the line, so the policy the driver runs does not wait
        _, state = decide(driver.spec, Signals(), None, 0.0)
        _, after = decide(driver.spec, signals, state.with_(workers=3), 100.0)
        assert not after.paced
        # the same signals, most of the job done: ahead, and spot's losses are not replaced
        ahead = Signals(running={("worker", "spot"): 1}, preempted={("worker", "spot"): 2},
                        admits={"on-demand"}, records_done=2900,
                        records_total=signals.records_total)
        decisions, after = decide(driver.spec, ahead, state.with_(workers=3), 100.0)
        assert after.paced and after.held == 1
        assert [d.reason.value for d in decisions] == ["ahead_of_deadline"]
    finally:
        engine.close()
