"""Worker killed -> its data handed to another worker, with the master's defaults.

A real master (default flags: 1 s heartbeats, 3 s worker timeout) and a simulated worker
process (`python -m worker_sdk.data.simworker`, which heartbeats like the SDK) that holds leases while it
"trains" slowly. The worker is SIGKILLed at a random moment of its heartbeat cycle; a second
worker, already waiting, records when it receives a lease of one of the victim's shards.
The target (docs/benchmarks.md): at most 3 s.

    python scripts/bench_handover.py --trials 10
"""
from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import threading
import time

from cluster.launch import Launcher
from worker_sdk.data.simworker import SimWorker
from protos import master_pb2 as pb


def victim_shards(stub, dataset: str, name: str, timeout: float = 30.0) -> set[int]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for w in stub.GetStatus(pb.GetStatusRequest(), timeout=5).workers:
            if w.name == name and w.leases:
                return {x.shard.index for x in w.leases if x.dataset == dataset}
        time.sleep(0.05)
    raise RuntimeError("the victim never held a lease")


def trial(launcher: Launcher, address: str, stub, n: int) -> float:
    dataset = f"handover-{n}"
    stub.CreateDataset(pb.DatasetSpec(name=dataset, num_records=4000, shard_size=100,
                                      num_epochs=1), timeout=5)
    victim = launcher.python("-m", "worker_sdk.data.simworker", "--master", address, "--dataset",
                             dataset, "--name", "victim", "--max-shards", "40",
                             "--seconds-per-record", "0.1", name="victim")
    try:
        held = victim_shards(stub, dataset, "victim")  # it holds every shard now
        got: dict[int, float] = {}
        rescuer = SimWorker(address, dataset, name="rescuer", max_shards=1,
                            on_lease=lambda lease: got.setdefault(lease.shard.index,
                                                                  time.monotonic()))
        thread = threading.Thread(target=rescuer.run, kwargs={"max_seconds": 30}, daemon=True)
        thread.start()
        time.sleep(1.0 + random.random())  # a random phase of the victim's heartbeat cycle
        victim.kill()
        killed = time.monotonic()
        thread.join(35)
        rescuer.close()
        return min(t for i, t in got.items() if i in held) - killed
    finally:
        victim.kill()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--trials", type=int, default=10)
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp, Launcher(tmp) as launcher:
        master = launcher.master()
        times = [trial(launcher, master.address, master.stub(), n) for n in range(args.trials)]
    print(f"worker SIGKILLed -> first of its shards leased to another worker, {len(times)} "
          f"trials, defaults (heartbeat 1 s, worker timeout 3 s):")
    print(f"  min {min(times):.2f} s, median {statistics.median(times):.2f} s, "
          f"max {max(times):.2f} s (target: at most 3 s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
