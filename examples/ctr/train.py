"""Train a click-through-rate model on the PS set: the example to copy.

Start a master and the PS, generate data (scripts/make_ctr_data.py), then start as many copies
of this job as you like (`scripts/train_ctr.py`, or `python -m examples.ctr.train`), on any
machines, at any time; kill any of them (SIGKILL, SIGTERM) and start more. They train one model together and every record of every epoch is trained
exactly once:

    python scripts/train_ctr.py --master localhost:50051 --data data/ctr

The model: one embedding table on the PS for all categorical fields (each field's ids are
offset into it, so a step pulls its rows in one request per PS) and a small MLP over the
embeddings and the dense features. `--eval` only evaluates the PS's current model on the
held-out split and prints the AUC.
"""
from __future__ import annotations

import argparse
import logging
import os
import socket
import sys
import time
from pathlib import Path

import torch
from torch import nn

from examples.ctr.dataset import ClickLog
from examples.ctr.evaluate import evaluate
from examples.ctr.model import build_model
from examples.ctr.pace import Pace
from worker_sdk import ElasticDataset, ParquetReader
from worker_sdk.ps.client import PSClient

log = logging.getLogger("train_ctr")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--master", default=os.environ.get("ELASTIC_PS_MASTER", "localhost:50051"))
    p.add_argument("--data", default="data/ctr", help="directory from make_ctr_data.py")
    p.add_argument("--dataset", default="ctr-train", help="dataset name on the master")
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--shard-size", type=int, default=2048)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--name", default=os.environ.get("ELASTIC_PS_WORKER_NAME")
                   or f"{socket.gethostname()}-{os.getpid()}")
    p.add_argument("--label", action="append", default=[], metavar="KEY=VALUE",
                   help="worker label, e.g. market=spot (repeatable)")
    p.add_argument("--num-workers", type=int, default=0,
                   help="DataLoader worker processes reading batches (ds.loader); 0: read in "
                        "the training process (ds.batches)")
    p.add_argument("--parquet", action="store_true",
                   help="read DIR/train.parquet (make_ctr_data.py --parquet) with ParquetReader "
                        "instead of the numpy memmaps")
    p.add_argument("--max-inflight", type=int, default=1,
                   help="pushes sent and not yet answered")
    p.add_argument("--eval", action="store_true", help="only evaluate the current model")
    p.add_argument("--log-every", type=float, default=5.0, help="seconds between progress lines")
    p.add_argument("--start-when", metavar="PATH",
                   help="load everything, then join only once PATH exists (a warm standby)")
    p.add_argument("--pace-file", metavar="PATH",
                   help="a JSON file saying how fast to train, read between steps "
                        "(examples/ctr/pace.py; the demo's): the least seconds between steps, "
                        "and whether to hold before the next one")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    labels = dict(item.split("=", 1) for item in args.label if "=" in item)
    if len(labels) != len(args.label):
        p.error("--label takes KEY=VALUE")
    train = ClickLog(args.data, "train")
    if args.start_when:
        deadline = time.monotonic() + 3600
        while not Path(args.start_when).exists():
            if time.monotonic() > deadline:
                p.error(f"--start-when {args.start_when}: it never appeared")
            time.sleep(0.05)
    model = build_model(train.meta)
    client = PSClient(master=args.master, max_inflight=args.max_inflight)
    client.init_parameters(model, optimizer="adagrad", lr=args.lr)
    if args.eval:
        print(f"test AUC {evaluate(client, model, ClickLog(args.data, 'test')):.4f} "
              f"(best reachable {train.meta['optimal_test_auc']:.4f})")
        return 0

    source = (ParquetReader(Path(args.data) / "train.parquet", columns=["ids", "dense", "y"])
              if args.parquet else train)  # either way a leased range is read in one call
    ds = ElasticDataset(source, master=args.master, name=args.dataset,
                        shard_size=args.shard_size, num_epochs=args.epochs, shuffle=True,
                        seed=args.seed, worker_name=args.name, labels=labels)
    loss_fn = nn.BCEWithLogitsLoss()
    steps = records = 0
    started = last_log = time.monotonic()
    failures_in_a_row = 0
    pace = Pace(args.pace_file) if args.pace_file else None
    # the fast path: ClickLog reads a leased range in one call (read/take), the next batch's
    # embedding rows and dense parameters are fetched while this one computes, and pushes go
    # out without waiting for their answers (a batch counts as trained once its push is answered)
    prefetch = lambda batch: client.prefetch(batch[0])  # noqa: E731
    batches = (ds.loader(args.batch_size, num_workers=args.num_workers, prefetch=prefetch)
               if args.num_workers else ds.batches(args.batch_size, prefetch=prefetch))
    for ids, dense, y in batches:
        client.pull(model)
        try:
            loss = loss_fn(model(ids, dense), y)
            if not torch.isfinite(loss):
                raise FloatingPointError(f"loss is {loss.item()}")
            loss.backward()
        except (FloatingPointError, ValueError, IndexError) as exc:
            # bad data, not a bad worker: report the batch FAILED; a shard that fails
            # --max-shard-failures times is quarantined by the master, the rest goes on
            model.zero_grad(set_to_none=True)
            client.flush()  # earlier steps' pushes answered: only this batch is failed
            ds.mark_failed(f"{type(exc).__name__}: {exc}")
            failures_in_a_row += 1
            if failures_in_a_row > 20:
                raise  # not a poison record: something is wrong with this worker
            continue
        failures_in_a_row = 0
        client.push(model, wait=False)  # the batch counts as trained once this is answered
        steps += 1
        records += len(y)
        now = time.monotonic()
        if now - last_log >= args.log_every:
            log.info("%s: %d steps, %d records, %.0f records/s, loss %.4f", args.name, steps,
                     records, records / (now - started), loss.item())
            last_log = now
        if pace is not None:
            pace.wait(client.flush)
    log.info("%s: done: %d steps, %d records in %.1f s", args.name, steps, records,
             time.monotonic() - started)
    client.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
