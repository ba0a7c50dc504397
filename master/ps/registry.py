"""The parameter-server registry: which PS serves each index, its backups, and the set's size.

Plain Python on the journal, like the rest of the core (moved out of `MasterCore`). Replicas
(`--ps-replicas`: generations, backups, promotions) are decided by master/ps/replicas.py; this
module keeps the primaries' rows and carries those decisions out.

The set has one `num_ps`. A PS of that set may register (again) at any time; each primary
registration of an index bumps its incarnation. A registration with another `num_ps` is
refused (FAILED_PRECONDITION, PS_SET_MISMATCH) while any primary of the current set is alive,
and replaces the whole set once every one is lost (its health check failed for the timeout,
see master/ps/monitor.py). So one misconfigured PS, or the stale rows of a set that is gone,
block the right PS only until they are found dead, never for good.

With replicas, a primary's lease (master/ps/leases.py) says how long it may still answer
pushes on its own. Another primary is made without waiting for it only by promoting an in-sync
backup; a syncing backup (`mark_lost`) or a new process (`join`) takes over only once the old
primary's lease must have run out: until then `mark_lost` does nothing (the monitor asks again)
and a registration is refused UNAVAILABLE / PS_PRIMARY_LEASE (the PS retries).
"""
from __future__ import annotations

from dataclasses import dataclass

from rpckit.auth import is_curve_key
from rpckit.errors import Reason, invalid, precondition, unavailable
from ..limits import MAX_NUM_PS, check_address, check_int
from ..persistence.journal import Journal
from ..states import EventKind
from .leases import PrimaryLeases
from .replicas import Join, Promotion, ReplicaSets, Role, check_instance


@dataclass
class PSRegistration:
    incarnation: int
    role: Role
    generation: int
    primary: dict  # the index's primary row (this PS's own when role is primary)


class PSRegistry:
    def __init__(self, journal: Journal, replicas: int = 0, rows: list[dict] = (),
                 generations: list[dict] = (), backups: list[dict] = (),
                 leases: PrimaryLeases | None = None):
        self.journal = journal
        self.leases = leases  # with replicas: primaries answer only under a lease
        self.rows: dict[int, dict] = {row["idx"]: dict(row) for row in rows}
        self.lost: set[int] = set()  # this run's view; every PS is presumed alive at start
        self.replicas = ReplicaSets(journal, replicas, generations, backups)

    @property
    def num_ps(self) -> int:
        return next(iter(self.rows.values()))["num_ps"] if self.rows else 0

    def join(self, address: str, data_address: str, index: int, num_ps: int,
             data_public_key: str = "", instance: str = "") -> PSRegistration:
        """Register a PS process: as its index's primary, or (--ps-replicas) as a backup."""
        check_address("PS address", address)
        check_address("PS data_address", data_address, empty_ok=True)
        if data_public_key and not is_curve_key(data_public_key):
            raise invalid("data_public_key must be a CURVE public key: 40 Z85 characters")
        check_int("num_ps", num_ps, 1, MAX_NUM_PS)
        check_int("PS index", index, 0, num_ps - 1)
        check_instance(instance)
        replaced = self._check_set(index, num_ps)
        previous = self.rows.get(index)
        join = self.replicas.decide(index, instance, address, previous, index in self.lost)
        if join == Join.PROMOTE_THEN_BACKUP:
            # its old process is gone: an in-sync backup takes over and it follows that one
            promotion = self.replicas.promote(index, "restarted")
            self._promote(promotion)
            previous = self.rows[index]
            join = Join.BACKUP if promotion else Join.PRIMARY
        if join == Join.PRIMARY and previous is not None \
                and instance != self.replicas.primary_instance(index):
            self._check_lease_over(index)  # a new process replaces a primary
        if join == Join.BACKUP:
            self.replicas.add_backup(index, instance, address, data_address, data_public_key)
            return PSRegistration(previous["incarnation"], Role.BACKUP,
                                  self.replicas.generation(index), previous)
        incarnation = self._register_primary(address, data_address, index, num_ps,
                                             data_public_key, replaced)
        before = self.replicas.generation(index)
        generation = self.replicas.set_primary(index, instance)
        if generation != before and self.leases is not None:
            self.leases.new_primary(index)
        return PSRegistration(incarnation, Role.PRIMARY, generation, self.rows[index])

    def _check_lease_over(self, index: int) -> None:
        left = self.leases.left(index) if self.leases is not None else 0.0
        if left > 0:
            raise unavailable(
                Reason.PS_PRIMARY_LEASE,
                f"PS index {index}'s primary may still answer pushes for {left:.1f} s (its "
                f"lease); this PS becomes the primary after that: retry then")

    def grant_lease(self, index: int) -> None:
        """The current primary of `index` renewed its lease (ReportReplicas answered)."""
        if self.leases is not None:
            self.leases.grant(index)

    def _check_set(self, index: int, num_ps: int) -> int:
        """Refuse another num_ps while the set lives; drop a set that is all lost. Returns how
        many rows were dropped."""
        if not self.rows or self.num_ps == num_ps:
            return 0
        alive = sorted(set(self.rows) - self.lost)
        if alive:
            raise precondition(
                Reason.PS_SET_MISMATCH,
                f"the PS set has num_ps={self.num_ps} and PS {alive[:8]} of it are alive; "
                f"start this PS with --num-ps {self.num_ps}, or stop that set first "
                "(a set gives way once all its PS are lost)"
            )
        dropped = len(self.rows)
        for old in self.rows:
            if old != index:  # the row of `index` itself is updated by the registration
                self.journal.batch.delete("ps", old)
        self.rows = {i: row for i, row in self.rows.items() if i == index}
        self.lost.clear()
        return dropped

    def _register_primary(self, address: str, data_address: str, index: int, num_ps: int,
                          data_public_key: str = "", replaced: int = 0) -> int:
        previous = self.rows.get(index)
        row = dict(
            idx=index, address=address, data_address=data_address, num_ps=num_ps,
            data_public_key=data_public_key,
            registered_ms=self.journal.now_ms(),
            incarnation=(previous["incarnation"] + 1) if previous else 1,
        )
        self.rows[index] = row
        self.lost.discard(index)
        if previous:
            self.journal.batch.update("ps", index, row)
        else:
            self.journal.batch.insert("ps", index, row)
        self.journal.event(
            EventKind.PS_REGISTERED,
            cause="replaced" if replaced else "again" if previous else "new",
            detail=f"ps {index}/{num_ps} at {address} data {data_address} "
            f"incarnation {row['incarnation']}"
            + (f"; the lost set of {replaced} PS was dropped" if replaced else ""),
        )
        return row["incarnation"]

    def mark_lost(self, index: int, incarnation: int, why: str) -> bool:
        """Record that PS `index` stopped answering; a no-op if it registered again since."""
        row = self.rows.get(index)
        if row is None or row["incarnation"] != incarnation or index in self.lost:
            return False
        if (self.leases is not None and self.replicas.backups_of(index)
                and not self.replicas.in_sync(index) and self.leases.left(index) > 0):
            return False  # a syncing backup would take over: not while the lease may live
        self.lost.add(index)
        self.journal.event(EventKind.PS_LOST, cause="health_check",
                           detail=f"ps {index} at {row['address']}: {why}")
        # no backup in sync (or it would have been promoted sooner): the best one left serves
        self._promote(self.replicas.promote(index, "in_sync", allow_syncing=True))
        return True

    def promote(self, index: int, incarnation: int, why: str) -> bool:
        """The primary of `index` (this incarnation) is failing: promote an in-sync backup."""
        row = self.rows.get(index)
        if row is None or row["incarnation"] != incarnation or index in self.lost:
            return False
        promotion = self.replicas.promote(index, "in_sync")
        if promotion is None:
            return False
        self.journal.event(EventKind.PS_LOST, cause="failover",
                           detail=f"ps {index} at {row['address']}: {why}")
        self._promote(promotion)
        return True

    def _promote(self, promotion: Promotion | None) -> None:
        if promotion is None:
            return
        b = promotion.backup
        if self.leases is not None:
            self.leases.new_primary(promotion.index)
        self._register_primary(b["address"], b["data_address"], promotion.index,
                               self.rows[promotion.index]["num_ps"], b["data_public_key"])

    def listing(self) -> tuple[list[dict], int, bool]:
        """(primary rows by index, num_ps, complete: every index 0..num_ps-1 registered)."""
        rows = [self.rows[i] for i in sorted(self.rows)]
        num_ps = self.num_ps
        return rows, num_ps, num_ps > 0 and len(rows) == num_ps
