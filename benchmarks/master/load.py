"""The load generator of the master benchmarks: N persistent client processes (spawned once,
reused for every run), each with its own gRPC channel and registered worker, that run one kind
of step in a loop for a fixed window and report counts, latencies and errors; the server's
CPU time and thread switches are sampled around the window.

Kinds: "echo" (the bare echo server), "two-calls" (GetShard then ReportShard), "batched"
(GetShard of 4 carrying DONE of the previous 4), "progress-heartbeat" and
"progress-piggyback" (see benchmarks.master.progress), "dlrover" (DLRover 0.6.1's own client).
"""
from __future__ import annotations

import multiprocessing as mp
import os
import sys
import time
from pathlib import Path

from benchmarks.master.servers import ECHO_METHOD, ECHO_PAYLOAD, HOST

BATCH = 4
# calls a client makes per step, by kind (the others make one)
CALLS_PER_STEP = {"two-calls": 2, "dlrover": 2, "progress-heartbeat": 2}


def _client_loop(idx: int, cmd_q, res_q, go, start_at) -> None:
    """A persistent client process: one run per command, own channel per run."""
    if os.environ.get("BENCH_DLROVER_CLIENT"):
        import sysconfig

        # spawn hands the child our sys.path: DLRover's own venv's packages go before ours
        sys.path[:0] = [sysconfig.get_paths()["purelib"]]
    import grpc

    if not os.environ.get("BENCH_DLROVER_CLIENT"):
        from protos import master_pb2 as pb
        from protos import master_pb2_grpc as pb_grpc

    while True:
        cmd = cmd_q.get()
        if cmd is None:
            return
        kind, port, dataset, duration = cmd
        stats = {"calls": 0, "shards": 0, "leased": 0, "refused": 0, "errors": 0,
                 "lat": [], "error": ""}
        channel = grpc.insecure_channel(f"{HOST}:{port}")
        ready = False
        try:
            grpc.channel_ready_future(channel).result(timeout=30)
            if kind == "echo":
                echo = channel.unary_unary(ECHO_METHOD)
                echo(ECHO_PAYLOAD, timeout=30)
                step = _echo_step(echo)
            elif kind == "dlrover":
                step = _dlrover_step(port, dataset, idx)
            else:
                stub = pb_grpc.MasterStub(channel)
                step = _master_step(stub, pb, kind, dataset, idx)
            res_q.put(("ready", idx))
            ready = True
            go.wait()
            t0 = start_at.value
            while time.monotonic() < t0:
                time.sleep(0.001)
            deadline = t0 + duration
            lat = stats["lat"]
            while True:
                begin = time.monotonic()
                if begin >= deadline:
                    break
                try:
                    shards, leased, refused = step()
                except grpc.RpcError as exc:
                    stats["errors"] += 1
                    stats["error"] = f"{exc.code()}: {exc.details()}"
                    time.sleep(0.01)
                    continue
                end = time.monotonic()
                if end > deadline:
                    break  # finished after the window: not counted
                stats["calls"] += CALLS_PER_STEP.get(kind, 1)
                stats["shards"] += shards
                stats["leased"] += leased
                stats["refused"] += refused
                lat.append(end - begin)
        except Exception as exc:  # noqa: BLE001 - reported to the parent with the numbers
            stats["error"] = f"{type(exc).__name__}: {exc}"
            if not ready:
                res_q.put(("ready", idx))
        finally:
            channel.close()
        res_q.put(("done", idx, stats))


def _dlrover_step(port: int, dataset: str, idx: int):
    """DLRover 0.6.1's own client: get_task then report_task_result, one shard each."""
    os.environ.setdefault("DLROVER_LOG_LEVEL", "ERROR")  # the client's logs only, not its master's
    from dlrover.python.elastic_agent.master_client import GrpcMasterClient

    client = GrpcMasterClient(f"{HOST}:{port}", idx, "worker", timeout=30)
    # the first report creates the dataset; DLRover ignores the same one again
    client.report_dataset_shard_params(batch_size=10, num_epochs=1000, dataset_size=10_000_000,
                                       shuffle=False, num_minibatches_per_shard=1,
                                       dataset_name=dataset)

    def step():
        ok, task = client.get_task(dataset)
        if not ok or task.task_id < 0:
            return 0, 0, 0
        res = client.report_task_result(dataset, task.task_id, "")
        return (1, 1, 0) if res.success else (0, 1, 1)

    return step


def _echo_step(echo):
    def step():
        echo(ECHO_PAYLOAD, timeout=30)
        return 0, 0, 0

    return step


def _master_step(stub, pb, kind: str, dataset: str, idx: int):
    """One unit of client work against the master; returns (acked, leased, refused)."""
    worker_id = stub.RegisterWorker(
        pb.RegisterWorkerRequest(name=f"bench-{idx}", labels={"bench": "1"}), timeout=30
    ).worker_id
    done = pb.ShardReport.DONE

    if kind == "two-calls":
        def step():
            got = stub.GetShard(pb.GetShardRequest(worker_id=worker_id, dataset=dataset,
                                                   max_shards=0), timeout=30)
            if not got.leases:
                return 0, 0, 0
            lease = got.leases[0]
            res = stub.ReportShard(pb.ReportShardRequest(worker_id=worker_id, reports=[
                pb.ShardReport(lease_id=lease.lease_id, outcome=done,
                               records_done=lease.shard.end - lease.shard.start)]), timeout=30)
            ok = sum(1 for r in res.results if r.accepted)
            return ok, 1, len(res.results) - ok

        return step

    progress = pb.ShardReport.PROGRESS

    def half(leases) -> list:
        """PROGRESS half-way into each lease, as the SDK reports trained offsets."""
        return [pb.ShardReport(lease_id=x.lease_id, outcome=progress,
                               records_done=(x.shard.end - x.shard.start) // 2) for x in leases]

    if kind == "progress-heartbeat":
        # the stress case: a Heartbeat with PROGRESS for every held lease before every
        # GetShard (the SDK heartbeats once a second), then DONE piggybacked on GetShard
        held_hb: list = []

        def step():
            hb = stub.Heartbeat(pb.HeartbeatRequest(worker_id=worker_id,
                                                    progress=half(held_hb)), timeout=30)
            refused = sum(1 for r in hb.results if not r.accepted)
            reports = [pb.ShardReport(lease_id=x.lease_id, outcome=done,
                                      records_done=x.shard.end - x.shard.start) for x in held_hb]
            got = stub.GetShard(pb.GetShardRequest(worker_id=worker_id, dataset=dataset,
                                                   max_shards=BATCH, reports=reports),
                                timeout=30)
            held_hb[:] = got.leases
            ok = sum(1 for r in got.results if r.accepted)
            return ok, len(got.leases), refused + len(got.results) - ok

        return step

    if kind == "progress-piggyback":
        # SDK-like: two generations of leases held; each GetShard carries DONE for the
        # older one and PROGRESS (half-way) for the newer one, still in training
        older: list = []
        newer: list = []

        def step():
            reports = [pb.ShardReport(lease_id=x.lease_id, outcome=done,
                                      records_done=x.shard.end - x.shard.start)
                       for x in older] + half(newer)
            got = stub.GetShard(pb.GetShardRequest(worker_id=worker_id, dataset=dataset,
                                                   max_shards=BATCH, reports=reports),
                                timeout=30)
            n_done = len(older)
            ok = sum(1 for r in got.results[:n_done] if r.accepted)  # DONE acked: shards
            refused = sum(1 for r in got.results if not r.accepted)
            older[:] = newer
            newer[:] = got.leases
            return ok, len(got.leases), refused

        return step

    held: list = []

    def step():
        reports = [pb.ShardReport(lease_id=x.lease_id, outcome=done,
                                  records_done=x.shard.end - x.shard.start) for x in held]
        got = stub.GetShard(pb.GetShardRequest(worker_id=worker_id, dataset=dataset,
                                               max_shards=BATCH, reports=reports), timeout=30)
        held[:] = got.leases
        ok = sum(1 for r in got.results if r.accepted)
        return ok, len(got.leases), len(got.results) - ok

    return step


class Clients:
    """N persistent client processes (spawned once, reused for every run)."""

    def __init__(self, n: int, python: str | None = None):
        ctx = mp.get_context("spawn")
        self.res_q = ctx.Queue()
        self.go = ctx.Event()
        self.start_at = ctx.Value("d", 0.0)
        self.cmd_qs = [ctx.Queue() for _ in range(n)]
        self.procs = [
            ctx.Process(target=_client_loop, daemon=True,
                        args=(i, self.cmd_qs[i], self.res_q, self.go, self.start_at))
            for i in range(n)
        ]
        if python:  # clients of another venv (DLRover's): its interpreter, told so by env
            os.environ["BENCH_DLROVER_CLIENT"] = "1"
            ctx.set_executable(python)
        try:
            for p in self.procs:
                p.start()
        finally:
            if python:
                ctx.set_executable(sys.executable)
                del os.environ["BENCH_DLROVER_CLIENT"]

    def run(self, k: int, kind: str, port: int, dataset: str, duration: float,
            server_pid: int | None = None) -> dict:
        import psutil

        self.go.clear()
        for q in self.cmd_qs[:k]:
            q.put((kind, port, dataset, duration))
        for _ in range(k):
            msg = self._get(k, 120)
            assert msg[0] == "ready", msg
        server = psutil.Process(server_pid) if server_pid else None
        self.start_at.value = time.monotonic() + 0.2
        self.go.set()
        time.sleep(0.2)
        cpu0 = server.cpu_times()[:2] if server else (0.0, 0.0)
        switches0 = _switches(server_pid)
        time.sleep(duration)
        cpu1 = server.cpu_times()[:2] if server else (0.0, 0.0)
        switches1 = _switches(server_pid)
        results = [self._get(k, duration + 120) for _ in range(k)]
        stats = [r[2] for r in results]
        lat = sorted(x for s in stats for x in s["lat"])
        total = {key: sum(s[key] for s in stats)
                 for key in ("calls", "shards", "leased", "refused", "errors")}
        errors = [s["error"] for s in stats if s["error"]]
        return dict(
            kind=kind, clients=k, duration_s=duration,
            calls_per_s=total["calls"] / duration, shards_per_s=total["shards"] / duration,
            leased_per_s=total["leased"] / duration, refused=total["refused"],
            errors=total["errors"], first_error=errors[0] if errors else "",
            p50_ms=_pct(lat, 50) * 1e3, p99_ms=_pct(lat, 99) * 1e3,
            # cores the server process kept busy; its CPU and thread switches per call
            server_cpu=(sum(cpu1) - sum(cpu0)) / duration,
            server_user_us=_per_call(cpu1[0] - cpu0[0], total["calls"]) * 1e6,
            server_sys_us=_per_call(cpu1[1] - cpu0[1], total["calls"]) * 1e6,
            server_switches=_per_call(switches1 - switches0, total["calls"]),
        )

    def _get(self, k: int, timeout: float):
        """The next message from the first k clients; fails fast if one of them died."""
        import queue

        deadline = time.monotonic() + timeout
        while True:
            try:
                return self.res_q.get(timeout=0.5)
            except queue.Empty:
                dead = [p.pid for p in self.procs[:k] if not p.is_alive()]
                if dead:
                    raise RuntimeError(f"client processes {dead} died during the run") from None
                if time.monotonic() > deadline:
                    raise RuntimeError(f"no answer from the clients in {timeout:.0f} s") from None

    def close(self) -> None:
        for q in self.cmd_qs:
            q.put(None)
        for p in self.procs:
            p.join(timeout=10)
            if p.is_alive():
                p.kill()


def _per_call(amount: float, calls: int) -> float:
    return amount / calls if calls else float("nan")


def _switches(pid: int | None) -> int:
    """Voluntary context switches of all of a process's threads so far (Linux; else 0)."""
    total = 0
    if pid is None:
        return 0
    for status in Path(f"/proc/{pid}/task").glob("*/status"):
        try:
            for line in status.read_text().splitlines():
                if line.startswith("voluntary_ctxt_switches"):
                    total += int(line.split()[1])
        except OSError:
            pass  # a thread that ended meanwhile
    return total


def _pct(sorted_values: list[float], pct: float) -> float:
    if not sorted_values:
        return float("nan")
    i = min(len(sorted_values) - 1, int(len(sorted_values) * pct / 100))
    return sorted_values[i]


