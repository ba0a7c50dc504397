"""The SQL store: migrations match the schema, batches round-trip, bad URLs are refused."""
from __future__ import annotations

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext

from master.core import MasterCore
from master.persistence.batch import Batch
from master.persistence.schema import metadata
from master.persistence.store import Store, StoreError
from tests.fakes import FakeClock


def test_migrations_produce_exactly_the_schema(tmp_path):
    store = Store(f"sqlite:///{tmp_path}/m.db")
    store.upgrade()
    store.upgrade()  # idempotent
    with store.engine.connect() as conn:
        diff = compare_metadata(MigrationContext.configure(conn), metadata)
    assert diff == [], f"master/persistence/schema.py and the migrations disagree: {diff}"


def test_sqlite_is_in_wal_mode_with_full_sync(tmp_path):
    store = Store(f"sqlite:///{tmp_path}/m.db")
    with store.engine.connect() as conn:
        assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
        assert conn.exec_driver_sql("PRAGMA synchronous").scalar() == 2  # FULL


def test_batch_merges_changes_to_one_row():
    b = Batch()
    b.insert("leases", 1, {"a": 1, "b": 2})
    b.update("leases", 1, {"b": 3})
    b.update("leases", 2, {"x": 1})
    b.update("leases", 2, {"y": 2})
    b.insert("pieces", 7, {"k": 1})
    b.delete("pieces", 7)
    b.delete("pieces", 8)
    assert b.inserts["leases"] == {1: {"a": 1, "b": 3}}
    assert b.updates["leases"] == {2: {"x": 1, "y": 2}}
    assert b.inserts["pieces"] == {} and b.deletes["pieces"] == {8}
    assert b and not Batch()


def test_a_failed_commit_writes_nothing(tmp_path):
    store = Store(f"sqlite:///{tmp_path}/m.db")
    store.upgrade()
    core = MasterCore(clock=FakeClock())
    core.register_worker("a", {})
    batch = core.journal.swap()
    batch.insert("workers", "w-1", dict(batch.inserts["workers"]["w-1"]))
    batch.events.append(dict(batch.events[-1]))  # same seq twice: the commit must fail whole
    with pytest.raises(Exception):
        store.apply(batch)
    snap = store.load()
    assert snap.workers == [] and snap.max_event_seq == 0


@pytest.mark.parametrize(
    "url,words",
    [
        ("sqlite:////nonexistent-dir/sub/m.db", "cannot open database"),
        ("nosuchdriver://x/y", "cannot open database"),
        ("postgresql+psycopg://u:secret@127.0.0.1:1/db", "cannot open database"),
    ],
)
def test_bad_urls_are_refused_with_the_reason(url, words):
    with pytest.raises(StoreError) as info:
        Store(url)
    assert words in str(info.value)
    assert "secret" not in str(info.value)


@pytest.mark.postgres
def test_migrations_produce_exactly_the_schema_on_postgres(pg_url):
    store = Store(pg_url)
    store.upgrade()
    with store.engine.connect() as conn:
        diff = compare_metadata(MigrationContext.configure(conn), metadata)
    assert diff == []
    store.close()


def test_upgrade_from_0001_keeps_and_converts_existing_rows(tmp_path):
    from alembic import command
    from alembic.config import Config
    from sqlalchemy import text

    from master.persistence.store import MIGRATIONS

    url = f"sqlite:///{tmp_path}/old.db"
    store = Store(url)
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    with store.engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "0001")
        conn.execute(text(
            "INSERT INTO epochs VALUES ('d', 0, 1, 0, 10, 1, 2, 0, 7, '{}', 0, 0, 1, 2)"))
        conn.execute(text(
            "INSERT INTO leases VALUES (1, 'd', 0, 0, 0, 10, 'w-1', 1, 2, 0, 2, 0, '[]', "
            "'doing', '', 0)"))
    store.upgrade()
    snap = store.load()
    assert snap.epochs[0]["records_rehanded"] == 7 and snap.leases[0]["redo"]
