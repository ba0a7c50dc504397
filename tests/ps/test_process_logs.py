"""A real PS's log through a normal start and a master outage (issue 37): a normal start
prints no WARNING, and a master down for seconds is one WARNING line per kind of failure
(no multi-line gRPC repr every half second), then one line with the count once the master
answers again."""
from __future__ import annotations

import re
import signal
import time

import pytest

pytestmark = pytest.mark.slow

WARNING = re.compile(r"^\S+ \S+ (WARNING|ERROR) (\S+): ", re.M)


def _warnings(text: str) -> list[tuple[str, str]]:
    return [(m.group(1), m.group(2)) for m in WARNING.finditer(text)]


def _wait_for(proc, pattern: str, timeout: float = 60.0) -> str:
    proc.wait_for(pattern, timeout)
    return proc.output()


def test_a_normal_start_and_a_master_outage_log_few_lines(launcher):
    master = launcher.master()
    ps = launcher.ps(master.address, index=0, num_ps=1)
    _wait_for(ps, r"is the primary of generation 1 \(was pending\)")
    started = ps.output()
    assert "INFO ps.replication.node: PS 0 is the primary of generation 1" in started
    assert _warnings(started) == []

    master.kill(signal.SIGKILL)
    _wait_for(ps, r"cannot renew the primary lease")
    # several more renewals fail meanwhile (one every quarter lease, about 0.5 s); bounded
    deadline = time.monotonic() + 20.0
    while ps.output().count("\n") == started.count("\n") and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(3.0)
    master.start()
    text = _wait_for(ps, r"the master renews the primary lease again")
    outage = text[len(started):]
    said = _warnings(outage)
    assert said.count(("WARNING", "ps.replication.primary")) == 1, outage
    assert said.count(("WARNING", "ps.registrar")) <= 1, outage
    assert "_InactiveRpcError" not in outage and "debug_error_string" not in outage
    again = re.search(r"renews the primary lease again \(after (\d+) times", outage)
    assert again and int(again.group(1)) >= 3, outage
