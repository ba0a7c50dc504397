"""How `elastic-master` starts and refuses to: what a failed start leaves behind."""
from __future__ import annotations

import socket

from master.core import Settings
from master.persistence.store import Store
from tests.master.harness import Harness


def test_a_port_in_use_fails_the_start_before_the_database_is_created(launcher, tmp_path):
    db = tmp_path / "never.db"
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        out = launcher.run("-m", "master", "--host", "127.0.0.1", "--port", str(port),
                           "--db", f"sqlite:///{db}")
    assert out.returncode == 1, out.stderr
    assert "cannot listen" in out.stderr
    assert not db.exists()


def test_a_metrics_port_in_use_fails_the_start_too(launcher, tmp_path):
    db = tmp_path / "never.db"
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        out = launcher.run("-m", "master", "--host", "127.0.0.1", "--port", "0",
                           "--metrics-port", str(port), "--db", f"sqlite:///{db}")
    assert out.returncode == 1, out.stderr
    assert "cannot serve metrics" in out.stderr
    assert not db.exists()


def test_a_start_with_other_ps_slots_than_the_jobs_layout_is_refused_and_changes_nothing(
        launcher, tmp_path):
    db = f"sqlite:///{tmp_path / 'job.db'}"
    h = Harness(Settings(ps_slots=64), url=db)
    h.core.register_ps("10.0.0.1:100", "tcp://10.0.0.1:101", 0, 1)  # the layout is recorded
    h.commit()
    before = h.store.load()
    h.store.close()
    out = launcher.run("-m", "master", "--host", "127.0.0.1", "--port", "0",
                       "--ps-slots", "128", "--db", db)
    assert out.returncode == 1, out.stderr
    assert "--ps-slots 128 but the job on this --db has a PS layout of 64 slots" in out.stderr
    assert "--ps-slots 64" in out.stderr  # the fix
    reader = Store(db)
    after = reader.load()
    reader.close()
    assert (after.ps_layout, after.max_event_seq, after.ps) == (
        before.ps_layout, before.max_event_seq, before.ps)
