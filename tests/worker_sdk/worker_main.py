"""A worker process for the end-to-end tests: trains nothing, but like a real loop.

Run as `python -m tests.worker_sdk.worker_main` from the repository root.

Each step sleeps `--step-s` (the "training"), then appends the record ids of its samples to
`--log` (one per line, flushed: what this worker trained), then acknowledges: with --ack push it
calls ds.mark_trained() as a PSClient.push would; with --ack next the next request does it.
"""
from __future__ import annotations

import argparse
import logging
import os
import sys
import time

from worker_sdk import ElasticDataset


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--master", required=True)
    p.add_argument("--dataset", default="train")
    p.add_argument("--records", type=int, default=200)
    p.add_argument("--shard-size", type=int, default=10)
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--shuffle", action="store_true")
    p.add_argument("--lease-timeout", type=float, default=0.0)
    p.add_argument("--max-shards", type=int, default=2)
    p.add_argument("--batch", type=int, default=0, help="0: iterate samples")
    p.add_argument("--step-s", type=float, default=0.01)
    p.add_argument("--long-step-s", type=float, default=0.0,
                   help="every step after the first sleeps this long (a long step in flight)")
    p.add_argument("--ack", default="auto")
    p.add_argument("--name", default=f"test-worker-{os.getpid()}")
    p.add_argument("--log", required=True)
    a = p.parse_args()
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    ds = ElasticDataset(
        list(range(a.records)), master=a.master, name=a.dataset, shard_size=a.shard_size,
        num_epochs=a.epochs, shuffle=a.shuffle, lease_timeout_s=a.lease_timeout,
        max_shards=a.max_shards, worker_name=a.name, ack=a.ack,
    )
    steps = ds.batches(a.batch) if a.batch else ([x] for x in ds)
    with open(a.log, "a") as log:
        for i, step in enumerate(steps):
            records = step.tolist() if hasattr(step, "tolist") else step
            time.sleep(a.long_step_s if i and a.long_step_s else a.step_s)
            log.write("".join(f"{r}\n" for r in records))
            log.flush()
            if a.ack == "push":
                ds.mark_trained()
    ds.close()
    print(f"finished {ds.stats()}", flush=True)


if __name__ == "__main__":
    main()
