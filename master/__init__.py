"""The elastic-ps master: a durable Dataset Shard Service and worker / PS registry over gRPC."""

__version__ = "0.1.0"
