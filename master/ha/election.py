"""Carries out the leader lease's decisions against the database, and fences every commit.

`Election.run` (a thread) reads the `leader` row, asks `LeaderLease` what to do, and does it:
take the row over (`UPDATE ... WHERE` the row is still what we observed, so two standbys
cannot both win), renew it, or give up. `fence(conn)` runs first inside every commit
transaction of the leader: it updates the row `WHERE holder = me AND term = my term` and
aborts the commit (`Deposed`) when no row matched. On SQLite the update takes the database's
write lock and on PostgreSQL the row's lock, both held until the commit ends, so a takeover
is ordered either before a commit (which then aborts) or after it (and the new leader's
`store.load()` sees it): a deposed leader never writes.

On PostgreSQL the leader's sessions also get `idle_in_transaction_session_timeout` and
`lock_timeout` of one lease, so a leader frozen inside a transaction (SIGSTOP, a paused VM)
loses its session, and with it its locks, instead of blocking the standby for ever. SQLite
has no such thing: a leader frozen inside a commit holds the file's write lock until it
continues or dies (docs/operations.md).
"""
from __future__ import annotations

import logging
import threading
import time
from typing import Callable

from sqlalchemy import bindparam, event, select, update
from sqlalchemy.engine import Connection, Engine

from ..persistence import schema
from .leader import Action, LeaderLease, LeaseRow, Leadership

log = logging.getLogger(__name__)
ROW = schema.leader.c.id == 1
# every commit's first statement, built once: a statement built per commit cost the master
# about 70 us of SQLAlchemy (construction and cache key) where executing it costs 15
FENCE = update(schema.leader).where(
    ROW, schema.leader.c.holder == bindparam("fence_holder"),
    schema.leader.c.term == bindparam("fence_term"),
).values(version=schema.leader.c.version)


class Deposed(Exception):
    """A commit found that another master holds the lease: nothing was written."""


class Election:
    def __init__(self, engine: Engine, lease: LeaderLease,
                 on_elected: Callable[[int], None], on_lost: Callable[[str], None]):
        self.engine = engine
        self.lease = lease
        self.on_elected = on_elected  # runs on a thread of its own: the lease keeps renewing
        self.on_lost = on_lost
        self.leader_address = ""  # the holder's address as last read ('' when none)
        if engine.dialect.name == "postgresql":
            self._bound_waits(int(lease.lease_s * 1000))

    def _bound_waits(self, ms: int) -> None:
        @event.listens_for(self.engine, "connect")
        def _timeouts(dbapi_conn, _record):
            with dbapi_conn.cursor() as cur:
                cur.execute(f"SET idle_in_transaction_session_timeout = {ms}")
                cur.execute(f"SET lock_timeout = {ms}")
            dbapi_conn.commit()

        self.engine.dispose()  # connections opened before this listener get no settings

    # ---- the row ------------------------------------------------------------------------------

    def read(self) -> LeaseRow:
        with self.engine.connect() as conn:
            row = conn.execute(select(schema.leader).where(ROW)).one()
        return LeaseRow(row.holder, row.address, row.term, row.version)

    def try_acquire(self, seen: LeaseRow) -> int | None:
        """Take the row over if it is still `seen`; the new term, or None if another won."""
        term = seen.term + 1
        with self.engine.begin() as conn:
            done = conn.execute(update(schema.leader).where(
                ROW, schema.leader.c.holder == seen.holder, schema.leader.c.term == seen.term,
                schema.leader.c.version == seen.version,
            ).values(holder=self.lease.holder, address=self.lease.address, term=term,
                     version=0, renewed_ms=_now_ms())).rowcount
        return term if done == 1 else None

    def _mine(self):
        return (ROW, schema.leader.c.holder == self.lease.holder,
                schema.leader.c.term == self.lease.term)

    def renew(self) -> bool:
        """Bump our row's version; False when the row is no longer ours."""
        with self.engine.begin() as conn:
            return conn.execute(update(schema.leader).where(*self._mine()).values(
                version=schema.leader.c.version + 1, renewed_ms=_now_ms())).rowcount == 1

    def release(self) -> None:
        """Free the row (a clean stop): a standby takes over at its next look."""
        if self.lease.role is not Leadership.LEADER:
            return
        with self.engine.begin() as conn:
            conn.execute(update(schema.leader).where(*self._mine()).values(
                holder="", version=schema.leader.c.version + 1, renewed_ms=_now_ms()))
        self.lease.lost()

    def fence(self, conn: Connection) -> None:
        """First statement of every commit: abort it unless the row is still ours."""
        matched = conn.execute(FENCE, {"fence_holder": self.lease.holder,
                                       "fence_term": self.lease.term}).rowcount
        if matched != 1:
            raise Deposed(f"another master took over the leader lease (this one had term "
                          f"{self.lease.term}); nothing of this commit was written")

    @property
    def serving(self) -> bool:
        return self.lease.serving

    # ---- the loop -----------------------------------------------------------------------------

    def step(self) -> bool:
        """One look at the row or one renewal; False once this master lost the lease."""
        lease = self.lease
        if lease.role is Leadership.STANDBY:
            row = self.read()
            self.leader_address = row.address if row.holder else ""
            if lease.observe(row) is Action.ACQUIRE:
                started = lease.clock()
                term = self.try_acquire(row)
                if term is not None:
                    lease.acquired(term, started)
                    self.leader_address = lease.address
                    log.info("took the leader lease (term %d, from %s)", term,
                             row.address or "nobody")
                    threading.Thread(target=self.on_elected, args=(term,), name="elected",
                                     daemon=True).start()
            return True
        if lease.role is not Leadership.LEADER:
            return False
        action = lease.due()
        if action is Action.RENEW:
            started = lease.clock()
            if self.renew():
                lease.renewed(started)
                return True
            return self._lose("another master took over the leader lease")
        if action is Action.STEP_DOWN:
            return self._lose(f"the leader lease could not be renewed within "
                              f"{lease.lease_s:g} s")
        return True

    def _lose(self, why: str) -> bool:
        self.lease.lost()
        self.leader_address = ""
        self.on_lost(why)
        return False

    def run(self, stop: threading.Event) -> None:
        while not stop.is_set():
            try:
                if not self.step():
                    return
            except Exception as exc:  # noqa: BLE001 - a database hiccup: the lease decides
                log.warning("leader lease: %s", exc)
                if self.lease.role is Leadership.LEADER and self.lease.due() is Action.STEP_DOWN:
                    self._lose(f"the leader lease could not be renewed within "
                               f"{self.lease.lease_s:g} s ({exc})")
                    return
            stop.wait(max(0.02, self.lease.next_poll()))


def _now_ms() -> int:
    return int(time.time() * 1000)
