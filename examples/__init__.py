"""Example jobs built on elastic-ps, packages to read and copy: `examples.ctr` (the main job:
a CTR model trained by workers that come and go) and `examples.master_demo` (the master alone
under churn, with simulated workers)."""
