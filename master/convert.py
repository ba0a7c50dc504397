"""Translation between protobuf messages and the core's plain objects."""
from __future__ import annotations

from protos import master_pb2 as pb

from .calls import Report, Result
from .datasets.shards import Lease
from .datasets.spec import DatasetSpec

OUTCOME = {pb.ShardReport.DONE: "DONE", pb.ShardReport.FAILED: "FAILED",
           pb.ShardReport.PROGRESS: "PROGRESS", pb.ShardReport.RELEASED: "RELEASED"}
GRANT = {"LEASED": pb.GetShardResponse.LEASED, "WAIT": pb.GetShardResponse.WAIT,
          "END": pb.GetShardResponse.END}


def to_reports(reports) -> list[Report]:
    return [
        Report(r.lease_id, OUTCOME.get(r.outcome, f"unknown({r.outcome})"), r.records_done,
               r.message)
        for r in reports
    ]


def to_results(results: list[Result]) -> list[pb.ReportResult]:
    return [pb.ReportResult(lease_id=r.lease_id, accepted=r.accepted, duplicate=r.duplicate,
                            reason=r.reason) for r in results]


def to_lease(lease: Lease) -> pb.Lease:
    return pb.Lease(
        lease_id=lease.lease_id, dataset=lease.dataset, deadline_ms=lease.deadline_ms,
        shard=pb.Shard(epoch=lease.epoch, index=lease.index, start=lease.start, end=lease.end),
    )


def spec_to_pb(spec: DatasetSpec) -> pb.DatasetSpec:
    return pb.DatasetSpec(**spec.as_row())


def spec_from_pb(msg: pb.DatasetSpec) -> DatasetSpec:
    return DatasetSpec(
        name=msg.name, num_records=msg.num_records, shard_size=msg.shard_size,
        num_epochs=msg.num_epochs, shuffle=msg.shuffle, seed=msg.seed,
        lease_timeout_s=msg.lease_timeout_s,
    )


def ps_to_pb(row: dict, lost: bool = False, replicas=None, layout=None) -> pb.PSInfo:
    """A PS index's primary row; with `replicas` (master/ps/replicas.py) also its
    generation and backups, with `layout` (master/ps/layout.py) its slot ranges."""
    info = _ps_info(row, lost)
    if layout is not None:
        info.slots.extend(pb.SlotRange(start=r.start, end=r.end)
                          for r in layout.ranges(row["idx"]))
    if replicas is not None:
        info.generation = replicas.generation(row["idx"])
        info.instance = replicas.primary_instance(row["idx"])
        info.backups.extend(
            pb.PSBackup(**{k: b[k] for k in ("address", "data_address", "data_public_key",
                                             "state", "instance", "registered_ms")})
            for b in replicas.backups_of(row["idx"]))
    return info


def _ps_info(row: dict, lost: bool) -> pb.PSInfo:
    return pb.PSInfo(address=row["address"], data_address=row["data_address"], index=row["idx"],
                     num_ps=row["num_ps"], registered_ms=row["registered_ms"],
                     incarnation=row["incarnation"], state="lost" if lost else "alive",
                     data_public_key=row.get("data_public_key", ""))


def layout_to_pb(layout, waiting: list[str] = ()) -> pb.PSLayoutStatus:
    """The PS layout's state for GetStatus (master/ps/layout.py)."""
    return pb.PSLayoutStatus(
        layout_version=layout.version, ps_slots=layout.ps_slots, num_ps=layout.num_ps,
        target_num_ps=layout.target, resizing=layout.resizing,
        moves_planned=layout.moves_planned, moves_pending=len(layout.moves),
        resize_started_ms=layout.resize_started_ms, moves_by_phase=layout.phases(),
        waiting=waiting)
