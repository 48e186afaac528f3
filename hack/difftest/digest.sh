#!/usr/bin/env bash
# The digest of everything the differential test proves: the validation
# (internal/kpvalidate), the root module's dependencies, the per-minor
# modules and their list. hack/difftest/run.sh records it in proven.sum after
# every minor agreed; hack/ci/difftest.sh compares it to decide whether `make
# test` must run every minor again or only the sentinel minors (SENTINELS below).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
# the sentinel minor `make test` runs when nothing proven has changed: the
# newest. The oldest and the kind tier's run as real binaries in every
# `make test` (hack/difftest/realbinary.sh: kube-proxy v1.27 and
# KUBERNETES_VERSION's), and one compiled minor is enough to notice a
# toolchain or module that no longer agrees; each costs minutes cold.
if [[ "${1:-}" == --sentinels ]]; then
  awk '$1 !~ /^#/ && NF {print $1}' hack/difftest/versions.txt | tail -n1
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
