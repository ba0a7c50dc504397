"""The SDK never leaves a user guessing: waits are explained, dead ends fail fast, recoveries
are logged at INFO without any logging set up, errors name the right remedy."""
from __future__ import annotations

import logging
import subprocess
import sys

import pytest
import torch

from tests.conftest import REPO
from worker_sdk import MasterClient
from worker_sdk.errors import MasterUnavailable
from worker_sdk.data.master_client import gave_up
from worker_sdk.ps.data_client import DataClient, PSUnavailable, master_routes


@pytest.mark.timeout(60)  # retried, it would take the 120 s budget
def test_a_misspelled_master_host_fails_at_once_with_a_clear_message():
    client = MasterClient("no-such-host-xyz.invalid:50051", heartbeat=False)
    try:
        with pytest.raises(MasterUnavailable) as failed:
            client.register()
    finally:
        client.close()
    assert "no such host" in str(failed.value)
    assert "'no-such-host-xyz.invalid'" in str(failed.value)


@pytest.mark.timeout(60)
def test_a_misspelled_master_host_fails_the_ps_lookup_at_once():
    with pytest.raises(PSUnavailable) as failed:
        master_routes("no-such-host-xyz.invalid:50051", timeout_s=30)
    assert "no such host" in str(failed.value)


def test_the_heartbeat_warning_claims_no_budget_and_no_variable(monkeypatch):
    monkeypatch.delenv("ELASTIC_PS_RETRY_TIMEOUT_S", raising=False)
    beat = gave_up("m:1", "Heartbeat", 0.0, "UNAVAILABLE: refused", 0.0)
    assert "0 s" not in beat and "ELASTIC_PS_RETRY_TIMEOUT_S" not in beat
    assert "Heartbeat" in beat and "refused" in beat
    default = gave_up("m:1", "GetShard", 120.3, "UNAVAILABLE: refused", 120.0)
    assert "120 s, the default" in default and "ELASTIC_PS_RETRY_TIMEOUT_S" not in default
    monkeypatch.setenv("ELASTIC_PS_RETRY_TIMEOUT_S", "30")
    assert "from ELASTIC_PS_RETRY_TIMEOUT_S" in gave_up("m:1", "GetShard", 30, "x", 30.0)


def test_waiting_for_the_ps_set_says_what_it_waits_for(master, caplog):
    caplog.set_level(logging.INFO, logger="worker_sdk")
    with pytest.raises(PSUnavailable):
        master_routes(master.address, timeout_s=3.5, poll_s=0.2)
    said = [r.getMessage() for r in caplog.records if "waiting for the PS set" in r.getMessage()]
    assert said, caplog.text
    assert "no PS has registered" in said[0] and "elastic-ps --master" in said[0]


def test_waiting_on_a_master_that_does_not_answer_says_so(caplog):
    caplog.set_level(logging.INFO, logger="worker_sdk")
    with pytest.raises(PSUnavailable):
        master_routes("127.0.0.1:1", timeout_s=3.5, poll_s=0.2)
    assert "the master does not answer" in caplog.text


def test_push_before_init_names_the_call_and_the_remedy():
    client = DataClient(["tcp://127.0.0.1:1"], timeout_s=0.5, max_attempts=1)
    try:
        with pytest.raises(KeyError) as failed:
            client.push({"w": torch.zeros(2)})
        with pytest.raises(KeyError) as pulled:
            client.pull(["w"])
    finally:
        client.close()
    assert "push of tensor 'w'" in str(failed.value)
    assert "PSClient.init_parameters(model)" in str(failed.value)
    assert "pull of tensor 'w'" in str(pulled.value)


SCRIPT = """
import logging, sys
if sys.argv[1] == "configured":
    logging.basicConfig(level=logging.WARNING)
from worker_sdk import MasterClient
MasterClient("127.0.0.1:1", heartbeat=False).close()
logging.getLogger("worker_sdk.data.master_client").info("a recovery line")
"""


@pytest.mark.parametrize("setup, shown", [("bare", True), ("configured", False)])
def test_recoveries_show_at_info_unless_the_application_configured_logging(setup, shown):
    out = subprocess.run([sys.executable, "-c", SCRIPT, setup], capture_output=True, text=True,
                         cwd=REPO, timeout=60)
    assert out.returncode == 0, out.stderr
    assert ("a recovery line" in out.stderr) == shown, out.stderr


def test_a_rerun_of_a_finished_dataset_says_why_it_trains_nothing(master, caplog):
    from worker_sdk import ElasticDataset

    caplog.set_level(logging.INFO, logger="worker_sdk")
    data = torch.arange(20, dtype=torch.float32)
    for run in range(2):
        ds = ElasticDataset(data, master=master.address, name="done", shard_size=10,
                            num_epochs=1, ack="next")
        steps = sum(1 for _ in ds.batches(batch_size=5))
        ds.close()
        assert steps == (4 if run == 0 else 0)
    said = [r.getMessage() for r in caplog.records if "finished every epoch" in r.getMessage()]
    assert len(said) == 1 and "elastic-ctl drop done" in said[0]
