"""A protocol-level simulated worker: leases shards and "trains" them by sleeping.

For the master's demo, integration tests and benchmarks: it speaks the real gRPC contract
(batched GetShard with piggybacked reports, heartbeats, retries while the master is away,
adoption of leases whose reply was lost) but has no model. Real training uses worker_sdk.
"""
from __future__ import annotations

import logging
import threading
import time
from typing import Callable

import grpc

from protos import master_pb2 as pb
from protos import master_pb2_grpc as pb_grpc
from rpckit.errors import Reason, reason_of
from rpckit.retry import RETRYABLE

log = logging.getLogger(__name__)


class SimWorker:
    def __init__(
        self,
        master: str,
        dataset: str,
        *,
        name: str = "sim",
        labels: dict[str, str] | None = None,
        max_shards: int = 4,
        seconds_per_record: float = 0.0,
        heartbeats: bool = True,
        retry_for: float = 60.0,
        on_lease: Callable[[pb.Lease], None] | None = None,
    ):
        self.master = master
        self.dataset = dataset
        self.name = name
        self.labels = labels or {}
        self.max_shards = max_shards
        self.seconds_per_record = seconds_per_record
        self.retry_for = retry_for
        self.on_lease = on_lease
        self.channel = grpc.insecure_channel(master)
        self.stub = pb_grpc.MasterStub(self.channel)
        self.worker_id = ""
        self.heartbeat_interval = 1.0
        self.lock = threading.Lock()
        self.todo: list[pb.Lease] = []  # leased, not yet trained
        self.known: set[int] = set()  # every lease id this worker has seen
        self.finished: list[pb.Lease] = []  # trained, DONE not yet acknowledged
        self.records_trained = 0
        self.leases_done = 0
        self.stop = threading.Event()
        self.silent = threading.Event()  # set: stop all calls, as if hung
        self._heartbeats = heartbeats

    # ---- calls with retry ---------------------------------------------------------------

    def _call(self, method: str, request):
        deadline = time.monotonic() + self.retry_for
        delay = 0.05
        while True:
            try:
                return getattr(self.stub, method)(request, timeout=10)
            except grpc.RpcError as exc:
                if exc.code() not in RETRYABLE or time.monotonic() > deadline:
                    raise
                log.warning("%s: master unreachable (%s); retrying in %.2f s",
                            method, exc.code().name, delay)
                time.sleep(delay)
                delay = min(delay * 2, 1.0)

    def register(self) -> None:
        reply = self._call("RegisterWorker", pb.RegisterWorkerRequest(name=self.name,
                                                                      labels=self.labels))
        with self.lock:
            self.worker_id = reply.worker_id
            self.heartbeat_interval = reply.heartbeat_interval_s
            # a new identity holds nothing: what the old one held is redone elsewhere
            self.todo.clear()
            self.finished.clear()

    def _with_worker(self, make_request: Callable[[], object], method: str):
        """Call `method`; re-register and retry once when the master does not know us."""
        try:
            return self._call(method, make_request())
        except grpc.RpcError as exc:
            if reason_of(exc) != Reason.WORKER_GONE:
                raise
            log.warning("%s: %s; registering again", method, exc.details())
            self.register()
            return self._call(method, make_request())

    # ---- the loop -----------------------------------------------------------------------

    def _heartbeat_loop(self) -> None:
        while not self.stop.wait(self.heartbeat_interval):
            if self.silent.is_set():
                continue
            try:
                reply = self._with_worker(
                    lambda: pb.HeartbeatRequest(worker_id=self.worker_id), "Heartbeat"
                )
            except grpc.RpcError as exc:
                log.warning("heartbeat failed: %s", exc.code().name)
                continue
            with self.lock:
                for lease in reply.leases:
                    if lease.lease_id not in self.known:  # its GetShard reply was lost
                        self.known.add(lease.lease_id)
                        self.todo.append(lease)

    def run(self, max_seconds: float = 300.0) -> None:
        """Lease and train until END, `stop`, or `max_seconds`."""
        self.register()
        if self._heartbeats:
            threading.Thread(target=self._heartbeat_loop, daemon=True).start()
        give_up = time.monotonic() + max_seconds
        try:
            while not self.stop.is_set() and time.monotonic() < give_up:
                if self.silent.is_set():
                    time.sleep(0.05)
                    continue
                with self.lock:
                    lease = self.todo.pop(0) if self.todo else None
                if lease is not None:
                    self._train(lease)
                    continue
                with self.lock:
                    reports = [pb.ShardReport(lease_id=x.lease_id, outcome=pb.ShardReport.DONE)
                               for x in self.finished]
                reply = self._with_worker(
                    lambda: pb.GetShardRequest(worker_id=self.worker_id, dataset=self.dataset,
                                               max_shards=self.max_shards, reports=reports),
                    "GetShard",
                )
                with self.lock:
                    acked = {r.lease_id for r in reply.results}
                    self.finished = [x for x in self.finished if x.lease_id not in acked]
                    for lease in reply.leases:
                        if lease.lease_id not in self.known:
                            self.known.add(lease.lease_id)
                            self.todo.append(lease)
                if reply.status == pb.GetShardResponse.END:
                    return
                if reply.status == pb.GetShardResponse.WAIT:
                    time.sleep(reply.retry_after_ms / 1000)
        finally:
            self.stop.set()

    def _train(self, lease: pb.Lease) -> None:
        if self.on_lease:
            self.on_lease(lease)
        size = lease.shard.end - lease.shard.start
        if self.seconds_per_record:
            time.sleep(size * self.seconds_per_record)
        with self.lock:
            self.records_trained += size
            self.leases_done += 1
            self.finished.append(lease)

    def leave(self, reason: str = "finished") -> None:
        with self.lock:
            reports = [pb.ShardReport(lease_id=x.lease_id, outcome=pb.ShardReport.DONE)
                       for x in self.finished]
            self.finished.clear()
        try:
            self._call("LeaveWorker", pb.LeaveWorkerRequest(worker_id=self.worker_id,
                                                            reason=reason, reports=reports))
        except grpc.RpcError as exc:
            if reason_of(exc) != Reason.WORKER_GONE:
                raise

    def close(self) -> None:
        self.stop.set()
        self.channel.close()


def main(argv: list[str] | None = None) -> None:
    """`python -m master.simworker --master HOST:PORT --dataset NAME`: one simulated worker."""
    import argparse
    import signal

    p = argparse.ArgumentParser(prog="python -m master.simworker", description=main.__doc__)
    p.add_argument("--master", required=True)
    p.add_argument("--dataset", required=True)
    p.add_argument("--name", default="sim")
    p.add_argument("--max-shards", type=int, default=4)
    p.add_argument("--seconds-per-record", type=float, default=0.0005)
    p.add_argument("--max-seconds", type=float, default=600)
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s: %(message)s")
    worker = SimWorker(args.master, args.dataset, name=args.name, max_shards=args.max_shards,
                       seconds_per_record=args.seconds_per_record)
    preempted = threading.Event()

    def on_sigterm(*_):
        preempted.set()
        worker.stop.set()

    signal.signal(signal.SIGTERM, on_sigterm)
    worker.run(max_seconds=args.max_seconds)
    worker.leave("preempted" if preempted.is_set() else "finished")
    print(f"{args.name}: trained {worker.records_trained} records in {worker.leases_done} leases")


if __name__ == "__main__":
    main()
