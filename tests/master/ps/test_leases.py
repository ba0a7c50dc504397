"""Primary leases on the master (fake clock): when a primary may still answer, and what waits."""
from __future__ import annotations

import pytest

from master.core import Settings
from master.ps.leases import PrimaryLeases
from rpckit.errors import ServiceError
from tests.fakes import FakeClock
from tests.master.harness import Harness


def test_a_lease_runs_from_the_last_grant_or_the_master_start_plus_the_margin():
    clock = FakeClock(100.0)
    leases = PrimaryLeases(clock, lease_s=2.0, margin_s=0.5)
    # never granted in this run: an earlier master may have granted one just before it stopped
    assert leases.left(0) == 2.5
    clock.advance(1.0)
    assert leases.grant(0) == 2.0
    assert leases.left(0) == 2.5
    clock.advance(2.4)
    assert leases.left(0) == pytest.approx(0.1)
    clock.advance(0.1)
    assert leases.left(0) == 0.0
    # another primary holds no lease of its own yet; the start still bounds the old ones
    leases.new_primary(0)
    assert leases.left(0) == 0.0


def test_a_new_primary_is_not_bound_by_the_old_primarys_grant():
    clock = FakeClock(0.0)
    leases = PrimaryLeases(clock, lease_s=2.0, margin_s=0.5)
    clock.advance(10.0)
    leases.grant(3)
    leases.new_primary(3)
    assert leases.left(3) == 0.0 and leases.left(4) == 0.0


@pytest.fixture
def h():
    return Harness(Settings(ps_replicas=1, ps_lease_s=2.0))


def join(h, port, instance, index=0):
    joined = h.core.join_ps(f"h:{port}", f"tcp://h:{port + 1}", index, 1, "", instance)
    h.commit()
    return joined


def kinds(h):
    return [(e["kind"], e["cause"]) for e in h.store.events(0, 1000)]


def test_a_syncing_backup_takes_over_only_after_the_primarys_lease_ran_out(h):
    join(h, 10, "a")
    join(h, 20, "b")
    h.clock.advance(5.0)
    assert h.core.report_replicas(0, 1, "a", []) == 1  # a renewal: granted now
    incarnation = h.core.ps[0]["incarnation"]
    h.clock.advance(2.4)  # lease 2 s + margin 0.5 s: a may still answer
    assert not h.core.mark_ps_lost(0, incarnation, "down")
    assert h.core.replicas.primary_instance(0) == "a" and 0 not in h.core.ps_lost
    h.clock.advance(0.2)
    assert h.core.mark_ps_lost(0, incarnation, "down")
    h.commit()
    assert h.core.replicas.primary_instance(0) == "b" and h.core.replicas.generation(0) == 2
    assert ("ps_promoted", "not_in_sync") in kinds(h)
    # the old primary can renew no more
    with pytest.raises(ServiceError) as err:
        h.core.report_replicas(0, 1, "a", [])
    assert err.value.reason == "FENCED"


def test_an_in_sync_backup_is_promoted_at_once_whatever_the_lease(h):
    join(h, 10, "a")
    join(h, 20, "b")
    h.core.report_replicas(0, 1, "a", ["b"])  # granted now, and b in sync
    h.commit()
    # the fast path: a cannot answer a push without b's acknowledgement, so no wait
    assert h.core.promote_ps(0, h.core.ps[0]["incarnation"], "failing")
    h.commit()
    assert h.core.replicas.primary_instance(0) == "b"


def test_a_lost_primary_with_an_in_sync_backup_hands_over_at_once(h):
    join(h, 10, "a")
    join(h, 20, "b")
    h.core.report_replicas(0, 1, "a", ["b"])
    assert h.core.mark_ps_lost(0, h.core.ps[0]["incarnation"], "down")
    h.commit()
    assert h.core.replicas.primary_instance(0) == "b"
    assert ("ps_promoted", "in_sync") in kinds(h)


def test_a_new_process_replaces_a_primary_only_after_its_lease(h):
    join(h, 10, "a")
    h.clock.advance(5.0)
    h.core.report_replicas(0, 1, "a", [])
    h.clock.advance(3.0)
    # no backups: the primary is marked lost, and a new process may not replace it while a
    # renewal it sent just before going quiet could still be running
    assert h.core.mark_ps_lost(0, h.core.ps[0]["incarnation"], "down")
    h.clock.now -= 1.0  # (as if it renewed 1 s before it was found lost)
    h.core.ps_set.leases.grant(0)
    with pytest.raises(ServiceError) as err:
        join(h, 30, "c")
    assert (err.value.code, err.value.reason) == ("UNAVAILABLE", "PS_PRIMARY_LEASE")
    assert h.core.replicas.primary_instance(0) == "a"
    h.clock.advance(2.5)
    joined = join(h, 30, "c")
    assert (joined.generation, h.core.replicas.primary_instance(0)) == (2, "c")


def test_a_primary_restarted_at_its_address_without_a_backup_waits_for_its_old_lease(h):
    join(h, 10, "a")
    h.clock.advance(1.0)
    h.core.report_replicas(0, 1, "a", [])
    with pytest.raises(ServiceError) as err:
        join(h, 10, "a2")
    assert err.value.reason == "PS_PRIMARY_LEASE"
    h.clock.advance(2.5)
    assert join(h, 10, "a2").generation == 2


def test_after_a_master_restart_leases_count_from_the_restart(h):
    join(h, 10, "a")
    join(h, 20, "b")
    h.clock.advance(60.0)
    h.restart()  # it knows of no grant: one may have been given just before
    incarnation = h.core.ps[0]["incarnation"]
    assert not h.core.mark_ps_lost(0, incarnation, "down")
    h.clock.advance(2.5)
    assert h.core.mark_ps_lost(0, incarnation, "down")


def test_re_registering_the_same_primary_never_waits(h):
    join(h, 10, "a")
    h.core.report_replicas(0, 1, "a", [])
    assert join(h, 10, "a").generation == 1


def test_without_replicas_there_are_no_leases():
    h = Harness(Settings(ps_replicas=0))
    join(h, 10, "a")
    assert h.core.ps_set.leases is None
    assert join(h, 20, "b").generation == 2
