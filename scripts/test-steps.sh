#!/usr/bin/env bash
# The go test steps of make test (run make test, which starts PostgreSQL
# first). Two lanes run side by side:
#   - the unit and suite tests, then the race tests (-short), then a short
#     fuzz run, one after the other;
#   - the CPI catalog (TestCertifyCatalog), the longest single step: each
#     bug and each legal variant that names the methods it varies
#     certified by the specs that can show it (make catalog gives every
#     one a whole default run; see cmd/cpilab/catalog_test.go).
# The catalog's certify runs fill the cores the unit step leaves idle on its
# tail (cmd/cpilab's certify runs, two at a time), and the race and fuzz
# steps start as soon as the unit step ends instead of waiting for the
# catalog. The unit step runs four packages at a time (go test's default is
# one per core): several suites mostly wait on a Director's tasks and agents
# (the FlexVolume catalog uses a fifth of a core for three minutes) and
# would hold a core's slot idle. Each line of output is prefixed with its
# step; a failing step ends its lane (the race and fuzz steps do not run
# after a failed unit step), and any lane's failure fails the whole run
# after both lanes have ended.
set -uo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
PKGS=${PKGS:-./...}
RACE_PKGS=${RACE_PKGS:?the packages for the race step}
FUZZTIME=${FUZZTIME:-3s}

# Every step's output is also kept in one file, so that a failed run ends
# by saying again what failed: a CI log read from its end shows the failing
# tests and their first lines, not only the last package's "ok".
log=$(mktemp "${TMPDIR:-/tmp}/cpilab-test-steps.XXXXXX")
trap 'rm -f "$log"' EXIT

step() { # step NAME COMMAND...: runs the command, its output prefixed with [NAME]
  local name=$1
  shift
  "$@" 2>&1 | sed -u "s/^/[$name] /" | tee -a "$log"
  return "${PIPESTATUS[0]}"
}

recap() { # each failing test's first 4 and last 8 lines, then every failing test and package
  awk '
    function flush(  i, from) {
      if (!n) return
      from = n > 12 ? n - 7 : 5
      for (i = 1; i <= n && i <= 4; i++) print block[i]
      if (from > 5) print "        … (" from - 5 " lines)"
      for (i = from; i <= n; i++) print block[i]
      n = 0
    }
    / --- FAIL: / { flush(); block[++n] = $0; failed[++f] = $0; next }
    n && /^\[[a-z]+\]     / { block[++n] = $0; next }
    { flush() }
    /^\[[a-z]+\] (FAIL\t|panic:)/ { failed[++f] = $0 }
    END {
      flush()
      if (f) print "make test: the failing tests and packages:"
      for (i = 1; i <= f; i++) print failed[i]
    }
  ' "$log"
}

start=$SECONDS
ended() { # ended NAME STATUS: says when a step ended, and how
  echo "[$1] ended with status $2 after $((SECONDS - start)) s"
}

tests_lane() { # unit, then race, then fuzz; stops at the first failure
  local rc race_pkgs
  step unit "$GO" test -p 4 -count=1 -timeout 30m -skip '^TestCertifyCatalog$' $PKGS
  rc=$?
  ended unit "$rc"
  [ "$rc" = 0 ] || return "$rc"
  race_pkgs=$("$GO" list $RACE_PKGS) || return 1
  # shellcheck disable=SC2086
  step race "$GO" test -count=1 -race -short -timeout 20m $race_pkgs
  rc=$?
  ended race "$rc"
  [ "$rc" = 0 ] || return "$rc"
  step fuzz ./scripts/fuzz.sh "$FUZZTIME"
  rc=$?
  ended fuzz "$rc"
  return "$rc"
}

tests_lane &
tests=$!
step catalog "$GO" test -count=1 -timeout 45m -run '^TestCertifyCatalog$' ./cmd/cpilab/ &
catalog=$!
wait "$catalog"; catalog_rc=$?
ended catalog "$catalog_rc"
wait "$tests"; tests_rc=$?
if [ "$tests_rc" != 0 ] || [ "$catalog_rc" != 0 ]; then
  echo "make test: what failed, said again (the lines above are in the order the steps printed them):" >&2
  recap >&2
  echo "make test: the unit, race and fuzz steps ended with status $tests_rc, the catalog with $catalog_rc" >&2
  exit 1
fi
echo "make test: every step passed in $((SECONDS - start)) s"
