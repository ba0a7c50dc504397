"""Example jobs built on elastic-ps: packages to read and copy (`examples.ctr`)."""
