"""One elastic-ps worker of bench_train: the bench's model on the fast path, timed step by step.

    python -m benchmarks.train.worker --master HOST:PORT --data DIR --batch 1024 --out F.json

It loads everything, waits for `--start-when` (so that several workers start together), then
trains like examples/ctr/train.py (range reads, the next batch's rows prefetched, pushes that
do not wait for their answers) and writes its records, wall time, CPU time (all its threads)
and step timeline to `--out`: seconds reading
(waiting for the next batch, leasing included), in the ElasticEmbedding's forward (distinct ids,
the rows taken, the gather; its waits for rows not counted), waiting on pulls (dense and rows
not yet there), pushing (the SDK's push and prefetch calls: the gradients taken, the Step built
and sent, waiting for room and for the last answers), computing (the rest: the MLP forward and
backward, the embedding's backward).
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch
from torch import nn

from examples.ctr.dataset import ClickLog
from benchmarks.train.models import elastic_model
from worker_sdk import ElasticDataset, PSClient

# called when the timed loop starts and ends (benchmarks/train/profile.py profiles it alone)
ON_START = ON_END = None


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--master", required=True)
    p.add_argument("--data", required=True)
    p.add_argument("--dataset", default="bench")
    p.add_argument("--batch", type=int, default=1024)
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--shard-size", type=int, default=8192)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--max-inflight", type=int, default=1)
    p.add_argument("--prefetch-ahead", type=int, default=1,
                   help="batches ahead of the loop whose data is prefetched (ds.batches)")
    p.add_argument("--num-workers", type=int, default=0, help="DataLoader workers (ds.loader)")
    p.add_argument("--plain", action="store_true",
                   help="no prefetch, synchronous pushes (the plain path, for comparison)")
    p.add_argument("--read-own-writes", action="store_true",
                   help="PSClient(read_own_writes=True): each step computes on every push of "
                   "its own")
    p.add_argument("--correct-own-writes", choices=("auto", "on", "off"), default="auto",
                   help="PSClient(correct_own_writes=None / True / False): each step adds its "
                   "last push's update to what it read (auto: PSClient's default)")
    p.add_argument("--name", default="bench-worker")
    p.add_argument("--start-when")
    p.add_argument("--out", required=True)
    a = p.parse_args(argv)
    torch.set_num_threads(1)  # as the local loop (benchmarks/train/local.py) and the PS
    train = ClickLog(a.data, "train")
    model = elastic_model(train.meta)
    client = PSClient(master=a.master, max_inflight=a.max_inflight,
                      read_own_writes=a.read_own_writes,
                      correct_own_writes={"auto": None, "on": True,
                                          "off": False}[a.correct_own_writes])
    client.init_parameters(model, optimizer="adagrad", lr=a.lr)
    ds = ElasticDataset(train, master=a.master, name=a.dataset, shard_size=a.shard_size,
                        num_epochs=a.epochs, shuffle=True, seed=a.seed, worker_name=a.name)
    if a.start_when:
        Path(a.out + ".ready").touch()
        while not Path(a.start_when).exists():
            time.sleep(0.01)
    loss_fn = nn.BCEWithLogitsLoss()
    clock = time.perf_counter
    spent = {"embedding": 0.0, "push": 0.0, "prefetch": 0.0}
    at = [0.0, 0.0]  # the embedding forward's start and the pull wait then

    def before(module, args):
        at[0], at[1] = clock(), client.pipeline.wait_pull_s

    def after(module, args, out):
        spent["embedding"] += clock() - at[0] - (client.pipeline.wait_pull_s - at[1])

    model.embedding.register_forward_pre_hook(before)
    model.embedding.register_forward_hook(after)

    def prefetch(batch):
        t0 = clock()
        client.prefetch(batch[0])
        spent["prefetch"] += clock() - t0

    if a.plain:
        prefetch = None
    batches = (ds.loader(a.batch, num_workers=a.num_workers, prefetch=prefetch)
               if a.num_workers else ds.batches(a.batch, prefetch=prefetch,
                                                prefetch_ahead=a.prefetch_ahead))
    it = iter(batches)
    records = steps = 0
    read_s = 0.0
    started = time.perf_counter()
    start_unix = time.time()
    cpu_started = time.process_time()  # every thread of the process: ZeroMQ's I/O thread too
    if ON_START is not None:
        ON_START()
    while True:
        t0 = time.perf_counter()
        batch = next(it, None)
        read_s += time.perf_counter() - t0
        if batch is None:
            break
        ids, dense, y = batch
        client.pull(model)
        loss_fn(model(ids, dense), y).backward()
        t0 = clock()
        client.push(model, wait=a.plain)
        spent["push"] += clock() - t0
        records += len(y)
        steps += 1
    t0 = clock()
    client.flush()
    spent["push"] += clock() - t0
    if ON_END is not None:
        ON_END()
    wall = time.perf_counter() - started
    end_unix = time.time()
    cpu = time.process_time() - cpu_started
    ds.close()
    waits = client.timeline()
    client.close()
    # the prefetch hook runs inside next(it) and sends the held push: the push phase's time
    read_s -= spent["prefetch"]
    push_s = spent["push"] + spent["prefetch"]
    compute = wall - read_s - waits["wait_pull_s"] - push_s - spent["embedding"]
    Path(a.out).write_text(json.dumps(dict(
        name=a.name, records=records, steps=steps, wall_s=wall, start=start_unix,
        end=end_unix, cpu_s=cpu, read_s=read_s, pull_s=waits["wait_pull_s"],
        push_s=push_s, embedding_s=spent["embedding"], compute_s=compute,
        stale=client.stale_refusals,
        own_writes=[client.pipeline.own_added, client.pipeline.own_missed,
                    client.pipeline.own_unmarked, client.pipeline.order.shown])))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
