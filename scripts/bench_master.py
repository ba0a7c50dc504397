#!/usr/bin/env python3
"""Benchmark the master against its targets (docs/benchmarks.md): `benchmarks.master` (see --help)."""
import sys
from pathlib import Path

# a door into the checkout: examples/, benchmarks/ and cluster/ are not installed
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.master.cli import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
