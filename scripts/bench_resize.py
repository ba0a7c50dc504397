#!/usr/bin/env python3
"""Benchmark resizing the PS set 2 -> 4 -> 2 while a worker trains, live against
stop-the-world: `benchmarks.resize` (see --help)."""
import sys
from pathlib import Path

# a door into the checkout: examples/, benchmarks/ and cluster/ are not installed
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.resize.cli import main  # noqa: E402

if __name__ == "__main__":
    raise SystemExit(main())
