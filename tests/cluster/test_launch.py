"""The process launcher: ready lines, ports, signals, restarts, and nothing left running."""
from __future__ import annotations

import os
import signal
import sys

import psutil
import pytest

from cluster.launch import Launcher, LaunchError, child_env
from protos import master_pb2 as pb

pytestmark = pytest.mark.slow

SERVER = ("import sys, time; print('fake listening on 127.0.0.1:4321', flush=True); "
          "print('later line', flush=True); time.sleep(120)")


def _running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_the_port_comes_from_the_ready_line_and_close_kills_even_a_stopped_child(tmp_path):
    with Launcher(tmp_path) as launcher:
        proc = launcher.python("-c", SERVER, name="fake", ready=r"listening on \S+:(?P<port>\d+)")
        assert proc.port == 4321 and proc.address == "127.0.0.1:4321"
        assert proc.wait_for("later").group(0) == "later"
        proc.pause()
        pid = proc.pid
    assert not _running(pid)
    assert "later line" in proc.output()


def test_a_start_that_fails_kills_the_child_and_says_why(tmp_path):
    with Launcher(tmp_path) as launcher:
        with pytest.raises(LaunchError, match="exited with 3"):
            launcher.python("-c", "print('no luck'); raise SystemExit(3)", name="bad",
                            ready="listening on")
        with pytest.raises(LaunchError, match="still running"):
            launcher.python("-c", "import time; time.sleep(120)", name="mute",
                            ready="listening on", timeout=0.5)
        assert all(not p.alive for p in launcher.started)


def test_a_child_runs_on_the_cpus_it_is_given(tmp_path):
    cpus = {min(os.sched_getaffinity(0))}
    with Launcher(tmp_path) as launcher:
        proc = launcher.python("-c", "import os; print(sorted(os.sched_getaffinity(0)))",
                               name="pinned", cpus=cpus)
        assert proc.wait(30) == 0
    assert proc.output().strip() == str(sorted(cpus))


def test_children_get_no_elastic_ps_settings_but_the_ones_given(monkeypatch):
    monkeypatch.setenv("ELASTIC_PS_PORT", "1")
    env = child_env(ELASTIC_PS_DB="sqlite://")
    assert "ELASTIC_PS_PORT" not in env and env["ELASTIC_PS_DB"] == "sqlite://"


def test_a_master_restarts_on_the_same_port_and_database(launcher):
    master = launcher.master()
    port, db = master.port, master.db
    master.stub().CreateDataset(pb.DatasetSpec(name="d", num_records=10, shard_size=5,
                                               num_epochs=1), timeout=10)
    master.restart()
    assert master.port == port and master.db == db and master.starts == 2
    assert master.dataset("d").spec.num_records == 10
    assert master.terminate() == 0
    assert master.kill() == 0  # already gone: its exit code again


def test_sigterm_reaches_a_stopped_child(tmp_path):
    with Launcher(tmp_path) as launcher:
        proc = launcher.python("-c", SERVER, name="fake", ready="listening on")
        proc.pause()
        assert proc.terminate(timeout=10) == -signal.SIGTERM
    assert sys.executable in proc.argv
