"""A PS SIGKILLed before its first checkpoint comes back empty: the job goes on and the loss is
counted (docs/ps.md, "Checkpoints"; worker_sdk/ps/restarts.py). Real master, PS and workers.

The master records a `ps_restored` event (cause `empty`) only where its layout says the index
held state, and the ledger counts the records acknowledged before the restart as
`updates_lost`; the workers declare the model on the empty PS again from their current values
and finish without a failure spent."""
from __future__ import annotations

import collections
import json
import time

import pytest
import torch

from protos import master_pb2 as pb
from tests.master.ha.test_standby import _wait
from worker_sdk import PSClient

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

N, EPOCHS = 2000, 2


def _records(log) -> int:
    return len(log.read_text().split()) if log.exists() else 0


def _ps_restored(master) -> list[dict]:
    return [json.loads(e.detail) | {"cause": e.cause} for e in master.events()
            if e.kind == "ps_restored"]


def test_a_ps_killed_before_its_first_checkpoint_stops_no_worker_and_is_counted(
        launcher, master, tmp_path):
    ps = [launcher.ps(master.address, "--checkpoint-interval", "0", index=i, num_ps=2,
                      checkpoint_dir=f"ps{i}") for i in range(2)]
    workers, logs = [], []
    for name in ("a", "b"):
        log = tmp_path / f"{name}.log"
        logs.append(log)
        workers.append(launcher.python(
            "-m", "tests.worker_sdk.train_main", "--master", master.address, "--records",
            str(N), "--epochs", str(EPOCHS), "--name", name, "--log", str(log),
            "--max-inflight", "2", "--step-s", "0.05", name=name))
    deadline = time.monotonic() + 90
    while sum(_records(log) for log in logs) < 400:  # a tenth of the job trained
        assert all(w.alive for w in workers), [w.output(tail=2000) for w in workers]
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert _ps_restored(master) == []  # a first start of each index is no loss
    ps[1].restart()  # SIGKILL, then the same flags: no checkpoint, so it starts empty
    for w in workers:
        assert w.wait(150) == 0, w.output(tail=4000)
    assert any("restarted empty" in w.output() for w in workers)
    epochs = master.dataset("train").epochs
    assert [e.records_done for e in epochs] == [N] * EPOCHS
    causes = collections.Counter()
    for e in epochs:
        causes.update(dict(e.requeues))
    assert causes["failed"] == 0, causes  # no failure spent on a PS restart
    (event,) = _ps_restored(master)
    assert (event["index"], event["empty"], event["cause"], event["from_ms"]) == (
        1, True, "empty", 0)
    ledger = master.stub().GetLedger(pb.GetLedgerRequest(), timeout=5)
    (lost,) = ledger.ps_updates_lost
    assert lost.index == 1 and lost.restores == 1
    # every record acknowledged before the restart is counted lost (errs toward lost)
    assert 400 <= ledger.updates_lost <= N * EPOCHS


def test_a_ps_that_restarted_empty_is_declared_again_from_the_workers_current_values(
        launcher, master):
    ps = launcher.ps(master.address, "--checkpoint-interval", "0")
    model = torch.nn.Linear(4, 1)
    initial = {n: p.detach().clone() for n, p in model.named_parameters()}
    client = PSClient(master=master.address)
    try:
        client.init_parameters(model, optimizer="sgd", lr=1.0)
        for _ in range(3):  # SGD, lr 1, gradients -1: each push adds 1
            client.pull(model)
            for p in model.parameters():
                p.grad = -torch.ones_like(p)
            client.push(model)
        client.pull(model)
        trained = {n: p.detach().clone() for n, p in model.named_parameters()}
        assert torch.allclose(trained["bias"], initial["bias"] + 3)
        ps.restart()  # SIGKILL before any checkpoint: it comes back empty
        _wait(lambda: _ps_restored(master), 60, "the ps_restored event")
        for p in model.parameters():
            p.grad = -torch.ones_like(p)
        client.push(model)  # refused NOT_INITIALIZED, declared again, pushed again
        client.pull(model)
        # from the worker's current values, not the initial ones: one more push on top
        assert torch.allclose(model.bias.detach(), trained["bias"] + 1)
        assert torch.allclose(model.weight.detach(), trained["weight"] + 1)
        assert client.declaration.declared_again == 1
        (event,) = _ps_restored(master)
        assert event["empty"] and event["index"] == 0
    finally:
        client.close()
