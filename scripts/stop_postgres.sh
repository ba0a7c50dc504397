#!/usr/bin/env bash
# Stop the PostgreSQL server scripts/start_postgres.sh started with its data in DIR (fast
# shutdown: open sessions are ended). Nothing to do when none runs there. DIR is kept.
set -euo pipefail
dir=${1:?usage: scripts/stop_postgres.sh DATA_DIR}
[ -f "$dir/postmaster.pid" ] || exit 0  # never started, or already stopped
bin=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -n 1)
as_pg=()
if [ "$(id -u)" = 0 ]; then
  as_pg=(runuser -u postgres --)  # as the server was started
fi
if "${as_pg[@]}" "$bin/pg_ctl" -D "$dir" status >/dev/null 2>&1; then
  "${as_pg[@]}" "$bin/pg_ctl" -D "$dir" -m fast -w -t 60 stop >&2
fi
