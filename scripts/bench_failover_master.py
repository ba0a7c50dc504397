#!/usr/bin/env python3
"""Master leader SIGKILLed with a standby -> shards handed out again:
`benchmarks.failover_master` (see --help)."""
import sys

from benchmarks.failover_master import main

if __name__ == "__main__":
    sys.exit(main())
