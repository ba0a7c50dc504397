from benchmarks.ps.cli import main

main()
