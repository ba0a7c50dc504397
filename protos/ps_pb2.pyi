from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class TensorMeta(_message.Message):
    __slots__ = ("name", "dtype", "shape")
    NAME_FIELD_NUMBER: _ClassVar[int]
    DTYPE_FIELD_NUMBER: _ClassVar[int]
    SHAPE_FIELD_NUMBER: _ClassVar[int]
    name: str
    dtype: str
    shape: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, name: _Optional[str] = ..., dtype: _Optional[str] = ..., shape: _Optional[_Iterable[int]] = ...) -> None: ...

class OptimizerConfig(_message.Message):
    __slots__ = ("name", "lr", "momentum", "dampening", "weight_decay", "nesterov", "betas", "eps", "amsgrad", "lr_decay", "initial_accumulator_value", "maximize")
    NAME_FIELD_NUMBER: _ClassVar[int]
    LR_FIELD_NUMBER: _ClassVar[int]
    MOMENTUM_FIELD_NUMBER: _ClassVar[int]
    DAMPENING_FIELD_NUMBER: _ClassVar[int]
    WEIGHT_DECAY_FIELD_NUMBER: _ClassVar[int]
    NESTEROV_FIELD_NUMBER: _ClassVar[int]
    BETAS_FIELD_NUMBER: _ClassVar[int]
    EPS_FIELD_NUMBER: _ClassVar[int]
    AMSGRAD_FIELD_NUMBER: _ClassVar[int]
    LR_DECAY_FIELD_NUMBER: _ClassVar[int]
    INITIAL_ACCUMULATOR_VALUE_FIELD_NUMBER: _ClassVar[int]
    MAXIMIZE_FIELD_NUMBER: _ClassVar[int]
    name: str
    lr: float
    momentum: float
    dampening: float
    weight_decay: float
    nesterov: bool
    betas: _containers.RepeatedScalarFieldContainer[float]
    eps: float
    amsgrad: bool
    lr_decay: float
    initial_accumulator_value: float
    maximize: bool
    def __init__(self, name: _Optional[str] = ..., lr: _Optional[float] = ..., momentum: _Optional[float] = ..., dampening: _Optional[float] = ..., weight_decay: _Optional[float] = ..., nesterov: _Optional[bool] = ..., betas: _Optional[_Iterable[float]] = ..., eps: _Optional[float] = ..., amsgrad: _Optional[bool] = ..., lr_decay: _Optional[float] = ..., initial_accumulator_value: _Optional[float] = ..., maximize: _Optional[bool] = ...) -> None: ...

class TableSpec(_message.Message):
    __slots__ = ("name", "dim", "initializer", "init_a", "init_b", "seed", "optimizer", "num_embeddings", "max_rows", "admit_after", "ttl_s", "ttl_steps", "evict")
    NAME_FIELD_NUMBER: _ClassVar[int]
    DIM_FIELD_NUMBER: _ClassVar[int]
    INITIALIZER_FIELD_NUMBER: _ClassVar[int]
    INIT_A_FIELD_NUMBER: _ClassVar[int]
    INIT_B_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    OPTIMIZER_FIELD_NUMBER: _ClassVar[int]
    NUM_EMBEDDINGS_FIELD_NUMBER: _ClassVar[int]
    MAX_ROWS_FIELD_NUMBER: _ClassVar[int]
    ADMIT_AFTER_FIELD_NUMBER: _ClassVar[int]
    TTL_S_FIELD_NUMBER: _ClassVar[int]
    TTL_STEPS_FIELD_NUMBER: _ClassVar[int]
    EVICT_FIELD_NUMBER: _ClassVar[int]
    name: str
    dim: int
    initializer: str
    init_a: float
    init_b: float
    seed: int
    optimizer: OptimizerConfig
    num_embeddings: int
    max_rows: int
    admit_after: int
    ttl_s: float
    ttl_steps: int
    evict: str
    def __init__(self, name: _Optional[str] = ..., dim: _Optional[int] = ..., initializer: _Optional[str] = ..., init_a: _Optional[float] = ..., init_b: _Optional[float] = ..., seed: _Optional[int] = ..., optimizer: _Optional[_Union[OptimizerConfig, _Mapping]] = ..., num_embeddings: _Optional[int] = ..., max_rows: _Optional[int] = ..., admit_after: _Optional[int] = ..., ttl_s: _Optional[float] = ..., ttl_steps: _Optional[int] = ..., evict: _Optional[str] = ...) -> None: ...

class InitParameters(_message.Message):
    __slots__ = ("tensors", "optimizer", "tables")
    TENSORS_FIELD_NUMBER: _ClassVar[int]
    OPTIMIZER_FIELD_NUMBER: _ClassVar[int]
    TABLES_FIELD_NUMBER: _ClassVar[int]
    tensors: _containers.RepeatedCompositeFieldContainer[TensorMeta]
    optimizer: OptimizerConfig
    tables: _containers.RepeatedCompositeFieldContainer[TableSpec]
    def __init__(self, tensors: _Optional[_Iterable[_Union[TensorMeta, _Mapping]]] = ..., optimizer: _Optional[_Union[OptimizerConfig, _Mapping]] = ..., tables: _Optional[_Iterable[_Union[TableSpec, _Mapping]]] = ...) -> None: ...

class Pull(_message.Message):
    __slots__ = ("names", "packed")
    NAMES_FIELD_NUMBER: _ClassVar[int]
    PACKED_FIELD_NUMBER: _ClassVar[int]
    names: _containers.RepeatedScalarFieldContainer[str]
    packed: bool
    def __init__(self, names: _Optional[_Iterable[str]] = ..., packed: _Optional[bool] = ...) -> None: ...

class Push(_message.Message):
    __slots__ = ("tensors", "versions", "packed_count", "check_only", "checked")
    TENSORS_FIELD_NUMBER: _ClassVar[int]
    VERSIONS_FIELD_NUMBER: _ClassVar[int]
    PACKED_COUNT_FIELD_NUMBER: _ClassVar[int]
    CHECK_ONLY_FIELD_NUMBER: _ClassVar[int]
    CHECKED_FIELD_NUMBER: _ClassVar[int]
    tensors: _containers.RepeatedCompositeFieldContainer[TensorMeta]
    versions: _containers.RepeatedScalarFieldContainer[int]
    packed_count: int
    check_only: bool
    checked: bool
    def __init__(self, tensors: _Optional[_Iterable[_Union[TensorMeta, _Mapping]]] = ..., versions: _Optional[_Iterable[int]] = ..., packed_count: _Optional[int] = ..., check_only: _Optional[bool] = ..., checked: _Optional[bool] = ...) -> None: ...

class PullRows(_message.Message):
    __slots__ = ("table", "marked")
    TABLE_FIELD_NUMBER: _ClassVar[int]
    MARKED_FIELD_NUMBER: _ClassVar[int]
    table: str
    marked: bool
    def __init__(self, table: _Optional[str] = ..., marked: _Optional[bool] = ...) -> None: ...

class PushRows(_message.Message):
    __slots__ = ("table",)
    TABLE_FIELD_NUMBER: _ClassVar[int]
    table: str
    def __init__(self, table: _Optional[str] = ...) -> None: ...

class Step(_message.Message):
    __slots__ = ("push", "push_rows", "pull", "pull_rows")
    PUSH_FIELD_NUMBER: _ClassVar[int]
    PUSH_ROWS_FIELD_NUMBER: _ClassVar[int]
    PULL_FIELD_NUMBER: _ClassVar[int]
    PULL_ROWS_FIELD_NUMBER: _ClassVar[int]
    push: Push
    push_rows: _containers.RepeatedCompositeFieldContainer[PushRows]
    pull: Pull
    pull_rows: _containers.RepeatedCompositeFieldContainer[PullRows]
    def __init__(self, push: _Optional[_Union[Push, _Mapping]] = ..., push_rows: _Optional[_Iterable[_Union[PushRows, _Mapping]]] = ..., pull: _Optional[_Union[Pull, _Mapping]] = ..., pull_rows: _Optional[_Iterable[_Union[PullRows, _Mapping]]] = ...) -> None: ...

class DataRequest(_message.Message):
    __slots__ = ("client_id", "seq", "token", "generation", "frame_sizes", "init_parameters", "pull", "push", "pull_rows", "push_rows", "follow", "replicate", "step", "slot_export", "slot_import")
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    SEQ_FIELD_NUMBER: _ClassVar[int]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    FRAME_SIZES_FIELD_NUMBER: _ClassVar[int]
    INIT_PARAMETERS_FIELD_NUMBER: _ClassVar[int]
    PULL_FIELD_NUMBER: _ClassVar[int]
    PUSH_FIELD_NUMBER: _ClassVar[int]
    PULL_ROWS_FIELD_NUMBER: _ClassVar[int]
    PUSH_ROWS_FIELD_NUMBER: _ClassVar[int]
    FOLLOW_FIELD_NUMBER: _ClassVar[int]
    REPLICATE_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    SLOT_EXPORT_FIELD_NUMBER: _ClassVar[int]
    SLOT_IMPORT_FIELD_NUMBER: _ClassVar[int]
    client_id: str
    seq: int
    token: str
    generation: int
    frame_sizes: _containers.RepeatedScalarFieldContainer[int]
    init_parameters: InitParameters
    pull: Pull
    push: Push
    pull_rows: PullRows
    push_rows: PushRows
    follow: Follow
    replicate: Replicate
    step: Step
    slot_export: SlotMove
    slot_import: SlotMove
    def __init__(self, client_id: _Optional[str] = ..., seq: _Optional[int] = ..., token: _Optional[str] = ..., generation: _Optional[int] = ..., frame_sizes: _Optional[_Iterable[int]] = ..., init_parameters: _Optional[_Union[InitParameters, _Mapping]] = ..., pull: _Optional[_Union[Pull, _Mapping]] = ..., push: _Optional[_Union[Push, _Mapping]] = ..., pull_rows: _Optional[_Union[PullRows, _Mapping]] = ..., push_rows: _Optional[_Union[PushRows, _Mapping]] = ..., follow: _Optional[_Union[Follow, _Mapping]] = ..., replicate: _Optional[_Union[Replicate, _Mapping]] = ..., step: _Optional[_Union[Step, _Mapping]] = ..., slot_export: _Optional[_Union[SlotMove, _Mapping]] = ..., slot_import: _Optional[_Union[SlotMove, _Mapping]] = ...) -> None: ...

class SlotMove(_message.Message):
    __slots__ = ("slots", "layout_version", "attempt", "handover")
    SLOTS_FIELD_NUMBER: _ClassVar[int]
    LAYOUT_VERSION_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    HANDOVER_FIELD_NUMBER: _ClassVar[int]
    slots: _containers.RepeatedScalarFieldContainer[int]
    layout_version: int
    attempt: int
    handover: bool
    def __init__(self, slots: _Optional[_Iterable[int]] = ..., layout_version: _Optional[int] = ..., attempt: _Optional[int] = ..., handover: _Optional[bool] = ...) -> None: ...

class SlotMoveResult(_message.Message):
    __slots__ = ("rows", "tensors")
    ROWS_FIELD_NUMBER: _ClassVar[int]
    TENSORS_FIELD_NUMBER: _ClassVar[int]
    rows: int
    tensors: int
    def __init__(self, rows: _Optional[int] = ..., tensors: _Optional[int] = ...) -> None: ...

class SlotExport(_message.Message):
    __slots__ = ("format", "slots", "layout_version", "initialized", "optimizer", "tables", "dense", "applied", "crc32")
    FORMAT_FIELD_NUMBER: _ClassVar[int]
    SLOTS_FIELD_NUMBER: _ClassVar[int]
    LAYOUT_VERSION_FIELD_NUMBER: _ClassVar[int]
    INITIALIZED_FIELD_NUMBER: _ClassVar[int]
    OPTIMIZER_FIELD_NUMBER: _ClassVar[int]
    TABLES_FIELD_NUMBER: _ClassVar[int]
    DENSE_FIELD_NUMBER: _ClassVar[int]
    APPLIED_FIELD_NUMBER: _ClassVar[int]
    CRC32_FIELD_NUMBER: _ClassVar[int]
    format: int
    slots: _containers.RepeatedScalarFieldContainer[int]
    layout_version: int
    initialized: bool
    optimizer: OptimizerConfig
    tables: _containers.RepeatedCompositeFieldContainer[ExportedTable]
    dense: _containers.RepeatedCompositeFieldContainer[ExportedTensor]
    applied: _containers.RepeatedCompositeFieldContainer[AppliedMark]
    crc32: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, format: _Optional[int] = ..., slots: _Optional[_Iterable[int]] = ..., layout_version: _Optional[int] = ..., initialized: _Optional[bool] = ..., optimizer: _Optional[_Union[OptimizerConfig, _Mapping]] = ..., tables: _Optional[_Iterable[_Union[ExportedTable, _Mapping]]] = ..., dense: _Optional[_Iterable[_Union[ExportedTensor, _Mapping]]] = ..., applied: _Optional[_Iterable[_Union[AppliedMark, _Mapping]]] = ..., crc32: _Optional[_Iterable[int]] = ...) -> None: ...

class ExportedFrame(_message.Message):
    __slots__ = ("dtype", "shape", "frame", "offset")
    DTYPE_FIELD_NUMBER: _ClassVar[int]
    SHAPE_FIELD_NUMBER: _ClassVar[int]
    FRAME_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    dtype: str
    shape: _containers.RepeatedScalarFieldContainer[int]
    frame: int
    offset: int
    def __init__(self, dtype: _Optional[str] = ..., shape: _Optional[_Iterable[int]] = ..., frame: _Optional[int] = ..., offset: _Optional[int] = ...) -> None: ...

class ExportedTable(_message.Message):
    __slots__ = ("spec", "optimizer", "ids", "weights", "accum", "counts", "steps", "ticks", "touched", "delta", "gone")
    SPEC_FIELD_NUMBER: _ClassVar[int]
    OPTIMIZER_FIELD_NUMBER: _ClassVar[int]
    IDS_FIELD_NUMBER: _ClassVar[int]
    WEIGHTS_FIELD_NUMBER: _ClassVar[int]
    ACCUM_FIELD_NUMBER: _ClassVar[int]
    COUNTS_FIELD_NUMBER: _ClassVar[int]
    STEPS_FIELD_NUMBER: _ClassVar[int]
    TICKS_FIELD_NUMBER: _ClassVar[int]
    TOUCHED_FIELD_NUMBER: _ClassVar[int]
    DELTA_FIELD_NUMBER: _ClassVar[int]
    GONE_FIELD_NUMBER: _ClassVar[int]
    spec: TableSpec
    optimizer: OptimizerConfig
    ids: ExportedFrame
    weights: ExportedFrame
    accum: ExportedFrame
    counts: ExportedFrame
    steps: ExportedFrame
    ticks: ExportedFrame
    touched: ExportedFrame
    delta: bool
    gone: ExportedFrame
    def __init__(self, spec: _Optional[_Union[TableSpec, _Mapping]] = ..., optimizer: _Optional[_Union[OptimizerConfig, _Mapping]] = ..., ids: _Optional[_Union[ExportedFrame, _Mapping]] = ..., weights: _Optional[_Union[ExportedFrame, _Mapping]] = ..., accum: _Optional[_Union[ExportedFrame, _Mapping]] = ..., counts: _Optional[_Union[ExportedFrame, _Mapping]] = ..., steps: _Optional[_Union[ExportedFrame, _Mapping]] = ..., ticks: _Optional[_Union[ExportedFrame, _Mapping]] = ..., touched: _Optional[_Union[ExportedFrame, _Mapping]] = ..., delta: _Optional[bool] = ..., gone: _Optional[_Union[ExportedFrame, _Mapping]] = ...) -> None: ...

class ExportedTensor(_message.Message):
    __slots__ = ("name", "value", "version", "pushes", "stateful", "state")
    NAME_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    PUSHES_FIELD_NUMBER: _ClassVar[int]
    STATEFUL_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    name: str
    value: ExportedFrame
    version: int
    pushes: int
    stateful: bool
    state: _containers.RepeatedCompositeFieldContainer[OptimizerEntry]
    def __init__(self, name: _Optional[str] = ..., value: _Optional[_Union[ExportedFrame, _Mapping]] = ..., version: _Optional[int] = ..., pushes: _Optional[int] = ..., stateful: _Optional[bool] = ..., state: _Optional[_Iterable[_Union[OptimizerEntry, _Mapping]]] = ...) -> None: ...

class OptimizerEntry(_message.Message):
    __slots__ = ("key", "value")
    KEY_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    key: str
    value: ExportedFrame
    def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[ExportedFrame, _Mapping]] = ...) -> None: ...

class AppliedMark(_message.Message):
    __slots__ = ("client_id", "seq", "answer")
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    SEQ_FIELD_NUMBER: _ClassVar[int]
    ANSWER_FIELD_NUMBER: _ClassVar[int]
    client_id: str
    seq: int
    answer: AppliedAnswer
    def __init__(self, client_id: _Optional[str] = ..., seq: _Optional[int] = ..., answer: _Optional[_Union[AppliedAnswer, _Mapping]] = ...) -> None: ...

class AppliedAnswer(_message.Message):
    __slots__ = ("code", "message", "reason", "versions", "max_staleness", "row_count", "row_counts", "push", "duplicate")
    CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    VERSIONS_FIELD_NUMBER: _ClassVar[int]
    MAX_STALENESS_FIELD_NUMBER: _ClassVar[int]
    ROW_COUNT_FIELD_NUMBER: _ClassVar[int]
    ROW_COUNTS_FIELD_NUMBER: _ClassVar[int]
    PUSH_FIELD_NUMBER: _ClassVar[int]
    DUPLICATE_FIELD_NUMBER: _ClassVar[int]
    code: str
    message: str
    reason: str
    versions: TensorVersions
    max_staleness: int
    row_count: int
    row_counts: RowCounts
    push: AppliedAnswer
    duplicate: bool
    def __init__(self, code: _Optional[str] = ..., message: _Optional[str] = ..., reason: _Optional[str] = ..., versions: _Optional[_Union[TensorVersions, _Mapping]] = ..., max_staleness: _Optional[int] = ..., row_count: _Optional[int] = ..., row_counts: _Optional[_Union[RowCounts, _Mapping]] = ..., push: _Optional[_Union[AppliedAnswer, _Mapping]] = ..., duplicate: _Optional[bool] = ...) -> None: ...

class TensorVersions(_message.Message):
    __slots__ = ("of",)
    class OfEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    OF_FIELD_NUMBER: _ClassVar[int]
    of: _containers.ScalarMap[str, int]
    def __init__(self, of: _Optional[_Mapping[str, int]] = ...) -> None: ...

class RowCounts(_message.Message):
    __slots__ = ("counts",)
    COUNTS_FIELD_NUMBER: _ClassVar[int]
    counts: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, counts: _Optional[_Iterable[int]] = ...) -> None: ...

class Follow(_message.Message):
    __slots__ = ("generation", "attach_id", "instance", "data_address", "data_public_key", "applied", "loaded")
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    ATTACH_ID_FIELD_NUMBER: _ClassVar[int]
    INSTANCE_FIELD_NUMBER: _ClassVar[int]
    DATA_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    DATA_PUBLIC_KEY_FIELD_NUMBER: _ClassVar[int]
    APPLIED_FIELD_NUMBER: _ClassVar[int]
    LOADED_FIELD_NUMBER: _ClassVar[int]
    generation: int
    attach_id: int
    instance: str
    data_address: str
    data_public_key: str
    applied: int
    loaded: bool
    def __init__(self, generation: _Optional[int] = ..., attach_id: _Optional[int] = ..., instance: _Optional[str] = ..., data_address: _Optional[str] = ..., data_public_key: _Optional[str] = ..., applied: _Optional[int] = ..., loaded: _Optional[bool] = ...) -> None: ...

class Replicate(_message.Message):
    __slots__ = ("generation", "attach_id", "seq", "request")
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    ATTACH_ID_FIELD_NUMBER: _ClassVar[int]
    SEQ_FIELD_NUMBER: _ClassVar[int]
    REQUEST_FIELD_NUMBER: _ClassVar[int]
    generation: int
    attach_id: int
    seq: int
    request: bytes
    def __init__(self, generation: _Optional[int] = ..., attach_id: _Optional[int] = ..., seq: _Optional[int] = ..., request: _Optional[bytes] = ...) -> None: ...

class FollowResult(_message.Message):
    __slots__ = ("attach_id", "seq", "attached", "in_sync")
    ATTACH_ID_FIELD_NUMBER: _ClassVar[int]
    SEQ_FIELD_NUMBER: _ClassVar[int]
    ATTACHED_FIELD_NUMBER: _ClassVar[int]
    IN_SYNC_FIELD_NUMBER: _ClassVar[int]
    attach_id: int
    seq: int
    attached: bool
    in_sync: bool
    def __init__(self, attach_id: _Optional[int] = ..., seq: _Optional[int] = ..., attached: _Optional[bool] = ..., in_sync: _Optional[bool] = ...) -> None: ...

class ReplicateResult(_message.Message):
    __slots__ = ("seq",)
    SEQ_FIELD_NUMBER: _ClassVar[int]
    seq: int
    def __init__(self, seq: _Optional[int] = ...) -> None: ...

class InitParametersResult(_message.Message):
    __slots__ = ("initialized", "versions", "staleness_checked", "tables_changed")
    class VersionsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    INITIALIZED_FIELD_NUMBER: _ClassVar[int]
    VERSIONS_FIELD_NUMBER: _ClassVar[int]
    STALENESS_CHECKED_FIELD_NUMBER: _ClassVar[int]
    TABLES_CHANGED_FIELD_NUMBER: _ClassVar[int]
    initialized: bool
    versions: _containers.ScalarMap[str, int]
    staleness_checked: bool
    tables_changed: bool
    def __init__(self, initialized: _Optional[bool] = ..., versions: _Optional[_Mapping[str, int]] = ..., staleness_checked: _Optional[bool] = ..., tables_changed: _Optional[bool] = ...) -> None: ...

class PullResult(_message.Message):
    __slots__ = ("tensors", "versions", "staleness_checked", "packed_count")
    TENSORS_FIELD_NUMBER: _ClassVar[int]
    VERSIONS_FIELD_NUMBER: _ClassVar[int]
    STALENESS_CHECKED_FIELD_NUMBER: _ClassVar[int]
    PACKED_COUNT_FIELD_NUMBER: _ClassVar[int]
    tensors: _containers.RepeatedCompositeFieldContainer[TensorMeta]
    versions: _containers.RepeatedScalarFieldContainer[int]
    staleness_checked: bool
    packed_count: int
    def __init__(self, tensors: _Optional[_Iterable[_Union[TensorMeta, _Mapping]]] = ..., versions: _Optional[_Iterable[int]] = ..., staleness_checked: _Optional[bool] = ..., packed_count: _Optional[int] = ...) -> None: ...

class PushResult(_message.Message):
    __slots__ = ("versions", "max_staleness", "duplicate")
    class VersionsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    VERSIONS_FIELD_NUMBER: _ClassVar[int]
    MAX_STALENESS_FIELD_NUMBER: _ClassVar[int]
    DUPLICATE_FIELD_NUMBER: _ClassVar[int]
    versions: _containers.ScalarMap[str, int]
    max_staleness: int
    duplicate: bool
    def __init__(self, versions: _Optional[_Mapping[str, int]] = ..., max_staleness: _Optional[int] = ..., duplicate: _Optional[bool] = ...) -> None: ...

class PullRowsResult(_message.Message):
    __slots__ = ("dim", "created", "state")
    DIM_FIELD_NUMBER: _ClassVar[int]
    CREATED_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    dim: int
    created: int
    state: bool
    def __init__(self, dim: _Optional[int] = ..., created: _Optional[int] = ..., state: _Optional[bool] = ...) -> None: ...

class PushRowsResult(_message.Message):
    __slots__ = ("rows", "duplicate")
    ROWS_FIELD_NUMBER: _ClassVar[int]
    DUPLICATE_FIELD_NUMBER: _ClassVar[int]
    rows: int
    duplicate: bool
    def __init__(self, rows: _Optional[int] = ..., duplicate: _Optional[bool] = ...) -> None: ...

class StepResult(_message.Message):
    __slots__ = ("push", "push_rows", "pull", "pull_rows")
    PUSH_FIELD_NUMBER: _ClassVar[int]
    PUSH_ROWS_FIELD_NUMBER: _ClassVar[int]
    PULL_FIELD_NUMBER: _ClassVar[int]
    PULL_ROWS_FIELD_NUMBER: _ClassVar[int]
    push: PushResult
    push_rows: _containers.RepeatedCompositeFieldContainer[PushRowsResult]
    pull: PullResult
    pull_rows: _containers.RepeatedCompositeFieldContainer[PullRowsResult]
    def __init__(self, push: _Optional[_Union[PushResult, _Mapping]] = ..., push_rows: _Optional[_Iterable[_Union[PushRowsResult, _Mapping]]] = ..., pull: _Optional[_Union[PullResult, _Mapping]] = ..., pull_rows: _Optional[_Iterable[_Union[PullRowsResult, _Mapping]]] = ...) -> None: ...

class DataResponse(_message.Message):
    __slots__ = ("code", "message", "seq", "local_endpoint", "reason", "layout_version", "frame_sizes", "init_parameters", "pull", "push", "pull_rows", "push_rows", "follow", "replicate", "step", "slot_export", "slot_import")
    class Code(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        OK: _ClassVar[DataResponse.Code]
        CANCELLED: _ClassVar[DataResponse.Code]
        UNKNOWN: _ClassVar[DataResponse.Code]
        INVALID_ARGUMENT: _ClassVar[DataResponse.Code]
        DEADLINE_EXCEEDED: _ClassVar[DataResponse.Code]
        NOT_FOUND: _ClassVar[DataResponse.Code]
        ALREADY_EXISTS: _ClassVar[DataResponse.Code]
        PERMISSION_DENIED: _ClassVar[DataResponse.Code]
        RESOURCE_EXHAUSTED: _ClassVar[DataResponse.Code]
        FAILED_PRECONDITION: _ClassVar[DataResponse.Code]
        ABORTED: _ClassVar[DataResponse.Code]
        OUT_OF_RANGE: _ClassVar[DataResponse.Code]
        UNIMPLEMENTED: _ClassVar[DataResponse.Code]
        INTERNAL: _ClassVar[DataResponse.Code]
        UNAVAILABLE: _ClassVar[DataResponse.Code]
        DATA_LOSS: _ClassVar[DataResponse.Code]
        UNAUTHENTICATED: _ClassVar[DataResponse.Code]
    OK: DataResponse.Code
    CANCELLED: DataResponse.Code
    UNKNOWN: DataResponse.Code
    INVALID_ARGUMENT: DataResponse.Code
    DEADLINE_EXCEEDED: DataResponse.Code
    NOT_FOUND: DataResponse.Code
    ALREADY_EXISTS: DataResponse.Code
    PERMISSION_DENIED: DataResponse.Code
    RESOURCE_EXHAUSTED: DataResponse.Code
    FAILED_PRECONDITION: DataResponse.Code
    ABORTED: DataResponse.Code
    OUT_OF_RANGE: DataResponse.Code
    UNIMPLEMENTED: DataResponse.Code
    INTERNAL: DataResponse.Code
    UNAVAILABLE: DataResponse.Code
    DATA_LOSS: DataResponse.Code
    UNAUTHENTICATED: DataResponse.Code
    CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    SEQ_FIELD_NUMBER: _ClassVar[int]
    LOCAL_ENDPOINT_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    LAYOUT_VERSION_FIELD_NUMBER: _ClassVar[int]
    FRAME_SIZES_FIELD_NUMBER: _ClassVar[int]
    INIT_PARAMETERS_FIELD_NUMBER: _ClassVar[int]
    PULL_FIELD_NUMBER: _ClassVar[int]
    PUSH_FIELD_NUMBER: _ClassVar[int]
    PULL_ROWS_FIELD_NUMBER: _ClassVar[int]
    PUSH_ROWS_FIELD_NUMBER: _ClassVar[int]
    FOLLOW_FIELD_NUMBER: _ClassVar[int]
    REPLICATE_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    SLOT_EXPORT_FIELD_NUMBER: _ClassVar[int]
    SLOT_IMPORT_FIELD_NUMBER: _ClassVar[int]
    code: DataResponse.Code
    message: str
    seq: int
    local_endpoint: str
    reason: str
    layout_version: int
    frame_sizes: _containers.RepeatedScalarFieldContainer[int]
    init_parameters: InitParametersResult
    pull: PullResult
    push: PushResult
    pull_rows: PullRowsResult
    push_rows: PushRowsResult
    follow: FollowResult
    replicate: ReplicateResult
    step: StepResult
    slot_export: SlotMoveResult
    slot_import: SlotMoveResult
    def __init__(self, code: _Optional[_Union[DataResponse.Code, str]] = ..., message: _Optional[str] = ..., seq: _Optional[int] = ..., local_endpoint: _Optional[str] = ..., reason: _Optional[str] = ..., layout_version: _Optional[int] = ..., frame_sizes: _Optional[_Iterable[int]] = ..., init_parameters: _Optional[_Union[InitParametersResult, _Mapping]] = ..., pull: _Optional[_Union[PullResult, _Mapping]] = ..., push: _Optional[_Union[PushResult, _Mapping]] = ..., pull_rows: _Optional[_Union[PullRowsResult, _Mapping]] = ..., push_rows: _Optional[_Union[PushRowsResult, _Mapping]] = ..., follow: _Optional[_Union[FollowResult, _Mapping]] = ..., replicate: _Optional[_Union[ReplicateResult, _Mapping]] = ..., step: _Optional[_Union[StepResult, _Mapping]] = ..., slot_export: _Optional[_Union[SlotMoveResult, _Mapping]] = ..., slot_import: _Optional[_Union[SlotMoveResult, _Mapping]] = ...) -> None: ...

class CheckpointRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class CheckpointResponse(_message.Message):
    __slots__ = ("path", "bytes", "seconds", "number")
    PATH_FIELD_NUMBER: _ClassVar[int]
    BYTES_FIELD_NUMBER: _ClassVar[int]
    SECONDS_FIELD_NUMBER: _ClassVar[int]
    NUMBER_FIELD_NUMBER: _ClassVar[int]
    path: str
    bytes: int
    seconds: float
    number: int
    def __init__(self, path: _Optional[str] = ..., bytes: _Optional[int] = ..., seconds: _Optional[float] = ..., number: _Optional[int] = ...) -> None: ...

class GetPSStatusRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class TensorStatus(_message.Message):
    __slots__ = ("meta", "version")
    META_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    meta: TensorMeta
    version: int
    def __init__(self, meta: _Optional[_Union[TensorMeta, _Mapping]] = ..., version: _Optional[int] = ...) -> None: ...

class TableStatus(_message.Message):
    __slots__ = ("spec", "rows", "pushes", "bytes", "admitted", "filtered", "evicted")
    class EvictedEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    SPEC_FIELD_NUMBER: _ClassVar[int]
    ROWS_FIELD_NUMBER: _ClassVar[int]
    PUSHES_FIELD_NUMBER: _ClassVar[int]
    BYTES_FIELD_NUMBER: _ClassVar[int]
    ADMITTED_FIELD_NUMBER: _ClassVar[int]
    FILTERED_FIELD_NUMBER: _ClassVar[int]
    EVICTED_FIELD_NUMBER: _ClassVar[int]
    spec: TableSpec
    rows: int
    pushes: int
    bytes: int
    admitted: int
    filtered: int
    evicted: _containers.ScalarMap[str, int]
    def __init__(self, spec: _Optional[_Union[TableSpec, _Mapping]] = ..., rows: _Optional[int] = ..., pushes: _Optional[int] = ..., bytes: _Optional[int] = ..., admitted: _Optional[int] = ..., filtered: _Optional[int] = ..., evicted: _Optional[_Mapping[str, int]] = ...) -> None: ...

class GetPSStatusResponse(_message.Message):
    __slots__ = ("index", "num_ps", "address", "data_address", "initialized", "optimizer", "tensors", "tables", "pushes", "pulls", "duplicates", "refused_stale", "staleness", "max_staleness_seen", "checkpoints", "last_checkpoint", "last_checkpoint_ms", "restored_from", "started_ms", "max_staleness_allowed", "waited_for_send", "copies_on_write", "data_public_key", "role", "generation", "replica_state", "backups_in_sync", "replication_seq")
    class StalenessEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: int
        value: int
        def __init__(self, key: _Optional[int] = ..., value: _Optional[int] = ...) -> None: ...
    INDEX_FIELD_NUMBER: _ClassVar[int]
    NUM_PS_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    DATA_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    INITIALIZED_FIELD_NUMBER: _ClassVar[int]
    OPTIMIZER_FIELD_NUMBER: _ClassVar[int]
    TENSORS_FIELD_NUMBER: _ClassVar[int]
    TABLES_FIELD_NUMBER: _ClassVar[int]
    PUSHES_FIELD_NUMBER: _ClassVar[int]
    PULLS_FIELD_NUMBER: _ClassVar[int]
    DUPLICATES_FIELD_NUMBER: _ClassVar[int]
    REFUSED_STALE_FIELD_NUMBER: _ClassVar[int]
    STALENESS_FIELD_NUMBER: _ClassVar[int]
    MAX_STALENESS_SEEN_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINTS_FIELD_NUMBER: _ClassVar[int]
    LAST_CHECKPOINT_FIELD_NUMBER: _ClassVar[int]
    LAST_CHECKPOINT_MS_FIELD_NUMBER: _ClassVar[int]
    RESTORED_FROM_FIELD_NUMBER: _ClassVar[int]
    STARTED_MS_FIELD_NUMBER: _ClassVar[int]
    MAX_STALENESS_ALLOWED_FIELD_NUMBER: _ClassVar[int]
    WAITED_FOR_SEND_FIELD_NUMBER: _ClassVar[int]
    COPIES_ON_WRITE_FIELD_NUMBER: _ClassVar[int]
    DATA_PUBLIC_KEY_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    REPLICA_STATE_FIELD_NUMBER: _ClassVar[int]
    BACKUPS_IN_SYNC_FIELD_NUMBER: _ClassVar[int]
    REPLICATION_SEQ_FIELD_NUMBER: _ClassVar[int]
    index: int
    num_ps: int
    address: str
    data_address: str
    initialized: bool
    optimizer: OptimizerConfig
    tensors: _containers.RepeatedCompositeFieldContainer[TensorStatus]
    tables: _containers.RepeatedCompositeFieldContainer[TableStatus]
    pushes: int
    pulls: int
    duplicates: int
    refused_stale: int
    staleness: _containers.ScalarMap[int, int]
    max_staleness_seen: int
    checkpoints: int
    last_checkpoint: str
    last_checkpoint_ms: int
    restored_from: str
    started_ms: int
    max_staleness_allowed: int
    waited_for_send: int
    copies_on_write: int
    data_public_key: str
    role: str
    generation: int
    replica_state: str
    backups_in_sync: int
    replication_seq: int
    def __init__(self, index: _Optional[int] = ..., num_ps: _Optional[int] = ..., address: _Optional[str] = ..., data_address: _Optional[str] = ..., initialized: _Optional[bool] = ..., optimizer: _Optional[_Union[OptimizerConfig, _Mapping]] = ..., tensors: _Optional[_Iterable[_Union[TensorStatus, _Mapping]]] = ..., tables: _Optional[_Iterable[_Union[TableStatus, _Mapping]]] = ..., pushes: _Optional[int] = ..., pulls: _Optional[int] = ..., duplicates: _Optional[int] = ..., refused_stale: _Optional[int] = ..., staleness: _Optional[_Mapping[int, int]] = ..., max_staleness_seen: _Optional[int] = ..., checkpoints: _Optional[int] = ..., last_checkpoint: _Optional[str] = ..., last_checkpoint_ms: _Optional[int] = ..., restored_from: _Optional[str] = ..., started_ms: _Optional[int] = ..., max_staleness_allowed: _Optional[int] = ..., waited_for_send: _Optional[int] = ..., copies_on_write: _Optional[int] = ..., data_public_key: _Optional[str] = ..., role: _Optional[str] = ..., generation: _Optional[int] = ..., replica_state: _Optional[str] = ..., backups_in_sync: _Optional[int] = ..., replication_seq: _Optional[int] = ...) -> None: ...

class MoveSlotsRequest(_message.Message):
    __slots__ = ("action", "slots", "layout_version", "src_data_address", "src_public_key", "owned", "attempt")
    class Action(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        ACTION_UNSPECIFIED: _ClassVar[MoveSlotsRequest.Action]
        IMPORT: _ClassVar[MoveSlotsRequest.Action]
        ABORT: _ClassVar[MoveSlotsRequest.Action]
        LAYOUT: _ClassVar[MoveSlotsRequest.Action]
        PREPARE: _ClassVar[MoveSlotsRequest.Action]
    ACTION_UNSPECIFIED: MoveSlotsRequest.Action
    IMPORT: MoveSlotsRequest.Action
    ABORT: MoveSlotsRequest.Action
    LAYOUT: MoveSlotsRequest.Action
    PREPARE: MoveSlotsRequest.Action
    ACTION_FIELD_NUMBER: _ClassVar[int]
    SLOTS_FIELD_NUMBER: _ClassVar[int]
    LAYOUT_VERSION_FIELD_NUMBER: _ClassVar[int]
    SRC_DATA_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    SRC_PUBLIC_KEY_FIELD_NUMBER: _ClassVar[int]
    OWNED_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    action: MoveSlotsRequest.Action
    slots: _containers.RepeatedScalarFieldContainer[int]
    layout_version: int
    src_data_address: str
    src_public_key: str
    owned: str
    attempt: int
    def __init__(self, action: _Optional[_Union[MoveSlotsRequest.Action, str]] = ..., slots: _Optional[_Iterable[int]] = ..., layout_version: _Optional[int] = ..., src_data_address: _Optional[str] = ..., src_public_key: _Optional[str] = ..., owned: _Optional[str] = ..., attempt: _Optional[int] = ...) -> None: ...

class MoveSlotsResponse(_message.Message):
    __slots__ = ("rows", "tensors", "slots", "seconds")
    ROWS_FIELD_NUMBER: _ClassVar[int]
    TENSORS_FIELD_NUMBER: _ClassVar[int]
    SLOTS_FIELD_NUMBER: _ClassVar[int]
    SECONDS_FIELD_NUMBER: _ClassVar[int]
    rows: int
    tensors: int
    slots: int
    seconds: float
    def __init__(self, rows: _Optional[int] = ..., tensors: _Optional[int] = ..., slots: _Optional[int] = ..., seconds: _Optional[float] = ...) -> None: ...
