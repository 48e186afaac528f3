#!/usr/bin/env bash
# make dist: static linux builds in dist/ for every architecture the
# collection carries (RELEASE_ARCHES in hack/lib.sh: amd64, arm64,
# ppc64le, every one a kubespray control plane can have), installed as the collection's
# binary modules (plugins/modules/kube_proxy_sync_linux_<arch>), and the
# collection tarball dist/kube_proxy_sync-kube_proxy_sync-<version>.tar.gz
# (galaxy.yml's version) that `ansible-galaxy collection install` takes
# offline; its FILES.json holds each module's sha256, which ansible-galaxy
# checks on install. The tarball needs ansible-galaxy from a toolchain venv
# (make venv); without one, only the binaries are built.
#
# DIST_ARCHES="amd64" builds a subset, for a playbook run from this checkout
# on one architecture (the kubespray tier does); the tarball carries every
# architecture, so it is built only when all of them are.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
cd "${REPO_ROOT}"

arches="${DIST_ARCHES:-${RELEASE_ARCHES}}"
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

for arch in ${RELEASE_ARCHES}; do
  if [[ " ${arches} " != *" ${arch} "* ]]; then
    log "DIST_ARCHES (${arches}) leaves out ${arch}: skipping the collection tarball, which carries ${RELEASE_ARCHES}"
    exit 0
  fi
done
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
# Built from a copy of what galaxy.yml's manifest takes: ansible-galaxy walks
# every file under the directory it builds before it applies the manifest,
# and under .cache other jobs (the kind tier's root filesystems and Docker
# data) make and remove files while this runs.
stage="${CACHE_DIR}/dist/collection"
rm -rf "${stage}"
mkdir -p "${stage}"
tar -cf - galaxy.yml README.md CHANGELOG.md meta roles plugins/modules tests/sanity | tar -xf - -C "${stage}"
ANSIBLE_HOME="${CACHE_DIR}/ansible/dist" "${galaxy}" collection build --force --output-path "${REPO_ROOT}/dist" "${stage}" >&2
rm -rf "${stage}"
tarball="$(ls dist/kube_proxy_sync-kube_proxy_sync-*.tar.gz)"
# Four static binaries make it about 23 MB, more than the 20 MB
# galaxy.ansible.com takes: it is published with the release (make release),
# and installed from there or offline (README.md, "Release artifacts").
log "collection ${tarball} ($(du -h "${tarball}" | cut -f1))"
