"""Group commit: no call is answered before its changes (and what it saw) are durable."""
from __future__ import annotations

import threading
import time

import pytest

from master.core import MasterCore
from master.persistence.committer import Committer
from rpckit.errors import ServiceError
from master.persistence.store import Store


class GatedStore(Store):
    """A real store whose commits wait for the test to open a gate (or fail on demand)."""

    def __init__(self):
        super().__init__("sqlite://")
        self.upgrade()
        self.gate = threading.Event()
        self.fail = False
        self.batches = 0

    def apply(self, batch):
        self.gate.wait(10)
        if self.fail:
            raise RuntimeError("disk on fire")
        super().apply(batch)
        self.batches += 1


@pytest.fixture
def setup():
    store = GatedStore()
    core = MasterCore(snapshot=store.load())
    fatal = []
    committer = Committer(core, store, fatal.append)
    committer.start()
    yield core, store, committer, fatal
    store.gate.set()
    committer.stop()


def test_a_call_returns_only_after_its_batch_is_durable(setup):
    core, store, committer, _ = setup
    done = threading.Event()
    threading.Thread(target=lambda: (committer.call(
        lambda: core.register_worker("a", {})), done.set())).start()
    time.sleep(0.2)
    assert not done.is_set()  # the commit is held at the gate
    store.gate.set()
    assert done.wait(5)
    assert [w["worker_id"] for w in store.load().workers] == ["w-1"]



def test_group_commit_under_concurrency(setup):
    core, store, committer, _ = setup
    store.gate.set()
    errors = []

    def client(i):
        try:
            for _ in range(20):
                committer.call(lambda: core.register_worker(f"w{i}", {}))
        except Exception as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=client, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not errors
    assert len(store.load().workers) == 160
    assert store.batches < 160 + 1  # some calls shared a commit


def test_a_read_only_call_waits_for_the_state_it_saw(setup):
    core, store, committer, _ = setup
    seen = threading.Event()
    threading.Thread(target=lambda: committer.call(
        lambda: core.register_worker("a", {}))).start()
    time.sleep(0.1)
    # nothing to write, but it can see worker a, whose registration is not durable yet
    threading.Thread(target=lambda: (committer.call(lambda: len(core.workers.alive)),
                                     seen.set())).start()
    time.sleep(0.2)
    assert not seen.is_set()
    store.gate.set()
    assert seen.wait(5)


def test_a_failed_commit_stops_the_master_and_answers_unavailable(setup):
    core, store, committer, fatal = setup
    store.fail = True
    store.gate.set()
    with pytest.raises(ServiceError) as info:
        committer.call(lambda: core.register_worker("a", {}))
    assert info.value.code == "UNAVAILABLE"
    assert len(fatal) == 1 and "disk on fire" in str(fatal[0])
    with pytest.raises(ServiceError):
        committer.call(lambda: None)
