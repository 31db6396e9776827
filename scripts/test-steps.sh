#!/usr/bin/env bash
# The go test steps of make test (run make test, which starts PostgreSQL
# first). The unit and suite tests and the CPI catalog run side by side: the
# unit step ends on a long tail of one package (cmd/cpilab's certify runs,
# one at a time) that leaves a core idle, which the catalog's certify runs
# fill. The unit step runs four packages at a time (go test's default is
# one per core): several suites mostly wait on a Director's tasks and agents
# (the FlexVolume catalog uses a fifth of a core for three minutes) and
# would hold a core's slot idle. Each line of their output is prefixed with its step; a step's
# failure fails the whole run after both have ended. Then the race tests
# (-short) and a short fuzz run, one after the other.
set -uo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
PKGS=${PKGS:-./...}
RACE_PKGS=${RACE_PKGS:?the packages for the race step}
FUZZTIME=${FUZZTIME:-3s}

step() { # step NAME COMMAND...: runs the command, its output prefixed with [NAME]
  local name=$1
  shift
  "$@" 2>&1 | sed -u "s/^/[$name] /"
  return "${PIPESTATUS[0]}"
}

start=$SECONDS
step unit "$GO" test -p 4 -count=1 -timeout 30m -skip '^TestCertifyCatalog$' $PKGS &
unit=$!
step catalog "$GO" test -count=1 -timeout 45m -run '^TestCertifyCatalog$' ./cmd/cpilab/ &
catalog=$!
wait "$unit"; unit_rc=$?
echo "[unit] ended with status $unit_rc after $((SECONDS - start)) s"
wait "$catalog"; catalog_rc=$?
echo "[catalog] ended with status $catalog_rc after $((SECONDS - start)) s"
if [ "$unit_rc" != 0 ] || [ "$catalog_rc" != 0 ]; then
  echo "make test: the unit step ended with status $unit_rc, the catalog with $catalog_rc" >&2
  exit 1
fi

start=$SECONDS
# shellcheck disable=SC2046
"$GO" test -count=1 -race -short -timeout 20m $("$GO" list $RACE_PKGS 2>/dev/null) || exit 1
echo "[race] ended after $((SECONDS - start)) s"
./scripts/fuzz.sh "$FUZZTIME" || exit 1
