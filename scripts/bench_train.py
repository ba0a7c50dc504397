#!/usr/bin/env python3
"""Benchmark a worker's records/s through elastic-ps against a local torch loop:
`benchmarks.train` (see --help)."""
import sys
from pathlib import Path

# a door into the checkout: examples/, benchmarks/ and cluster/ are not installed
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.train.cli import main  # noqa: E402

if __name__ == "__main__":
    raise SystemExit(main())
