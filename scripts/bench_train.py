#!/usr/bin/env python3
"""Benchmark a worker's records/s through elastic-ps against a local torch loop:
`benchmarks.train` (see --help)."""
from benchmarks.train.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
