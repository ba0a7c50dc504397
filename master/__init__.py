"""The elastic-ps master: a durable Dataset Shard Service and worker / PS registry over gRPC.

One subpackage per role: `datasets` (the shard service), `ps` (the PS registry and its health),
`ha` (the leader lease among standbys), `persistence` (journal, group commit, store,
migrations), `ctl` (elastic-ctl). The top level holds what they share: `core` (MasterCore,
which routes every call), `calls`, `workers`, `states`, `limits`, the gRPC face (`server`,
`convert`, `views`), `settings`, `metrics` and `__main__`. docs/master.md, "Code layout".
"""

__version__ = "0.1.0"
