#!/usr/bin/env bash
# The differential test of kube-proxy's config validation: for every
# supported minor (hack/difftest/versions.txt), its module under
# hack/difftest/v1.NN runs kube-proxy's real decoding, defaulting and
# validation next to internal/kpvalidate on the same inputs: the case table,
# a fixed pseudo-random sweep, the field table against the real types and
# the feature gates. The fuzz target then runs for FUZZTIME (default 20s; 0
# skips it) at the minors in DIFFTEST_FUZZ (default: the newest): fuzzing
# rebuilds every dependency with coverage instrumentation, which costs as
# much as the first build of the module.
#
# The first build of a module compiles that Kubernetes version's libraries:
# about 8 CPU-minutes per minor; later runs reuse the Go build cache.
#
# A green run of every minor writes hack/difftest/proven.sum: the digest
# of what it proved (hack/difftest/digest.sh). `make test` runs every minor
# only when the digest no longer matches, else the sentinel minors.
#
# Usage: hack/difftest/run.sh [--gates] [1.NN ...]   (default: every minor)
#   --gates  regenerate internal/kpvalidate/zz_generated_gates.go from the
#            gates every minor knows (needs every minor)
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
cd "${REPO_ROOT}/hack/difftest"

FUZZTIME="${FUZZTIME:-20s}"
DIFFTEST_FUZZ="${DIFFTEST_FUZZ:-$(awk '$1 !~ /^#/ && NF {m=$1} END {print m}' versions.txt)}"
GATES=0
if [[ "${1:-}" == "--gates" ]]; then
  GATES=1
  shift
fi
# The checksum database does not know many k8s.io/* v0.X.Y releases: each
# module's go.sum pins what the module proxy served.
export GONOSUMDB=k8s.io
gates_dir="$(mktemp -d)"
trap 'rm -rf "${gates_dir}"' EXIT

want=("$@")
while read -r minor kube _; do
  [[ -z "${minor}" || "${minor}" == \#* ]] && continue
  if ((${#want[@]})) && [[ " ${want[*]} " != *" ${minor} "* ]]; then
    continue
  fi
  # the version kube-proxy's binary reports (showHiddenMetricsForVersion)
  ldflags="-X k8s.io/component-base/version.gitVersion=${kube} -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=${minor#1.}"
  log "kube-proxy ${minor} (k8s.io/kubernetes ${kube})"
  start=${SECONDS}
  run=(TestLenientLogSeen TestCases TestRandom TestFieldTable TestFeatureGates TestGateStages FuzzDiff)
  if ((GATES)); then
    # the table is being regenerated: dump the gates, check them afterwards
    run=(TestFeatureGates)
  fi
  # -vet=off: go test's vet analyses every package the module builds
  # (facts for its checks), all of Kubernetes' here, for one small test file
  (cd "v${minor}" && DIFFTEST_GATES_OUT="${gates_dir}/gates-${minor}.json" \
    go test -vet=off -count=1 -ldflags "${ldflags}" -run "^($(IFS='|'; echo "${run[*]}"))\$" . ) || {
      ((GATES)) || die "kube-proxy ${minor} and internal/kpvalidate disagree (see above)"
    }
  if ((!GATES)) && [[ "${FUZZTIME}" != 0 && " ${DIFFTEST_FUZZ} " == *" ${minor} "* ]]; then
    (cd "v${minor}" && go test -vet=off -count=1 -ldflags "${ldflags}" -run '^$' -fuzz '^FuzzDiff$' -fuzztime "${FUZZTIME}" .) ||
      die "fuzzing found a config kube-proxy ${minor} and internal/kpvalidate disagree on (the input is in hack/difftest/v${minor}/testdata/fuzz)"
  fi
  log "kube-proxy ${minor}: agreed ($((SECONDS - start))s)"
done <versions.txt

# and the real kube-proxy binaries, where the kind harness built them
# (make test runs that check itself, once it has built them:
# DIFFTEST_REALBINARY=0 leaves it out here)
if ((!GATES)) && [[ "${DIFFTEST_REALBINARY:-1}" == 1 ]]; then
  "${REPO_ROOT}/hack/difftest/realbinary.sh"
fi

if ((!GATES && ${#want[@]} == 0)); then
  "${REPO_ROOT}/hack/difftest/digest.sh" >"${REPO_ROOT}/hack/difftest/proven.sum"
  log "every minor agreed: hack/difftest/proven.sum records what was proven (commit it)"
fi

if ((GATES)); then
  cd "${REPO_ROOT}"
  go run ./hack/difftest/gengates "${gates_dir}" >internal/kpvalidate/zz_generated_gates.go.tmp
  mv internal/kpvalidate/zz_generated_gates.go.tmp internal/kpvalidate/zz_generated_gates.go
  log "wrote internal/kpvalidate/zz_generated_gates.go; run hack/difftest/run.sh again to check everything"
fi
