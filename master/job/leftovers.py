"""The job's processes that outlived every master, and how `elastic-job run` stops them.

The leader stops what it launched when the job ends, and a leader that dies hands it to a
standby. When every master is gone (killed, crashed, or stopped at once by a second Ctrl-C)
nobody would: `elastic-job run` then reads the processes the job's database lists as live (a
row is written before each launch, its engine id after), adopts them with an engine of the
job's kind on the job's folder (a launch never confirmed is found by name, as a standby finds
it) and stops them: SIGTERM, SIGKILL after the engine's stop grace. Then it records each
in the database as a leader would have: its row ended (`exited`, cause `masters_lost`, its
exit status) and a `node_exited` event. Only rows still live are changed, in one transaction,
and only once every master is gone, so no master writes beside it. The job stays `running`:
a later `elastic-job run` on the database continues it, its leader launching the processes
anew (a worker that exited 0 on our SIGTERM is not taken for one that finished the data).
"""
from __future__ import annotations

import json
import logging
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from engines.port import EventKind

from ..states import EventKind as JobEvent
from .book import LIVE, ProcState
from .leading import local_engine, ray_engine

log = logging.getLogger(__name__)
CAUSE = "masters_lost"  # why a process stopped here ended (its row, its node_exited event)


class Unreadable(Exception):
    """The job's database could not be read: its processes may still run."""


@dataclass(frozen=True)
class Stopped:
    """A process of the job that was still running, and how it ended once stopped (`code`:
    its exit status, negative for a signal; None: the engine could not read it)."""

    role: str
    name: str
    market: str
    id: str
    code: int | None

    def to_dict(self) -> dict:
        return asdict(self)

    def describe(self) -> str:
        return f"{self.name} ({self.role}, {self.market}, exit {self.code})"


def _on_db(db: str, fn):
    """`fn(conn)` in one transaction on `db`; Unreadable when it cannot be reached."""
    from sqlalchemy import create_engine
    from sqlalchemy.exc import SQLAlchemyError

    try:
        engine = create_engine(db)
    except (SQLAlchemyError, ValueError, ImportError) as exc:
        raise Unreadable(f"{exc.__class__.__name__}: {exc}") from exc
    try:
        with engine.begin() as conn:
            return fn(conn)
    except SQLAlchemyError as exc:
        raise Unreadable(f"{exc.__class__.__name__}: {exc}") from exc
    finally:
        engine.dispose()


def live_rows(db: str) -> list[dict]:
    """The rows of `job_processes` in a live state (launching, running, preempting,
    stopping): what the masters had not seen end. Unreadable when the database cannot be."""
    from sqlalchemy import inspect, select

    from master.persistence import schema

    table = schema.job_processes

    def read(conn) -> list[dict]:
        if not inspect(conn).has_table(table.name):
            return []  # the masters died before the job began: nothing launched
        query = select(table).where(table.c.state.in_([str(s) for s in LIVE]))
        return [dict(r._mapping) for r in conn.execute(query.order_by(table.c.name))]
    return _on_db(db, read)


def record_stopped(db: str, stopped: list[Stopped]) -> None:
    """Each process stopped here ended in its row (cause `masters_lost`) and in a
    `node_exited` event, as the leader records an end; one transaction."""
    from sqlalchemy import func, insert, select, update

    from master.persistence import schema

    table, events = schema.job_processes, schema.events

    def write(conn) -> None:
        now = int(time.time() * 1000)
        seq = conn.scalar(select(func.max(events.c.seq))) or 0
        for proc in stopped:
            state = ProcState.EXITED if proc.code is not None else ProcState.LOST
            changed = conn.execute(update(table).where(
                table.c.name == proc.name, table.c.state.in_([str(s) for s in LIVE])).values(
                state=str(state), exit_code=proc.code, cause=CAUSE, ended_ms=now)).rowcount
            if not changed:
                continue
            seq += 1
            detail = {"role": proc.role, "market": proc.market, "name": proc.name,
                      "code": proc.code}
            conn.execute(insert(events).values(
                seq=seq, time_ms=now, kind=str(JobEvent.NODE_EXITED), worker_id="",
                dataset="", epoch=-1, shard_index=-1, cause=CAUSE,
                detail=json.dumps(detail, sort_keys=True)))
    _on_db(db, write)


def job_engine(spec, workdir: Path):
    """An engine of the job's kind on its folder, to adopt and stop what the leader's
    launched (the same stop grace; no market trace: it launches nothing)."""
    if spec.engine == "ray":
        return ray_engine(spec, workdir)
    return local_engine(spec, workdir)


def stop_leftovers(spec, workdir: Path, rows: list[dict]) -> list[Stopped]:
    """Adopt each process `rows` lists that still runs and stop it (graceful; SIGKILL after
    the engine's grace). Those stopped, with how they ended."""
    if not rows:
        return []
    from .book import Proc

    engine = job_engine(spec, workdir)
    try:
        running = []
        for row in rows:
            proc = Proc(**{k: row[k] for k in Proc.__dataclass_fields__})
            handle = proc.handle() if proc.engine_id else \
                engine.find(proc.role, proc.name, proc.market)
            if handle is not None and engine.adopt(handle):
                running.append(handle)
        ends = engine.stop_all(graceful=True, timeout=engine.stop_grace_s + 10)
        codes = {e.handle.id: e.code for e in ends
                 if e.kind in (EventKind.EXITED, EventKind.LOST)}
        return [Stopped(h.role, h.name, h.market, h.id, codes.get(h.id)) for h in running]
    finally:
        engine.close()
