"""This PS's place in its index's replica set, and the data plane's role filter that follows from it.

The master decides the role (master/ps/replicas.py); the registrar hands each answer to
`on_role`. What the role filter lets through, by role:

- pending (not registered yet) and fenced (deposed, registering again): nothing; clients get
  UNAVAILABLE with reason FENCED and look the primary up again.
- backup: only `Replicate` from its primary (backup.py); clients are FENCED.
- primary: clients' requests, unless they name a newer generation than this PS's (then it
  was deposed and does not know yet: FENCED); with `--ps-replicas` > 0 every mutation goes
  through the replication order (primary.py), and backups may attach (`Follow`); a
  mutation is answered only under a valid primary lease (lease.py).

The node is a link of the data plane's request chain (ps/dataplane/__init__.py): it is handed
the next link, the handlers, and passes to it what its role serves.

A primary the master answers FENCED (ReportReplicas) stops serving at once and registers
again, which makes it a backup of the new primary: a deposed primary never serves as a second
primary.
"""
from __future__ import annotations

import enum
import logging
import threading
from typing import Callable

import zmq

from protos import ps_pb2

from rpckit.errors import Reason, ServiceError
from ..store.params import ParamStore
from .backup import Backup, Upstream
from .primary import Fenced, Primary

log = logging.getLogger(__name__)

MUTATIONS = frozenset({"init_parameters", "push", "push_rows", "step", "slot_import"})


def mutates(kind: str, req: ps_pb2.DataRequest, stateful=lambda table: False) -> bool:
    """Whether a client request may change the model: a push's staleness check
    (Push.check_only) does not, nor a Step of reads only, unless it pulls rows of a table
    whose reads change it (`stateful(table)`: admission, a cap, a TTL; see
    pswire.tables.TableSpec.stateful_reads)."""
    if kind == "push":
        return not req.push.check_only
    if kind == "step":
        return (req.step.HasField("push") or len(req.step.push_rows) > 0
                or any(stateful(r.table) for r in req.step.pull_rows))
    if kind == "pull_rows":
        return stateful(req.pull_rows.table)
    return kind in MUTATIONS


class NodeRole(str, enum.Enum):
    """Where this PS stands in its replica set: the master's word (primary, backup), before
    its first one (pending), or after a renewal was refused (fenced)."""

    PENDING = "pending"
    PRIMARY = "primary"
    BACKUP = "backup"
    FENCED = "fenced"


def fenced(message: str) -> ServiceError:
    return ServiceError("UNAVAILABLE", Reason.FENCED, message)


class ReplicaNode:
    def __init__(self, store: ParamStore, handlers, ctx: zmq.Context, token: str,
                 instance: str, data_address: str, data_public_key: str = "",
                 ack_timeout: float = 2.0, token_source: str = ""):
        """handlers: the next link (ps.dataplane.Handlers over `store`), which serves what
        this node lets through and the mutations a backup receives."""
        self.store = store
        self.handlers = handlers
        self.ctx = ctx
        self.token = token
        self.token_source = token_source
        self.instance = instance
        self.data_address = data_address
        self.data_public_key = data_public_key
        self.ack_timeout = ack_timeout
        self.role = NodeRole.PENDING
        self.generation = 0
        self.replicas = 0
        self.primary: Primary | None = None
        self.backup: Backup | None = None
        self.urgent = threading.Event()  # ask the master soon (the primary went quiet)
        self.wake: Callable[[], None] = lambda: None        # the registrar's, when it runs
        self.fatal: Callable[[str], None] = lambda why: None  # stop the PS (the registrar's)
        # (generation, in_sync) -> the lease granted, in seconds
        self.report: Callable[[int, list[str]], float] | None = None
        # set once this PS is a primary with backups: its handlers then wait for the backups'
        # acknowledgements, so the transport serves with more of them (DataPlane.more_handlers)
        self.more_handlers = threading.Event()
        self._lock = threading.Lock()

    # -- the role filter -----------------------------------------------------------------------

    def handle(self, kind: str, req: ps_pb2.DataRequest, frames: list, header) -> list:
        role, primary = self.role, self.primary
        if kind == "replicate":
            backup = self.backup
            if role != NodeRole.BACKUP or backup is None:
                raise fenced(f"PS {self.store.index} is {role.value}, not a backup")
            return backup.on_replicate(req, frames)
        self._primary_only(role, primary)
        if req.generation > self.generation:
            raise fenced(f"PS {self.store.index} is at generation {self.generation}, the "
                         f"request names {req.generation}: this PS was deposed")
        if kind == "follow":
            return self._follow(primary, req)
        if self.replicas > 0 and mutates(kind, req, self._stateful_reads):
            reads_change = kind == "step" and any(self._stateful_reads(r.table)
                                                  for r in req.step.pull_rows)
            return primary.mutate(req, header, frames,
                                  lambda: self.handlers.handle(kind, req, frames, header),
                                  reads_change)
        return self.handlers.handle(kind, req, frames, header)

    def import_slots(self, req: ps_pb2.DataRequest, frames: list) -> list:
        """A slot move's export written here (ps/slots/calls.py: this PS's own call, never a
        request off the network), through the replication order so the backups hold it too
        (they replay it as a `slot_import`)."""
        role, primary = self.role, self.primary
        self._primary_only(role, primary)
        if self.replicas > 0:
            return primary.mutate(req, req.SerializeToString(), frames,
                                  lambda: self.handlers.import_slots(req, frames))
        return self.handlers.import_slots(req, frames)

    def _primary_only(self, role, primary) -> None:
        if role != NodeRole.PRIMARY or primary is None:
            raise fenced(f"PS {self.store.index} is {role.value} (generation "
                         f"{self.generation}), not the primary: ask the master (ListPS)")

    def _follow(self, primary: Primary, req: ps_pb2.DataRequest) -> list:
        if self.replicas == 0:
            raise ServiceError("FAILED_PRECONDITION", Reason.FENCED,
                               "the master asks for no backups (--ps-replicas 0)")
        if req.follow.generation != self.generation:
            raise fenced(f"generation {req.follow.generation} asked, this primary is at "
                         f"{self.generation}")
        if req.follow.attach_id == 0:
            result, snapshot = primary.attach(req.follow)
            return [ps_pb2.DataResponse(code=0, seq=req.seq, follow=result).SerializeToString(),
                    snapshot]
        return [ps_pb2.DataResponse(code=0, seq=req.seq, follow=primary.status(req.follow))
                .SerializeToString()]

    # -- what the master says ------------------------------------------------------------------

    def on_role(self, role: str, generation: int, primary: ps_pb2.PSInfo, replicas: int) -> None:
        with self._lock:
            self.replicas = replicas
            if role == NodeRole.PRIMARY and replicas > 0:
                self.more_handlers.set()
            if role == NodeRole.PRIMARY:
                if self.role == NodeRole.PRIMARY and self.generation == generation:
                    return
                self._stop_backup()
                if self.primary is not None:
                    self.primary.close()
                was = self.role
                self.generation, self.role = generation, NodeRole.PRIMARY
                self.primary = Primary(self.store, self.ctx, self.token, generation,
                                       self._report, self.ack_timeout)
                self.urgent.clear()
                # a start's first role is news, not a warning; a promotion (a backup's primary
                # lost) or a return after a fence is
                log.log(logging.INFO if was == NodeRole.PENDING else logging.WARNING,
                        "PS %d is the primary of generation %d (was %s)", self.store.index,
                        generation, was.value)
            elif role == NodeRole.BACKUP:
                if self.primary is not None:
                    self.primary.fence()
                    self.primary.close()
                    self.primary = None
                if self.role != NodeRole.BACKUP or self.generation != generation:
                    log.log(logging.INFO if self.role in (NodeRole.PENDING, NodeRole.BACKUP)
                            else logging.WARNING, "PS %d is a backup of %s (generation %d)",
                            self.store.index, primary.data_address, generation)
                    self.urgent.clear()
                self.generation, self.role = generation, NodeRole.BACKUP
                if self.backup is None:
                    self.backup = Backup(self.store, self.ctx, self.token, self.instance,
                                         self.data_address, self.data_public_key,
                                         self._apply_replicated, self._primary_silent,
                                         on_fatal=lambda why: self.fatal(why),
                                         token_source=self.token_source)
                self.backup.follow(Upstream(generation, primary.data_address,
                                            primary.data_public_key))

    def _report(self, in_sync: list[str]) -> float:
        if self.report is None:
            raise RuntimeError("no master to report to")
        try:
            return self.report(self.generation, in_sync)
        except Fenced:
            self.role = NodeRole.FENCED  # not under _lock: on_role may be closing this primary
            log.warning("PS %d was deposed (generation %d): registering again",
                        self.store.index, self.generation)
            self.urgent.set()
            self.wake()
            raise

    def _apply_replicated(self, inner: ps_pb2.DataRequest, frames: list) -> list:
        kind = inner.WhichOneof("body")
        if kind == "step":  # a backup applies the mutations; the reads were the primary's
            step = inner.step
            step.ClearField("pull")
            if not any(self._stateful_reads(r.table) for r in step.pull_rows):
                # the ids frames, then the state masks (protos/ps.proto)
                reads = len(step.pull_rows) + sum(r.marked for r in step.pull_rows)
                frames = frames[:len(frames) - reads]
                del step.pull_rows[:]
            # else the row pulls change the tables (sightings, evictions, touch order):
            # the backup makes them too, in the same order, and drops the rows read
        return self.handlers.handle(kind, inner, frames, replicated=True)

    def _stateful_reads(self, table: str) -> bool:
        # decided before the order lock: a table not declared yet (an InitParameters may be
        # applying) counts as stateful, so its reads are ordered after the declaration; if it
        # is still unknown then, the read is refused and nothing is forwarded
        t = self.store.tables.get(table)
        return t is None or t.spec.stateful_reads

    def _primary_silent(self) -> None:
        self.urgent.set()
        self.wake()

    def _stop_backup(self) -> None:
        if self.backup is not None:
            self.backup.stop()
            self.backup = None

    def close(self) -> None:
        with self._lock:
            self._stop_backup()
            if self.primary is not None:
                self.primary.close()

    # -- status ---------------------------------------------------------------------------------

    def status(self) -> dict:
        backup, primary = self.backup, self.primary
        return dict(
            role=self.role.value, generation=self.generation,
            replica_state=("in_sync" if backup.in_sync else "syncing") if backup else "",
            backups_in_sync=primary.in_sync_count() if primary else 0,
            replication_seq=primary.seq if primary else (backup.applied_seq if backup else 0),
        )
