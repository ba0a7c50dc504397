"""The master on its own: a dataset driven through it by simulated workers under churn.

Starts `elastic-master` on a fresh SQLite file, creates a 2-epoch dataset, runs simulated
worker processes (they lease shards and "train" by sleeping), scales them 2 -> 4 -> 2 with one
killed by SIGKILL and one stopped by SIGTERM, SIGKILLs and restarts the master once, shows
live progress, and prints what the churn cost. Nothing is left running when it ends or is
interrupted.
"""
from __future__ import annotations

import argparse
import shutil
import signal
import sys
import time
from pathlib import Path

import grpc
from tqdm import tqdm

from cluster.launch import Launcher, Proc
from protos import master_pb2 as pb
from protos import master_pb2_grpc as pb_grpc


def start_worker(launcher: Launcher, address: str, name: str, dataset: str,
                 spr: float) -> Proc:
    return launcher.python("-m", "worker_sdk.data.simworker", "--master", address, "--dataset", dataset,
                           "--name", name, "--seconds-per-record", str(spr), name=name)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--records", type=int, default=40_000)
    p.add_argument("--shard-size", type=int, default=200)
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--seconds-per-record", type=float, default=0.0004)
    p.add_argument("--dir", default="demo-run", help="where the master's database goes")
    args = p.parse_args(argv)

    run_dir = Path(args.dir).resolve()
    shutil.rmtree(run_dir, ignore_errors=True)
    launcher = Launcher(run_dir)  # logs and the master's database go there
    master = launcher.master(db=f"sqlite:///{run_dir / 'master.db'}")
    workers: dict[str, Proc] = {}
    started = time.monotonic()
    try:
        channel = grpc.insecure_channel(master.address)
        stub = pb_grpc.MasterStub(channel)
        stub.CreateDataset(pb.DatasetSpec(name="demo", num_records=args.records,
                                          shard_size=args.shard_size, num_epochs=args.epochs,
                                          shuffle=True, seed=1))
        total = args.records * args.epochs
        plan = [  # (fraction of all records done, action)
            (0.00, "start 2"), (0.15, "start 2"), (0.35, "sigkill"), (0.45, "kill master"),
            (0.55, "sigterm"), (0.70, "start 1"),
        ]
        n = 0
        bar = tqdm(total=total, unit="rec", desc="training", dynamic_ncols=True)
        last_done = 0
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            try:
                status = stub.GetStatus(pb.GetStatusRequest(), timeout=2)
            except grpc.RpcError:
                time.sleep(0.2)  # the master is restarting
                continue
            (ds,) = status.datasets
            done = sum(e.records_done for e in ds.epochs)
            bar.update(done - last_done)
            last_done = done
            bar.set_postfix(epoch=min(ds.epoch, args.epochs - 1), workers=len(status.workers),
                            shards=f"{ds.done}/{-(-args.records // args.shard_size)}")
            while plan and done >= plan[0][0] * total:
                _, action = plan.pop(0)
                alive = [k for k, v in workers.items() if v.alive]
                if action.startswith("start"):
                    for _ in range(int(action.split()[1])):
                        n += 1
                        workers[f"sim{n}"] = start_worker(launcher, master.address, f"sim{n}",
                                                          "demo", args.seconds_per_record)
                    tqdm.write(f"scaled up to {len(alive) + int(action.split()[1])} workers")
                elif action == "sigkill" and alive:
                    workers[alive[0]].kill()
                    tqdm.write(f"SIGKILL {alive[0]}: its shards come back after the timeout")
                elif action == "sigterm" and alive:
                    workers[alive[0]].signal(signal.SIGTERM)
                    tqdm.write(f"SIGTERM {alive[0]}: it hands its leases back at once")
                elif action == "kill master":
                    tqdm.write("SIGKILL the master; restarting it on the same database")
                    master.restart()
            if ds.finished:
                break
            time.sleep(0.25)
        bar.close()
        for proc in workers.values():
            proc.wait(30)
        wall = time.monotonic() - started
        status = stub.GetStatus(pb.GetStatusRequest(), timeout=5)
        (ds,) = status.datasets
        print("\nSUMMARY")
        print(f"  wall time {wall:.1f} s, {len(workers)} worker processes started")
        for e in ds.epochs:
            requeues = ", ".join(f"{k}={v}" for k, v in sorted(e.requeues.items())) or "none"
            print(f"  epoch {e.epoch}: {e.records_done}/{e.records_total} records done, "
                  f"{e.handouts} hand-outs for {e.done} shards, {e.records_redone} records "
                  f"redone, {e.duplicates} duplicate reports, requeues: {requeues}")
        ok = ds.finished and all(e.records_done == e.records_total for e in ds.epochs)
        print(f"  every record of every epoch counted done exactly once: {ok}")
        print(f"  inspect the timeline: see {args.dir}/ (the master has stopped)")
        return 0 if ok else 1
    except KeyboardInterrupt:
        print("\ninterrupted; stopping everything", file=sys.stderr)
        return 130
    finally:
        for proc in workers.values():
            proc.kill()
        master.terminate()
        launcher.close()


if __name__ == "__main__":
    sys.exit(main())
