from benchmarks.train.cli import main

raise SystemExit(main())
