#!/usr/bin/env bash
# Static linux/amd64 and linux/arm64 builds in dist/, copied into the role as
# its binary Ansible modules (roles/kube_proxy_sync/library/kube_proxy_sync_linux_<arch>).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "${REPO_ROOT}"

version="${VERSION:-$(git describe --tags --always --dirty 2>/dev/null || echo dev)}"
ldflags="-s -w -X github.com/kube-proxy-sync/kube-proxy-sync/internal/app.version=${version}"
library="roles/kube_proxy_sync/library"
mkdir -p dist "${library}"
for arch in amd64 arm64; do
  out="dist/kube-proxy-sync-linux-${arch}"
  log "building ${out} (${version})"
  CGO_ENABLED=0 GOOS=linux GOARCH="${arch}" go build -trimpath -ldflags "${ldflags}" -o "${out}" ./cmd/kube-proxy-sync
  install -m 0755 "${out}" "${library}/kube_proxy_sync_linux_${arch}"
done
