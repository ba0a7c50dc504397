"""One refusal type for every server, with a machine-readable reason clients branch on.

A server raises `ServiceError(code, reason, message)`; the gRPC adapters send it as a
`google.rpc.Status` whose details hold an `ErrorInfo(reason=..., domain="elasticps")`
(grpcio-status), and the ZeroMQ data plane puts the reason into its response header. Clients
read `reason_of(...)`, never the message, so a message may be reworded freely; the message is
for people and says what to fix. The reasons are listed in docs/errors.md.
"""
from __future__ import annotations

import enum

import grpc
from google.protobuf import any_pb2
from google.rpc import code_pb2, error_details_pb2, status_pb2
from grpc_status import rpc_status

DOMAIN = "elasticps"
QUOTE_CHARS = 64  # how much of a client's input an error message may repeat


class Reason(str, enum.Enum):
    """Why a call was refused. The values travel on the wire: never rename one."""

    # any server
    INVALID_ARGUMENT = "INVALID_ARGUMENT"      # a field is malformed or out of bounds
    UNDECODABLE = "UNDECODABLE"                # the request bytes are not the message
    UNAUTHENTICATED = "UNAUTHENTICATED"        # no or wrong bearer token
    PERMISSION_DENIED = "PERMISSION_DENIED"    # the token may not make this call (a proxy's)
    TLS_MISMATCH = "TLS_MISMATCH"              # client and server disagree on TLS (client side)
    SHUTTING_DOWN = "SHUTTING_DOWN"            # the server is stopping: retry elsewhere/later
    INTERNAL = "INTERNAL"                      # a bug: report it
    # master
    WORKER_GONE = "WORKER_GONE"                # unknown or lost worker: register again
    UNKNOWN_DATASET = "UNKNOWN_DATASET"        # CreateDataset first
    DATASET_EXISTS = "DATASET_EXISTS"          # same name, another spec
    DATASET_BUSY = "DATASET_BUSY"              # the dataset has leases out
    PS_SET_MISMATCH = "PS_SET_MISMATCH"        # (no longer sent: LAYOUT_MISMATCH since round 3)
    LAYOUT_MISMATCH = "LAYOUT_MISMATCH"        # a PS index or --num-ps outside the PS layout
    RESIZE_IN_PROGRESS = "RESIZE_IN_PROGRESS"  # slots are being handed over: resize again later
    PS_REPLICAS_FULL = "PS_REPLICAS_FULL"      # the PS index has its --ps-replicas backups
    NOT_LEADER = "NOT_LEADER"                  # a standby master: call the leader
    DATABASE_FAILED = "DATABASE_FAILED"        # the master stops after a failed commit
    NO_JOB = "NO_JOB"                          # the master was started without a job spec
    # parameter server
    NOT_INITIALIZED = "NOT_INITIALIZED"        # InitParameters first
    UNKNOWN_TENSOR = "UNKNOWN_TENSOR"
    UNKNOWN_TABLE = "UNKNOWN_TABLE"
    STALE_GRADIENT = "STALE_GRADIENT"          # pull again and recompute (--max-staleness)
    MODEL_MISMATCH = "MODEL_MISMATCH"          # the PS holds another model or optimizer
    TOO_LARGE = "TOO_LARGE"                    # a request over the PS's per-request bounds
    OUT_OF_MEMORY = "OUT_OF_MEMORY"            # the PS could not allocate for this request
    FENCED = "FENCED"                          # a deposed PS primary: re-route
    PS_PRIMARY_LEASE = "PS_PRIMARY_LEASE"      # the old PS primary may still hold its lease
    UNAVAILABLE = "UNAVAILABLE"                # not reached / no answer in time
    WRONG_OWNER = "WRONG_OWNER"                # a slot of the request moved: re-route by a
                                               # newer layout (DataResponse.layout_version)
    SLOT_MOVING = "SLOT_MOVING"                # a slot is being handed over: retry shortly
    MOVE_ABORTED = "MOVE_ABORTED"              # a slot move's attempt was rolled back


class ServiceError(Exception):
    """A refused request: `code` a gRPC status name, `reason` a `Reason`, `message` the fix."""

    def __init__(self, code: str, reason: Reason | str, message: str,
                 metadata: dict[str, str] | None = None):
        if not hasattr(grpc.StatusCode, code):
            raise ValueError(f"unknown status code {code!r}")
        super().__init__(f"{code}: {message}")
        self.code = code
        self.reason = reason.value if isinstance(reason, Reason) else str(reason)
        self.message = message
        # machine-readable facts about the refusal (ErrorInfo.metadata), e.g. a standby
        # master's {"leader": "host:port"}
        self.metadata = dict(metadata or {})

    @property
    def status_code(self) -> grpc.StatusCode:
        return getattr(grpc.StatusCode, self.code)


def invalid(message: str, reason: Reason = Reason.INVALID_ARGUMENT) -> ServiceError:
    return ServiceError("INVALID_ARGUMENT", reason, message)


def not_found(reason: Reason, message: str) -> ServiceError:
    return ServiceError("NOT_FOUND", reason, message)


def already_exists(reason: Reason, message: str) -> ServiceError:
    return ServiceError("ALREADY_EXISTS", reason, message)


def precondition(reason: Reason, message: str) -> ServiceError:
    return ServiceError("FAILED_PRECONDITION", reason, message)


def unavailable(reason: Reason, message: str) -> ServiceError:
    return ServiceError("UNAVAILABLE", reason, message)


def quote(value: object, limit: int = QUOTE_CHARS) -> str:
    """`repr` of at most `limit` characters of a client's input, for an error message."""
    text = value if isinstance(value, str) else str(value)
    if len(text) <= limit:
        return repr(text)
    return repr(text[:limit]) + f"... ({len(text)} chars)"


def to_status(err: ServiceError) -> grpc.Status:
    """The rich status (google.rpc.Status with an ErrorInfo) a servicer aborts with."""
    detail = any_pb2.Any()
    detail.Pack(error_details_pb2.ErrorInfo(reason=err.reason, domain=DOMAIN,
                                            metadata=err.metadata))
    return rpc_status.to_status(status_pb2.Status(
        code=getattr(code_pb2, err.code), message=err.message, details=[detail]))


def abort(context: grpc.ServicerContext, err: ServiceError) -> None:
    context.abort_with_status(to_status(err))


def _error_info(exc: BaseException) -> error_details_pb2.ErrorInfo | None:
    if not isinstance(exc, grpc.RpcError) or not hasattr(exc, "trailing_metadata"):
        return None
    try:
        status = rpc_status.from_call(exc)
    except ValueError:  # inconsistent trailers: treat as no details
        return None
    if status is None:
        return None
    for detail in status.details:
        info = error_details_pb2.ErrorInfo()
        if detail.Is(info.DESCRIPTOR) and detail.Unpack(info) and info.domain == DOMAIN:
            return info
    return None


def reason_of(exc: BaseException) -> str:
    """The reason a refusal carries ('' when none): a ServiceError's own, or the ErrorInfo
    inside a grpc.RpcError's status details."""
    reason = getattr(exc, "reason", None)
    if isinstance(reason, str):
        return reason
    info = _error_info(exc)
    return info.reason if info is not None else ""


def metadata_of(exc: BaseException) -> dict[str, str]:
    """The ErrorInfo metadata a refusal carries ({} when none), like `reason_of`."""
    metadata = getattr(exc, "metadata", None)
    if isinstance(metadata, dict):
        return dict(metadata)
    info = _error_info(exc)
    return dict(info.metadata) if info is not None else {}
