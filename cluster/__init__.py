"""Running elastic-ps processes on this machine: `cluster.launch` (the process launcher of
tests, benchmarks and the demo) and `cluster.local` (a whole CTR job: master, PS, workers)."""
