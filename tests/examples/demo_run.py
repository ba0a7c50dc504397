"""Run the demo as a user does (`python -m examples.ctr.demo ...`) and read its --json; on a
timeout (this one's or pytest's) it is interrupted (SIGINT, as Ctrl-C), so it stops every
process it started before the test fails, instead of being killed with them left running."""
from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

from cluster.launch import CODE_ROOT, child_env


def run_demo(tmp_path: Path, *args: str, timeout: float) -> tuple[dict, int, str]:
    """The summary, the exit status and the output's end."""
    summary_path = tmp_path / "summary.json"
    proc = subprocess.Popen(
        [sys.executable, "-m", "examples.ctr.demo", *args, "--workdir", str(tmp_path / "run"),
         "--json", str(summary_path)],
        cwd=CODE_ROOT, env=child_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True)
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"the demo ran past {timeout:g} s") from None
    finally:
        if proc.poll() is None:  # a timeout (ours or pytest's): Ctrl-C, so it cleans up
            proc.send_signal(signal.SIGINT)
            try:
                proc.communicate(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.communicate()
    assert summary_path.exists(), out[-3000:]
    return json.loads(summary_path.read_text()), proc.returncode, out[-3000:]
