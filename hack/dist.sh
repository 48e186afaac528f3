#!/usr/bin/env bash
# Static linux/amd64 and linux/arm64 builds in dist/, copied into the role as
# its binary Ansible modules (roles/kube_proxy_sync/library/kube_proxy_sync_linux_<arch>).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "${REPO_ROOT}"

library="roles/kube_proxy_sync/library"
mkdir -p dist "${library}"
for arch in amd64 arm64; do
  out="dist/kube-proxy-sync-linux-${arch}"
  log "building ${out}"
  build_static "${arch}" "${out}"
  install -m 0755 "${out}" "${library}/kube_proxy_sync_linux_${arch}"
done
