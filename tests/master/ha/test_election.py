"""The election against a real database: one winner, renewals, and commits fenced by the row."""
from __future__ import annotations

import pytest
from sqlalchemy import select

from master.ha.election import Deposed, Election
from master.ha.leader import LeaderLease, Leadership
from master.persistence import schema
from master.persistence.batch import Batch
from master.persistence.store import Store


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def _master(url, name, clock, elected):
    store = Store(url)
    store.upgrade()
    lease = LeaderLease(name, f"{name}:1", 5.0, clock)
    election = Election(store.engine, lease, lambda term: elected.append((name, term)),
                        lambda why: elected.append((name, "lost")))
    store.fence = election.fence
    return store, election


def _batch(n):
    batch = Batch()
    batch.event(dict(seq=n, time_ms=0, kind="test", worker_id="", dataset="", epoch=-1,
                     shard_index=-1, cause="", detail=""))
    return batch


def _events(store):
    with store.engine.connect() as conn:
        return [r.seq for r in conn.execute(select(schema.events.c.seq).order_by("seq"))]


def _two_masters_one_leader_and_a_fenced_deposed_one(url):
    clock, elected = Clock(), []
    a_store, a = _master(url, "a", clock, elected)
    b_store, b = _master(url, "b", clock, elected)
    a.step()
    b.step()
    assert a.lease.role is Leadership.LEADER and b.lease.role is Leadership.STANDBY
    assert b.leader_address == "a:1"
    a_store.apply(_batch(1))  # the leader commits
    # a is frozen: no renewal for a whole lease on b's clock, so b takes over
    clock.now += 5.0
    b.step()
    assert b.lease.role is Leadership.LEADER and b.lease.term == a.lease.term + 1
    # a still believes it leads, but every commit of it is refused and writes nothing
    with pytest.raises(Deposed):
        a_store.apply(_batch(2))
    b_store.apply(_batch(3))
    assert _events(b_store) == [1, 3]
    # and its next renewal finds the row gone
    a.lease.renewed(clock.now)
    clock.now += 2.0
    assert a.step() is False and a.lease.role is Leadership.STOPPED
    assert ("a", "lost") in elected
    # a clean stop frees the row: another master takes it at its first look
    c_store, c = _master(url, "c", clock, elected)
    c.step()
    assert c.lease.role is Leadership.STANDBY
    b.release()
    c.step()
    assert c.lease.role is Leadership.LEADER
    for store in (a_store, b_store, c_store):
        store.close()


def test_sqlite(tmp_path):
    _two_masters_one_leader_and_a_fenced_deposed_one(f"sqlite:///{tmp_path / 'm.db'}")


def test_postgres(pg_url):
    _two_masters_one_leader_and_a_fenced_deposed_one(pg_url)
