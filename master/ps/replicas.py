"""PS replicas on the master: per index, the generation, the primary's instance and the backups.

Plain Python on the journal, like the rest of the core. What it decides (`--ps-replicas R`):

- Who a registering PS is. Each PS process has a random `instance`. The same instance again is
  a re-registration (same role). With R = 0 a new instance replaces the primary (the behaviour
  without replicas). With R > 0 a new instance joins an index whose primary is alive as a
  backup (at most R: PS_REPLICAS_FULL beyond), and becomes the primary of an index that has
  none alive. A new instance at the primary's own address means the primary restarted: an
  in-sync backup is promoted first, and the newcomer joins as its backup.
- Which backup takes over. `promote` prefers an in-sync backup (one the primary waits for
  before it answers a push: it holds every acknowledged push); only when the primary is
  declared lost with none in sync does a syncing one take over (`allow_syncing`), and only
  once the old primary's lease ran out (master/ps/registry.py, master/ps/leases.py). Every
  change of primary bumps the index's `generation`; the other backups go back to syncing
  (they copy the new primary again).
- Which backups are in sync: only the primary of the current generation may say so
  (`report`); anyone else is told FENCED. The primary stops waiting for a backup only after
  the master recorded that it is no longer in sync, so the master never promotes a backup
  that may lack an acknowledged push.

Durable: `ps_generations` (index -> generation, primary instance) and `ps_backups` (one row
per backup), committed with the call like every other decision.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass

from rpckit.errors import Reason, invalid, precondition
from ..limits import MAX_ID, MAX_NUM_PS, check_int
from ..persistence.journal import Journal

MAX_REPLICAS = 8
MAX_INSTANCE = 64


class ReplicaRole(str, enum.Enum):
    """What the master makes a registered PS of its index (sent as PSRegistration.role)."""

    PRIMARY = "primary"
    BACKUP = "backup"


class BackupState(str, enum.Enum):
    SYNCING = "syncing"
    IN_SYNC = "in_sync"


class Join(str, enum.Enum):
    """What a registration makes of a PS process."""

    PRIMARY = "primary"                    # first of its index, same instance again, or R = 0
    BACKUP = "backup"
    PROMOTE_THEN_BACKUP = "promote_then_backup"  # the primary restarted at its address


@dataclass
class Promotion:
    index: int
    backup: dict       # the promoted backup's row (address, data_address, ...)
    generation: int
    cause: str         # in_sync, not_in_sync, restarted


def check_instance(instance: str) -> None:
    if len(instance) > MAX_INSTANCE or not instance.isprintable():
        raise invalid(f"instance must be at most {MAX_INSTANCE} printable characters")


class ReplicaSets:
    def __init__(self, journal: Journal, wanted: int = 0, generations: list[dict] = (),
                 backups: list[dict] = ()):
        if not 0 <= wanted <= MAX_REPLICAS:
            raise ValueError(f"--ps-replicas must be in 0..{MAX_REPLICAS}")
        self.journal = journal
        self.wanted = wanted
        self.gens: dict[int, dict] = {r["idx"]: dict(r) for r in generations}
        self.backups: dict[int, dict[str, dict]] = {}
        for row in sorted(backups, key=lambda r: r["registered_ms"]):
            self.backups.setdefault(row["idx"], {})[row["instance"]] = dict(row)

    # ---- reads ------------------------------------------------------------------------------

    def generation(self, index: int) -> int:
        row = self.gens.get(index)
        return row["generation"] if row else 0

    def primary_instance(self, index: int) -> str:
        row = self.gens.get(index)
        return row["instance"] if row else ""

    def backups_of(self, index: int) -> list[dict]:
        return list(self.backups.get(index, {}).values())

    def in_sync(self, index: int) -> list[dict]:
        return [b for b in self.backups_of(index) if b["state"] == BackupState.IN_SYNC]

    def find(self, instance: str) -> dict | None:
        for members in self.backups.values():
            if instance in members:
                return members[instance]
        return None

    # ---- decisions --------------------------------------------------------------------------

    def decide(self, index: int, instance: str, address: str, primary: dict | None,
               primary_lost: bool) -> Join:
        """What a registration of `instance` at `address` for `index` makes of it."""
        if primary is None:
            return Join.PRIMARY
        if instance and instance == self.primary_instance(index):
            return Join.PRIMARY
        if instance and instance in self.backups.get(index, {}):
            return Join.BACKUP
        if self.wanted == 0 or primary_lost:
            # without replicas the newcomer replaces the primary (as before); a lost primary
            # with backups was replaced by a promotion already, so none is left to follow
            return Join.PRIMARY
        if address == primary["address"]:
            # the primary's own address from another process: the primary restarted
            return Join.PROMOTE_THEN_BACKUP if self.backups_of(index) else Join.PRIMARY
        if len(self.backups.get(index, {})) >= self.wanted:
            raise precondition(
                Reason.PS_REPLICAS_FULL,
                f"PS index {index} has its {self.wanted} backups already (--ps-replicas "
                f"{self.wanted}); start this PS when one is gone, or raise --ps-replicas")
        return Join.BACKUP

    def set_primary(self, index: int, instance: str) -> int:
        """Record `instance` as the primary of `index`; bump the generation when it changed.
        Returns the generation."""
        row = self.gens.get(index)
        if row is not None and row["instance"] == instance and instance:
            return row["generation"]
        generation = (row["generation"] + 1) if row else 1
        new = dict(idx=index, generation=generation, instance=instance)
        self.gens[index] = new
        if row is None:
            self.journal.batch.insert("ps_generations", index, new)
        else:
            self.journal.batch.update("ps_generations", index, new)
            self._resync_all(index)
        return generation

    def add_backup(self, index: int, instance: str, address: str, data_address: str,
                   data_public_key: str = "") -> dict:
        members = self.backups.setdefault(index, {})
        previous = members.get(instance)
        row = dict(instance=instance, idx=index, address=address, data_address=data_address,
                   data_public_key=data_public_key, state=BackupState.SYNCING.value,
                   registered_ms=self.journal.now_ms())
        members[instance] = row
        if previous is None:
            self.journal.batch.insert("ps_backups", instance, row)
            self.journal.event("ps_backup", cause="joined",
                               detail=f"ps {index} backup {instance} at {address} data "
                               f"{data_address} (generation {self.generation(index)})")
        else:
            self.journal.batch.update("ps_backups", instance, row)
        return row

    def promote(self, index: int, cause: str, allow_syncing: bool = False) -> Promotion | None:
        """Make a backup the primary of `index`: an in-sync one, else (allow_syncing) any."""
        candidates = self.in_sync(index)
        if not candidates and allow_syncing:
            candidates = self.backups_of(index)
            cause = "not_in_sync"
        if not candidates:
            return None
        chosen = candidates[0]
        self._remove(index, chosen["instance"])
        generation = self.set_primary(index, chosen["instance"])
        self.journal.event(
            "ps_promoted", cause=cause,
            detail=f"ps {index} backup {chosen['instance']} at {chosen['address']} is the "
            f"primary of generation {generation}")
        return Promotion(index, chosen, generation, cause)

    def report(self, index: int, generation: int, instance: str, in_sync: list[str]) -> int:
        """The primary's in-sync backups. FENCED unless it is the current primary."""
        check_int("PS index", index, 0, MAX_NUM_PS - 1)
        check_int("generation", generation, 0, MAX_ID)
        check_instance(instance)
        if len(in_sync) > 4 * MAX_REPLICAS:
            raise invalid(f"{len(in_sync)} in-sync backups listed; at most {4 * MAX_REPLICAS}")
        for backup in in_sync:
            check_instance(backup)
        current = self.gens.get(index)
        if current is None or current["instance"] != instance or current["generation"] != generation:
            now = f"generation {current['generation']}" if current else "no primary"
            raise precondition(
                Reason.FENCED,
                f"this PS (instance {instance[:16]}, generation {generation}) is not the primary "
                f"of PS index {index} ({now}): stop serving and join as a backup")
        wanted = set(in_sync)
        for row in self.backups_of(index):
            state = BackupState.IN_SYNC if row["instance"] in wanted else BackupState.SYNCING
            if row["state"] != state:
                row["state"] = state.value
                self.journal.batch.update("ps_backups", row["instance"], {"state": state.value})
                self.journal.event(
                    "ps_backup", cause=state.value,
                    detail=f"ps {index} backup {row['instance']} at {row['address']} "
                    f"(generation {generation})")
        return generation

    def lose_backup(self, index: int, instance: str, why: str) -> bool:
        row = self.backups.get(index, {}).get(instance)
        if row is None:
            return False
        self._remove(index, instance)
        self.journal.event("ps_lost", cause="backup",
                           detail=f"ps {index} backup {instance} at {row['address']}: {why}")
        return True

    def _remove(self, index: int, instance: str) -> None:
        del self.backups[index][instance]
        if not self.backups[index]:
            del self.backups[index]
        self.journal.batch.delete("ps_backups", instance)

    def _resync_all(self, index: int) -> None:
        # a new primary: every backup copies it again before it counts as in sync
        for row in self.backups_of(index):
            if row["state"] != BackupState.SYNCING:
                row["state"] = BackupState.SYNCING.value
                self.journal.batch.update("ps_backups", row["instance"],
                                          {"state": BackupState.SYNCING.value})
