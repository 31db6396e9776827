#!/usr/bin/env bash
# Runs every Fuzz* target in the module for the given time each (default 10s).
set -euo pipefail
fuzztime=${1:-10s}
cd "$(dirname "$0")/.."
found=0
for pkg in $(go list ./...); do
  dir=$(go list -f '{{.Dir}}' "$pkg")
  for target in $(grep -ho '^func Fuzz[A-Za-z0-9_]*' "$dir"/*_test.go 2>/dev/null | sed 's/^func //' | sort -u); do
    found=1
    echo "fuzz $pkg $target ($fuzztime)"
    go test -run '^$' -fuzz "^${target}\$" -fuzztime "$fuzztime" "$pkg" >/tmp/cpilab-fuzz.$$ 2>&1 || { cat /tmp/cpilab-fuzz.$$; rm -f /tmp/cpilab-fuzz.$$; exit 1; }
  done
done
rm -f /tmp/cpilab-fuzz.$$
[ "$found" = 1 ] || echo "fuzz: no fuzz targets yet"
