"""Real processes for end-to-end tests (see scripts/launch.py)."""
from __future__ import annotations

from scripts.launch import ROOT, Proc, master_args

__all__ = ["ROOT", "Proc", "master"]


def master(db_url: str, *extra: str, port: int = 0) -> Proc:
    return Proc(master_args(db_url, *extra, port=port), "elastic-master").start()
