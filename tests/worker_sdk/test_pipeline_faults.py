"""Exactly once with the pipelined step: prefetch, DataLoader worker processes and pushes in
flight, with workers SIGKILLed and SIGTERMed mid-step (real master, real PS, real processes).

The workers (tests/worker_sdk/train_main.py) log the records of every push that was answered
before the SDK acknowledges them. So: every record of every epoch counted once by the master,
and every record found in the logs at least once per epoch, means that nothing was acknowledged
that was not pushed (a record acknowledged without a push would have been counted and never
trained again, so it would be missing from every log).
"""
from __future__ import annotations

import collections
import signal
import time

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

N, EPOCHS = 2000, 2


@pytest.fixture
def job(launcher, master, tmp_path):
    launcher.ps(master.address, index=0, num_ps=1, checkpoint_dir="ps0")
    logs = []

    def worker(name, *flags):
        log = tmp_path / f"{name}.log"
        logs.append(log)
        proc = launcher.python("-m", "tests.worker_sdk.train_main", "--master", master.address,
                               "--records", str(N), "--epochs", str(EPOCHS), "--name", name,
                               "--log", str(log), *flags, name=name)
        return proc, log

    return master, worker, logs


def _records(log) -> list[int]:
    return [int(x) for x in log.read_text().split()] if log.exists() else []


def _wait_records(proc, log, n, timeout=60.0):
    deadline = time.monotonic() + timeout
    while len(_records(log)) < n:
        assert proc.alive, proc.output(tail=3000)
        assert time.monotonic() < deadline, proc.output(tail=3000)
        time.sleep(0.02)


def _check(master, logs):
    epochs = master.dataset("train").epochs
    assert [e.records_done for e in epochs] == [N] * EPOCHS  # each record counted once
    pushed = collections.Counter(r for log in logs for r in _records(log))
    missing = [r for r in range(N) if pushed[r] < EPOCHS]
    assert not missing, f"acknowledged but never pushed: {missing[:20]}"
    return epochs


def test_sigkill_and_sigterm_mid_step_with_loader_workers_and_pushes_in_flight(job):
    master, worker, logs = job
    a, a_log = worker("a", "--num-workers", "2", "--max-inflight", "2")
    b, b_log = worker("b", "--max-inflight", "1")
    _wait_records(a, a_log, 300)
    _wait_records(b, b_log, 300)
    a.kill()  # SIGKILL: pushes in flight and prefetched batches die with it
    b.signal(signal.SIGTERM)
    assert b.wait(20) == 0, b.output(tail=3000)
    c, _ = worker("c", "--num-workers", "2", "--max-inflight", "2")
    assert c.wait(120) == 0, c.output(tail=3000)
    epochs = _check(master, logs)
    causes = collections.Counter()
    for e in epochs:
        causes.update(dict(e.requeues))
    assert causes["preempted"] >= 1


def test_sigterm_hands_back_exact_offsets_with_loader_workers_and_two_pushes_in_flight(job):
    master, worker, logs = job
    a, a_log = worker("a", "--num-workers", "2", "--max-inflight", "2")
    _wait_records(a, a_log, 500)
    a.signal(signal.SIGTERM)
    assert a.wait(20) == 0, a.output(tail=3000)
    handed_back = sum(e.requeues["preempted"] for e in master.dataset("train").epochs)
    b, _ = worker("b", "--max-inflight", "2")
    assert b.wait(120) == 0, b.output(tail=3000)
    epochs = _check(master, logs)
    assert handed_back >= 1
    # exact offsets: the untrained remainders came back, nothing had to be trained twice
    assert sum(e.records_redone for e in epochs) == 0
    pushed = collections.Counter(r for log in logs for r in _records(log))
    assert all(pushed[r] == EPOCHS for r in range(N)), "a record was pushed twice"


def test_ctrl_c_mid_step_hands_every_lease_back_with_exact_offsets_and_exits_130(job):
    """SIGINT is handled as SIGTERM is: no KeyboardInterrupt mid-push (which used to report the
    lease in flight FAILED, spending its shard's failure budget), cause `interrupted`."""
    master, worker, logs = job
    a, a_log = worker("a", "--max-inflight", "2", "--step-s", "0.02")
    _wait_records(a, a_log, 300)
    a.signal(signal.SIGINT)
    assert a.wait(20) == 130, a.output(tail=3000)
    out = a.output()
    assert "Traceback" not in out and "KeyboardInterrupt" not in out, out[-3000:]
    epochs = master.dataset("train").epochs
    causes = collections.Counter()
    for e in epochs:
        causes.update(dict(e.requeues))
    assert causes["interrupted"] >= 1 and causes["failed"] == 0, causes
    assert all(e.doing == 0 for e in epochs)  # every lease came back at once
    assert [ev.cause for ev in master.events() if ev.kind == "worker_left"] == ["interrupted"]
    # exact offsets: nothing credited that was not pushed, and nothing to redo
    assert 0 < sum(e.records_done for e in epochs) <= len(_records(a_log))
    assert sum(e.records_redone for e in epochs) == 0


def test_a_failed_background_push_is_raised_at_the_next_call_and_acknowledges_nothing(
        launcher, master):
    import torch
    from torch import nn

    from worker_sdk import ArrayReader, ElasticDataset, ElasticEmbedding, PSClient, ack
    from worker_sdk.ps.pipeline import PushFailed

    ps = launcher.ps(master.address, index=0, num_ps=1, checkpoint_dir="ps0")
    model = nn.ModuleDict({"emb": ElasticEmbedding(None, 4, table="t"), "head": nn.Linear(4, 1)})
    client = PSClient(master=master.address, timeout_s=2.0, max_attempts=2)
    try:
        client.init_parameters(model, "sgd", lr=0.1)
        ds = ElasticDataset(ArrayReader(torch.arange(100)), master=master.address, name="f",
                            shard_size=50, max_shards=1, handle_sigterm=False)
        batches = ds.batches(20)

        def compute(batch):
            client.pull(model)
            model["head"](model["emb"](batch)).sum().backward()

        compute(next(batches))
        client.push(model, wait=False)
        client.flush()
        (lease,) = ds.table.leases.values()
        assert lease.trained == 20  # answered: acknowledged
        compute(next(batches))
        ps.kill()
        client.push(model, wait=False)  # captured, sent in the background; no PS answers
        with pytest.raises(PushFailed):
            client.flush()  # waits for the answer: the retries are spent, the push failed
        ack.trained()  # nothing can acknowledge the abandoned records any more
        assert lease.trained == 20 and lease.failed
        ds.close()
        epoch = master.dataset("f").epochs[0]
        assert epoch.records_done == 20  # only the step whose push was answered
    finally:
        client.close()
