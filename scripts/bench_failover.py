#!/usr/bin/env python3
"""PS primary SIGKILLed -> first answered push; a backup's cost: `benchmarks.failover`."""
import sys

from benchmarks.failover import main

if __name__ == "__main__":
    sys.exit(main())
