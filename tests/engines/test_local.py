"""The local engine with real processes: exit codes, stops, market capacity (refused launches,
notices, SIGKILL after the grace), adoption by a second engine, nothing left running."""
from __future__ import annotations

import signal
import sys
import time

import pytest

from engines import process
from engines.local import LocalEngine
from engines.port import EventKind, Handle, LaunchFailed, Refusal

SLEEP = [sys.executable, "-c", "import time; time.sleep(60)"]
# exits 0 on SIGTERM, as a worker handing its leases back does
POLITE = [sys.executable, "-c",
          "import signal, sys, time\n"
          "signal.signal(signal.SIGTERM, lambda *a: sys.exit(0))\n"
          "print('ready', flush=True)\n"
          "time.sleep(60)"]
# ignores SIGTERM: only SIGKILL ends it
STUBBORN = [sys.executable, "-c",
            "import signal, time\n"
            "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
            "print('ready', flush=True)\n"
            "time.sleep(60)"]


class Clock:
    def __init__(self, t: float = 1000.0):
        self.t = t

    def __call__(self) -> float:
        return self.t


def env() -> dict[str, str]:
    return process.clean_env()


def wait_events(engine: LocalEngine, n: int, kinds=(EventKind.EXITED, EventKind.LOST),
                timeout: float = 30.0) -> list:
    """Poll until `n` events of `kinds` came (bounded), return those."""
    seen = []
    deadline = time.monotonic() + timeout
    while len(seen) < n and time.monotonic() < deadline:
        seen += [e for e in engine.poll() if e.kind in kinds]
        time.sleep(0.05)
    return seen


def wait_ready(handle: Handle, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if "ready" in open(handle.log).read():
            return
        time.sleep(0.02)
    raise AssertionError(f"{handle.name} printed no ready line")


@pytest.fixture
def engine(tmp_path):
    engine = LocalEngine(tmp_path / "local", stop_grace_s=20)
    yield engine
    engine.stop_all(graceful=False, timeout=20)
    engine.close()


def test_exit_codes_a_graceful_stop_and_a_kill(engine):
    ok = engine.launch("worker", "ok", "spot", [sys.executable, "-c", "raise SystemExit(3)"],
                       env())
    missing = engine.launch("worker", "missing", "spot", ["no-such-command-here"], env())
    polite = engine.launch("worker", "polite", "spot", POLITE, env())
    killed = engine.launch("worker", "killed", "spot", SLEEP, env())
    started = [e for e in engine.events() if e.kind is EventKind.STARTED]
    assert [e.handle.name for e in started] == ["ok", "missing", "polite", "killed"]
    wait_ready(polite)
    engine.stop(polite, graceful=True)
    engine.stop(killed, graceful=False)
    codes = {e.handle.name: e.code for e in wait_events(engine, 4)}
    assert codes == {"ok": 3, "missing": 127, "polite": 0, "killed": -signal.SIGKILL}
    assert engine.running() == []


def test_an_empty_command_is_refused(engine):
    with pytest.raises(LaunchFailed) as err:
        engine.launch("worker", "w", "spot", [], env())
    assert err.value.reason is Refusal.START_FAILED
    assert engine.running() == []


def test_a_market_beyond_its_capacity_refuses_launches_and_preempts_the_newest(tmp_path):
    clock = Clock()
    limits = {"spot": 2}
    engine = LocalEngine(tmp_path / "local", capacity=lambda m, t: limits.get(m),
                         preempt_grace_s=30, clock=clock)
    try:
        old = engine.launch("worker", "old", "spot", POLITE, env())
        new = engine.launch("worker", "new", "spot", STUBBORN, env())
        with pytest.raises(LaunchFailed) as err:
            engine.launch("worker", "third", "spot", SLEEP, env())
        assert err.value.reason is Refusal.NO_CAPACITY and not engine.admits("spot")
        assert engine.admits("on-demand")  # not in the trace: no limit
        engine.launch("worker", "od", "on-demand", SLEEP, env())
        wait_ready(old), wait_ready(new)

        limits["spot"] = 1
        notices = [e for e in engine.poll() if e.kind is EventKind.PREEMPTED]
        assert [e.handle.name for e in notices] == ["new"]  # the newest goes first
        assert notices[0].deadline_ms == int((clock.t + 30) * 1000)
        assert not engine.admits("spot")  # one counted, capacity one
        assert engine.poll() == []  # noticed once
        clock.t += 29
        assert wait_events(engine, 1, timeout=1.0) == []  # it ignores SIGTERM: still there
        clock.t += 2  # past the deadline: SIGKILL
        ends = wait_events(engine, 1)
        assert [(e.handle.name, e.code) for e in ends] == [("new", -signal.SIGKILL)]

        limits["spot"] = 0
        notices = [e for e in engine.poll() if e.kind is EventKind.PREEMPTED]
        assert [e.handle.name for e in notices] == ["old"]
        ends = wait_events(engine, 1)
        assert [(e.handle.name, e.code) for e in ends] == [("old", 0)]  # handed back, exit 0
        limits["spot"] = 1
        assert engine.admits("spot")
    finally:
        engine.stop_all(graceful=False)
        engine.close()


def test_a_second_engine_adopts_the_processes_and_reads_their_exit_codes(tmp_path):
    first = LocalEngine(tmp_path / "local")
    go = tmp_path / "go"
    waits = [sys.executable, "-c",
             "import os, sys, time\n"
             f"while not os.path.exists({str(go)!r}): time.sleep(0.02)\n"
             "sys.exit(5)"]
    handle = first.launch("worker", "w", "spot", waits, env())
    gone = first.launch("worker", "gone", "spot", SLEEP, env())
    stored = handle.to_dict()  # what the master keeps in its database
    first.close()  # the master that launched it is gone; its children run on

    second = LocalEngine(tmp_path / "local")
    try:
        assert second.adopt(Handle.from_dict(stored))
        assert second.adopt(gone)
        assert {h.name for h in second.running()} == {"w", "gone"}
        process.signal_group(int(gone.id.split(":")[0]), signal.SIGKILL)  # no status written
        go.touch()
        ends = {e.handle.name: (e.kind, e.code) for e in wait_events(second, 2)}
        assert ends == {"w": (EventKind.EXITED, 5), "gone": (EventKind.LOST, None)}
        assert not process.alive(handle.id)
        # a pid that was never ours is not taken for it
        assert not second.adopt(Handle("worker", "x", "spot", f"{handle.id.split(':')[0]}:1"))
    finally:
        second.stop_all(graceful=False)
        first.stop_all(graceful=False)


def test_a_stop_reaches_what_the_process_started_and_stop_all_leaves_nothing(engine, tmp_path):
    pidfile = tmp_path / "grandchild.pid"
    parent = [sys.executable, "-c",
              "import subprocess, sys, time\n"
              "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
              f"open({str(pidfile)!r}, 'w').write(str(p.pid))\n"
              "time.sleep(60)"]
    engine.launch("worker", "parent", "spot", parent, env())
    engine.launch("ps", "ps0", "on-demand", SLEEP, env())
    deadline = time.monotonic() + 30
    while not pidfile.exists() or not pidfile.read_text():
        assert time.monotonic() < deadline
        time.sleep(0.02)
    grandchild = int(pidfile.read_text())
    assert process.start_ticks(grandchild) is not None
    ends = engine.stop_all(graceful=True, timeout=30)
    assert sorted(e.handle.name for e in ends) == ["parent", "ps0"]
    assert engine.running() == []
    deadline = time.monotonic() + 10
    while process.start_ticks(grandchild) is not None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert process.start_ticks(grandchild) is None
