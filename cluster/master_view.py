"""What a job's master says, read by whoever started the job (LocalCluster, the Ray demo's
RayJob): one leader-following stub over every master's address, and the reads the demo and the
tests make of it. A class using it sets `master_address`, `dataset` and `_stub = None`."""
from __future__ import annotations

import grpc

from protos import master_pb2 as pb
from protos import master_pb2_grpc as pb_grpc
from rpckit.channels import LeaderStub


class MasterView:
    master_address: str
    dataset: str
    _stub: LeaderStub | None

    def stub(self) -> LeaderStub:
        """A Master stub that follows the leader over every master's address."""
        if self._stub is None:
            self._stub = LeaderStub(self.master_address, pb_grpc.MasterStub)
        return self._stub

    def close_stub(self) -> None:
        if self._stub is not None:
            self._stub.close()
            self._stub = None

    def status(self, timeout: float = 5.0) -> pb.GetStatusResponse | None:
        try:
            return self.stub().GetStatus(pb.GetStatusRequest(), timeout=timeout)
        except grpc.RpcError:
            return None  # starting, restarting, a standby taking over, or stopped

    def dataset_status(self) -> pb.DatasetStatus | None:
        status = self.status()
        if status is None:
            return None
        return next((ds for ds in status.datasets if ds.spec.name == self.dataset), None)

    def ledger(self) -> pb.GetLedgerResponse:
        return self.stub().GetLedger(pb.GetLedgerRequest(dataset=self.dataset), timeout=30)

    def events(self, since: int = 0) -> list[pb.Event]:
        return list(self.stub().GetEvents(pb.GetEventsRequest(since=since, limit=10000),
                                          timeout=10).events)

    def leases(self) -> list[dict]:
        """The dataset's durable lease history (GetLeases, every page), each lease a dict of
        the LeaseRecord fields (`start_rec`, `end_rec`, `state`, `records_done`, ...)."""
        rows, after = [], 0
        while page := self.stub().GetLeases(pb.GetLeasesRequest(
                dataset=self.dataset, after=after, limit=10000), timeout=30).leases:
            rows += [{f.name: getattr(x, f.name) for f in x.DESCRIPTOR.fields} for x in page]
            after = page[-1].lease_id
        return rows
