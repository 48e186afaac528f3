#!/usr/bin/env bash
# The digest of everything the differential test proves: the validation
# (internal/kpvalidate), the root module's dependencies, the per-minor
# modules and their list. hack/difftest/run.sh records it in proven.sum after
# every minor agreed; hack/ci/test.sh compares it to decide whether `make test`
# must run every minor again or only the sentinel minors (SENTINELS below).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
# the sentinel minors `make test` runs when nothing proven has changed: the
# oldest, the kind tier's (KUBERNETES_VERSION) and the newest
if [[ "${1:-}" == --sentinels ]]; then
  minors="$(awk '$1 !~ /^#/ && NF {print $1}' hack/difftest/versions.txt)"
  kind_minor="$(awk '$1 == "KUBERNETES_VERSION" {sub(/^v/, "", $3); split($3, v, "."); print v[1] "." v[2]}' hack/versions.mk)"
  printf '%s\n' "$(head -n1 <<<"${minors}")" "${kind_minor}" "$(tail -n1 <<<"${minors}")" | awk '!seen[$0]++' | xargs
  exit 0
fi
# tracked and untracked files alike (an uncommitted change is not proven);
# the effect-table check (hack/difftest/effectsrc/) is not in it:
# hack/difftest/effectsrc.sh runs always
{
  git ls-files --cached --others --exclude-standard -- \
    internal/kpvalidate go.mod go.sum hack/difftest/versions.txt \
    hack/difftest/_template 'hack/difftest/v1.*' |
    LC_ALL=C sort -u |
    while read -r f; do [[ -f "${f}" ]] && sha256sum "${f}"; done
} | sha256sum | cut -d' ' -f1
