#!/usr/bin/env bash
# Certify a CPI executable with cpilab and leave reports in $REPORT_DIR.
#   CPI_PATH    the CPI executable (default bin/cpi)
#   CPILAB      the cpilab binary (default: cpilab on PATH)
#   REPORT_DIR  where junit.xml, report.json and report.html go (default reports)
#   LABELS      optional Ginkgo label filter, e.g. '!slow'
set -euo pipefail
cpi=${CPI_PATH:-bin/cpi}
cpilab=${CPILAB:-cpilab}
out=${REPORT_DIR:-reports}
mkdir -p "$out"
args=(certify --cpi "$cpi" --junit-report "$out/junit.xml" --json-report "$out/report.json" --html-report "$out/report.html")
[ -n "${LABELS:-}" ] && args+=(--label-filter "$LABELS")
exec "$cpilab" "${args[@]}"
