"""Durable state through SQLAlchemy: schema migrations, snapshot at start, batched commits.

Any SQLAlchemy URL works; SQLite (the default, an embedded file) runs in WAL mode with
synchronous=FULL so that a committed batch survives a power cut, and PostgreSQL is tested
in CI. `apply()` writes a whole `Batch` in one transaction: when it returns, everything in the
batch is durable, which is what lets the master answer the calls that produced it.
"""
from __future__ import annotations

import logging
import time
from contextlib import closing
from pathlib import Path
from typing import Callable, Iterator

from alembic import command
from alembic.config import Config
from sqlalchemy import and_, bindparam, case, create_engine, event, func, select
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.pool import StaticPool

from . import schema
from .batch import Batch
from .snapshot import Snapshot

log = logging.getLogger(__name__)

MIGRATIONS = Path(__file__).resolve().parent / "migrations"


class StoreError(Exception):
    """The database cannot be opened or used; the message says which URL and why."""


def _safe_url(url: str) -> str:
    try:
        from sqlalchemy.engine import make_url

        return make_url(url).render_as_string(hide_password=True)
    except Exception:  # noqa: BLE001 - only for messages
        return "<unparseable URL>"


def _make_engine(url: str) -> Engine:
    if url.startswith("sqlite"):
        if ":memory:" in url or url in ("sqlite://", "sqlite:///"):
            engine = create_engine(
                url, poolclass=StaticPool, connect_args={"check_same_thread": False}
            )
        else:
            engine = create_engine(url, connect_args={"check_same_thread": False, "timeout": 30})

        @event.listens_for(engine, "connect")
        def _pragmas(dbapi_conn, _record):
            cur = dbapi_conn.cursor()
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA synchronous=FULL")  # acknowledged means on disk
            cur.execute("PRAGMA busy_timeout=30000")
            cur.close()

        return engine
    return create_engine(url, pool_pre_ping=True)


SQLITE_BUSY = 5  # and its extended codes (BUSY_SNAPSHOT, BUSY_RECOVERY, ...) in the low byte


def _sqlite_busy(exc: BaseException) -> bool:
    """Whether `exc` is SQLite's SQLITE_BUSY (its error code, not its message)."""
    code = getattr(getattr(exc, "orig", exc), "sqlite_errorcode", None)
    return code is not None and code & 0xFF == SQLITE_BUSY


# A commit's statements, built once (as `_update`'s are, per column set): building one per
# commit is SQLAlchemy Python (construction, coercion, cache key) costing more than running it.
_INSERTS = {name: table.insert()
            for name, table in {**schema.TABLES, "events": schema.events}.items()}
_DELETES = {name: table.delete().where(table.primary_key.columns[0].in_(
    bindparam("keys", expanding=True))) for name, table in schema.TABLES.items()
    if len(table.primary_key.columns) == 1}


class Store:
    def __init__(self, url: str):
        self.url = url
        try:
            self.engine = _make_engine(url)
            with self.engine.connect() as conn:
                conn.exec_driver_sql("SELECT 1")
        except Exception as exc:  # noqa: BLE001 - the CLI reports it and exits non-zero
            raise StoreError(f"cannot open database {_safe_url(url)}: {exc}") from exc
        self._updates = {}
        # set by the leader election: runs first in every commit and aborts it unless this
        # master still holds the leader lease (master/ha/election.py)
        self.fence: Callable[[Connection], None] | None = None

    # ---- schema -----------------------------------------------------------------------------

    def upgrade(self, attempts: int = 3, busy_s: float = 30.0) -> None:
        """Bring the schema to the newest migration (a no-op when it is there already).
        Masters started together on a fresh database race to create it: the loser's attempt
        fails, and its next one finds the schema there. While SQLite answers busy (the other
        master is still migrating: WAL gives up at once on a stale snapshot, whatever the busy
        timeout) it waits up to `busy_s`; any other error gets `attempts` tries."""
        failed = 0
        busy_until = time.monotonic() + busy_s
        while True:
            try:
                return self._upgrade()
            except Exception as exc:  # noqa: BLE001 - the last attempt's error is the answer
                if _sqlite_busy(exc) and time.monotonic() < busy_until:
                    time.sleep(0.5)
                    continue
                failed += 1
                if failed >= attempts:
                    raise
                time.sleep(0.5 * failed)

    def _upgrade(self) -> None:
        cfg = Config()
        cfg.set_main_option("script_location", str(MIGRATIONS))
        with self.engine.begin() as conn:
            cfg.attributes["connection"] = conn
            command.upgrade(cfg, "head")

    # ---- start-up ---------------------------------------------------------------------------

    def load(self) -> Snapshot:
        """Everything the core needs to continue: active leases only, never the history."""
        with self.engine.connect() as conn:

            def rows(stmt):
                return [dict(r._mapping) for r in conn.execute(stmt)]

            return Snapshot(
                datasets=rows(select(schema.datasets)),
                epochs=rows(select(schema.epochs)),
                leases=rows(select(schema.leases).where(schema.leases.c.state == "doing")),
                pieces=rows(select(schema.pieces)),
                workers=rows(select(schema.workers)),
                ps=rows(select(schema.ps)),
                ps_generations=rows(select(schema.ps_generations)),
                ps_backups=rows(select(schema.ps_backups)),
                ps_layout=rows(select(schema.ps_layout)),
                ps_slot_ranges=rows(select(schema.ps_slot_ranges)),
                ps_slot_moves=rows(select(schema.ps_slot_moves)),
                max_lease_id=conn.scalar(select(func.max(schema.leases.c.lease_id))) or 0,
                max_piece_key=conn.scalar(select(func.max(schema.pieces.c.key))) or 0,
                max_event_seq=conn.scalar(select(func.max(schema.events.c.seq))) or 0,
            )

    # ---- commits ----------------------------------------------------------------------------

    def apply(self, batch: Batch) -> None:
        """Commit the whole batch in one transaction; raises if it did not commit."""
        with self.engine.begin() as conn:
            if self.fence is not None:
                self.fence(conn)
            for dataset in batch.drops:  # first: the batch's later rows may re-create it
                schema.drop_dataset(conn, dataset)
            for name, table in schema.TABLES.items():
                keys = batch.deletes[name]
                if keys:
                    conn.execute(_DELETES[name], {"keys": list(keys)})
                if batch.inserts[name]:
                    conn.execute(_INSERTS[name], list(batch.inserts[name].values()))
                if batch.updates[name]:
                    self._update(conn, table, batch.updates[name])
            if batch.events:
                conn.execute(_INSERTS["events"], batch.events)

    def _update(self, conn, table, updates: dict) -> None:
        # executemany needs one statement per column set; a batch has only a few distinct sets
        pks = [c.name for c in table.primary_key.columns]
        groups: dict[tuple, list[dict]] = {}
        for key, row in updates.items():
            keyvals = key if isinstance(key, tuple) else (key,)
            params = {f"pk_{n}": v for n, v in zip(pks, keyvals)}
            params.update(row)
            groups.setdefault(tuple(sorted(row)), []).append(params)
        for columns, params in groups.items():
            stmt = self._updates.get((table.name, columns))
            if stmt is None:
                where = [table.c[n] == bindparam(f"pk_{n}") for n in pks]
                stmt = table.update().where(*where).values(
                    {c: bindparam(c) for c in columns}
                )
                self._updates[(table.name, columns)] = stmt
            conn.execute(stmt, params)

    # ---- reads ------------------------------------------------------------------------------

    def lookup_leases(self, lease_ids: list[int]) -> list[dict]:
        """(lease_id, dataset, epoch, worker_id) of these leases: one query, however many."""
        ids = sorted({i for i in lease_ids if 0 < i < 1 << 63})
        if not ids:
            return []
        lz = schema.leases.c
        with self.engine.connect() as conn:
            rows = conn.execute(select(lz.lease_id, lz.dataset, lz.epoch, lz.worker_id)
                                .where(lz.lease_id.in_(ids)))
            return [dict(r._mapping) for r in rows]

    def events(self, since: int, limit: int) -> list[dict]:
        with closing(self.iter_events(since, limit)) as rows:
            return list(rows)

    def iter_events(self, since: int, limit: int) -> Iterator[dict]:
        """Events with seq > since, oldest first, streamed: a reader that stops early (a page
        full of bytes) does not make the database send the rest. Close it when done."""
        with self.engine.connect().execution_options(stream_results=True, yield_per=256) as conn:
            stmt = (
                select(schema.events)
                .where(schema.events.c.seq > since)
                .order_by(schema.events.c.seq)
                .limit(limit)
            )
            for r in conn.execute(stmt):
                yield dict(r._mapping)

    def leases_of(self, dataset: str) -> list[dict]:
        """Every lease ever handed out for `dataset` (audits and the goodput ledger)."""
        with self.engine.connect() as conn:
            stmt = select(schema.leases).where(schema.leases.c.dataset == dataset)
            return [dict(r._mapping) for r in conn.execute(stmt.order_by(schema.leases.c.lease_id))]

    def iter_leases(self, dataset: str, after: int, limit: int) -> Iterator[dict]:
        """`dataset`'s leases with lease_id > after, oldest first, streamed (GetLeases pages
        them as iter_events does). Close it when done."""
        with self.engine.connect().execution_options(stream_results=True, yield_per=256) as conn:
            lz = schema.leases.c
            stmt = (select(schema.leases).where(lz.dataset == dataset, lz.lease_id > after)
                    .order_by(lz.lease_id).limit(limit))
            for r in conn.execute(stmt):
                yield dict(r._mapping)

    def lease_totals(self, dataset: str = "") -> list[dict]:
        """Per (dataset, epoch): records handed out, redone, done, done on the first try."""
        lz = schema.leases.c
        size = lz.end_rec - lz.start_rec
        done = case((lz.state == "done", size), else_=lz.records_done)
        stmt = select(
            lz.dataset, lz.epoch,
            func.count().label("handouts"),
            func.sum(size).label("records_handed"),
            func.sum(case((lz.redo, size), else_=0)).label("records_redone"),
            func.sum(case((lz.handout > 1, size), else_=0)).label("records_rehanded"),
            func.sum(case((lz.state == "doing", 0), else_=done)).label("records_done"),
            func.sum(case((and_(lz.handout == 1, lz.state != "doing"), done),
                          else_=0)).label("records_first_try"),
        ).group_by(lz.dataset, lz.epoch).order_by(lz.dataset, lz.epoch)
        if dataset:
            stmt = stmt.where(lz.dataset == dataset)
        with self.engine.connect() as conn:
            return [{k: (int(v) if k != "dataset" else v) for k, v in r._mapping.items()}
                    for r in conn.execute(stmt)]

    def events_of_kind(self, kind: str, limit: int = 10_000) -> list[dict]:
        """The newest `limit` events of `kind`, oldest first (ix_events_kind)."""
        ev = schema.events
        with self.engine.connect() as conn:
            rows = conn.execute(select(ev).where(ev.c.kind == kind)
                                .order_by(ev.c.seq.desc()).limit(limit))
            return [dict(r._mapping) for r in reversed(list(rows))]

    def leases_between(self, from_ms: int, to_ms: int) -> dict[int, int]:
        """{lease_id: records acknowledged} of the leases held at some time in
        [from_ms, to_ms]: handed out by its end, and still held or ended after its start."""
        lz = schema.leases.c
        acked = case((lz.state == "done", lz.end_rec - lz.start_rec), else_=lz.records_done)
        stmt = select(lz.lease_id, acked.label("acked")).where(
            lz.handed_ms <= to_ms, (lz.state == "doing") | (lz.ended_ms >= from_ms))
        with self.engine.connect() as conn:
            return {r.lease_id: int(r.acked) for r in conn.execute(stmt) if r.acked}

    def ps_slots(self) -> int:
        """The job's --ps-slots as its layout recorded it (0: no layout yet)."""
        with self.engine.connect() as conn:
            return conn.scalar(select(schema.ps_layout.c.ps_slots)) or 0

    def job(self) -> tuple[dict | None, list[dict]]:
        """The job row (None: this master drives no job) and its processes, every one ever
        launched (a job launches a bounded number: master/job/book.py)."""
        with self.engine.connect() as conn:
            row = conn.execute(select(schema.job)).first()
            procs = conn.execute(select(schema.job_processes)
                                 .order_by(schema.job_processes.c.launched_ms))
            return (dict(row._mapping) if row else None), [dict(r._mapping) for r in procs]

    def workers_all(self) -> list[dict]:
        with self.engine.connect() as conn:
            return [dict(r._mapping) for r in conn.execute(select(schema.workers))]

    def close(self) -> None:
        self.engine.dispose()
