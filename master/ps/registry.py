"""The parameter-server registry: which PS serves each index, its backups, and the set's size.

Plain Python on the journal, like the rest of the core (moved out of `MasterCore`). Replicas
(`--ps-replicas`: generations, backups, promotions) are decided by master/ps/replicas.py; this
module keeps the primaries' rows and carries those decisions out.

The set's size is the PS layout's (master/ps/layout.py): the first registration makes the
layout from its `num_ps`, and after that only `resize-ps` changes the count. A registration
whose index is outside the layout (and not one a resize adds), or whose `num_ps` disagrees, is
refused FAILED_PRECONDITION / LAYOUT_MISMATCH whatever state the set is in: no registration
ever replaces the layout (issue 25: a stray PS refused while the set lived used to take its
place once the set restarted). Each primary registration of an index bumps its incarnation.

With replicas, a primary's lease (master/ps/leases.py) says how long it may still answer
pushes on its own. Another primary is made without waiting for it only by promoting an in-sync
backup; a syncing backup (`mark_lost`) or a new process (`join`) takes over only once the old
primary's lease must have run out: until then `mark_lost` does nothing (the monitor asks again)
and a registration is refused UNAVAILABLE / PS_PRIMARY_LEASE (the PS retries).
"""
from __future__ import annotations

from dataclasses import dataclass

from rpckit.auth import is_curve_key
from rpckit.errors import Reason, invalid, unavailable
from ..limits import MAX_NUM_PS, check_endpoint, check_int
from ..persistence.journal import Journal
from ..states import EventKind
from .layout import PSLayout
from .leases import PrimaryLeases
from .replicas import Join, Promotion, ReplicaSets, ReplicaRole, check_instance


@dataclass
class PSRegistration:
    incarnation: int
    role: ReplicaRole
    generation: int
    primary: dict  # the index's primary row (this PS's own when role is primary)


class PSRegistry:
    def __init__(self, journal: Journal, replicas: int = 0, rows: list[dict] = (),
                 generations: list[dict] = (), backups: list[dict] = (),
                 leases: PrimaryLeases | None = None, layout: PSLayout | None = None):
        self.journal = journal
        self.leases = leases  # with replicas: primaries answer only under a lease
        self.rows: dict[int, dict] = {row["idx"]: dict(row) for row in rows}
        self.lost: set[int] = set()  # this run's view; every PS is presumed alive at start
        self.replicas = ReplicaSets(journal, replicas, generations, backups)
        self.layout = layout if layout is not None else PSLayout(journal, 1024)
        if self.layout.layout is None and self.rows:
            # a database from before the layout: the registered set's count makes it
            self.layout.create(next(iter(self.rows.values()))["num_ps"])

    @property
    def num_ps(self) -> int:
        return self.layout.num_ps

    def join(self, address: str, data_address: str, index: int, num_ps: int,
             data_public_key: str = "", instance: str = "") -> PSRegistration:
        """Register a PS process: as its index's primary, or (--ps-replicas) as a backup."""
        check_endpoint("PS address", address)
        check_endpoint("PS data_address", data_address, "tcp://", empty_ok=True)
        if data_public_key and not is_curve_key(data_public_key):
            raise invalid("data_public_key must be a CURVE public key: 40 Z85 characters")
        check_int("num_ps", num_ps, 0, MAX_NUM_PS)  # 0: the layout's
        check_int("PS index", index, 0, (num_ps or MAX_NUM_PS) - 1)
        check_instance(instance)
        num_ps = self.layout.fit(index, num_ps)  # LAYOUT_MISMATCH: changes nothing
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
        made = ""
        if self.layout.layout is None:  # the first PS of the job: its count makes the layout
            self.layout.create(num_ps)
            made = f"; layout version 1 made: {self.layout.ps_slots} slots over {num_ps} PS"
        if join == Join.BACKUP:
            self.replicas.add_backup(index, instance, address, data_address, data_public_key)
            return PSRegistration(previous["incarnation"], ReplicaRole.BACKUP,
                                  self.replicas.generation(index), previous)
        incarnation = self._register_primary(address, data_address, index, num_ps,
                                             data_public_key, made)
        before = self.replicas.generation(index)
        generation = self.replicas.set_primary(index, instance)
        if generation != before and self.leases is not None:
            self.leases.new_primary(index)
        return PSRegistration(incarnation, ReplicaRole.PRIMARY, generation, self.rows[index])

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

    def _register_primary(self, address: str, data_address: str, index: int, num_ps: int,
                          data_public_key: str = "", note: str = "") -> int:
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
            cause="again" if previous else "new" if self.layout.member(index) else "joining",
            detail=f"ps {index}/{num_ps} at {address} data {data_address} "
            f"incarnation {row['incarnation']}{note}",
        )
        return row["incarnation"]

    def forget_removed(self) -> list[int]:
        """Once a shrink moved every slot off the indices it removes, those indices leave the
        registry (their PS exit 0 when their next ListPS shows the layout: ps/registrar.py),
        so the health monitor does not count them lost. Returns the indices forgotten."""
        top = max(self.layout.num_ps, self.layout.target)
        gone = sorted(i for i in self.rows if i >= top)
        for index in gone:
            del self.rows[index]
            self.lost.discard(index)
            self.journal.batch.delete("ps", index)
            for backup in self.replicas.backups_of(index):
                self.replicas._remove(index, backup["instance"])
        return gone

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
        """(primary rows of the layout's indices, num_ps, complete: every index 0..num_ps-1
        registered). Indices a grow adds are in `joining` until slots move to them."""
        num_ps = self.num_ps
        rows = [self.rows[i] for i in sorted(self.rows) if i < num_ps]
        return rows, num_ps, num_ps > 0 and len(rows) == num_ps

    def joining(self) -> list[dict]:
        """Primary rows of registered indices a resize adds (num_ps..target-1)."""
        return [self.rows[i] for i in sorted(self.rows)
                if self.num_ps <= i < self.layout.target]
