#!/usr/bin/env bash
# Binary size, per architecture: stripped and gzipped bytes of the static
# linux build (what Ansible copies to the target host on every task run),
# and the 15 packages that take the most room.
#
#   hack/build/size.sh          print the figures
#   hack/build/size.sh --check  also fail when a build exceeds the budget (make test,
#                         make release)
#
# Every release architecture (RELEASE_ARCHES, hack/lib.sh) is measured: with
# a warm build cache each costs about 1 s to link and 3 s to gzip; the first
# build of an architecture compiles every dependency for it (about 70 s of
# CPU). SIZE_ARCHES="amd64 arm64" measures a subset. The budget (bytes,
# decimal MB) can be overridden for an experiment with SIZE_MAX_STRIPPED /
# SIZE_MAX_GZIP.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
cd "${REPO_ROOT}"

# The budget is 20 MB stripped and 7 MB gzipped (issue 14); the binary is
# about 16.4 MB and 6.0 MB (amd64). What brings it back over: a client-go
# typed clientset or applyconfiguration (every API group's types, ~21 MB),
# client-go's leaderelection (the same, via the clientset and informers),
# k8s.io/kube-proxy's types (component-base logging: Prometheus,
# OpenTelemetry, ~6 MB).
max_stripped="${SIZE_MAX_STRIPPED:-20000000}"
max_gzip="${SIZE_MAX_GZIP:-7000000}"

check=false
[[ "${1:-}" == "--check" ]] && check=true

out="${CACHE_DIR}/size"
mkdir -p "${out}"
over=()
printf '%-14s %12s %12s\n' "binary" "stripped" "gzipped"
for arch in ${SIZE_ARCHES:-${RELEASE_ARCHES}}; do
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
go run ./hack/build/binsize -top 15 "${out}/kube-proxy-sync-symbols"

if [[ "${check}" == true && ${#over[@]} -gt 0 ]]; then
  die "over the size budget: ${over[*]} (see the top packages above, and the imports named at the top of hack/build/size.sh)"
fi
if [[ "${check}" == true ]]; then
  log "size within budget: ${max_stripped} bytes stripped, ${max_gzip} gzipped"
fi
