"""[3] Cost of one shard operation (get + report) at 10^3, 10^5 and 10^6 shards, in-process
on MasterCore: the pure core (journal batch discarded) and the core with a real Store (SQLite
file) behind the Committer. Must stay flat; also the time to create the dataset."""
from __future__ import annotations

import statistics
import time
from pathlib import Path


def bench_cost(args, workdir: Path, log) -> dict:
    from master.calls import Report
    from master.core import MasterCore, Settings
    from master.datasets.spec import DatasetSpec
    from master.persistence.committer import Committer
    from master.persistence.store import Store

    def fresh(n_shards: int, durable: bool, tag: str, count: int):
        # enough epochs never to run out; small datasets roll over epochs on the way
        spec = DatasetSpec(name="cost", num_records=n_shards * 10, shard_size=10,
                           num_epochs=2 + 2 * count // n_shards, shuffle=True, seed=3)
        if durable:
            store = Store(f"sqlite:///{workdir / f'cost-{tag}.db'}")
            store.upgrade()
            core = MasterCore(Settings(), snapshot=store.load())
            committer = Committer(core, store, on_fatal=lambda exc: None)
            committer.start()
            call = committer.call
        else:
            store = committer = None
            core = MasterCore(Settings())

            def call(fn):
                result = fn()
                core.journal.swap()  # what a commit would take away
                return result

        t = time.perf_counter()
        call(lambda: core.create_dataset(spec))
        created = time.perf_counter() - t
        worker = call(lambda: core.register_worker("cost", {})).worker_id
        return core, call, created, worker, (committer, store)

    def ops(core, call, worker, count: int) -> float:
        t = time.perf_counter()
        for _ in range(count):
            grant = call(lambda: core.get_shard(worker, "cost", 0, []))
            lease = grant.leases[0]
            call(lambda: core.report(worker, [Report(lease.lease_id, "DONE", lease.size)]))
        return (time.perf_counter() - t) / count

    rows = []
    for durable, count in ((False, args.cost_ops_core), (True, args.cost_ops_durable)):
        rounds = args.cost_rounds[not durable]  # the cheap in-memory runs get more rounds
        samples: dict[int, list[float]] = {n: [] for n in args.cost_sizes}
        created: dict[int, list[float]] = {n: [] for n in args.cost_sizes}
        for rnd in range(rounds):  # interleaved, so noise spreads over all sizes
            for n in args.cost_sizes:
                core, call, made, worker, (committer, store) = fresh(
                    n, durable, f"{n}-{rnd}-{int(durable)}", count)
                try:
                    ops(core, call, worker, min(count // 10, 200))  # warm-up
                    samples[n].append(ops(core, call, worker, count))
                    created[n].append(made)
                finally:
                    if committer is not None:
                        committer.stop()
                        store.close()
        for n in args.cost_sizes:
            row = dict(mode="core+store+committer (SQLite)" if durable else "core only",
                       shards=n, ops=count, rounds=rounds,
                       us_per_op=min(samples[n]) * 1e6,
                       us_per_op_median=statistics.median(samples[n]) * 1e6,
                       create_ms=min(created[n]) * 1e3)
            rows.append(row)
            log(f"  {row['mode']:30s} {n:>9,d} shards: {row['us_per_op']:8.1f} us/op "
                f"(median {row['us_per_op_median']:.1f}), create {row['create_ms']:.1f} ms")
    ratios = {}
    for mode in {r["mode"] for r in rows}:
        mine = {r["shards"]: r for r in rows if r["mode"] == mode}
        lo, hi = min(mine), max(mine)
        ratios[mode] = mine[hi]["us_per_op"] / mine[lo]["us_per_op"]
    return {"rows": rows, "ratio_max_vs_min": ratios}
