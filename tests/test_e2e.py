"""The whole job on real processes: master, 2 PS, CTR workers killed and started while training."""
from __future__ import annotations

import signal
import time

import psutil
import pytest

from cluster.local import LocalCluster, records_done
from examples.ctr import data as ctr_data
from examples.ctr.evaluate import HeldOutAUC
from master.persistence.store import Store
from tests.master.harness import assert_exactly_once, audit

pytestmark = pytest.mark.slow

RECORDS, EPOCHS = 6000, 3
WORKER = "examples.ctr.train"
TRAIN_ARGS = ("--epochs", str(EPOCHS), "--batch-size", "128", "--shard-size", "250",
              "--log-every", "30")


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    out = tmp_path_factory.mktemp("ctr")
    ctr_data.main(["--out", str(out), "--records", str(RECORDS), "--test-records", "4000",
                   "--seed", "5"])
    return out


def wait_until(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def job_finished(cluster: LocalCluster) -> bool:
    ds = cluster.dataset_status()
    return bool(ds) and ds.finished


def finish(cluster: LocalCluster, timeout: float = 180) -> None:
    wait_until(lambda: job_finished(cluster) or not cluster.alive(), timeout,
               "the job to finish")
    codes = cluster.wait_workers(60)
    assert all(code is not None for code in codes.values())


def check_exactly_once(cluster: LocalCluster) -> None:
    ds = cluster.dataset_status()
    assert ds.finished, ds
    assert [e.records_done for e in ds.epochs] == [RECORDS] * EPOCHS
    history = audit(Store(cluster.db), cluster.dataset)
    for epoch in range(EPOCHS):
        assert_exactly_once(history[epoch], RECORDS)


def no_worker_left(cluster: LocalCluster) -> None:
    pids = {p.pid for p in cluster.workers.values()}
    running = [p for p in psutil.process_iter(["pid", "cmdline"])
               if p.info["pid"] in pids and p.is_running() and p.status() != "zombie"]
    assert running == []


@pytest.fixture(scope="module")
def baseline(data, tmp_path_factory):
    """The same job with one worker and no churn."""
    with LocalCluster(tmp_path_factory.mktemp("calm"), data, worker_module=WORKER,
                      train_args=TRAIN_ARGS) as cluster:
        cluster.add_worker()
        finish(cluster)
        check_exactly_once(cluster)
        with HeldOutAUC(cluster.master_address, data) as auc:
            return auc()


def test_churn_loses_nothing_and_reaches_the_same_auc(data, tmp_path, baseline):
    with LocalCluster(tmp_path, data, worker_module=WORKER, train_args=TRAIN_ARGS) as cluster:
        first = cluster.add_worker()
        wait_until(lambda: records_done(cluster.dataset_status()) >= RECORDS // 4, 120,
                   "a quarter of the first epoch")
        second, third = cluster.add_worker(), cluster.add_worker()
        wait_until(lambda: records_done(cluster.dataset_status()) >= RECORDS // 2, 120,
                   "half of the first epoch")
        wait_until(lambda: cluster.training(first), 60, f"{first} to hold a lease")
        cluster.signal_worker(first, signal.SIGKILL)
        cluster.restart_master()  # and the master dies too: workers ride it out
        # preempt a worker that is training, not one still importing torch on a busy machine;
        # as soon as it is: a worker trains an epoch in seconds, and on a slow machine `third`
        # alone can finish the job while `second` still backs off from the master's restart
        seen = []
        wait_until(lambda: (cluster.training(second) and not seen.append(second))
                   or job_finished(cluster), 120, f"{second} to hold a lease")
        assert seen, f"the job finished before {second} held a lease"
        cluster.signal_worker(second, signal.SIGTERM)
        wait_until(lambda: records_done(cluster.dataset_status()) >= RECORDS, 120,
                   "the first epoch")
        cluster.add_worker()
        finish(cluster)
        assert cluster.workers[first].returncode == -signal.SIGKILL
        assert cluster.workers[second].returncode == 0  # SIGTERM: leave and exit 0
        check_exactly_once(cluster)
        no_worker_left(cluster)
        with HeldOutAUC(cluster.master_address, data) as held_out:
            auc = held_out()
        causes = {(e.kind, e.cause) for e in cluster.events()}
        assert ("worker_lost", "lost") in causes and ("worker_left", "preempted") in causes
        assert ("master_started", "restarted") in causes
        ledger = cluster.ledger()
        # what the SIGTERMed worker handed back was untrained: only the SIGKILLed worker's
        # (and the master restart's) leases can be redone
        assert ledger.records_redone <= ledger.records_rehanded
    assert abs(auc - baseline) <= 0.02, f"AUC with churn {auc:.4f}, without {baseline:.4f}"
