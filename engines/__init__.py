"""Engines: where the processes of a job run (DESIGN.md "Contract, round 4", "Engines").

Engines run a job's processes (local processes, Ray actors; Kubernetes to come) behind one port.
`engines.port` is the one port every engine offers the master (launch, stop, events, whether a
market admits launches now); `engines.local` runs processes on this machine, its markets
labels limited by a market trace (`engines.markets`); `engines.ray` runs each in a Ray
actor on a node labelled with its market (the `ray` extra), both on `engines.owner` (their
processes, events and the one `stop_all`); `engines.process` is the one way this
project starts and signals a child process (cluster.launch is built on it). This package
imports nothing of the master: the master uses an engine through the port, never the other
way round.
"""
