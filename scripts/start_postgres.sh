#!/usr/bin/env bash
# Start a throwaway PostgreSQL server for the tests and print its SQLAlchemy URL.
# Installs Debian's postgresql when it is missing (needs root, as on CI), keeps its data in
# a temporary directory ($ELASTIC_PS_TEST_PG_DIR when set), listens on 127.0.0.1 only. Stop it
# with `scripts/stop_postgres.sh DIR` (the path is printed on stderr); scripts/test does.
set -euo pipefail
free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
port=${ELASTIC_PS_TEST_PG_PORT:-$(free_port)}
dir=${ELASTIC_PS_TEST_PG_DIR:-$(mktemp -d /tmp/elastic-ps-pg.XXXXXX)}

if ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
  echo "installing postgresql with apt-get ..." >&2
  apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >&2
fi
bin=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -n 1)

as_pg=()
if [ "$(id -u)" = 0 ]; then
  as_pg=(runuser -u postgres --)  # the server refuses to run as root
  chown postgres "$dir"
fi
if [ ! -f "$dir/PG_VERSION" ]; then
  "${as_pg[@]}" "$bin/initdb" -D "$dir" -U postgres --auth=trust >/dev/null
fi
"${as_pg[@]}" "$bin/pg_ctl" -D "$dir" -l "$dir/server.log" -w -t 60 \
  -o "-p $port -k $dir -c listen_addresses=127.0.0.1 -c max_connections=200" start >&2
echo "PostgreSQL data in $dir (stop: ${as_pg[*]} $bin/pg_ctl -D $dir stop)" >&2
echo "postgresql+psycopg://postgres@127.0.0.1:$port/postgres"
