"""The simulated worker as a process: it leases through LeaseStream and, on SIGTERM, hands its
leases back as "preempted" and exits 0 (the demo and the handover benchmark rely on it)."""
from __future__ import annotations

import signal
import time

import pytest

from protos import master_pb2 as pb

pytestmark = [pytest.mark.slow, pytest.mark.timeout(90)]


def test_sigterm_hands_the_leases_back_and_exits_0(master, launcher):
    master.stub().CreateDataset(pb.DatasetSpec(name="sim", num_records=2000, shard_size=100,
                                               num_epochs=1), timeout=10)
    sim = launcher.python("-m", "worker_sdk.data.simworker", "--master", master.address,
                          "--dataset", "sim", "--name", "sim", "--max-shards", "3",
                          "--seconds-per-record", "0.002", name="sim")
    deadline = time.monotonic() + 60
    while master.dataset("sim").epochs[0].records_done < 200:
        assert sim.alive and time.monotonic() < deadline, sim.output(tail=3000)
        time.sleep(0.05)
    sim.signal(signal.SIGTERM)
    assert sim.wait(15) == 0, sim.output(tail=3000)
    assert "trained" in sim.output()
    left = [e for e in master.events() if e.kind == "worker_left"]
    assert [e.cause for e in left] == ["preempted"]
    epoch = master.dataset("sim").epochs[0]
    assert epoch.doing == 0 and epoch.requeues["preempted"] >= 1
