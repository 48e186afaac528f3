#!/usr/bin/env bash
# The mode column of internal/kpvalidate's field table (which proxy modes
# read each KubeProxyConfiguration field, so a change elsewhere is
# "no-effect") checked against kube-proxy's own source, every supported
# minor (versions.txt): hack/difftest/effectsrc parses, with go/parser
# and without compiling anything, cmd/kube-proxy/app, the proxiers it hands
# the whole configuration to, the v1alpha1 conversion and the v1alpha1 types,
# and finds the modes under which each field is read. Costs the downloads of
# the sources (go mod download: source only, no build), then about a second.
#
# Usage: hack/difftest/effectsrc.sh [1.NN ...]   (default: every minor)
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
# The checksum database does not know many k8s.io/* v0.X.Y releases (see
# gen.sh); outside a module, so nothing's go.mod or go.sum changes.
export GONOSUMDB=k8s.io GOFLAGS=-mod=mod

work="$(mktemp -d)"
trap 'rm -rf "${work}"' EXIT
list="${work}/sources"

# dir MODULE@VERSION: where go mod download put its source
dir() {
  (cd "${work}" && go mod download -json "$1") | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p'
}

want=("$@")
while read -r minor kube staging overrides; do
  [[ -z "${minor}" || "${minor}" == \#* ]] && continue
  if ((${#want[@]})) && [[ " ${want[*]} " != *" ${minor} "* ]]; then
    continue
  fi
  kubeproxy="${staging}"
  for o in ${overrides//,/ }; do
    [[ "${o}" == kube-proxy=* ]] && kubeproxy="${o#kube-proxy=}"
  done
  k8s_dir="$(dir "k8s.io/kubernetes@${kube}")"
  kp_dir="$(dir "k8s.io/kube-proxy@${kubeproxy}")"
  [[ -d "${k8s_dir}" && -d "${kp_dir}" ]] || die "could not download the source of kube-proxy ${minor} (k8s.io/kubernetes@${kube}, k8s.io/kube-proxy@${kubeproxy}): check the module proxy (GOPROXY)"
  printf '%s %s %s\n' "${minor}" "${k8s_dir}" "${kp_dir}" >>"${list}"
done <"${REPO_ROOT}/hack/difftest/versions.txt"
[[ -s "${list}" ]] || die "no minor of hack/difftest/versions.txt matches: $*"

cd "${REPO_ROOT}"
every=0
((${#want[@]})) || every=1
EFFECTSRC_SOURCES="${list}" EFFECTSRC_EVERY_MINOR="${every}" go test -count=1 -v -run '^TestKubeProxySource$' ./hack/difftest/effectsrc/ |
  grep -vE '^=== (RUN|PAUSE|CONT)'
