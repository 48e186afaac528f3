#!/usr/bin/env bash
# make dist: static linux/amd64 and linux/arm64 builds in dist/, installed as
# the collection's binary modules (plugins/modules/kube_proxy_sync_linux_<arch>),
# and the collection tarball dist/kube_proxy_sync-kube_proxy_sync-<version>.tar.gz
# (galaxy.yml) that `ansible-galaxy collection install` takes offline.
# The tarball needs ansible-galaxy from a toolchain venv (make venv); without
# one, only the binaries are built.
#
# DIST_ARCHES="ppc64le" builds the modules of other release architectures
# (hack/lib.sh) for a playbook run from this checkout, as the role's preflight
# suggests on such a host. The tarball carries amd64 and arm64 (galaxy.yml),
# so it is built only when both are.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
cd "${REPO_ROOT}"

arches="${DIST_ARCHES:-amd64 arm64}"
for arch in ${arches}; do
  [[ " ${RELEASE_ARCHES} " == *" ${arch} "* ]] || die "DIST_ARCHES: ${arch} is not a release architecture (${RELEASE_ARCHES})"
done

mkdir -p dist plugins/modules
for arch in ${arches}; do
  out="dist/kube-proxy-sync-linux-${arch}"
  log "building ${out}"
  build_static "${arch}" "${out}"
  install -m 0755 "${out}" "plugins/modules/kube_proxy_sync_linux_${arch}"
done
# Playbooks run from this checkout find the collection here (ansible.cfg).
collections_link

if [[ " ${arches} " != *" amd64 "* || " ${arches} " != *" arm64 "* ]]; then
  log "DIST_ARCHES has not both amd64 and arm64: skipping the collection tarball"
  exit 0
fi
galaxy=""
for toolchain in ${ANSIBLE_TOOLCHAINS}; do
  if [[ -x "$(venv_dir "${toolchain}")/bin/ansible-galaxy" ]]; then
    galaxy="$(venv_dir "${toolchain}")/bin/ansible-galaxy"
  fi
done
if [[ -z "${galaxy}" ]]; then
  log "no toolchain venv (make venv): skipping the collection tarball"
  exit 0
fi
rm -f dist/kube_proxy_sync-kube_proxy_sync-*.tar.gz
ANSIBLE_HOME="${CACHE_DIR}/ansible/dist" "${galaxy}" collection build --force --output-path dist . >&2
tarball="$(ls dist/kube_proxy_sync-kube_proxy_sync-*.tar.gz)"
log "collection ${tarball} ($(du -h "${tarball}" | cut -f1))"
