"""[4] Master RSS (psutil) of the real master process with a 10^6-shard dataset, 1,000
registered workers holding 2 leases each, and 70,000 shards already done (so the bounded cache
of recently ended leases is full)."""
from __future__ import annotations

import time
from pathlib import Path

from benchmarks.master.servers import HOST, create_dataset, start_master
from cluster.launch import Launcher


def bench_rss(args, workdir: Path, log) -> dict:
    import grpc
    import psutil

    from protos import master_pb2 as pb
    from protos import master_pb2_grpc as pb_grpc

    # workers stay registered while we measure: they make no call after registering
    launcher = Launcher(workdir)
    server = start_master(launcher, "rss", ("--worker-timeout", "3600"))
    try:
        proc = psutil.Process(server.pid)
        mb = lambda: proc.memory_info().rss / 2**20  # noqa: E731
        out = {"rss_start_mb": mb()}
        out["create_s"] = create_dataset(server.port, "rss", args.rss_shards * 10, 10, 3)
        out["rss_dataset_mb"] = mb()
        with grpc.insecure_channel(f"{HOST}:{server.port}") as channel:
            stub = pb_grpc.MasterStub(channel)
            register = stub.RegisterWorker.future
            ids = []
            for start in range(0, args.rss_workers, 100):
                futs = [register(pb.RegisterWorkerRequest(
                    name=f"rss-{i}", labels={"host": f"node-{i % 50}", "zone": "a"}))
                    for i in range(start, min(start + 100, args.rss_workers))]
                ids += [f.result(timeout=60).worker_id for f in futs]
            out["rss_workers_mb"] = mb()
            # steady-state churn: one worker finishes shards through the batched path, so
            # the master's bounded cache of recently ended leases fills up
            done, held = 0, []
            while done < args.rss_churn:
                reports = [pb.ShardReport(lease_id=x.lease_id, outcome=pb.ShardReport.DONE,
                                          records_done=x.shard.end - x.shard.start)
                           for x in held]
                got = stub.GetShard(pb.GetShardRequest(worker_id=ids[0], dataset="rss",
                                                       max_shards=256, reports=reports),
                                    timeout=60)
                done += sum(1 for r in got.results if r.accepted)
                held = list(got.leases)
            # then leave leases held: 2 by each registered worker
            holders = ids[: args.rss_holders]
            futs = [stub.GetShard.future(pb.GetShardRequest(worker_id=w, dataset="rss",
                                                            max_shards=2)) for w in holders]
            held_now = sum(len(f.result(timeout=60).leases) for f in futs)
            status = stub.GetStatus(pb.GetStatusRequest(), timeout=60)
            time.sleep(0.5)
        out.update(rss_final_mb=mb(), workers=len(ids), shards=args.rss_shards,
                   churned_shards=done, leases_held=held_now + len(held),
                   workers_alive=sum(1 for w in status.workers if w.state == "alive"))
        log(f"  start {out['rss_start_mb']:.0f} MB, +{args.rss_shards:,} shards "
            f"{out['rss_dataset_mb']:.0f} MB (created in {out['create_s'] * 1e3:.0f} ms), "
            f"+{len(ids)} workers {out['rss_workers_mb']:.0f} MB, +{done:,} shards done and "
            f"{out['leases_held']} leases held: {out['rss_final_mb']:.0f} MB")
    finally:
        server.stop()
        launcher.close()
    return out
