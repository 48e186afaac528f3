#!/usr/bin/env bash
# Binary size, per architecture: stripped and gzipped bytes of the static
# linux build (what Ansible copies to the target host on every task run),
# and the 15 packages that take the most room.
#
#   hack/size.sh          print the figures
#   hack/size.sh --check  also fail when a build exceeds the budget (make test)
#
# The budget (bytes, decimal MB) can be overridden for an experiment with
# SIZE_MAX_STRIPPED / SIZE_MAX_GZIP.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "${REPO_ROOT}"

# The budget is 20 MB stripped and 7 MB gzipped (issue 14). While
# internal/kpconfig still imports k8s.io/kube-proxy, which brings
# component-base's logging (Prometheus, OpenTelemetry; 6.0 MB measured),
# the ceiling is the size with it (22.4 MB, 7.8 MB gzipped, amd64), so the
# binary can only shrink; the 20 MB budget applies as soon as that import
# is gone (16.4 MB, 5.9 MB gzipped without it).
if go list -deps ./cmd/kube-proxy-sync | grep -qx 'k8s.io/component-base/logs/api/v1'; then
  log "k8s.io/kube-proxy's component-base logging is still linked: ceiling is today's size, not the 20 MB budget"
  default_stripped=23000000 default_gzip=8000000
else
  default_stripped=20000000 default_gzip=7000000
fi
max_stripped="${SIZE_MAX_STRIPPED:-${default_stripped}}"
max_gzip="${SIZE_MAX_GZIP:-${default_gzip}}"

check=false
[[ "${1:-}" == "--check" ]] && check=true

out="${CACHE_DIR}/size"
mkdir -p "${out}"
over=()
printf '%-14s %12s %12s\n' "binary" "stripped" "gzipped"
for arch in amd64 arm64; do
  bin="${out}/kube-proxy-sync-linux-${arch}"
  build_static "${arch}" "${bin}"
  stripped="$(wc -c <"${bin}")"
  gzipped="$(gzip -9 -c "${bin}" | wc -c)"
  printf '%-14s %12s %12s\n' "linux/${arch}" \
    "$(awk -v n="${stripped}" 'BEGIN { printf "%.1f MB", n / 1e6 }')" \
    "$(awk -v n="${gzipped}" 'BEGIN { printf "%.1f MB", n / 1e6 }')"
  (( stripped <= max_stripped )) || over+=("linux/${arch} is ${stripped} bytes stripped, budget ${max_stripped}")
  (( gzipped <= max_gzip )) || over+=("linux/${arch} is ${gzipped} bytes gzipped, budget ${max_gzip}")
done

# the same build with its symbol table, to see where the bytes go
printf '\ntop packages, linux/amd64 (symbol bytes):\n'
build_static amd64 "${out}/kube-proxy-sync-symbols" nostrip
go run ./hack/binsize -top 15 "${out}/kube-proxy-sync-symbols"

if [[ "${check}" == true && ${#over[@]} -gt 0 ]]; then
  die "over the size budget: ${over[*]} (see the top packages above; an import of a client-go typed clientset, k8s.io/kube-proxy or leaderelection brings back every API group)"
fi
if [[ "${check}" == true ]]; then
  log "size within budget: ${max_stripped} bytes stripped, ${max_gzip} gzipped"
fi
