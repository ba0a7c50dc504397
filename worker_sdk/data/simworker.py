"""A simulated worker: leases shards through the SDK's lease protocol and "trains" by sleeping.

For the master's demo, integration tests and benchmarks. It is `LeaseStream` with no model:
the same batched GetShard with piggybacked reports, heartbeats, retries while the master is
away, re-registration, adoption of leases whose answer was lost, hand-back on SIGTERM. It joins
a dataset that already exists (by name). Imports without torch.

    python -m worker_sdk.data.simworker --master HOST:PORT --dataset NAME
"""
from __future__ import annotations

import logging
import threading
import time
from typing import Callable

from protos import master_pb2 as pb

from .lease_stream import END, LeaseStream, Wait

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
        handle_sigterm: bool = False,
    ):
        """on_lease(lease) is called when the worker starts training a lease (a pb.Lease)."""
        self.master = master
        self.dataset = dataset
        self.name = name
        self.labels = labels or {}
        self.max_shards = max_shards
        self.seconds_per_record = seconds_per_record
        self.heartbeats = heartbeats
        self.retry_for = retry_for
        self.on_lease = on_lease
        self.handle_sigterm = handle_sigterm
        self.stop = threading.Event()
        self.stream: LeaseStream | None = None
        self.records_trained = 0
        self.leases_done = 0
        self._started: set[int] = set()

    @property
    def worker_id(self) -> str | None:
        return self.stream.client.worker_id if self.stream else None

    def run(self, max_seconds: float = 300.0) -> None:
        """Lease and train until END, `stop`, or `max_seconds`; then leave ("finished" at END,
        "closed" otherwise)."""
        self.stream = LeaseStream(
            self.dataset, self.master, max_shards=self.max_shards, worker_name=self.name,
            labels=self.labels, ack="push", handle_sigterm=self.handle_sigterm,
            retry_timeout_s=self.retry_for, heartbeat=self.heartbeats, cancel=self.stop)
        self.stream.client.ensure_registered()
        give_up = time.monotonic() + max_seconds
        try:
            while not self.stop.is_set() and time.monotonic() < give_up:
                item = self.stream.next_piece(1 << 30)  # the rest of a lease at once
                if item is END:
                    break
                if isinstance(item, Wait):
                    self.stream.wait(item)
                    continue
                self._train(item)
        finally:
            self.stop.set()
            self.stream.close()

    def _train(self, piece) -> None:
        lease = piece.lease
        if self.on_lease and lease.lease_id not in self._started:
            self._started.add(lease.lease_id)
            self.on_lease(pb.Lease(lease_id=lease.lease_id, shard=pb.Shard(
                epoch=lease.epoch, index=lease.index, start=lease.start, end=lease.end)))
        if self.seconds_per_record:
            time.sleep(piece.count * self.seconds_per_record)
        self.stream.deliver([piece])
        self.stream.mark_trained()  # reported DONE on the next GetShard
        self.records_trained += piece.count
        self.leases_done += piece.first + piece.count == lease.size

    def close(self) -> None:
        self.stop.set()


def main(argv: list[str] | None = None) -> None:
    """`python -m worker_sdk.data.simworker --master HOST:PORT --dataset NAME`: one simulated
    worker. SIGTERM hands its leases back (reason "preempted") and exits 0."""
    import argparse

    p = argparse.ArgumentParser(prog="python -m worker_sdk.data.simworker", description=main.__doc__)
    p.add_argument("--master", required=True)
    p.add_argument("--dataset", required=True)
    p.add_argument("--name", default="sim")
    p.add_argument("--max-shards", type=int, default=4)
    p.add_argument("--seconds-per-record", type=float, default=0.0005)
    p.add_argument("--max-seconds", type=float, default=600)
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s: %(message)s")
    worker = SimWorker(args.master, args.dataset, name=args.name, max_shards=args.max_shards,
                       seconds_per_record=args.seconds_per_record, handle_sigterm=True)
    try:
        worker.run(max_seconds=args.max_seconds)
    finally:
        print(f"{args.name}: trained {worker.records_trained} records in {worker.leases_done} "
              "leases", flush=True)


if __name__ == "__main__":
    main()
