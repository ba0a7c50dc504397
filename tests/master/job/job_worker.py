"""A worker a job's master launches in the tests: trains nothing, but leases like a real one.

Run as `python -m tests.master.job.job_worker`, configured as a launched worker is: the master
and its name from ELASTIC_PS_MASTER / ELASTIC_PS_WORKER_NAME (the SDK reads them), the market
label from ELASTIC_PS_LABELS. Each record it trains is appended to DIR/NAME.records (what it
trained, flushed before the acknowledgement); it exits 0 once the dataset is finished.
"""
from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from pathlib import Path


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True, help="folder for NAME.records")
    p.add_argument("--records", type=int, default=400)
    p.add_argument("--shard-size", type=int, default=10)
    p.add_argument("--step-s", type=float, default=0.01)
    p.add_argument("--slow-until", metavar="PATH",
                   help="train at --slow-step-s a record until PATH exists (a test holds the "
                        "job running while it kills, preempts or waits)")
    p.add_argument("--slow-step-s", type=float, default=0.2)
    p.add_argument("--fail-at-once", action="store_true", help="exit 3 before registering")
    a = p.parse_args()
    if a.fail_at_once:
        sys.exit(3)
    from worker_sdk import ElasticDataset  # after the check: --fail-at-once exits at once

    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    ds = ElasticDataset(list(range(a.records)), name="train", shard_size=a.shard_size,
                        num_epochs=1, max_shards=1, ack="push")
    name = os.environ.get("ELASTIC_PS_WORKER_NAME", f"worker-{os.getpid()}")
    with open(Path(a.out) / f"{name}.records", "a") as out:
        for record in ds:
            slow = a.slow_until and not os.path.exists(a.slow_until)
            time.sleep(a.slow_step_s if slow else a.step_s)
            out.write(f"{record}\n")
            out.flush()
            ds.mark_trained()
    ds.close()
    print(f"finished {ds.stats()}", flush=True)


if __name__ == "__main__":
    main()
