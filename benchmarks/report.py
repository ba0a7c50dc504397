"""What every benchmark report carries: the machine, the commit measured, the JSON file."""
from __future__ import annotations

import json
import os
import platform
import subprocess
from pathlib import Path

from cluster.launch import CODE_ROOT


def machine() -> str:
    return (f"{platform.machine()} {os.cpu_count()} CPUs, {platform.python_version()}, "
            f"load average {os.getloadavg()[0]:.2f} at start")


def git_commit(package: str) -> str:
    """The short commit of this checkout, marked when `package` has uncommitted changes."""
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=CODE_ROOT, text=True,
                              capture_output=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", package], cwd=CODE_ROOT,
                               text=True, capture_output=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return (head or "unknown") + (f" ({package}/ modified)" if dirty else "")


def write_json(path: str | Path, results: dict) -> None:
    Path(path).write_text(json.dumps(results, indent=2, default=str))
