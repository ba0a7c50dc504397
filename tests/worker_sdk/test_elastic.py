"""End to end: worker processes killed, preempted, stopped, and a master killed, on 127.0.0.1.

Every test checks the master's own accounting: each epoch's records_done == num_records
(counted exactly once), plus what the workers logged as trained.
"""
from __future__ import annotations

import collections
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from cluster.launch import Proc
from tests.conftest import REPO
from worker_sdk import ElasticDataset

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

class WorkerProcess:
    def __init__(self, proc: Proc, log: Path):
        self.proc = proc
        self.log = log

    def records(self) -> list[int]:
        if not self.log.exists():
            return []
        return [int(line) for line in self.log.read_text().split()]

    def wait_records(self, n: int, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while len(self.records()) < n:
            if not self.proc.alive:
                raise AssertionError(f"worker exited with {self.proc.returncode} before training "
                                     f"{n} records:\n{self.output()}")
            if time.monotonic() > deadline:
                raise AssertionError(f"worker trained {len(self.records())} < {n} records in "
                                     f"{timeout} s:\n{self.output()}")
            time.sleep(0.02)

    def wait(self, timeout: float = 60.0) -> int:
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"worker still running after {timeout} s:\n{self.output()}")

    def output(self) -> str:
        return self.proc.output(tail=4000)


@pytest.fixture
def spawn(tmp_path, launcher):
    """`spawn(master, name, *flags)` starts tests/worker_sdk/worker_main.py; the launcher kills
    them all at teardown."""

    def start(master, name: str, *args: str) -> WorkerProcess:
        log = tmp_path / f"{name}.log"
        proc = launcher.python("-m", "tests.worker_sdk.worker_main", "--master", master.address,
                               "--log", str(log), "--name", name, *args, name=name)
        return WorkerProcess(proc, log)

    return start


class InProcessWorker(threading.Thread):
    """A second worker in this process (a thread), so a test starts fewer interpreters."""

    def __init__(self, master, n: int, step_s: float, **spec):
        super().__init__(daemon=True)
        self.ds = ElasticDataset(list(range(n)), master=master.address, handle_sigterm=False,
                                 worker_name="in-process", **spec)
        self.step_s = step_s
        self.records: list[int] = []
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            for record in self.ds:
                time.sleep(self.step_s)
                self.records.append(record)
            self.ds.close()
        except BaseException as exc:  # noqa: BLE001 - reported by finish()
            self.error = exc

    def finish(self, timeout: float = 60.0) -> list[int]:
        self.join(timeout)
        assert not self.is_alive(), "the in-process worker did not finish"
        if self.error is not None:
            raise self.error
        return self.records


def assert_exactly_once(master, name: str, n: int, epochs: int):
    status = master.dataset(name)
    assert status.finished, status
    assert [e.records_done for e in status.epochs] == [n] * epochs
    assert sum(e.records_done for e in status.epochs) == n * epochs
    return status


def spec_flags(n, shard, epochs=1, **extra):
    flags = ["--records", str(n), "--shard-size", str(shard), "--epochs", str(epochs)]
    for key, value in extra.items():
        flag = f"--{key.replace('_', '-')}"
        flags += [flag] if value is True else [flag, str(value)]
    return flags


def test_two_workers_one_sigkilled_the_other_finishes_exactly_once(master_factory, spawn):
    master = master_factory("--worker-timeout", "1", "--heartbeat-interval", "0.2")
    n, epochs = 240, 2
    flags = spec_flags(n, 10, epochs, batch=4, step_s=0.02, shuffle=True)
    a = spawn(master, "a", *flags)
    b = spawn(master, "b", *flags)
    a.wait_records(40)
    a.proc.kill()
    assert b.wait() == 0, b.output()
    status = assert_exactly_once(master, "train", n, epochs)
    trained = collections.Counter(a.records() + b.records())
    assert set(trained) == set(range(n)) and min(trained.values()) >= epochs
    causes = collections.Counter()
    for e in status.epochs:
        causes.update(dict(e.requeues))
    if len(a.records()) < n * epochs:  # a held leases when it died
        assert causes["lost"] >= 1, status


def test_sigterm_hands_back_the_untrained_remainder_and_exits_0(master, spawn):
    n = 200
    # a: batches, acknowledged by (simulated) pushes, short steps: it parks at its next request
    a = spawn(master, "a", *spec_flags(n, 20, batch=4, step_s=0.03, ack="push"))
    # c: samples, "next" acks, and a step in flight far longer than the grace period: the
    # leave happens while it trains, and SIGTERM again ends the step with SystemExit(0)
    c = spawn(master, "c", *spec_flags(n, 20, step_s=0.01, long_step_s=30))
    a.wait_records(30)
    c.wait_records(1)
    sent = time.monotonic()
    a.proc.signal(signal.SIGTERM)
    c.proc.signal(signal.SIGTERM)
    assert a.wait(timeout=10) == 0, a.output()
    assert c.wait(timeout=10) == 0, c.output()
    assert time.monotonic() - sent < 5, (a.output(), c.output())
    assert len(c.records()) == 1  # its interrupted step was neither logged nor acknowledged
    epoch = master.dataset("train").epochs[0]
    assert epoch.requeues["preempted"] >= 2, epoch
    trained_a = a.records() + c.records()
    assert epoch.records_done == len(trained_a)  # what they trained is credited, nothing more
    left = [ev for ev in master.events() if ev.kind == "worker_left"]
    assert [ev.cause for ev in left] == ["preempted", "preempted"]

    b = InProcessWorker(master, n, 0.0, name="train", shard_size=20)
    b.start()
    trained_b = b.finish()
    assert_exactly_once(master, "train", n, 1)
    # zero records redone beyond the untrained remainders: no record was trained twice
    assert collections.Counter(trained_a + trained_b) == {i: 1 for i in range(n)}
    epoch = master.dataset("train").epochs[0]
    assert epoch.duplicates == 0
    # SIGTERM hands back exact offsets: the remainders are handed out again, never redone
    assert epoch.records_redone == 0
    assert 0 < epoch.records_rehanded <= n - len(trained_a)


@pytest.mark.parametrize("case", ["lease-timeout", "declared-lost"])
def test_a_stopped_worker_is_fenced_and_carries_on_after_sigcont(case, master_factory, spawn):
    if case == "lease-timeout":
        # the lease times out (2 s) while the worker stays alive (timeout 6 s)
        master = master_factory("--worker-timeout", "6", "--heartbeat-interval", "0.5")
        extra = dict(lease_timeout=2)
        pause = 3.5
    else:
        # the worker misses heartbeats for longer than the worker timeout: declared lost
        master = master_factory("--worker-timeout", "1.5", "--heartbeat-interval", "0.3")
        extra = {}
        pause = 3.0
    n = 200
    a = spawn(master, "a", *spec_flags(n, 5, step_s=0.01, max_shards=1, **extra))
    a.wait_records(20)
    a.proc.signal(signal.SIGSTOP)
    stopped_at = len(a.records())
    b = InProcessWorker(master, n, 0.05, name="train", shard_size=5, max_shards=1,
                        lease_timeout_s=extra.get("lease_timeout", 0))
    b.start()
    time.sleep(pause)
    a.proc.signal(signal.SIGCONT)
    assert a.wait() == 0, a.output()
    b.finish()
    assert len(a.records()) > stopped_at + 5, "the resumed worker did not carry on"
    status = assert_exactly_once(master, "train", n, 1)
    epoch = status.epochs[0]
    trained = collections.Counter(a.records() + b.records)
    assert set(trained) == set(range(n))
    events = master.events()
    if case == "lease-timeout":
        assert epoch.requeues["timeout"] >= 1, epoch
        assert epoch.duplicates >= 1, epoch  # the late report was refused, nothing counted
        assert "'duplicates': 0" not in a.output()
    else:
        assert epoch.requeues["lost"] >= 1, epoch
        registered = [ev for ev in events if ev.kind == "worker_registered" and '"a"' in ev.detail]
        assert len(registered) == 2, registered  # registered again after being declared lost
        assert any(ev.kind == "worker_lost" for ev in events)


def test_a_master_killed_and_restarted_is_ridden_out(master, spawn):
    n, epochs = 120, 2
    a = spawn(master, "a", *spec_flags(n, 10, epochs, batch=4, step_s=0.02))
    a.wait_records(24)
    master.kill()
    time.sleep(1.0)
    master.start()
    assert a.wait() == 0, a.output()
    assert_exactly_once(master, "train", n, epochs)
    trained = collections.Counter(a.records())
    assert set(trained) == set(range(n)) and min(trained.values()) >= epochs
    assert any(ev.kind == "master_started" and ev.cause == "restarted" for ev in master.events())
    assert "unreachable" in a.output()  # it did see the outage and retried


def _credited_by_worker(db_url: str, dataset: str) -> dict[str, int]:
    """Records the master credited to each worker id, from the durable lease history."""
    from master.persistence.store import Store

    credited: dict[str, int] = collections.Counter()
    for row in Store(db_url).leases_of(dataset):
        if row["state"] == "done":
            credited[row["worker_id"]] += row["end_rec"] - row["start_rec"]
        elif row["state"] != "doing":
            credited[row["worker_id"]] += row["records_done"]
    return credited


def test_kills_mid_shard_over_two_epochs_are_accounted_record_by_record(master_factory, spawn):
    master = master_factory("--worker-timeout", "1", "--heartbeat-interval", "0.2")
    n, epochs = 300, 2
    flags = spec_flags(n, 25, epochs, batch=3, step_s=0.02, shuffle=True, ack="push")
    a, b, c = (spawn(master, name, *flags) for name in ("a", "b", "c"))
    a.wait_records(45)
    a.proc.kill()  # SIGKILL mid-shard: it may have trained past its last progress report
    b.wait_records(90)
    b.proc.signal(signal.SIGTERM)  # a reclaim notice: exact offsets handed back
    assert b.wait() == 0, b.output()
    d = spawn(master, "d", *flags)
    assert c.wait() == 0 and d.wait() == 0, c.output() + d.output()
    status = assert_exactly_once(master, "train", n, epochs)

    ids = {}
    for e in master.events():
        if e.kind == "worker_registered":
            ids[e.worker_id] = __import__("json").loads(e.detail)["name"]
    by_name = {name: wid for wid, name in ids.items()}
    credited = _credited_by_worker(master.db, "train")
    trained = {w.proc.argv[w.proc.argv.index("--name") + 1]: w.records() for w in (a, b, c, d)}
    # SIGTERM: b trained exactly what the master credited to it, so nothing of b's is redone
    assert len(trained["b"]) == credited[by_name["b"]]
    # SIGKILL: a trained at most a few steps past what the master credited (its last progress)
    lost_to_kill = len(trained["a"]) - credited[by_name["a"]]
    assert 0 <= lost_to_kill
    # every record was trained once per epoch, plus exactly what a lost to its kill
    total = sum(len(r) for r in trained.values())
    assert total - n * epochs == lost_to_kill
    extra = collections.Counter(sum(trained.values(), [])) - \
        collections.Counter({i: epochs for i in range(n)})
    assert sum(extra.values()) == lost_to_kill
    assert all(extra[r] <= collections.Counter(trained["a"])[r] for r in extra)
    # the master's redone figure is an honest upper bound that SIGTERM adds nothing to
    redone = sum(e.records_redone for e in status.epochs)
    assert lost_to_kill <= redone
    # elastic-ctl events lists each kill with its cause
    out = subprocess.run([sys.executable, "-m", "master.ctl", "--master", master.address,
                          "events"], capture_output=True, text=True, cwd=REPO, timeout=30)
    lines = out.stdout.splitlines()
    assert any("worker_lost" in x and by_name["a"] in x and "cause=lost" in x for x in lines)
    assert any("worker_left" in x and by_name["b"] in x and "cause=preempted" in x
               for x in lines)
    assert any("lease_requeued" in x and "cause=preempted" in x for x in lines)
