#!/usr/bin/env bash
# Runs every go fuzz target (func FuzzXxx in *_fuzz_test.go) for FUZZTIME
# each, one after the other. A crash stops the run; go test saves the input
# under the package's testdata/fuzz/<FuzzName>/, where plain `go test` then
# replays it as a regression test (commit it with the fix).
#
# Environment:
#   FUZZTIME=30s   how long each target runs (a go test -fuzztime value)
#   FUZZ=regex     only targets whose name matches
#   FUZZMINIMIZETIME=5s  time spent shrinking each new interesting input
#                  (go's default, 60s, can eat most of a short FUZZTIME)
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
cd "${REPO_ROOT}"

FUZZTIME="${FUZZTIME:-30s}"
FUZZ="${FUZZ:-.}"
FUZZMINIMIZETIME="${FUZZMINIMIZETIME:-5s}"

ran=0
while IFS= read -r file; do
  pkg="./$(dirname "${file}")"
  while IFS= read -r name; do
    [[ "${name}" =~ ${FUZZ} ]] || continue
    log "fuzzing ${pkg} ${name} for ${FUZZTIME}"
    go test -run '^$' -fuzz "^${name}\$" -fuzztime "${FUZZTIME}" -fuzzminimizetime "${FUZZMINIMIZETIME}" "${pkg}"
    ran=$((ran + 1))
  done < <(grep -oE '^func Fuzz[A-Za-z0-9_]+' "${file}" | sed 's/^func //')
done < <(find internal cmd -name '*_fuzz_test.go' 2>/dev/null | sort)
((ran > 0)) || die "no fuzz target matches FUZZ=${FUZZ}"
log "${ran} fuzz targets ran ${FUZZTIME} each without a crash"
