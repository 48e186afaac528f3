#!/usr/bin/env bash
# make verify (and make release, first): one version everywhere. galaxy.yml's
# version (kps_version, hack/lib.sh) is the only place it is written; this
# fails when
#   - it is not MAJOR.MINOR.PATCH (what ansible-galaxy and a v-tag take),
#   - the binary built with the release flags (kps_ldflags) reports another
#     version in --version (a renamed variable, a flag that no longer lands),
#   - CHANGELOG.md's newest entry is not that version.
#   hack/verify/version.sh
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
cd "${REPO_ROOT}"

version="$(kps_version)"
[[ "${version}" =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]] ||
  die "galaxy.yml's version is '${version}': want MAJOR.MINOR.PATCH, the one version of the binary, the collection and the release"

out="$(mktemp -d)"
trap 'rm -rf "${out}"' EXIT
CGO_ENABLED=0 go build -trimpath -ldflags "$(kps_ldflags)" -o "${out}/kube-proxy-sync" ./cmd/kube-proxy-sync
reported="$("${out}/kube-proxy-sync" --version)"
[[ "${reported}" =~ ^kube-proxy-sync\ ([^ ]+)(\ \(commit\ [^\)]+\))?$ ]] ||
  die "--version printed '${reported}': want 'kube-proxy-sync VERSION (commit COMMIT)'"
[[ "${BASH_REMATCH[1]}" == "${version}" ]] ||
  die "the binary built with kps_ldflags (hack/lib.sh) reports version ${BASH_REMATCH[1]}, galaxy.yml says ${version}"

newest="$(sed -n 's/^## *//p' CHANGELOG.md | head -n1)"
[[ "${newest}" == "${version}" ]] ||
  die "CHANGELOG.md's newest entry is '${newest}', galaxy.yml's version is ${version}: add a '## ${version}' entry"

log "one version, ${version}: galaxy.yml, --version (${reported}), CHANGELOG.md"
