#!/usr/bin/env python3
"""Worker killed -> its data handed to another worker: `benchmarks.handover` (see --help)."""
import sys

from benchmarks.handover import main

if __name__ == "__main__":
    sys.exit(main())
