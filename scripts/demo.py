#!/usr/bin/env python3
"""The README's main job. For now: the master under churn (scripts/demo_master.py)."""
import runpy
from pathlib import Path

runpy.run_path(str(Path(__file__).with_name("demo_master.py")), run_name="__main__")
