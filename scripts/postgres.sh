#!/usr/bin/env bash
# A throw-away PostgreSQL cluster for cpilab's tests, on a loopback port.
#
#   scripts/postgres.sh start DIR   installs PostgreSQL from the distribution's
#                                   packages when missing, creates a cluster in
#                                   DIR, starts it on 127.0.0.1 and prints its URL
#   scripts/postgres.sh stop DIR    stops it and removes DIR
#   scripts/postgres.sh run CMD…    start, run CMD with CPILAB_TEST_POSTGRES set
#                                   to the URL, stop; exits with CMD's status
set -euo pipefail

find_bin() {
  local b
  for b in "$(command -v "$1" 2>/dev/null || true)" /usr/lib/postgresql/*/bin/"$1"; do
    [ -n "$b" ] && [ -x "$b" ] && { echo "$b"; return 0; }
  done
  return 1
}

install_pg() {
  if find_bin initdb >/dev/null && find_bin pg_ctl >/dev/null; then return 0; fi
  if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
    echo "postgres.sh: PostgreSQL is not installed and cannot be installed here (need root and apt-get)" >&2
    return 1
  fi
  echo "postgres.sh: installing PostgreSQL from the distribution's packages" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >&2
  apt-get install -y -qq postgresql >&2
}

# run_as runs a PostgreSQL command as an unprivileged user when we are root
# (the server refuses to run as root).
run_as() {
  if [ "$(id -u)" = 0 ]; then
    id postgres >/dev/null 2>&1 || useradd --system --no-create-home postgres
    runuser -u postgres -- "$@"
  else
    "$@"
  fi
}

start() {
  local dir=$1
  install_pg
  local initdb pg_ctl
  initdb=$(find_bin initdb); pg_ctl=$(find_bin pg_ctl)
  mkdir -p "$dir"
  [ "$(id -u)" = 0 ] && { id postgres >/dev/null 2>&1 || useradd --system --no-create-home postgres; chown postgres "$dir"; chmod 700 "$dir"; }
  run_as "$initdb" -D "$dir/data" -U cpilab --auth=trust -E UTF8 --no-locale >"$dir/initdb.log" 2>&1 \
    || { cat "$dir/initdb.log" >&2; return 1; }
  local port
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])' 2>/dev/null \
    || echo $((20000 + RANDOM % 20000)))
  run_as "$pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 \
    -o "-p $port -k $dir -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=200" start >/dev/null \
    || { cat "$dir/server.log" >&2; return 1; }
  echo "$port" >"$dir/port"
  echo "postgres://cpilab@127.0.0.1:$port/postgres?sslmode=disable"
}

stop() {
  local dir=$1
  [ -d "$dir/data" ] && run_as "$(find_bin pg_ctl)" -D "$dir/data" -m immediate -w stop >/dev/null 2>&1 || true
  rm -rf "$dir"
}

case "${1:-}" in
  start) start "$2" ;;
  stop) stop "$2" ;;
  run)
    shift
    dir=$(mktemp -d /tmp/cpilab-pg.XXXXXX)
    trap 'stop "$dir"' EXIT
    url=$(start "$dir")
    CPILAB_TEST_POSTGRES=$url "$@"
    ;;
  *) echo "usage: $0 start DIR | stop DIR | run CMD…" >&2; exit 2 ;;
esac
