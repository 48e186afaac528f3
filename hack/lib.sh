# Shared helpers for hack/*.sh. Source it; it defines no behaviour on its own.
# shellcheck shell=bash

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE_DIR="${CACHE_DIR:-${REPO_ROOT}/.cache}"
TOOLS_BIN="${CACHE_DIR}/bin"
CLUSTER_DIR="${CACHE_DIR}/cluster"
KUBECONFIG_PATH="${CLUSTER_DIR}/kubeconfig"
VENV_DIR="${VENV_DIR:-${REPO_ROOT}/.venv}"

# Pinned versions, from the one file the Makefile includes too.
while IFS=':=' read -r name _ value; do
  name="${name// /}"
  [[ -z "${name}" || "${name}" == \#* ]] && continue
  value="${value#"${value%%[![:space:]]*}"}"
  printf -v "${name}" '%s' "${value}"
  export "${name?}"
done < "${REPO_ROOT}/hack/versions.mk"

log() { printf '==> %s\n' "$*" >&2; }
die() { printf 'error: %s\n' "$*" >&2; exit 1; }

# build_static ARCH OUT [nostrip]: the release build of the binary for
# linux/ARCH (static, trimmed paths, stripped unless nostrip).
build_static() {
  local arch="$1" out="$2" strip="-s -w"
  [[ "${3:-}" == nostrip ]] && strip=""
  local version="${VERSION:-$(git -C "${REPO_ROOT}" describe --tags --always --dirty 2>/dev/null || echo dev)}"
  CGO_ENABLED=0 GOOS=linux GOARCH="${arch}" go build -trimpath \
    -ldflags "${strip} -X github.com/kube-proxy-sync/kube-proxy-sync/internal/app.version=${version}" \
    -o "${out}" ./cmd/kube-proxy-sync
}
