#!/usr/bin/env python3
"""Worker SIGTERM -> process exited, quiet and under load: `benchmarks.sigterm` (see --help)."""
import sys

from benchmarks.sigterm import main

if __name__ == "__main__":
    sys.exit(main())
