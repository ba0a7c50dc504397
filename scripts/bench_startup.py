#!/usr/bin/env python3
"""Benchmark cold starts: master to serving, PS to listening and registered, worker to its
first trained batch, and the commands' --help: `benchmarks.startup` (see --help)."""
import sys
from pathlib import Path

# a door into the checkout: examples/, benchmarks/ and cluster/ are not installed
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.startup import main  # noqa: E402

if __name__ == "__main__":
    raise SystemExit(main())
