import sys

from benchmarks.master.cli import main

sys.exit(main())
