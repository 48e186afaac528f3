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
# The version is the Makefile's (git describe); kubespray's keys drop its
# leading v, as they do for every other project. The size budget is checked
# on every release arch first (hack/build/size.sh --check), so an over-budget build
# is never written.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
cd "${REPO_ROOT}"

VERSION="${VERSION:-$(git describe --tags --always --dirty 2>/dev/null || echo dev)}"
export VERSION
# owner/name of the repository whose releases carry the binaries (galaxy.yml)
repo="${RELEASE_REPO:-$(sed -E -n 's|^repository: *[a-z]+://[^/]+/||p' galaxy.yml)}"
[[ "${repo}" == */* ]] || die "no owner/name in galaxy.yml's repository: set RELEASE_REPO=owner/name"

if ! git describe --tags --exact-match >/dev/null 2>&1 || [[ "${VERSION}" == *-dirty ]]; then
  log "warning: ${VERSION} is not a clean tagged commit; publish only builds of a tag (git tag vX.Y.Z)"
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

# kubespray's version keys and URLs: v1.2.3 is keyed 1.2.3 and the URL puts
# the v back; a version that is not a v-tag (a commit) is used as it is.
key="${VERSION#v}"
url_version="{{ kube_proxy_sync_version }}"
[[ "${VERSION}" == v* ]] && url_version="v${url_version}"
# kubespray writes its X.Y.Z keys bare; anything else (a commit, which YAML
# may read as a number) is quoted.
yaml_key="${key}"
[[ "${key}" =~ ^[0-9]+\.[0-9]+\.[0-9]+ ]] || yaml_key="'${key}'"

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
