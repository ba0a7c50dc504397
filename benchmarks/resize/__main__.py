from benchmarks.resize.cli import main

raise SystemExit(main())
