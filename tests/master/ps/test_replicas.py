"""PS replicas on the master: roles, promotion, generations, fencing, durability (fake clock)."""
from __future__ import annotations

import pytest

from master.core import Settings
from master.ps.replicas import ReplicaRole
from rpckit.errors import ServiceError
from tests.master.harness import Harness


@pytest.fixture
def h():
    return Harness(Settings(ps_replicas=1))


def join(h, port, instance, index=0, num_ps=1):
    joined = h.core.join_ps(f"h:{port}", f"tcp://h:{port + 1}", index, num_ps, "", instance)
    h.commit()
    return joined


def refusal(fn):
    with pytest.raises(ServiceError) as err:
        fn()
    return err.value.code, err.value.reason


def kinds(h):
    return [(e["kind"], e["cause"]) for e in h.store.events(0, 1000)]


def test_second_process_of_an_index_joins_as_a_backup_and_a_third_is_refused(h):
    first = join(h, 10, "a")
    assert (first.role, first.generation) == (ReplicaRole.PRIMARY, 1)
    second = join(h, 20, "b")
    assert (second.role, second.generation) == (ReplicaRole.BACKUP, 1)
    assert second.primary["address"] == "h:10"
    assert refusal(lambda: join(h, 30, "c")) == ("FAILED_PRECONDITION", "PS_REPLICAS_FULL")
    # re-registrations keep their roles and the generation
    assert join(h, 10, "a").role == ReplicaRole.PRIMARY
    assert join(h, 20, "b").role == ReplicaRole.BACKUP
    assert h.core.replicas.generation(0) == 1
    assert [b["state"] for b in h.core.replicas.backups_of(0)] == ["syncing"]


def test_without_replicas_a_new_process_replaces_the_primary_and_bumps_the_generation():
    h = Harness(Settings(ps_replicas=0))
    join(h, 10, "a")
    joined = join(h, 20, "b")
    assert (joined.role, joined.generation) == (ReplicaRole.PRIMARY, 2)
    assert h.core.ps[0]["address"] == "h:20" and not h.core.replicas.backups_of(0)


def test_only_an_in_sync_backup_is_promoted_on_failover(h):
    join(h, 10, "a")
    join(h, 20, "b")
    incarnation = h.core.ps[0]["incarnation"]
    assert not h.core.promote_ps(0, incarnation, "failing")  # b is still syncing
    assert h.core.report_replicas(0, 1, "a", ["b"]) == 1
    h.commit()
    assert h.core.promote_ps(0, incarnation, "failing")
    h.commit()
    assert h.core.ps[0]["address"] == "h:20" and h.core.replicas.generation(0) == 2
    assert h.core.replicas.primary_instance(0) == "b" and not h.core.replicas.backups_of(0)
    assert ("ps_promoted", "in_sync") in kinds(h) and ("ps_lost", "failover") in kinds(h)
    # the deposed primary is fenced: it may no longer say who is in sync
    assert refusal(lambda: h.core.report_replicas(0, 1, "a", [])) == (
        "FAILED_PRECONDITION", "FENCED")
    # ... and when it comes back it joins as a backup of the new primary
    back = join(h, 10, "a")
    assert (back.role, back.generation, back.primary["address"]) == (ReplicaRole.BACKUP, 2, "h:20")


def test_lost_primary_without_an_in_sync_backup_hands_over_to_a_syncing_one(h):
    join(h, 10, "a")
    join(h, 20, "b")
    h.clock.advance(2.5)  # once a's lease must have run out (tests/master/ps/test_leases.py)
    assert h.core.mark_ps_lost(0, h.core.ps[0]["incarnation"], "down")
    h.commit()
    assert h.core.replicas.primary_instance(0) == "b" and 0 not in h.core.ps_lost
    assert ("ps_promoted", "not_in_sync") in kinds(h)


def test_a_primary_restarted_at_its_address_lets_its_in_sync_backup_take_over(h):
    join(h, 10, "a")
    join(h, 20, "b")
    h.core.report_replicas(0, 1, "a", ["b"])
    again = join(h, 10, "a2")  # same address, another process
    assert (again.role, again.generation, again.primary["address"]) == (
        ReplicaRole.BACKUP, 2, "h:20")
    assert ("ps_promoted", "restarted") in kinds(h)


def test_the_primary_reports_in_sync_and_dropped_backups(h):
    join(h, 10, "a")
    join(h, 20, "b")
    h.core.report_replicas(0, 1, "a", ["b"])
    assert [b["state"] for b in h.core.replicas.backups_of(0)] == ["in_sync"]
    h.core.report_replicas(0, 1, "a", [])
    h.commit()
    assert [b["state"] for b in h.core.replicas.backups_of(0)] == ["syncing"]
    assert [c for k, c in kinds(h) if k == "ps_backup"] == ["joined", "in_sync", "syncing"]
    assert refusal(lambda: h.core.report_replicas(0, 7, "a", [])) == (
        "FAILED_PRECONDITION", "FENCED")


def test_a_lost_backup_frees_its_place(h):
    join(h, 10, "a")
    join(h, 20, "b")
    assert h.core.lose_ps_backup(0, "b", "down")
    assert not h.core.lose_ps_backup(0, "b", "down")
    h.commit()
    assert join(h, 30, "c").role == ReplicaRole.BACKUP


def test_generations_and_roles_survive_a_master_restart(h):
    join(h, 10, "a")
    join(h, 20, "b")
    h.core.report_replicas(0, 1, "a", ["b"])
    h.commit()
    h.restart()
    assert h.core.replicas.generation(0) == 1 and h.core.replicas.primary_instance(0) == "a"
    assert [(b["instance"], b["state"]) for b in h.core.replicas.backups_of(0)] == [
        ("b", "in_sync")]
    assert h.core.promote_ps(0, h.core.ps[0]["incarnation"], "failing")
    h.commit()
    h.restart()
    assert h.core.replicas.generation(0) == 2 and h.core.ps[0]["address"] == "h:20"


def test_bad_instances_are_refused_and_change_nothing(h):
    assert refusal(lambda: join(h, 10, "x" * 65))[0] == "INVALID_ARGUMENT"
    assert refusal(lambda: join(h, 10, "a\n"))[0] == "INVALID_ARGUMENT"
    assert h.core.list_ps()[0] == [] and h.core.replicas.generation(0) == 0
