#!/usr/bin/env python3
"""Benchmark the master against DESIGN.md's targets: `benchmarks.master` (see --help)."""
import sys

from benchmarks.master.cli import main

if __name__ == "__main__":
    sys.exit(main())
