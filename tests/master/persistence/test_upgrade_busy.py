"""Masters started together on a fresh SQLite database race to migrate it; the loser sees
SQLITE_BUSY (under WAL at once, whatever the busy timeout) and must wait for the winner rather
than exit. The busy answer is told by SQLite's error code, not by its message."""
from __future__ import annotations

import sqlite3

import pytest

from master.persistence.store import Store, _sqlite_busy


def busy_error(tmp_path) -> sqlite3.OperationalError:
    """A real SQLITE_BUSY: a write while another connection holds the database exclusively."""
    path = tmp_path / "locked.db"
    holder = sqlite3.connect(path)
    holder.execute("create table t(a)")
    holder.commit()
    holder.execute("begin exclusive")
    try:
        sqlite3.connect(path, timeout=0).execute("insert into t values (1)")
    except sqlite3.OperationalError as exc:
        return exc
    finally:
        holder.rollback()
        holder.close()
    raise AssertionError("no busy error")


def test_sqlite_busy_is_told_by_its_code(tmp_path):
    exc = busy_error(tmp_path)
    assert _sqlite_busy(exc)
    assert not _sqlite_busy(sqlite3.OperationalError("database is locked"))  # no code: not told
    assert not _sqlite_busy(ValueError("x"))


class Racing(Store):
    """A store whose first migrations meet the other master's (a real busy error each time)."""

    def __init__(self, url, busy: int, error):
        super().__init__(url)
        self.busy, self.error, self.tries = busy, error, 0

    def _upgrade(self):
        self.tries += 1
        if self.tries <= self.busy:
            raise self.error
        return super()._upgrade()


def test_a_busy_database_is_waited_for_past_the_attempts(tmp_path):
    store = Racing(f"sqlite:///{tmp_path / 'm.db'}", busy=4, error=busy_error(tmp_path))
    store.upgrade(attempts=1, busy_s=30)
    assert store.tries == 5 and store.ps_slots() in (0, None)
    store.close()


def test_waiting_for_a_busy_database_is_bounded(tmp_path):
    store = Racing(f"sqlite:///{tmp_path / 'm.db'}", busy=10**6, error=busy_error(tmp_path))
    with pytest.raises(sqlite3.OperationalError):
        store.upgrade(attempts=1, busy_s=1.0)
    assert 2 <= store.tries <= 4
    store.close()


def test_other_errors_get_only_the_attempts(tmp_path):
    store = Racing(f"sqlite:///{tmp_path / 'm.db'}", busy=10**6, error=RuntimeError("broken"))
    with pytest.raises(RuntimeError):
        store.upgrade(attempts=2, busy_s=30)
    assert store.tries == 2
    store.close()
