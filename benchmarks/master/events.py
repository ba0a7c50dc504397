"""[6] Appending and reading 10^5 events: in-process through Journal.event + Store.apply on a
SQLite file, read back with Store.events in pages, then GetEvents over gRPC from a real master
started on that database."""
from __future__ import annotations

import statistics
import time
from pathlib import Path

from benchmarks.master.servers import HOST, start_master
from cluster.launch import Launcher

EVENTS_PAGE = 10_000  # GetEvents' cap on `limit` (master/server.py MAX_EVENTS)


def bench_events(args, workdir: Path, log) -> dict:
    """Append events through Journal.event + Store.apply (SQLite file, durable commits), read
    them back through Store.events in pages of 10,000 (as GetEvents does), then over gRPC
    with GetEvents from a real master started on that database."""
    import grpc

    from master.persistence.journal import Journal
    from master.persistence.store import Store
    from protos import master_pb2 as pb
    from protos import master_pb2_grpc as pb_grpc

    n, per_commit = args.events, args.events_per_commit

    def append(db: Path, count: int, per: int) -> float:
        store = Store(f"sqlite:///{db}")
        store.upgrade()
        journal = Journal()
        try:
            t = time.perf_counter()
            for first in range(0, count, per):
                for i in range(first, min(first + per, count)):
                    # the commonest event under churn, with a detail of its usual size
                    start = (i % 100_000) * 10
                    journal.event("lease_requeued", worker_id=f"w{i % 1000:06d}",
                                  dataset="bench", epoch=i // 100_000, shard_index=i % 100_000,
                                  cause=("lost", "preempted", "timeout")[i % 3],
                                  detail=f"lease {i + 1} offset 5: [{start}, {start + 5}) "
                                  f"done, [{start + 5}, {start + 10}) back")
                store.apply(journal.swap())
            return time.perf_counter() - t
        finally:
            store.close()

    def read_store(db: Path) -> tuple[float, int]:
        store = Store(f"sqlite:///{db}")
        try:
            t = time.perf_counter()
            since, got, pages = 0, 0, 0
            while True:
                rows = store.events(since, EVENTS_PAGE)
                pages += 1
                if not rows:
                    break
                assert rows[0]["seq"] == since + 1, (since, rows[0]["seq"])
                got += len(rows)
                since = rows[-1]["seq"]
            return time.perf_counter() - t, got
        finally:
            store.close()

    def read_grpc(port: int, limit: int) -> tuple[float, int, int]:
        with grpc.insecure_channel(f"{HOST}:{port}") as channel:
            stub = pb_grpc.MasterStub(channel)
            stub.GetEvents(pb.GetEventsRequest(since=0, limit=1), timeout=60)  # connected
            t = time.perf_counter()
            since, got, calls = 0, 0, 0
            while True:
                res = stub.GetEvents(pb.GetEventsRequest(since=since, limit=limit), timeout=60)
                calls += 1
                if not res.events:
                    break
                got += len(res.events)
                since = res.next
            return time.perf_counter() - t, got, calls

    out: dict = {"events": n, "per_commit": per_commit, "append": [], "read_store": [],
                 "append_single": [], "read_grpc": {}}
    for rnd in range(args.events_rounds):
        # round 0's database is kept for the master below (start_master opens NAME.db)
        path = workdir / ("events.db" if rnd == 0 else f"events-{rnd}.db")
        out["append"].append(append(path, n, per_commit))
        seconds, got = read_store(path)
        assert got == n, (got, n)
        out["read_store"].append(seconds)
        log(f"  round {rnd}: append {n:,} events, {per_commit} a commit: "
            f"{out['append'][-1]:.2f} s; read back in pages of {EVENTS_PAGE:,}: {seconds:.2f} s")
        if rnd:
            path.unlink()
    # one event a commit (a lone registration, say): the per-commit floor, on fewer events
    single = args.events_single
    out["append_single"].append(append(workdir / "events-single.db", single, 1))
    out["single"] = single
    log(f"  append {single:,} events, 1 a commit: {out['append_single'][-1]:.2f} s")
    # over gRPC, from a real master on the first database
    t = time.perf_counter()
    launcher = Launcher(workdir)
    server = start_master(launcher, "events")
    out["master_start_s"] = time.perf_counter() - t  # includes the interpreter's start
    try:
        for limit in (EVENTS_PAGE, 1000):
            runs = []
            for _ in range(args.events_rounds):
                seconds, got, calls = read_grpc(server.port, limit)
                assert got >= n, (got, n)  # plus the master's own master_started event
                runs.append(seconds)
            out["read_grpc"][limit] = dict(seconds=runs, events=got, calls=calls)
            log(f"  GetEvents, limit {limit:,}: {got:,} events in {calls} calls, "
                f"{min(runs):.2f} s (min of {len(runs)}; median {statistics.median(runs):.2f})")
    finally:
        server.stop()
        launcher.close()
    return out
