#!/usr/bin/env bash
# make release: what a release publishes, and what kubespray's download role
# needs to fetch it, in dist/release/:
#
#   kube-proxy-sync-linux-<arch>  static, stripped builds for RELEASE_ARCHES
#                                 (hack/lib.sh), one file each, named the way
#                                 kubespray names single-binary downloads
#                                 (<name>-linux-{{ image_arch }})
#   SHA256SUMS                    `sha256sum` lines for those files
#                                 (check with `sha256sum -c SHA256SUMS`)
#   kubespray.yml                 the checksums in the shape of kubespray's
#                                 checksums.yml (arch -> version -> sha256:...),
#                                 and the *_download_url / *_checksum / downloads
#                                 entries that read them
#
# The version is galaxy.yml's (kps_version, hack/lib.sh; hack/verify/version.sh
# checks the binary and CHANGELOG.md agree); the tag is v<version>. The size budget is checked
# on every release arch first (hack/build/size.sh --check), so an over-budget build
# is never written.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
cd "${REPO_ROOT}"

hack/verify/version.sh
VERSION="$(kps_version)"
# owner/name of the repository whose releases carry the binaries (galaxy.yml)
repo="${RELEASE_REPO:-$(sed -E -n 's|^repository: *[a-z]+://[^/]+/||p' galaxy.yml)}"
[[ "${repo}" == */* ]] || die "no owner/name in galaxy.yml's repository: set RELEASE_REPO=owner/name"

if [[ "$(git describe --tags --exact-match --dirty 2>/dev/null || true)" != "v${VERSION}" ]]; then
  log "warning: this is not a clean checkout of the tag v${VERSION} (galaxy.yml's version); publish only builds of that tag"
fi

SIZE_ARCHES="${RELEASE_ARCHES}" hack/build/size.sh --check

out=dist/release
rm -rf "${out}"
mkdir -p "${out}"
for arch in ${RELEASE_ARCHES}; do
  log "building ${out}/kube-proxy-sync-linux-${arch}"
  build_static "${arch}" "${out}/kube-proxy-sync-linux-${arch}"
done
(cd "${out}" && sha256sum kube-proxy-sync-linux-* > SHA256SUMS)

# kubespray's version keys are bare X.Y.Z; the release URL is the tag's, v<version>.
yaml_key="${VERSION}"
url_version="v{{ kube_proxy_sync_version }}"

{
  printf -- '---\n'
  printf '# kube-proxy-sync %s for kubespray (make release, hack/build/release.sh).\n' "${VERSION}"
  printf '#\n'
  printf '# roles/kubespray_defaults/vars/main/checksums.yml: per arch (kubespray'"'"'s\n'
  printf '# image_arch; arm is armv7l), newest version first.\n'
  printf 'kube_proxy_sync_binary_checksums:\n'
  for arch in ${RELEASE_ARCHES}; do
    sum="$(sha256sum "${out}/kube-proxy-sync-linux-${arch}" | cut -d' ' -f1)"
    printf '  %s:\n    %s: sha256:%s\n' "${arch}" "${yaml_key}" "${sum}"
  done
  cat <<YAML

# roles/kubespray_defaults/defaults/main/download.yml, next to the other
# versions, *_download_url and *_checksum variables. The version defaults to
# the newest one with a checksum; github_url is the setting kubespray's
# offline-environment docs point at a mirror.
kube_proxy_sync_version: "{{ (kube_proxy_sync_binary_checksums['amd64'] | dict2items)[0].key }}"
kube_proxy_sync_download_url: "{{ github_url }}/${repo}/releases/download/${url_version}/kube-proxy-sync-linux-{{ image_arch }}"
kube_proxy_sync_binary_checksum: "{{ kube_proxy_sync_binary_checksums[image_arch][kube_proxy_sync_version] }}"

# The entry of that file's downloads map (shown as a comment: this file is
# not a place to define downloads). enabled: the patch's opt-in variable.
#   kube_proxy_sync:
#     enabled: "{{ kube_proxy_sync_enabled }}"
#     file: true
#     version: "{{ kube_proxy_sync_version }}"
#     dest: "{{ local_release_dir }}/kube-proxy-sync-{{ kube_proxy_sync_version }}-{{ image_arch }}"
#     checksum: "{{ kube_proxy_sync_binary_checksum }}"
#     url: "{{ kube_proxy_sync_download_url }}"
#     unarchive: false
#     owner: "root"
#     mode: "0755"
#     groups:
#       - kube_control_plane
YAML
} > "${out}/kubespray.yml"

log "release ${VERSION} in ${out}/:"
(cd "${out}" && ls -l) >&2
