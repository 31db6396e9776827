#!/usr/bin/env bash
# The real-agent box: a stemcell-like root filesystem, built once from the
# distribution's packages and cached, in which the upstream BOSH agent runs
# as a container on the private Docker daemon of scripts/dockerd.sh.
#
#   scripts/agentbox.sh rootfs        builds the root filesystem when it is not
#                                     cached yet and prints the tarball's path
#   scripts/agentbox.sh image HOST    imports it into the daemon at HOST
#                                     (unix://…) unless already there, and
#                                     prints the image name
#   scripts/agentbox.sh agent         prints the upstream agent binary the box
#                                     runs, or exits 1 saying why there is none
#   scripts/agentbox.sh probe         says whether the box can run here (the
#                                     tests that need it skip otherwise; exits 0)
#
# The cache is ${XDG_CACHE_HOME:-~/.cache}/cpilab/agentbox/<key>, the key a
# hash of the recipe (build_rootfs below), the suite, mirror and machine, so a changed recipe builds a
# new root filesystem. Each build and import prints how long it took on stderr.
#
# The root filesystem: debootstrap's minbase of Debian plus resolvconf, monit,
# runit, iproute2 and socat (the agent reaches the mbus on its own loopback, forwarded to a unix socket bound from the host); users vcap and syslog; stub bosh-agent-rc and
# bosh-start-logging-and-auditing (which a stemcell's agent runs at
# bootstrap); a stub udevadm (a real `udevadm trigger` would replay device
# events on the host); monit's control file as a stemcell has it, started by
# runit on the agent's `sv start monit`; and /usr/local/bin/agentbox-init,
# the container's command: it unmounts the /etc/resolv.conf Docker binds
# (the agent replaces it with a link), forwards the agent's mbus address
# (127.0.0.1:4222 in the container's own network namespace) to the unix
# socket /var/vcap/agentbox/nats.sock, starts runsvdir and then the agent
# with /var/vcap/agentbox/agent.json. The agent binary (at
# /var/vcap/bosh/bin/bosh-agent) and the /var/vcap/agentbox directory
# (agent.json, the settings file, the socket) are bound into the container
# by whoever runs it (package realagent).
#
# The agent binary, in this order: $CPILAB_BOSH_AGENT; bin/bosh-agent in the
# checkout; an interop/ directory beside the checkout (../*/interop/bosh-agent,
# where a workspace keeps upstream builds). Build one from the upstream
# source (cloudfoundry/bosh-agent) with
#   CGO_ENABLED=0 go build -mod=vendor -o bosh-agent ./main
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/.." && pwd)
suite=${CPILAB_AGENTBOX_SUITE:-bookworm}
mirror=${CPILAB_AGENTBOX_MIRROR:-http://deb.debian.org/debian}
cache_root=${XDG_CACHE_HOME:-$HOME/.cache}/cpilab/agentbox

now() { date +%s.%N; }
took() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }

find_agent() {
	if [ -n "${CPILAB_BOSH_AGENT:-}" ]; then
		[ -x "$CPILAB_BOSH_AGENT" ] || { echo "agentbox.sh: CPILAB_BOSH_AGENT=$CPILAB_BOSH_AGENT is not an executable file" >&2; return 1; }
		echo "$CPILAB_BOSH_AGENT"
		return 0
	fi
	if [ -x "$top/bin/bosh-agent" ]; then
		echo "$top/bin/bosh-agent"
		return 0
	fi
	local c
	for c in "$top"/../*/interop/bosh-agent; do
		if [ -x "$c" ]; then
			(cd "$(dirname "$c")" && echo "$(pwd)/bosh-agent")
			return 0
		fi
	done
	echo "agentbox.sh: no upstream bosh-agent binary: set CPILAB_BOSH_AGENT, or put one at bin/bosh-agent (build it from cloudfoundry/bosh-agent with CGO_ENABLED=0 go build -mod=vendor -o bosh-agent ./main)" >&2
	return 1
}

# build_rootfs ROOT: the stemcell-like tree in ROOT.
build_rootfs() {
	local root=$1
	debootstrap --variant=minbase --include=resolvconf,monit,runit,iproute2,procps,socat \
		"$suite" "$root" "$mirror" >"$dir/debootstrap.log" 2>&1 || {
		echo "agentbox.sh: debootstrap of $suite from $mirror failed; the end of its log:" >&2
		tail -15 "$dir/debootstrap.log" >&2
		return 1
	}
	chroot "$root" /usr/sbin/groupadd --system syslog 2>/dev/null || true
	chroot "$root" /usr/sbin/useradd --system -g syslog -d /home/syslog -s /usr/sbin/nologin syslog 2>/dev/null || true
	chroot "$root" /usr/sbin/groupadd vcap
	chroot "$root" /usr/sbin/useradd -m -g vcap -G adm -s /bin/bash vcap
	chroot "$root" /usr/sbin/groupadd -f bosh_sshers
	chroot "$root" /usr/sbin/groupadd -f bosh_sudoers
	mkdir -p "$root/var/vcap/bosh/bin" "$root/var/vcap/bosh/etc" "$root/var/vcap/bosh/log" \
		"$root/var/vcap/monit" "$root/var/vcap/data" "$root/var/vcap/store" "$root/var/vcap/sys/log" \
		"$root/etc/sv/monit"
	printf '#!/bin/sh\n# stub: a stemcell runs its boot-time hooks here\nexit 0\n' >"$root/var/vcap/bosh/bin/bosh-agent-rc"
	printf '#!/bin/sh\n# stub: a stemcell starts rsyslog and auditd here\nexit 0\n' >"$root/var/vcap/bosh/bin/bosh-start-logging-and-auditing"
	printf '#!/bin/sh\n# stub: a real udevadm trigger in a container replays device events on the host\nexit 0\n' >"$root/usr/local/sbin/udevadm"
	ln -sf /usr/local/sbin/udevadm "$root/usr/bin/udevadm"
	chmod 755 "$root/var/vcap/bosh/bin/"* "$root/usr/local/sbin/udevadm"
	cat >"$root/var/vcap/bosh/etc/monitrc" <<'EOF'
set daemon 10
set logfile /var/vcap/monit/monit.log
set httpd port 2822 and use address 127.0.0.1
  allow cleartext /var/vcap/monit/monit.user
include /var/vcap/monit/*.monitrc
include /var/vcap/monit/job/*.monitrc
EOF
	chmod 0700 "$root/var/vcap/bosh/etc/monitrc"
	ln -sf /var/vcap/bosh/etc/monitrc "$root/etc/monit/monitrc"
	cat >"$root/etc/sv/monit/run" <<'EOF'
#!/bin/sh
exec /usr/bin/monit -I -c /var/vcap/bosh/etc/monitrc
EOF
	chmod 755 "$root/etc/sv/monit/run"
	touch "$root/etc/sv/monit/down"
	chroot "$root" ln -sfn /etc/sv/monit /etc/service/monit
	cat >"$root/usr/local/bin/agentbox-init" <<'EOF'
#!/bin/sh
# The box's command. Docker binds /etc/resolv.conf, which the agent replaces
# with a link.
umount /etc/resolv.conf 2>/dev/null || true
# The agent runs bosh-agent-rc and its other helpers from its own bin.
export PATH=/var/vcap/bosh/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
# The mbus: the agent dials 127.0.0.1:4222 on its own loopback, and socat
# carries that to the unix socket the host binds (no network is shared).
if [ -S /var/vcap/agentbox/nats.sock ]; then
	socat TCP-LISTEN:4222,bind=127.0.0.1,fork,reuseaddr UNIX-CONNECT:/var/vcap/agentbox/nats.sock &
fi
/usr/bin/runsvdir -P /etc/service >/dev/null 2>&1 &
exec /var/vcap/bosh/bin/bosh-agent -P ubuntu -C /var/vcap/agentbox/agent.json "$@"
EOF
	chmod 755 "$root/usr/local/bin/agentbox-init"
	# Smaller is faster: dockerd's vfs storage copies the whole tree for
	# each image import and each container.
	rm -rf "$root/var/cache/apt/archives/"*.deb "$root/var/lib/apt/lists/"* \
		"$root/usr/share/locale" "$root/usr/share/doc" "$root/usr/share/man" "$root/usr/share/info" 2>/dev/null || true
}

rootfs() {
	local tar=$dir/rootfs.tar
	if [ -f "$tar" ]; then
		echo "$tar"
		return 0
	fi
	if [ "$(id -u)" != 0 ]; then
		echo "agentbox.sh: building the root filesystem needs root (running as uid $(id -u))" >&2
		return 1
	fi
	mkdir -p "$dir"
	# One build at a time (tests in parallel packages may ask at once): the
	# second waits, then finds the first's tarball.
	exec 9>"$dir/.lock"
	flock 9
	if [ -f "$tar" ]; then
		exec 9>&-
		echo "$tar"
		return 0
	fi
	"$here/install-deps.sh" debootstrap >/dev/null
	local start root
	start=$(now)
	root=$(mktemp -d "$dir/root.XXXXXX")
	local rc=0
	set +e
	(
		set -e
		build_rootfs "$root"
	)
	rc=$?
	set -e
	if [ "$rc" != 0 ]; then
		echo "agentbox.sh: building the root filesystem failed (status $rc)" >&2
		rm -rf "$root"
		return 1
	fi
	tar -C "$root" --numeric-owner -cf "$tar.tmp" . && mv "$tar.tmp" "$tar"
	rm -rf "$root"
	exec 9>&-
	echo "agentbox.sh: root filesystem built in $(took "$start") s ($(du -m "$tar" | cut -f1) MB, cached in $dir)" >&2
	echo "$tar"
}

import() {
	local host=$1 tar start
	tar=$(rootfs)
	if docker -H "$host" image inspect "$image" >/dev/null 2>&1; then
		echo "$image"
		return 0
	fi
	start=$(now)
	docker -H "$host" import "$tar" "$image" >/dev/null
	echo "agentbox.sh: image $image imported in $(took "$start") s" >&2
	echo "$image"
}

key=$( (declare -f build_rootfs; echo "$suite $mirror $(uname -m)") | sha256sum | cut -c1-16)
dir=$cache_root/$key
image=cpilab-agentbox:$key

case "${1:-}" in
rootfs) rootfs ;;
image) import "$2" ;;
agent) find_agent ;;
probe)
	if ! a=$(find_agent 2>&1); then
		echo "agentbox.sh: the real-agent tests skip: ${a#agentbox.sh: }"
	elif ! err=$(rootfs 2>&1 >/dev/null); then
		echo "agentbox.sh: the real-agent tests skip: ${err//$'\n'/ }"
	else
		echo "agentbox.sh: the real-agent tests run with $a"
	fi
	;;
*)
	echo "usage: $0 rootfs | image HOST | agent | probe" >&2
	exit 2
	;;
esac
