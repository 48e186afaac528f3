#!/usr/bin/env bash
# make release: what a release of version V (galaxy.yml's) publishes, in
# dist/release/, all of it named by V:
#
#   kube_proxy_sync-kube_proxy_sync-V.tar.gz
#                                 the collection (make dist): the role and a
#                                 binary module for every architecture a
#                                 kubespray control plane can have
#                                 (RELEASE_ARCHES in hack/lib.sh), each with
#                                 its sha256 in the tarball's FILES.json
#   kube-proxy-sync-V-linux-<arch>
#                                 the same binaries, bare: what kubespray's
#                                 download role fetches (a downloads entry,
#                                 docs/kubespray/README.md) and the command
#   SHA256SUMS                    `sha256sum` lines for all of those
#                                 (`sha256sum -c SHA256SUMS`)
#   checksums.yml                 the lines that go into kubespray's
#                                 roles/kubespray_defaults/vars/main/checksums.yml
#                                 (kube_proxy_sync_binary_checksums: per
#                                 architecture, this version's sha256), also
#                                 printed on stdout
#
# One version: hack/verify/version.sh checks galaxy.yml, the binary's
# --version and CHANGELOG.md agree before anything is built; the tag is vV.
# The size budget is checked on every release arch first (hack/build/size.sh
# --check), so an over-budget build is never written. The binaries are
# checked to be the very files the tarball carries.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
cd "${REPO_ROOT}"

hack/verify/version.sh
VERSION="$(kps_version)"
if [[ "$(git describe --tags --exact-match --dirty 2>/dev/null || true)" != "v${VERSION}" ]]; then
  log "warning: this is not a clean checkout of the tag v${VERSION} (galaxy.yml's version); publish only builds of that tag"
fi

SIZE_ARCHES="${RELEASE_ARCHES}" hack/build/size.sh --check

DIST_ARCHES="${RELEASE_ARCHES}" hack/build/dist.sh
tarball="dist/kube_proxy_sync-kube_proxy_sync-${VERSION}.tar.gz"
[[ -f "${tarball}" ]] || die "make dist wrote no ${tarball} (it needs a toolchain venv: make venv)"

out=dist/release
rm -rf "${out}"
mkdir -p "${out}"
files=("${tarball##*/}")
manifest="$(tar -xzOf "${tarball}" FILES.json)"
checksums="kube_proxy_sync_binary_checksums:"
for arch in ${RELEASE_ARCHES}; do
  bin="kube-proxy-sync-${VERSION}-linux-${arch}"
  cp "dist/kube-proxy-sync-linux-${arch}" "${out}/${bin}"
  files+=("${bin}")
  sum="$(sha256sum "${out}/${bin}" | cut -d' ' -f1)"
  checksums+=$'\n'"  ${arch}:"$'\n'"    ${VERSION}: sha256:${sum}"
  grep -q "\"plugins/modules/kube_proxy_sync_linux_${arch}\".*\"${sum}\"" <<<"$(python3 -c '
import json, sys
for f in json.load(sys.stdin)["files"]:
    print(json.dumps(f["name"]), json.dumps(f["chksum_sha256"]))' <<<"${manifest}")" ||
    die "${tarball} does not carry ${bin} (sha256 ${sum}) as plugins/modules/kube_proxy_sync_linux_${arch}"
done
cp "${tarball}" "${out}/"
(cd "${out}" && sha256sum "${files[@]}" >SHA256SUMS)
printf '%s\n' "${checksums}" >"${out}/checksums.yml"

log "release ${VERSION} (tag v${VERSION}) in ${out}/:"
(cd "${out}" && ls -l) >&2
log "for kubespray's roles/kubespray_defaults/vars/main/checksums.yml (${out}/checksums.yml; a newer version goes above the older ones under each architecture):"
cat "${out}/checksums.yml"
