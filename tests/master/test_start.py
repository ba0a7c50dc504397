"""How `elastic-master` starts and refuses to: what a failed start leaves behind."""
from __future__ import annotations

import socket


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
