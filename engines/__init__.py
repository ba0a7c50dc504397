"""The engines the master launches a job's processes through (local processes, Ray,
Kubernetes), behind one port; this package imports nothing of the master."""
