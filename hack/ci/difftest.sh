#!/usr/bin/env bash
# The differential test as make test runs it: every supported minor when
# what it proves changed since its last green run of every minor
# (hack/difftest/proven.sum), else the sentinel minors (a cold build
# compiles Kubernetes once per minor); DIFFTEST_MINORS="1.27 1.37" picks a
# subset (see docs/validation.md). Then the effect table against
# kube-proxy's source, every minor (downloads only, no build).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
cd "${REPO_ROOT}"

step() { printf '\n==== %s\n' "$*" >&2; }

if [[ -z "${DIFFTEST_MINORS:-}" ]]; then
  if [[ "$(hack/difftest/digest.sh)" == "$(cat hack/difftest/proven.sum 2>/dev/null)" ]]; then
    DIFFTEST_MINORS="$(hack/difftest/digest.sh --sentinels)"
    # the fuzz target's seeds still run; its search (a coverage rebuild of
    # Kubernetes) runs with every minor
    export FUZZTIME="${FUZZTIME:-0}"
    step "differential test: config validation against kube-proxy's own (${DIFFTEST_MINORS}; every minor is proven for this validation, hack/difftest/proven.sum)"
  else
    step "differential test: config validation against kube-proxy's own (every minor: the validation changed since hack/difftest/proven.sum)"
  fi
else
  step "differential test: config validation against kube-proxy's own (${DIFFTEST_MINORS})"
fi
# shellcheck disable=SC2086
DIFFTEST_REALBINARY=0 hack/difftest/run.sh ${DIFFTEST_MINORS:-}
step "which modes read each field: the effect table against kube-proxy's source"
hack/difftest/effectsrc.sh
