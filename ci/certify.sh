#!/usr/bin/env bash
# Certify a CPI with cpilab and leave reports in $REPORT_DIR. The exit status
# is cpilab's: 0 accepted, 1 rejected, 2 a usage or harness error (or
# interrupted), so that CI tells a broken CPI from a broken pipeline.
#   CPI_PATH             the CPI executable, on cpilab's embedded cloud (default bin/cpi)
#   CPILAB_CONFIG        a cloud.yml for a real cloud instead (--config; CPI_PATH is then unused)
#   CPILAB               the cpilab binary (default: cpilab on PATH)
#   REPORT_DIR           where junit.xml, report.json, report.html and the run's log cpilab.log go (default reports)
#   LABELS               optional Ginkgo label filter, e.g. 'suite:contract'
#   STRICT               non-empty: specs not checked count as failed (--strict)
#   REQUIRE_API_VERSION  fail a CPI reporting a lower api_version (default 0: none)
set -euo pipefail
cpilab=${CPILAB:-cpilab}
out=${REPORT_DIR:-reports}
mkdir -p "$out"
args=(certify --report-dir "$out")
if [ -n "${CPILAB_CONFIG:-}" ]; then
	args+=(--config "$CPILAB_CONFIG")
else
	args+=(--cpi "${CPI_PATH:-bin/cpi}")
fi
if [ -n "${LABELS:-}" ]; then args+=(--label-filter "$LABELS"); fi
if [ -n "${STRICT:-}" ]; then args+=(--strict); fi
if [ "${REQUIRE_API_VERSION:-0}" != 0 ]; then args+=(--require-api-version "$REQUIRE_API_VERSION"); fi
exec "$cpilab" "${args[@]}"
