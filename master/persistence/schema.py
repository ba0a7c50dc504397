"""The master's tables (SQLAlchemy Core). Migrations in master/persistence/migrations
create them."""
from __future__ import annotations

from sqlalchemy import (
    BigInteger, Boolean, Column, Float, Index, Integer, MetaData, String, Table, Text, false,
)

metadata = MetaData()

datasets = Table(
    "datasets", metadata,
    Column("name", String(128), primary_key=True),
    Column("num_records", BigInteger, nullable=False),
    Column("shard_size", BigInteger, nullable=False),
    Column("num_epochs", Integer, nullable=False),
    Column("shuffle", Boolean, nullable=False),
    Column("seed", BigInteger, nullable=False),
    Column("lease_timeout_s", Float, nullable=False),
    Column("created_ms", BigInteger, nullable=False),
    Column("frontier", Integer, nullable=False),
    Column("cursor", BigInteger, nullable=False),
)

epochs = Table(
    "epochs", metadata,
    Column("dataset", String(128), primary_key=True),
    Column("epoch", Integer, primary_key=True),
    Column("started_ms", BigInteger, nullable=False),
    Column("finished_ms", BigInteger, nullable=False),
    Column("records_done", BigInteger, nullable=False),
    Column("shards_done", BigInteger, nullable=False),
    Column("handouts", BigInteger, nullable=False),
    Column("duplicates", BigInteger, nullable=False),
    Column("records_redone", BigInteger, nullable=False),
    Column("records_rehanded", BigInteger, nullable=False, server_default="0"),
    Column("requeues", Text, nullable=False),
    Column("quarantined_shards", BigInteger, nullable=False),
    Column("quarantined_records", BigInteger, nullable=False),
    Column("rehanded_shards", BigInteger, nullable=False),
    Column("max_handouts", Integer, nullable=False),
)

leases = Table(
    "leases", metadata,
    Column("lease_id", BigInteger, primary_key=True, autoincrement=False),
    Column("dataset", String(128), nullable=False),
    Column("epoch", Integer, nullable=False),
    Column("shard_index", BigInteger, nullable=False),
    Column("start_rec", BigInteger, nullable=False),
    Column("end_rec", BigInteger, nullable=False),
    Column("worker_id", String(32), nullable=False),
    Column("handed_ms", BigInteger, nullable=False),
    Column("deadline_ms", BigInteger, nullable=False),
    Column("records_done", BigInteger, nullable=False),
    Column("handout", Integer, nullable=False),
    Column("failures", Integer, nullable=False),
    Column("errors", Text, nullable=False),
    Column("state", String(16), nullable=False),  # doing, done, requeued, failed
    Column("cause", String(64), nullable=False),
    Column("ended_ms", BigInteger, nullable=False),
    Column("redo", Boolean, nullable=False, server_default=false()),
    Index("ix_leases_state", "state"),
    Index("ix_leases_dataset_epoch", "dataset", "epoch"),
)

pieces = Table(
    "pieces", metadata,
    Column("key", BigInteger, primary_key=True, autoincrement=False),
    Column("dataset", String(128), nullable=False),
    Column("epoch", Integer, nullable=False),
    Column("shard_index", BigInteger, nullable=False),
    Column("start_rec", BigInteger, nullable=False),
    Column("end_rec", BigInteger, nullable=False),
    Column("handouts", Integer, nullable=False),
    Column("failures", Integer, nullable=False),
    Column("errors", Text, nullable=False),
    Column("quarantined", Boolean, nullable=False),
    Column("redo", Boolean, nullable=False, server_default=false()),
)

workers = Table(
    "workers", metadata,
    Column("worker_id", String(32), primary_key=True),
    Column("num", BigInteger, nullable=False),
    Column("name", String(128), nullable=False),
    Column("labels", Text, nullable=False),
    Column("registered_ms", BigInteger, nullable=False),
    Column("state", String(16), nullable=False),  # alive, left, lost
    Column("reason", String(64), nullable=False),
    Column("ended_ms", BigInteger, nullable=False),
)

ps = Table(
    "ps", metadata,
    Column("idx", Integer, primary_key=True, autoincrement=False),
    Column("address", String(256), nullable=False),
    Column("data_address", String(256), nullable=False),
    Column("num_ps", Integer, nullable=False),
    Column("registered_ms", BigInteger, nullable=False),
    Column("incarnation", BigInteger, nullable=False),
    # the data plane's CURVE public key (Z85) when it is encrypted, else ''
    Column("data_public_key", String(40), nullable=False, server_default=""),
)

# PS replicas (master/ps/replicas.py): each index's generation and primary process, and its
# backups, one row per backup process
ps_generations = Table(
    "ps_generations", metadata,
    Column("idx", Integer, primary_key=True, autoincrement=False),
    Column("generation", BigInteger, nullable=False),
    Column("instance", String(64), nullable=False),
)

ps_backups = Table(
    "ps_backups", metadata,
    Column("instance", String(64), primary_key=True),
    Column("idx", Integer, nullable=False),
    Column("address", String(256), nullable=False),
    Column("data_address", String(256), nullable=False),
    Column("data_public_key", String(40), nullable=False),
    Column("state", String(16), nullable=False),  # syncing, in_sync
    Column("registered_ms", BigInteger, nullable=False),
)

# The PS layout (master/ps/layout.py): one row (id 1) for the job's slot count, the layout's
# version and size and a resize's target; each index's slot ranges ("0:342,853:1024", end
# exclusive); and the slot moves a resize planned that are not done yet, one row per slot.
ps_layout = Table(
    "ps_layout", metadata,
    Column("id", Integer, primary_key=True, autoincrement=False),
    Column("ps_slots", Integer, nullable=False),        # --ps-slots, fixed for the job
    Column("version", BigInteger, nullable=False),      # layout_version
    Column("num_ps", Integer, nullable=False),          # indices of the layout
    Column("target_num_ps", Integer, nullable=False),   # resize-ps's target
    Column("moves_planned", Integer, nullable=False),   # moves the current resize planned
    Column("resize_started_ms", BigInteger, nullable=False),  # 0: no resize on
    Column("changed_ms", BigInteger, nullable=False),
)

ps_slot_ranges = Table(
    "ps_slot_ranges", metadata,
    Column("idx", Integer, primary_key=True, autoincrement=False),
    Column("ranges", Text, nullable=False),
)

ps_slot_moves = Table(
    "ps_slot_moves", metadata,
    Column("slot", Integer, primary_key=True, autoincrement=False),
    Column("src", Integer, nullable=False),
    Column("dst", Integer, nullable=False),
    Column("phase", String(16), nullable=False),  # planned, copying, handover
    Column("planned_ms", BigInteger, nullable=False),
    Column("changed_ms", BigInteger, nullable=False),
)

events = Table(
    "events", metadata,
    Column("seq", BigInteger, primary_key=True, autoincrement=False),
    Column("time_ms", BigInteger, nullable=False),
    Column("kind", String(32), nullable=False),
    Column("worker_id", String(32), nullable=False),
    Column("dataset", String(128), nullable=False),
    Column("epoch", Integer, nullable=False),
    Column("shard_index", BigInteger, nullable=False),
    Column("cause", String(64), nullable=False),
    Column("detail", Text, nullable=False),
    Index("ix_events_kind", "kind"),  # the ledger reads the few ps_restored events
)

# The job a master drives (master/job/book.py), when it was started with a spec: one row (id
# 1) with the spec's text, the job's state, the policy's state, targets and decision counts
# (JSON), and one row per process launched for it, from the moment before its launch
# ('launching') to how it ended, so a master that takes over adopts or replaces each.
job = Table(
    "job", metadata,
    Column("id", Integer, primary_key=True, autoincrement=False),
    Column("name", String(64), nullable=False),
    Column("spec", Text, nullable=False),
    Column("state", String(16), nullable=False),  # running, finished, stopping, stopped
    Column("started_ms", BigInteger, nullable=False),  # t = 0 of the market trace
    Column("changed_ms", BigInteger, nullable=False),
    Column("policy", Text, nullable=False),     # master.scaling PolicyState, JSON
    Column("targets", Text, nullable=False),    # {"role/market": count}, JSON
    Column("decisions", Text, nullable=False),  # {reason: count}, JSON
    Column("launches", BigInteger, nullable=False),  # processes named so far
    Column("masters", Text, nullable=False),    # what launched processes are given
)

job_processes = Table(
    "job_processes", metadata,
    Column("name", String(128), primary_key=True),
    Column("role", String(16), nullable=False),    # master, ps, worker
    Column("market", String(64), nullable=False),
    Column("slot", Integer, nullable=False),       # a PS's index; -1 for a worker
    Column("engine_id", String(128), nullable=False),  # '' while launching
    Column("log", String(1024), nullable=False),
    # launching, running, preempting, stopping, exited, lost, failed (its launch)
    Column("state", String(16), nullable=False),
    Column("launched_ms", BigInteger, nullable=False),
    Column("ended_ms", BigInteger, nullable=False),
    Column("exit_code", Integer, nullable=True),
    Column("cause", String(64), nullable=False),  # why it ended: preempted, stopped, crashed, ...
    Index("ix_job_processes_state", "state"),
)

# The leader lease (one row, id 1): which master may commit. See master/ha/leader.py and
# master/ha/election.py; not written through batches, so not in TABLES.
leader = Table(
    "leader", metadata,
    Column("id", Integer, primary_key=True, autoincrement=False),
    Column("holder", String(64), nullable=False),   # '' when free
    Column("address", String(256), nullable=False),  # where the holder serves clients
    Column("term", BigInteger, nullable=False),      # +1 at every takeover
    Column("version", BigInteger, nullable=False),   # +1 at every renewal
    Column("renewed_ms", BigInteger, nullable=False),  # for people only (wall clock)
)

TABLES = {t.name: t for t in (datasets, epochs, leases, pieces, workers, ps, ps_generations,
                                ps_backups, ps_layout, ps_slot_ranges, ps_slot_moves, job,
                                job_processes)}


def drop_dataset(conn, name: str) -> None:
    """Delete every row of dataset `name`: leases, pieces, epochs, the spec (events stay)."""
    for table in (leases, pieces, epochs):
        conn.execute(table.delete().where(table.c.dataset == name))
    conn.execute(datasets.delete().where(datasets.c.name == name))
