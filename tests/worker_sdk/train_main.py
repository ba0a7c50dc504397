"""A training worker for the end-to-end tests of the pipelined step: a tiny model with an
ElasticEmbedding on a real PS, pushes in the background, optionally DataLoader workers.

Run as `python -m tests.worker_sdk.train_main` from the repository root. It appends to `--log`
the record ids of every step whose push was *answered*, at the moment the SDK is about to
acknowledge them (so a record is logged before the master can count it): what this worker
really pushed.
"""
from __future__ import annotations

import argparse
import logging
import sys
import threading
import time

import torch
from torch import nn

from worker_sdk import ArrayReader, ElasticDataset, ElasticEmbedding, PSClient, ack


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--master", required=True)
    p.add_argument("--records", type=int, default=2000)
    p.add_argument("--shard-size", type=int, default=100)
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--batch", type=int, default=40)
    p.add_argument("--num-workers", type=int, default=0)
    p.add_argument("--max-inflight", type=int, default=1)
    p.add_argument("--step-s", type=float, default=0.01)
    p.add_argument("--name", default="train-main")
    p.add_argument("--log", required=True)
    a = p.parse_args()
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    torch.set_num_threads(1)
    torch.manual_seed(0)
    full = nn.ModuleDict({"emb": ElasticEmbedding(None, 4, table="t", seed=1),
                          "head": nn.Linear(4, 1)})
    log = open(a.log, "a")
    lock = threading.Lock()
    steps: list[tuple[int, list[int]]] = []  # (the push's mark, the step's records)

    class LoggedLedger(ack.AckLedger):
        """The ack ledger of this loop: logs a step's records before acknowledging them."""

        def trained(self, mark=None):  # the pipeline calls this once a push is answered
            with lock:
                while steps and (mark is None or steps[0][0] <= mark):
                    log.write("".join(f"{r}\n" for r in steps.pop(0)[1]))
                log.flush()
            return super().trained(mark)

    ledger = LoggedLedger()
    client = PSClient(master=a.master, max_inflight=a.max_inflight, ledger=ledger)
    client.init_parameters(full, "sgd", lr=0.01)
    ds = ElasticDataset(ArrayReader(torch.arange(a.records)), master=a.master, name="train",
                        shard_size=a.shard_size, num_epochs=a.epochs, shuffle=True, seed=7,
                        max_shards=2, worker_name=a.name, ledger=ledger)
    prefetch = lambda batch: client.prefetch(batch % 50)  # noqa: E731
    loader = ds.loader(a.batch, num_workers=a.num_workers, prefetch=prefetch) \
        if a.num_workers else None
    # a DataLoader's pass ends at the tail of the job while other workers hold the rest (work
    # may still come back from one that dies): passes go on until the master says END
    while not ds.ended:
        batches = loader if loader is not None else ds.batches(
            a.batch, prefetch=prefetch, prefetch_ahead=a.max_inflight)
        for batch in batches:
            client.pull(full)
            full["head"](full["emb"](batch % 50)).sum().backward()
            time.sleep(a.step_s)
            with lock:
                steps.append((ledger.mark(), batch.tolist()))
            client.push(full, wait=False)
    client.flush()
    ds.close()
    client.close()
    print(f"finished {ds.stats()}", flush=True)


if __name__ == "__main__":
    main()
