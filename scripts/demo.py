#!/usr/bin/env python3
"""The main job under churn, against a run without: `examples.ctr.demo` (see its --help)."""
import sys

from examples.ctr.demo import main

if __name__ == "__main__":
    sys.exit(main())
