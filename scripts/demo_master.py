#!/usr/bin/env python3
"""The master alone under churn, with simulated workers: `examples.master_demo` (see --help)."""
import sys

from examples.master_demo import main

if __name__ == "__main__":
    sys.exit(main())
