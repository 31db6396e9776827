#!/usr/bin/env bash
# A throw-away, private Docker daemon for cpilab's tests (the Docker face is
# compared with it; certify --cloud docker can run a Docker CPI on it).
#
#   scripts/dockerd.sh start DIR   installs docker.io from the distribution's
#                                  packages when missing (scripts/install-deps.sh),
#                                  starts dockerd with its socket, data root,
#                                  exec root and pid file under DIR, waits for
#                                  it to answer and prints its host
#                                  (unix://DIR/docker.sock)
#   scripts/dockerd.sh stop DIR    stops it (containers killed) and removes DIR
#   scripts/dockerd.sh run CMD…    start, run CMD with CPILAB_REAL_DOCKER_HOST
#                                  set to the host, stop; exits with CMD's status
#   scripts/dockerd.sh probe       start and stop one, and say whether the tests
#                                  that need a real daemon will run here, or why not
#                                  (always exits 0: make test goes on without them)
#
# The daemon touches nothing of the machine's networking: no iptables rules,
# no default bridge (--iptables=false --ip6tables=false --bridge=none); user
# networks are bridges of its own. Storage is vfs (works on any file system,
# in a container too); CPILAB_DOCKERD_STORAGE=auto takes overlay2 where the
# directory's file system can hold an overlay mount (each container is then
# not a full copy of its image), else vfs. Its default runtime is a runc wrapper that drops
# CAP_SYS_RESOURCE from each container's capability sets: a sandbox whose
# bounding set lacks it cannot give it to a --privileged container (runc
# fails with "unable to apply caps: operation not permitted"), and the BOSH
# Docker CPI creates every container privileged.
# Exit status 1 with the reason on stderr when dockerd cannot run here.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)

start() {
  local dir=$1
  "$here/install-deps.sh" dockerd >/dev/null
  local dockerd runc
  dockerd=$(command -v dockerd) || { echo "dockerd.sh: no dockerd on PATH" >&2; return 1; }
  runc=$(command -v runc) || { echo "dockerd.sh: no runc on PATH" >&2; return 1; }
  if [ "$(id -u)" != 0 ]; then
    echo "dockerd.sh: dockerd needs root (running as uid $(id -u))" >&2
    return 1
  fi
  mkdir -p "$dir/data" "$dir/exec"
  # The socket path must fit a sockaddr_un (108 bytes).
  if [ ${#dir} -gt 80 ]; then
    echo "dockerd.sh: $dir is too long for a unix socket path" >&2
    return 1
  fi
  cat >"$dir/runc-nosysresource" <<EOF
#!/bin/sh
# runc, with CAP_SYS_RESOURCE dropped from the container's config.json
# (create, run) and from an exec's process.json (exec --process).
drop() {
  [ -f "\$1" ] && sed -i 's/"CAP_SYS_RESOURCE",//g; s/,"CAP_SYS_RESOURCE"//g; s/"CAP_SYS_RESOURCE"//g' "\$1"
}
prev=""
for a in "\$@"; do
  case "\$prev" in
    --bundle|-b) drop "\$a/config.json" ;;
    --process|-p) drop "\$a" ;;
  esac
  case "\$a" in
    --bundle=*) drop "\${a#--bundle=}/config.json" ;;
    --process=*) drop "\${a#--process=}" ;;
  esac
  prev="\$a"
done
exec $runc "\$@"
EOF
  chmod 755 "$dir/runc-nosysresource"
  local sock="$dir/docker.sock" driver=${CPILAB_DOCKERD_STORAGE:-vfs}
  if [ "$driver" = auto ]; then
    # overlay2 where the data root's file system can hold an overlay mount
    # (a container per image layer copy is then free), else vfs.
    driver=vfs
    mkdir -p "$dir/ovl/l" "$dir/ovl/u" "$dir/ovl/w" "$dir/ovl/m"
    if mount -t overlay overlay -o "lowerdir=$dir/ovl/l,upperdir=$dir/ovl/u,workdir=$dir/ovl/w" "$dir/ovl/m" 2>/dev/null; then
      umount "$dir/ovl/m"
      driver=overlay2
    fi
    rm -rf "$dir/ovl"
  fi
  "$dockerd" --iptables=false --ip6tables=false --bridge=none --storage-driver="$driver" \
    --host "unix://$sock" --data-root "$dir/data" --exec-root "$dir/exec" \
    --pidfile "$dir/dockerd.pid" --containerd-namespace cpilab --containerd-plugins-namespace cpilab-plugins \
    --add-runtime "cpilab-runc=$dir/runc-nosysresource" --default-runtime cpilab-runc \
    --log-level warn >"$dir/dockerd.log" 2>&1 </dev/null &
  local pid=$!
  echo "$pid" >"$dir/dockerd.launcher"
  local i
  for i in $(seq 1 150); do
    if ! kill -0 "$pid" 2>/dev/null; then
      echo "dockerd.sh: dockerd exited at start; its log:" >&2
      tail -20 "$dir/dockerd.log" >&2
      return 1
    fi
    if [ -S "$sock" ] && curl -sf --max-time 2 --unix-socket "$sock" http://docker/_ping >/dev/null 2>&1; then
      echo "unix://$sock"
      return 0
    fi
    sleep 0.2
  done
  echo "dockerd.sh: dockerd did not answer on $sock within 30 s; its log:" >&2
  tail -20 "$dir/dockerd.log" >&2
  stop "$dir"
  return 1
}

stop() {
  local dir=$1
  local pid=""
  [ -f "$dir/dockerd.pid" ] && pid=$(cat "$dir/dockerd.pid")
  [ -z "$pid" ] && [ -f "$dir/dockerd.launcher" ] && pid=$(cat "$dir/dockerd.launcher")
  if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid" 2>/dev/null || true
    local i
    for i in $(seq 1 100); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.1
    done
    kill -KILL "$pid" 2>/dev/null || true
  fi
  # vfs layers can hold read-only files: make them removable first.
  chmod -R u+w "$dir" 2>/dev/null || true
  rm -rf "$dir"
}

case "${1:-}" in
  start) start "$2" ;;
  stop) stop "$2" ;;
  probe)
    dir=$(mktemp -d /tmp/cpilab-dockerd.XXXXXX)
    if err=$(start "$dir" 2>&1 >/dev/null); then
      echo "dockerd.sh: a private Docker daemon starts here: the tests comparing the Docker face with it run"
    else
      echo "dockerd.sh: no real Docker daemon here, the tests that need one skip: ${err//$'\n'/ }"
    fi
    stop "$dir"
    ;;
  run)
    shift
    dir=$(mktemp -d /tmp/cpilab-dockerd.XXXXXX)
    trap 'stop "$dir"' EXIT
    host=$(start "$dir")
    CPILAB_REAL_DOCKER_HOST=$host "$@"
    ;;
  *) echo "usage: $0 start DIR | stop DIR | run CMD… | probe" >&2; exit 2 ;;
esac
