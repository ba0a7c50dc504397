"""The master's side of the parameter servers: who serves each index, and whether it is alive.

`registry` (the primaries' rows, registrations), `layout` (the PS layout: hash slots per
index, the set's size, a resize's target and slot moves), `replicas` (generations,
backups, promotions with `--ps-replicas`), `leases` (when a primary may still answer pushes),
`monitor` (health checks that declare a PS lost or promote a backup) and `restores` (the
accounting of a PS that came back from a checkpoint). Not the PS itself: that is the
top-level `ps` package.
"""
