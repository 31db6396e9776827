#!/usr/bin/env bash
# install-deps.sh TOOL…: install the system tools some tests need, from the
# distribution's packages, only when they are missing. Known tools:
#   chromium   a headless browser, to render the HTML report (Debian: chromium)
#   dockerd    the Docker daemon and runc, for the tests that compare the Docker
#              face with a real daemon (Debian: docker.io; scripts/dockerd.sh runs it)
#   debootstrap  builds the stemcell-like root filesystem the upstream agent runs in
#              (Debian: debootstrap; scripts/agentbox.sh uses it)
# Prints the path of each tool found or installed; exits 1 with the reason when
# one cannot be had (no apt-get, not root and no sudo, the package failed).
set -euo pipefail

find_chromium() {
	local c
	for c in chromium chromium-browser google-chrome-stable google-chrome; do
		if command -v "$c" >/dev/null 2>&1; then command -v "$c"; return 0; fi
	done
	return 1
}

apt_install() {
	local sudo=()
	if [ "$(id -u)" != 0 ]; then
		if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
			sudo=(sudo -n)
		else
			echo "install-deps: cannot install $*: not root and no password-less sudo" >&2
			return 1
		fi
	fi
	if ! command -v apt-get >/dev/null 2>&1; then
		echo "install-deps: cannot install $*: no apt-get on this machine" >&2
		return 1
	fi
	export DEBIAN_FRONTEND=noninteractive
	"${sudo[@]}" apt-get update -qq >&2 || { echo "install-deps: apt-get update failed" >&2; return 1; }
	"${sudo[@]}" apt-get install -y -qq --no-install-recommends "$@" >&2 ||
		{ echo "install-deps: apt-get install $* failed" >&2; return 1; }
}

[ $# -gt 0 ] || { echo "usage: scripts/install-deps.sh chromium|dockerd|debootstrap…" >&2; exit 2; }
for tool in "$@"; do
	case "$tool" in
	chromium)
		if ! find_chromium; then
			apt_install chromium fonts-dejavu-core
			find_chromium || { echo "install-deps: chromium installed but not on PATH" >&2; exit 1; }
		fi
		;;
	dockerd)
		if ! command -v dockerd >/dev/null 2>&1 || ! command -v runc >/dev/null 2>&1; then
			apt_install docker.io
			command -v dockerd >/dev/null 2>&1 || { echo "install-deps: docker.io installed but dockerd not on PATH" >&2; exit 1; }
		fi
		command -v dockerd
		;;
	debootstrap)
		if ! command -v debootstrap >/dev/null 2>&1; then
			apt_install debootstrap
			command -v debootstrap >/dev/null 2>&1 || { echo "install-deps: debootstrap installed but not on PATH" >&2; exit 1; }
		fi
		command -v debootstrap
		;;
	*)
		echo "install-deps: unknown tool $tool (known: chromium, dockerd, debootstrap)" >&2
		exit 2
		;;
	esac
done
