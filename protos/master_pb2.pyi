from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Shard(_message.Message):
    __slots__ = ("epoch", "index", "start", "end")
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    START_FIELD_NUMBER: _ClassVar[int]
    END_FIELD_NUMBER: _ClassVar[int]
    epoch: int
    index: int
    start: int
    end: int
    def __init__(self, epoch: _Optional[int] = ..., index: _Optional[int] = ..., start: _Optional[int] = ..., end: _Optional[int] = ...) -> None: ...

class Lease(_message.Message):
    __slots__ = ("lease_id", "shard", "deadline_ms", "dataset")
    LEASE_ID_FIELD_NUMBER: _ClassVar[int]
    SHARD_FIELD_NUMBER: _ClassVar[int]
    DEADLINE_MS_FIELD_NUMBER: _ClassVar[int]
    DATASET_FIELD_NUMBER: _ClassVar[int]
    lease_id: int
    shard: Shard
    deadline_ms: int
    dataset: str
    def __init__(self, lease_id: _Optional[int] = ..., shard: _Optional[_Union[Shard, _Mapping]] = ..., deadline_ms: _Optional[int] = ..., dataset: _Optional[str] = ...) -> None: ...

class ShardReport(_message.Message):
    __slots__ = ("lease_id", "outcome", "records_done", "message")
    class Outcome(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        OUTCOME_UNSPECIFIED: _ClassVar[ShardReport.Outcome]
        DONE: _ClassVar[ShardReport.Outcome]
        FAILED: _ClassVar[ShardReport.Outcome]
        PROGRESS: _ClassVar[ShardReport.Outcome]
        RELEASED: _ClassVar[ShardReport.Outcome]
    OUTCOME_UNSPECIFIED: ShardReport.Outcome
    DONE: ShardReport.Outcome
    FAILED: ShardReport.Outcome
    PROGRESS: ShardReport.Outcome
    RELEASED: ShardReport.Outcome
    LEASE_ID_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    RECORDS_DONE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    lease_id: int
    outcome: ShardReport.Outcome
    records_done: int
    message: str
    def __init__(self, lease_id: _Optional[int] = ..., outcome: _Optional[_Union[ShardReport.Outcome, str]] = ..., records_done: _Optional[int] = ..., message: _Optional[str] = ...) -> None: ...

class ReportResult(_message.Message):
    __slots__ = ("lease_id", "accepted", "duplicate", "reason")
    LEASE_ID_FIELD_NUMBER: _ClassVar[int]
    ACCEPTED_FIELD_NUMBER: _ClassVar[int]
    DUPLICATE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    lease_id: int
    accepted: bool
    duplicate: bool
    reason: str
    def __init__(self, lease_id: _Optional[int] = ..., accepted: _Optional[bool] = ..., duplicate: _Optional[bool] = ..., reason: _Optional[str] = ...) -> None: ...

class RegisterWorkerRequest(_message.Message):
    __slots__ = ("name", "labels")
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    NAME_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    name: str
    labels: _containers.ScalarMap[str, str]
    def __init__(self, name: _Optional[str] = ..., labels: _Optional[_Mapping[str, str]] = ...) -> None: ...

class RegisterWorkerResponse(_message.Message):
    __slots__ = ("worker_id", "heartbeat_interval_s", "worker_timeout_s")
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_INTERVAL_S_FIELD_NUMBER: _ClassVar[int]
    WORKER_TIMEOUT_S_FIELD_NUMBER: _ClassVar[int]
    worker_id: str
    heartbeat_interval_s: float
    worker_timeout_s: float
    def __init__(self, worker_id: _Optional[str] = ..., heartbeat_interval_s: _Optional[float] = ..., worker_timeout_s: _Optional[float] = ...) -> None: ...

class HeartbeatRequest(_message.Message):
    __slots__ = ("worker_id", "progress")
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    PROGRESS_FIELD_NUMBER: _ClassVar[int]
    worker_id: str
    progress: _containers.RepeatedCompositeFieldContainer[ShardReport]
    def __init__(self, worker_id: _Optional[str] = ..., progress: _Optional[_Iterable[_Union[ShardReport, _Mapping]]] = ...) -> None: ...

class HeartbeatResponse(_message.Message):
    __slots__ = ("ok", "results", "leases")
    OK_FIELD_NUMBER: _ClassVar[int]
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    LEASES_FIELD_NUMBER: _ClassVar[int]
    ok: bool
    results: _containers.RepeatedCompositeFieldContainer[ReportResult]
    leases: _containers.RepeatedCompositeFieldContainer[Lease]
    def __init__(self, ok: _Optional[bool] = ..., results: _Optional[_Iterable[_Union[ReportResult, _Mapping]]] = ..., leases: _Optional[_Iterable[_Union[Lease, _Mapping]]] = ...) -> None: ...

class LeaveWorkerRequest(_message.Message):
    __slots__ = ("worker_id", "reason", "reports")
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    REPORTS_FIELD_NUMBER: _ClassVar[int]
    worker_id: str
    reason: str
    reports: _containers.RepeatedCompositeFieldContainer[ShardReport]
    def __init__(self, worker_id: _Optional[str] = ..., reason: _Optional[str] = ..., reports: _Optional[_Iterable[_Union[ShardReport, _Mapping]]] = ...) -> None: ...

class LeaveWorkerResponse(_message.Message):
    __slots__ = ("results",)
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[ReportResult]
    def __init__(self, results: _Optional[_Iterable[_Union[ReportResult, _Mapping]]] = ...) -> None: ...

class DatasetSpec(_message.Message):
    __slots__ = ("name", "num_records", "shard_size", "num_epochs", "shuffle", "seed", "lease_timeout_s")
    NAME_FIELD_NUMBER: _ClassVar[int]
    NUM_RECORDS_FIELD_NUMBER: _ClassVar[int]
    SHARD_SIZE_FIELD_NUMBER: _ClassVar[int]
    NUM_EPOCHS_FIELD_NUMBER: _ClassVar[int]
    SHUFFLE_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    LEASE_TIMEOUT_S_FIELD_NUMBER: _ClassVar[int]
    name: str
    num_records: int
    shard_size: int
    num_epochs: int
    shuffle: bool
    seed: int
    lease_timeout_s: float
    def __init__(self, name: _Optional[str] = ..., num_records: _Optional[int] = ..., shard_size: _Optional[int] = ..., num_epochs: _Optional[int] = ..., shuffle: _Optional[bool] = ..., seed: _Optional[int] = ..., lease_timeout_s: _Optional[float] = ...) -> None: ...

class GetShardRequest(_message.Message):
    __slots__ = ("worker_id", "dataset", "max_shards", "reports")
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    DATASET_FIELD_NUMBER: _ClassVar[int]
    MAX_SHARDS_FIELD_NUMBER: _ClassVar[int]
    REPORTS_FIELD_NUMBER: _ClassVar[int]
    worker_id: str
    dataset: str
    max_shards: int
    reports: _containers.RepeatedCompositeFieldContainer[ShardReport]
    def __init__(self, worker_id: _Optional[str] = ..., dataset: _Optional[str] = ..., max_shards: _Optional[int] = ..., reports: _Optional[_Iterable[_Union[ShardReport, _Mapping]]] = ...) -> None: ...

class GetShardResponse(_message.Message):
    __slots__ = ("status", "leases", "results", "retry_after_ms")
    class Status(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        STATUS_UNSPECIFIED: _ClassVar[GetShardResponse.Status]
        LEASED: _ClassVar[GetShardResponse.Status]
        WAIT: _ClassVar[GetShardResponse.Status]
        END: _ClassVar[GetShardResponse.Status]
    STATUS_UNSPECIFIED: GetShardResponse.Status
    LEASED: GetShardResponse.Status
    WAIT: GetShardResponse.Status
    END: GetShardResponse.Status
    STATUS_FIELD_NUMBER: _ClassVar[int]
    LEASES_FIELD_NUMBER: _ClassVar[int]
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    RETRY_AFTER_MS_FIELD_NUMBER: _ClassVar[int]
    status: GetShardResponse.Status
    leases: _containers.RepeatedCompositeFieldContainer[Lease]
    results: _containers.RepeatedCompositeFieldContainer[ReportResult]
    retry_after_ms: int
    def __init__(self, status: _Optional[_Union[GetShardResponse.Status, str]] = ..., leases: _Optional[_Iterable[_Union[Lease, _Mapping]]] = ..., results: _Optional[_Iterable[_Union[ReportResult, _Mapping]]] = ..., retry_after_ms: _Optional[int] = ...) -> None: ...

class ReportShardRequest(_message.Message):
    __slots__ = ("worker_id", "reports")
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    REPORTS_FIELD_NUMBER: _ClassVar[int]
    worker_id: str
    reports: _containers.RepeatedCompositeFieldContainer[ShardReport]
    def __init__(self, worker_id: _Optional[str] = ..., reports: _Optional[_Iterable[_Union[ShardReport, _Mapping]]] = ...) -> None: ...

class ReportShardResponse(_message.Message):
    __slots__ = ("results",)
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[ReportResult]
    def __init__(self, results: _Optional[_Iterable[_Union[ReportResult, _Mapping]]] = ...) -> None: ...

class GetStatusRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class QuarantinedShard(_message.Message):
    __slots__ = ("shard", "failures", "errors")
    SHARD_FIELD_NUMBER: _ClassVar[int]
    FAILURES_FIELD_NUMBER: _ClassVar[int]
    ERRORS_FIELD_NUMBER: _ClassVar[int]
    shard: Shard
    failures: int
    errors: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, shard: _Optional[_Union[Shard, _Mapping]] = ..., failures: _Optional[int] = ..., errors: _Optional[_Iterable[str]] = ...) -> None: ...

class EpochStatus(_message.Message):
    __slots__ = ("epoch", "todo", "doing", "done", "records_done", "records_total", "handouts", "duplicates", "requeues", "records_redone", "quarantined", "finished", "rehanded_shards", "max_handouts", "records_rehanded")
    class RequeuesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    TODO_FIELD_NUMBER: _ClassVar[int]
    DOING_FIELD_NUMBER: _ClassVar[int]
    DONE_FIELD_NUMBER: _ClassVar[int]
    RECORDS_DONE_FIELD_NUMBER: _ClassVar[int]
    RECORDS_TOTAL_FIELD_NUMBER: _ClassVar[int]
    HANDOUTS_FIELD_NUMBER: _ClassVar[int]
    DUPLICATES_FIELD_NUMBER: _ClassVar[int]
    REQUEUES_FIELD_NUMBER: _ClassVar[int]
    RECORDS_REDONE_FIELD_NUMBER: _ClassVar[int]
    QUARANTINED_FIELD_NUMBER: _ClassVar[int]
    FINISHED_FIELD_NUMBER: _ClassVar[int]
    REHANDED_SHARDS_FIELD_NUMBER: _ClassVar[int]
    MAX_HANDOUTS_FIELD_NUMBER: _ClassVar[int]
    RECORDS_REHANDED_FIELD_NUMBER: _ClassVar[int]
    epoch: int
    todo: int
    doing: int
    done: int
    records_done: int
    records_total: int
    handouts: int
    duplicates: int
    requeues: _containers.ScalarMap[str, int]
    records_redone: int
    quarantined: int
    finished: bool
    rehanded_shards: int
    max_handouts: int
    records_rehanded: int
    def __init__(self, epoch: _Optional[int] = ..., todo: _Optional[int] = ..., doing: _Optional[int] = ..., done: _Optional[int] = ..., records_done: _Optional[int] = ..., records_total: _Optional[int] = ..., handouts: _Optional[int] = ..., duplicates: _Optional[int] = ..., requeues: _Optional[_Mapping[str, int]] = ..., records_redone: _Optional[int] = ..., quarantined: _Optional[int] = ..., finished: _Optional[bool] = ..., rehanded_shards: _Optional[int] = ..., max_handouts: _Optional[int] = ..., records_rehanded: _Optional[int] = ...) -> None: ...

class DatasetStatus(_message.Message):
    __slots__ = ("spec", "epoch", "todo", "doing", "done", "records_done", "records_total", "handouts", "duplicates", "requeues", "quarantined", "epochs", "finished", "epochs_not_shown", "quarantined_not_shown")
    class RequeuesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    SPEC_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    TODO_FIELD_NUMBER: _ClassVar[int]
    DOING_FIELD_NUMBER: _ClassVar[int]
    DONE_FIELD_NUMBER: _ClassVar[int]
    RECORDS_DONE_FIELD_NUMBER: _ClassVar[int]
    RECORDS_TOTAL_FIELD_NUMBER: _ClassVar[int]
    HANDOUTS_FIELD_NUMBER: _ClassVar[int]
    DUPLICATES_FIELD_NUMBER: _ClassVar[int]
    REQUEUES_FIELD_NUMBER: _ClassVar[int]
    QUARANTINED_FIELD_NUMBER: _ClassVar[int]
    EPOCHS_FIELD_NUMBER: _ClassVar[int]
    FINISHED_FIELD_NUMBER: _ClassVar[int]
    EPOCHS_NOT_SHOWN_FIELD_NUMBER: _ClassVar[int]
    QUARANTINED_NOT_SHOWN_FIELD_NUMBER: _ClassVar[int]
    spec: DatasetSpec
    epoch: int
    todo: int
    doing: int
    done: int
    records_done: int
    records_total: int
    handouts: int
    duplicates: int
    requeues: _containers.ScalarMap[str, int]
    quarantined: _containers.RepeatedCompositeFieldContainer[QuarantinedShard]
    epochs: _containers.RepeatedCompositeFieldContainer[EpochStatus]
    finished: bool
    epochs_not_shown: int
    quarantined_not_shown: int
    def __init__(self, spec: _Optional[_Union[DatasetSpec, _Mapping]] = ..., epoch: _Optional[int] = ..., todo: _Optional[int] = ..., doing: _Optional[int] = ..., done: _Optional[int] = ..., records_done: _Optional[int] = ..., records_total: _Optional[int] = ..., handouts: _Optional[int] = ..., duplicates: _Optional[int] = ..., requeues: _Optional[_Mapping[str, int]] = ..., quarantined: _Optional[_Iterable[_Union[QuarantinedShard, _Mapping]]] = ..., epochs: _Optional[_Iterable[_Union[EpochStatus, _Mapping]]] = ..., finished: _Optional[bool] = ..., epochs_not_shown: _Optional[int] = ..., quarantined_not_shown: _Optional[int] = ...) -> None: ...

class WorkerStatus(_message.Message):
    __slots__ = ("worker_id", "name", "labels", "last_heartbeat_ms", "leases", "state", "registered_ms", "leases_held")
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    LAST_HEARTBEAT_MS_FIELD_NUMBER: _ClassVar[int]
    LEASES_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    REGISTERED_MS_FIELD_NUMBER: _ClassVar[int]
    LEASES_HELD_FIELD_NUMBER: _ClassVar[int]
    worker_id: str
    name: str
    labels: _containers.ScalarMap[str, str]
    last_heartbeat_ms: int
    leases: _containers.RepeatedCompositeFieldContainer[Lease]
    state: str
    registered_ms: int
    leases_held: int
    def __init__(self, worker_id: _Optional[str] = ..., name: _Optional[str] = ..., labels: _Optional[_Mapping[str, str]] = ..., last_heartbeat_ms: _Optional[int] = ..., leases: _Optional[_Iterable[_Union[Lease, _Mapping]]] = ..., state: _Optional[str] = ..., registered_ms: _Optional[int] = ..., leases_held: _Optional[int] = ...) -> None: ...

class PSInfo(_message.Message):
    __slots__ = ("address", "data_address", "index", "num_ps", "registered_ms", "incarnation", "state", "data_public_key", "generation", "backups", "instance", "slots")
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    DATA_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    NUM_PS_FIELD_NUMBER: _ClassVar[int]
    REGISTERED_MS_FIELD_NUMBER: _ClassVar[int]
    INCARNATION_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    DATA_PUBLIC_KEY_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    BACKUPS_FIELD_NUMBER: _ClassVar[int]
    INSTANCE_FIELD_NUMBER: _ClassVar[int]
    SLOTS_FIELD_NUMBER: _ClassVar[int]
    address: str
    data_address: str
    index: int
    num_ps: int
    registered_ms: int
    incarnation: int
    state: str
    data_public_key: str
    generation: int
    backups: _containers.RepeatedCompositeFieldContainer[PSBackup]
    instance: str
    slots: _containers.RepeatedCompositeFieldContainer[SlotRange]
    def __init__(self, address: _Optional[str] = ..., data_address: _Optional[str] = ..., index: _Optional[int] = ..., num_ps: _Optional[int] = ..., registered_ms: _Optional[int] = ..., incarnation: _Optional[int] = ..., state: _Optional[str] = ..., data_public_key: _Optional[str] = ..., generation: _Optional[int] = ..., backups: _Optional[_Iterable[_Union[PSBackup, _Mapping]]] = ..., instance: _Optional[str] = ..., slots: _Optional[_Iterable[_Union[SlotRange, _Mapping]]] = ...) -> None: ...

class SlotRange(_message.Message):
    __slots__ = ("start", "end")
    START_FIELD_NUMBER: _ClassVar[int]
    END_FIELD_NUMBER: _ClassVar[int]
    start: int
    end: int
    def __init__(self, start: _Optional[int] = ..., end: _Optional[int] = ...) -> None: ...

class PSLayoutStatus(_message.Message):
    __slots__ = ("layout_version", "ps_slots", "num_ps", "target_num_ps", "resizing", "moves_planned", "moves_pending", "resize_started_ms", "moves_by_phase", "waiting")
    class MovesByPhaseEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    LAYOUT_VERSION_FIELD_NUMBER: _ClassVar[int]
    PS_SLOTS_FIELD_NUMBER: _ClassVar[int]
    NUM_PS_FIELD_NUMBER: _ClassVar[int]
    TARGET_NUM_PS_FIELD_NUMBER: _ClassVar[int]
    RESIZING_FIELD_NUMBER: _ClassVar[int]
    MOVES_PLANNED_FIELD_NUMBER: _ClassVar[int]
    MOVES_PENDING_FIELD_NUMBER: _ClassVar[int]
    RESIZE_STARTED_MS_FIELD_NUMBER: _ClassVar[int]
    MOVES_BY_PHASE_FIELD_NUMBER: _ClassVar[int]
    WAITING_FIELD_NUMBER: _ClassVar[int]
    layout_version: int
    ps_slots: int
    num_ps: int
    target_num_ps: int
    resizing: bool
    moves_planned: int
    moves_pending: int
    resize_started_ms: int
    moves_by_phase: _containers.ScalarMap[str, int]
    waiting: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, layout_version: _Optional[int] = ..., ps_slots: _Optional[int] = ..., num_ps: _Optional[int] = ..., target_num_ps: _Optional[int] = ..., resizing: _Optional[bool] = ..., moves_planned: _Optional[int] = ..., moves_pending: _Optional[int] = ..., resize_started_ms: _Optional[int] = ..., moves_by_phase: _Optional[_Mapping[str, int]] = ..., waiting: _Optional[_Iterable[str]] = ...) -> None: ...

class PSBackup(_message.Message):
    __slots__ = ("address", "data_address", "data_public_key", "state", "instance", "registered_ms")
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    DATA_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    DATA_PUBLIC_KEY_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    INSTANCE_FIELD_NUMBER: _ClassVar[int]
    REGISTERED_MS_FIELD_NUMBER: _ClassVar[int]
    address: str
    data_address: str
    data_public_key: str
    state: str
    instance: str
    registered_ms: int
    def __init__(self, address: _Optional[str] = ..., data_address: _Optional[str] = ..., data_public_key: _Optional[str] = ..., state: _Optional[str] = ..., instance: _Optional[str] = ..., registered_ms: _Optional[int] = ...) -> None: ...

class GetStatusResponse(_message.Message):
    __slots__ = ("datasets", "workers", "ps", "time_ms", "workers_not_shown", "datasets_not_shown", "layout")
    DATASETS_FIELD_NUMBER: _ClassVar[int]
    WORKERS_FIELD_NUMBER: _ClassVar[int]
    PS_FIELD_NUMBER: _ClassVar[int]
    TIME_MS_FIELD_NUMBER: _ClassVar[int]
    WORKERS_NOT_SHOWN_FIELD_NUMBER: _ClassVar[int]
    DATASETS_NOT_SHOWN_FIELD_NUMBER: _ClassVar[int]
    LAYOUT_FIELD_NUMBER: _ClassVar[int]
    datasets: _containers.RepeatedCompositeFieldContainer[DatasetStatus]
    workers: _containers.RepeatedCompositeFieldContainer[WorkerStatus]
    ps: _containers.RepeatedCompositeFieldContainer[PSInfo]
    time_ms: int
    workers_not_shown: int
    datasets_not_shown: int
    layout: PSLayoutStatus
    def __init__(self, datasets: _Optional[_Iterable[_Union[DatasetStatus, _Mapping]]] = ..., workers: _Optional[_Iterable[_Union[WorkerStatus, _Mapping]]] = ..., ps: _Optional[_Iterable[_Union[PSInfo, _Mapping]]] = ..., time_ms: _Optional[int] = ..., workers_not_shown: _Optional[int] = ..., datasets_not_shown: _Optional[int] = ..., layout: _Optional[_Union[PSLayoutStatus, _Mapping]] = ...) -> None: ...

class Event(_message.Message):
    __slots__ = ("seq", "time_ms", "kind", "worker_id", "dataset", "epoch", "shard_index", "cause", "detail")
    SEQ_FIELD_NUMBER: _ClassVar[int]
    TIME_MS_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    DATASET_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    SHARD_INDEX_FIELD_NUMBER: _ClassVar[int]
    CAUSE_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    seq: int
    time_ms: int
    kind: str
    worker_id: str
    dataset: str
    epoch: int
    shard_index: int
    cause: str
    detail: str
    def __init__(self, seq: _Optional[int] = ..., time_ms: _Optional[int] = ..., kind: _Optional[str] = ..., worker_id: _Optional[str] = ..., dataset: _Optional[str] = ..., epoch: _Optional[int] = ..., shard_index: _Optional[int] = ..., cause: _Optional[str] = ..., detail: _Optional[str] = ...) -> None: ...

class GetEventsRequest(_message.Message):
    __slots__ = ("since", "limit")
    SINCE_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    since: int
    limit: int
    def __init__(self, since: _Optional[int] = ..., limit: _Optional[int] = ...) -> None: ...

class GetEventsResponse(_message.Message):
    __slots__ = ("events", "next")
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    NEXT_FIELD_NUMBER: _ClassVar[int]
    events: _containers.RepeatedCompositeFieldContainer[Event]
    next: int
    def __init__(self, events: _Optional[_Iterable[_Union[Event, _Mapping]]] = ..., next: _Optional[int] = ...) -> None: ...

class LeaseRecord(_message.Message):
    __slots__ = ("lease_id", "dataset", "epoch", "shard_index", "start_rec", "end_rec", "worker_id", "handed_ms", "ended_ms", "records_done", "handout", "state", "cause", "redo")
    LEASE_ID_FIELD_NUMBER: _ClassVar[int]
    DATASET_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    SHARD_INDEX_FIELD_NUMBER: _ClassVar[int]
    START_REC_FIELD_NUMBER: _ClassVar[int]
    END_REC_FIELD_NUMBER: _ClassVar[int]
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    HANDED_MS_FIELD_NUMBER: _ClassVar[int]
    ENDED_MS_FIELD_NUMBER: _ClassVar[int]
    RECORDS_DONE_FIELD_NUMBER: _ClassVar[int]
    HANDOUT_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    CAUSE_FIELD_NUMBER: _ClassVar[int]
    REDO_FIELD_NUMBER: _ClassVar[int]
    lease_id: int
    dataset: str
    epoch: int
    shard_index: int
    start_rec: int
    end_rec: int
    worker_id: str
    handed_ms: int
    ended_ms: int
    records_done: int
    handout: int
    state: str
    cause: str
    redo: bool
    def __init__(self, lease_id: _Optional[int] = ..., dataset: _Optional[str] = ..., epoch: _Optional[int] = ..., shard_index: _Optional[int] = ..., start_rec: _Optional[int] = ..., end_rec: _Optional[int] = ..., worker_id: _Optional[str] = ..., handed_ms: _Optional[int] = ..., ended_ms: _Optional[int] = ..., records_done: _Optional[int] = ..., handout: _Optional[int] = ..., state: _Optional[str] = ..., cause: _Optional[str] = ..., redo: _Optional[bool] = ...) -> None: ...

class GetLeasesRequest(_message.Message):
    __slots__ = ("dataset", "after", "limit")
    DATASET_FIELD_NUMBER: _ClassVar[int]
    AFTER_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    dataset: str
    after: int
    limit: int
    def __init__(self, dataset: _Optional[str] = ..., after: _Optional[int] = ..., limit: _Optional[int] = ...) -> None: ...

class GetLeasesResponse(_message.Message):
    __slots__ = ("leases", "next")
    LEASES_FIELD_NUMBER: _ClassVar[int]
    NEXT_FIELD_NUMBER: _ClassVar[int]
    leases: _containers.RepeatedCompositeFieldContainer[LeaseRecord]
    next: int
    def __init__(self, leases: _Optional[_Iterable[_Union[LeaseRecord, _Mapping]]] = ..., next: _Optional[int] = ...) -> None: ...

class RegisterPSRequest(_message.Message):
    __slots__ = ("address", "data_address", "index", "num_ps", "data_public_key", "instance", "restored")
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    DATA_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    NUM_PS_FIELD_NUMBER: _ClassVar[int]
    DATA_PUBLIC_KEY_FIELD_NUMBER: _ClassVar[int]
    INSTANCE_FIELD_NUMBER: _ClassVar[int]
    RESTORED_FIELD_NUMBER: _ClassVar[int]
    address: str
    data_address: str
    index: int
    num_ps: int
    data_public_key: str
    instance: str
    restored: RestoredCheckpoint
    def __init__(self, address: _Optional[str] = ..., data_address: _Optional[str] = ..., index: _Optional[int] = ..., num_ps: _Optional[int] = ..., data_public_key: _Optional[str] = ..., instance: _Optional[str] = ..., restored: _Optional[_Union[RestoredCheckpoint, _Mapping]] = ...) -> None: ...

class RestoredCheckpoint(_message.Message):
    __slots__ = ("taken_ms", "started_ms", "number", "applied", "empty", "tensors", "tables")
    class AppliedEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    TAKEN_MS_FIELD_NUMBER: _ClassVar[int]
    STARTED_MS_FIELD_NUMBER: _ClassVar[int]
    NUMBER_FIELD_NUMBER: _ClassVar[int]
    APPLIED_FIELD_NUMBER: _ClassVar[int]
    EMPTY_FIELD_NUMBER: _ClassVar[int]
    TENSORS_FIELD_NUMBER: _ClassVar[int]
    TABLES_FIELD_NUMBER: _ClassVar[int]
    taken_ms: int
    started_ms: int
    number: int
    applied: _containers.ScalarMap[str, int]
    empty: bool
    tensors: _containers.RepeatedScalarFieldContainer[str]
    tables: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, taken_ms: _Optional[int] = ..., started_ms: _Optional[int] = ..., number: _Optional[int] = ..., applied: _Optional[_Mapping[str, int]] = ..., empty: _Optional[bool] = ..., tensors: _Optional[_Iterable[str]] = ..., tables: _Optional[_Iterable[str]] = ...) -> None: ...

class RegisterPSResponse(_message.Message):
    __slots__ = ("incarnation", "role", "generation", "primary", "replicas", "layout_version", "ps_slots")
    INCARNATION_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    PRIMARY_FIELD_NUMBER: _ClassVar[int]
    REPLICAS_FIELD_NUMBER: _ClassVar[int]
    LAYOUT_VERSION_FIELD_NUMBER: _ClassVar[int]
    PS_SLOTS_FIELD_NUMBER: _ClassVar[int]
    incarnation: int
    role: str
    generation: int
    primary: PSInfo
    replicas: int
    layout_version: int
    ps_slots: int
    def __init__(self, incarnation: _Optional[int] = ..., role: _Optional[str] = ..., generation: _Optional[int] = ..., primary: _Optional[_Union[PSInfo, _Mapping]] = ..., replicas: _Optional[int] = ..., layout_version: _Optional[int] = ..., ps_slots: _Optional[int] = ...) -> None: ...

class ReportReplicasRequest(_message.Message):
    __slots__ = ("index", "generation", "instance", "in_sync")
    INDEX_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    INSTANCE_FIELD_NUMBER: _ClassVar[int]
    IN_SYNC_FIELD_NUMBER: _ClassVar[int]
    index: int
    generation: int
    instance: str
    in_sync: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, index: _Optional[int] = ..., generation: _Optional[int] = ..., instance: _Optional[str] = ..., in_sync: _Optional[_Iterable[str]] = ...) -> None: ...

class ReportReplicasResponse(_message.Message):
    __slots__ = ("generation", "lease_ms")
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    LEASE_MS_FIELD_NUMBER: _ClassVar[int]
    generation: int
    lease_ms: int
    def __init__(self, generation: _Optional[int] = ..., lease_ms: _Optional[int] = ...) -> None: ...

class ListPSRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListPSResponse(_message.Message):
    __slots__ = ("ps", "num_ps", "complete", "replicas", "layout_version", "ps_slots", "target_num_ps", "joining")
    PS_FIELD_NUMBER: _ClassVar[int]
    NUM_PS_FIELD_NUMBER: _ClassVar[int]
    COMPLETE_FIELD_NUMBER: _ClassVar[int]
    REPLICAS_FIELD_NUMBER: _ClassVar[int]
    LAYOUT_VERSION_FIELD_NUMBER: _ClassVar[int]
    PS_SLOTS_FIELD_NUMBER: _ClassVar[int]
    TARGET_NUM_PS_FIELD_NUMBER: _ClassVar[int]
    JOINING_FIELD_NUMBER: _ClassVar[int]
    ps: _containers.RepeatedCompositeFieldContainer[PSInfo]
    num_ps: int
    complete: bool
    replicas: int
    layout_version: int
    ps_slots: int
    target_num_ps: int
    joining: _containers.RepeatedCompositeFieldContainer[PSInfo]
    def __init__(self, ps: _Optional[_Iterable[_Union[PSInfo, _Mapping]]] = ..., num_ps: _Optional[int] = ..., complete: _Optional[bool] = ..., replicas: _Optional[int] = ..., layout_version: _Optional[int] = ..., ps_slots: _Optional[int] = ..., target_num_ps: _Optional[int] = ..., joining: _Optional[_Iterable[_Union[PSInfo, _Mapping]]] = ...) -> None: ...

class ResizePSRequest(_message.Message):
    __slots__ = ("num_ps",)
    NUM_PS_FIELD_NUMBER: _ClassVar[int]
    num_ps: int
    def __init__(self, num_ps: _Optional[int] = ...) -> None: ...

class ResizePSResponse(_message.Message):
    __slots__ = ("layout_version", "num_ps", "target_num_ps", "moves_planned", "moves_pending", "ps_slots", "changed")
    LAYOUT_VERSION_FIELD_NUMBER: _ClassVar[int]
    NUM_PS_FIELD_NUMBER: _ClassVar[int]
    TARGET_NUM_PS_FIELD_NUMBER: _ClassVar[int]
    MOVES_PLANNED_FIELD_NUMBER: _ClassVar[int]
    MOVES_PENDING_FIELD_NUMBER: _ClassVar[int]
    PS_SLOTS_FIELD_NUMBER: _ClassVar[int]
    CHANGED_FIELD_NUMBER: _ClassVar[int]
    layout_version: int
    num_ps: int
    target_num_ps: int
    moves_planned: int
    moves_pending: int
    ps_slots: int
    changed: bool
    def __init__(self, layout_version: _Optional[int] = ..., num_ps: _Optional[int] = ..., target_num_ps: _Optional[int] = ..., moves_planned: _Optional[int] = ..., moves_pending: _Optional[int] = ..., ps_slots: _Optional[int] = ..., changed: _Optional[bool] = ...) -> None: ...

class RequeueRequest(_message.Message):
    __slots__ = ("dataset", "quarantined")
    DATASET_FIELD_NUMBER: _ClassVar[int]
    QUARANTINED_FIELD_NUMBER: _ClassVar[int]
    dataset: str
    quarantined: bool
    def __init__(self, dataset: _Optional[str] = ..., quarantined: _Optional[bool] = ...) -> None: ...

class RequeueResponse(_message.Message):
    __slots__ = ("requeued",)
    REQUEUED_FIELD_NUMBER: _ClassVar[int]
    requeued: int
    def __init__(self, requeued: _Optional[int] = ...) -> None: ...

class DropDatasetRequest(_message.Message):
    __slots__ = ("dataset", "force")
    DATASET_FIELD_NUMBER: _ClassVar[int]
    FORCE_FIELD_NUMBER: _ClassVar[int]
    dataset: str
    force: bool
    def __init__(self, dataset: _Optional[str] = ..., force: _Optional[bool] = ...) -> None: ...

class DropDatasetResponse(_message.Message):
    __slots__ = ("leases_ended", "epochs", "finished")
    LEASES_ENDED_FIELD_NUMBER: _ClassVar[int]
    EPOCHS_FIELD_NUMBER: _ClassVar[int]
    FINISHED_FIELD_NUMBER: _ClassVar[int]
    leases_ended: int
    epochs: int
    finished: bool
    def __init__(self, leases_ended: _Optional[int] = ..., epochs: _Optional[int] = ..., finished: _Optional[bool] = ...) -> None: ...

class EpochLedger(_message.Message):
    __slots__ = ("dataset", "epoch", "records_total", "records_done", "records_first_try", "records_handed", "records_redone", "handouts", "duplicates", "requeues", "goodput", "finished", "started_ms", "finished_ms", "records_rehanded")
    class RequeuesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    DATASET_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    RECORDS_TOTAL_FIELD_NUMBER: _ClassVar[int]
    RECORDS_DONE_FIELD_NUMBER: _ClassVar[int]
    RECORDS_FIRST_TRY_FIELD_NUMBER: _ClassVar[int]
    RECORDS_HANDED_FIELD_NUMBER: _ClassVar[int]
    RECORDS_REDONE_FIELD_NUMBER: _ClassVar[int]
    HANDOUTS_FIELD_NUMBER: _ClassVar[int]
    DUPLICATES_FIELD_NUMBER: _ClassVar[int]
    REQUEUES_FIELD_NUMBER: _ClassVar[int]
    GOODPUT_FIELD_NUMBER: _ClassVar[int]
    FINISHED_FIELD_NUMBER: _ClassVar[int]
    STARTED_MS_FIELD_NUMBER: _ClassVar[int]
    FINISHED_MS_FIELD_NUMBER: _ClassVar[int]
    RECORDS_REHANDED_FIELD_NUMBER: _ClassVar[int]
    dataset: str
    epoch: int
    records_total: int
    records_done: int
    records_first_try: int
    records_handed: int
    records_redone: int
    handouts: int
    duplicates: int
    requeues: _containers.ScalarMap[str, int]
    goodput: float
    finished: bool
    started_ms: int
    finished_ms: int
    records_rehanded: int
    def __init__(self, dataset: _Optional[str] = ..., epoch: _Optional[int] = ..., records_total: _Optional[int] = ..., records_done: _Optional[int] = ..., records_first_try: _Optional[int] = ..., records_handed: _Optional[int] = ..., records_redone: _Optional[int] = ..., handouts: _Optional[int] = ..., duplicates: _Optional[int] = ..., requeues: _Optional[_Mapping[str, int]] = ..., goodput: _Optional[float] = ..., finished: _Optional[bool] = ..., started_ms: _Optional[int] = ..., finished_ms: _Optional[int] = ..., records_rehanded: _Optional[int] = ...) -> None: ...

class LabelSeconds(_message.Message):
    __slots__ = ("label", "worker_seconds", "workers")
    LABEL_FIELD_NUMBER: _ClassVar[int]
    WORKER_SECONDS_FIELD_NUMBER: _ClassVar[int]
    WORKERS_FIELD_NUMBER: _ClassVar[int]
    label: str
    worker_seconds: float
    workers: int
    def __init__(self, label: _Optional[str] = ..., worker_seconds: _Optional[float] = ..., workers: _Optional[int] = ...) -> None: ...

class GetLedgerRequest(_message.Message):
    __slots__ = ("dataset",)
    DATASET_FIELD_NUMBER: _ClassVar[int]
    dataset: str
    def __init__(self, dataset: _Optional[str] = ...) -> None: ...

class GetLedgerResponse(_message.Message):
    __slots__ = ("epochs", "worker_seconds", "worker_seconds_total", "records_done", "records_handed", "records_redone", "goodput", "workers_lost", "workers_left", "records_rehanded", "updates_lost", "ps_updates_lost", "epochs_not_shown")
    class WorkersLeftEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    EPOCHS_FIELD_NUMBER: _ClassVar[int]
    WORKER_SECONDS_FIELD_NUMBER: _ClassVar[int]
    WORKER_SECONDS_TOTAL_FIELD_NUMBER: _ClassVar[int]
    RECORDS_DONE_FIELD_NUMBER: _ClassVar[int]
    RECORDS_HANDED_FIELD_NUMBER: _ClassVar[int]
    RECORDS_REDONE_FIELD_NUMBER: _ClassVar[int]
    GOODPUT_FIELD_NUMBER: _ClassVar[int]
    WORKERS_LOST_FIELD_NUMBER: _ClassVar[int]
    WORKERS_LEFT_FIELD_NUMBER: _ClassVar[int]
    RECORDS_REHANDED_FIELD_NUMBER: _ClassVar[int]
    UPDATES_LOST_FIELD_NUMBER: _ClassVar[int]
    PS_UPDATES_LOST_FIELD_NUMBER: _ClassVar[int]
    EPOCHS_NOT_SHOWN_FIELD_NUMBER: _ClassVar[int]
    epochs: _containers.RepeatedCompositeFieldContainer[EpochLedger]
    worker_seconds: _containers.RepeatedCompositeFieldContainer[LabelSeconds]
    worker_seconds_total: float
    records_done: int
    records_handed: int
    records_redone: int
    goodput: float
    workers_lost: int
    workers_left: _containers.ScalarMap[str, int]
    records_rehanded: int
    updates_lost: int
    ps_updates_lost: _containers.RepeatedCompositeFieldContainer[PSUpdatesLost]
    epochs_not_shown: int
    def __init__(self, epochs: _Optional[_Iterable[_Union[EpochLedger, _Mapping]]] = ..., worker_seconds: _Optional[_Iterable[_Union[LabelSeconds, _Mapping]]] = ..., worker_seconds_total: _Optional[float] = ..., records_done: _Optional[int] = ..., records_handed: _Optional[int] = ..., records_redone: _Optional[int] = ..., goodput: _Optional[float] = ..., workers_lost: _Optional[int] = ..., workers_left: _Optional[_Mapping[str, int]] = ..., records_rehanded: _Optional[int] = ..., updates_lost: _Optional[int] = ..., ps_updates_lost: _Optional[_Iterable[_Union[PSUpdatesLost, _Mapping]]] = ..., epochs_not_shown: _Optional[int] = ...) -> None: ...

class PSUpdatesLost(_message.Message):
    __slots__ = ("index", "records", "restores", "from_ms", "to_ms")
    INDEX_FIELD_NUMBER: _ClassVar[int]
    RECORDS_FIELD_NUMBER: _ClassVar[int]
    RESTORES_FIELD_NUMBER: _ClassVar[int]
    FROM_MS_FIELD_NUMBER: _ClassVar[int]
    TO_MS_FIELD_NUMBER: _ClassVar[int]
    index: int
    records: int
    restores: int
    from_ms: int
    to_ms: int
    def __init__(self, index: _Optional[int] = ..., records: _Optional[int] = ..., restores: _Optional[int] = ..., from_ms: _Optional[int] = ..., to_ms: _Optional[int] = ...) -> None: ...

class GetPlanRequest(_message.Message):
    __slots__ = ("decisions", "ended")
    DECISIONS_FIELD_NUMBER: _ClassVar[int]
    ENDED_FIELD_NUMBER: _ClassVar[int]
    decisions: int
    ended: bool
    def __init__(self, decisions: _Optional[int] = ..., ended: _Optional[bool] = ...) -> None: ...

class PlanTarget(_message.Message):
    __slots__ = ("role", "market", "target", "running")
    ROLE_FIELD_NUMBER: _ClassVar[int]
    MARKET_FIELD_NUMBER: _ClassVar[int]
    TARGET_FIELD_NUMBER: _ClassVar[int]
    RUNNING_FIELD_NUMBER: _ClassVar[int]
    role: str
    market: str
    target: int
    running: int
    def __init__(self, role: _Optional[str] = ..., market: _Optional[str] = ..., target: _Optional[int] = ..., running: _Optional[int] = ...) -> None: ...

class PlanDecision(_message.Message):
    __slots__ = ("seq", "time_ms", "role", "market", "from_count", "to_count", "reason", "signals")
    SEQ_FIELD_NUMBER: _ClassVar[int]
    TIME_MS_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    MARKET_FIELD_NUMBER: _ClassVar[int]
    FROM_COUNT_FIELD_NUMBER: _ClassVar[int]
    TO_COUNT_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    SIGNALS_FIELD_NUMBER: _ClassVar[int]
    seq: int
    time_ms: int
    role: str
    market: str
    from_count: int
    to_count: int
    reason: str
    signals: str
    def __init__(self, seq: _Optional[int] = ..., time_ms: _Optional[int] = ..., role: _Optional[str] = ..., market: _Optional[str] = ..., from_count: _Optional[int] = ..., to_count: _Optional[int] = ..., reason: _Optional[str] = ..., signals: _Optional[str] = ...) -> None: ...

class PlanProcess(_message.Message):
    __slots__ = ("name", "role", "market", "slot", "state", "engine_id", "launched_ms", "ended_ms", "exited", "exit_code", "cause")
    NAME_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    MARKET_FIELD_NUMBER: _ClassVar[int]
    SLOT_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    ENGINE_ID_FIELD_NUMBER: _ClassVar[int]
    LAUNCHED_MS_FIELD_NUMBER: _ClassVar[int]
    ENDED_MS_FIELD_NUMBER: _ClassVar[int]
    EXITED_FIELD_NUMBER: _ClassVar[int]
    EXIT_CODE_FIELD_NUMBER: _ClassVar[int]
    CAUSE_FIELD_NUMBER: _ClassVar[int]
    name: str
    role: str
    market: str
    slot: int
    state: str
    engine_id: str
    launched_ms: int
    ended_ms: int
    exited: bool
    exit_code: int
    cause: str
    def __init__(self, name: _Optional[str] = ..., role: _Optional[str] = ..., market: _Optional[str] = ..., slot: _Optional[int] = ..., state: _Optional[str] = ..., engine_id: _Optional[str] = ..., launched_ms: _Optional[int] = ..., ended_ms: _Optional[int] = ..., exited: _Optional[bool] = ..., exit_code: _Optional[int] = ..., cause: _Optional[str] = ...) -> None: ...

class ProcessSeconds(_message.Message):
    __slots__ = ("role", "market", "seconds")
    ROLE_FIELD_NUMBER: _ClassVar[int]
    MARKET_FIELD_NUMBER: _ClassVar[int]
    SECONDS_FIELD_NUMBER: _ClassVar[int]
    role: str
    market: str
    seconds: float
    def __init__(self, role: _Optional[str] = ..., market: _Optional[str] = ..., seconds: _Optional[float] = ...) -> None: ...

class GetPlanResponse(_message.Message):
    __slots__ = ("job", "state", "started_ms", "targets", "decisions", "decisions_by_reason", "processes", "processes_not_shown", "prices", "masters", "time_ms", "process_seconds", "ps_market")
    class DecisionsByReasonEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    class PricesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    JOB_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    STARTED_MS_FIELD_NUMBER: _ClassVar[int]
    TARGETS_FIELD_NUMBER: _ClassVar[int]
    DECISIONS_FIELD_NUMBER: _ClassVar[int]
    DECISIONS_BY_REASON_FIELD_NUMBER: _ClassVar[int]
    PROCESSES_FIELD_NUMBER: _ClassVar[int]
    PROCESSES_NOT_SHOWN_FIELD_NUMBER: _ClassVar[int]
    PRICES_FIELD_NUMBER: _ClassVar[int]
    MASTERS_FIELD_NUMBER: _ClassVar[int]
    TIME_MS_FIELD_NUMBER: _ClassVar[int]
    PROCESS_SECONDS_FIELD_NUMBER: _ClassVar[int]
    PS_MARKET_FIELD_NUMBER: _ClassVar[int]
    job: str
    state: str
    started_ms: int
    targets: _containers.RepeatedCompositeFieldContainer[PlanTarget]
    decisions: _containers.RepeatedCompositeFieldContainer[PlanDecision]
    decisions_by_reason: _containers.ScalarMap[str, int]
    processes: _containers.RepeatedCompositeFieldContainer[PlanProcess]
    processes_not_shown: int
    prices: _containers.ScalarMap[str, float]
    masters: str
    time_ms: int
    process_seconds: _containers.RepeatedCompositeFieldContainer[ProcessSeconds]
    ps_market: str
    def __init__(self, job: _Optional[str] = ..., state: _Optional[str] = ..., started_ms: _Optional[int] = ..., targets: _Optional[_Iterable[_Union[PlanTarget, _Mapping]]] = ..., decisions: _Optional[_Iterable[_Union[PlanDecision, _Mapping]]] = ..., decisions_by_reason: _Optional[_Mapping[str, int]] = ..., processes: _Optional[_Iterable[_Union[PlanProcess, _Mapping]]] = ..., processes_not_shown: _Optional[int] = ..., prices: _Optional[_Mapping[str, float]] = ..., masters: _Optional[str] = ..., time_ms: _Optional[int] = ..., process_seconds: _Optional[_Iterable[_Union[ProcessSeconds, _Mapping]]] = ..., ps_market: _Optional[str] = ...) -> None: ...

class StopJobRequest(_message.Message):
    __slots__ = ("reason",)
    REASON_FIELD_NUMBER: _ClassVar[int]
    reason: str
    def __init__(self, reason: _Optional[str] = ...) -> None: ...

class StopJobResponse(_message.Message):
    __slots__ = ("state",)
    STATE_FIELD_NUMBER: _ClassVar[int]
    state: str
    def __init__(self, state: _Optional[str] = ...) -> None: ...
