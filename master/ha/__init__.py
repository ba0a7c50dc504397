"""High availability: which of the masters on one database leads, and what the others answer.

`leader` (the leader lease's decisions, without I/O), `election` (carries them out against the
database and fences every commit) and `gate` (the interceptor that refuses calls with
NOT_LEADER on a standby).
"""
