#!/usr/bin/env bash
# Deletes the kind cluster (hack/kind/up.sh), reports the packets that tried
# to leave its docker network (hack/kind/egress.sh; exit 1 if any did), and
# stops the project-owned Docker engine if this checkout started one. Built
# images stay in the engine's data root under .cache for the next kind-up.
# Safe to run twice or when nothing runs.
set -euo pipefail
# shellcheck source=hack/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"

KIND_CLUSTER="${KIND_CLUSTER:-kps}"
docker_env

egress=0 where=""
if docker info >/dev/null 2>&1; then
  egress="$("${REPO_ROOT}/hack/kind/egress.sh" count kind)"
  ((egress == 0)) || where="$("${REPO_ROOT}/hack/kind/egress.sh" where kind | sort | uniq -c | sort -rn | head -20)"
  "${REPO_ROOT}/hack/kind/egress.sh" remove kind
  if [[ -x "${TOOLS_BIN}/kind" ]] && "${TOOLS_BIN}/kind" get clusters 2>/dev/null | grep -qx "${KIND_CLUSTER}"; then
    log "deleting kind cluster ${KIND_CLUSTER}"
    "${TOOLS_BIN}/kind" delete cluster --name "${KIND_CLUSTER}" >/dev/null 2>&1
  fi
  # kind leaves its docker network (and so a bridge on the host) behind;
  # remove it when no container of another cluster still uses it.
  if [[ -z "$(docker network inspect -f '{{range .Containers}}{{.Name}} {{end}}' kind 2>/dev/null)" ]]; then
    docker network rm kind >/dev/null 2>&1 || true
  fi
fi
rm -f "${CACHE_DIR}/kind/kubeconfig"
"${REPO_ROOT}/hack/kind/docker.sh" down
log "packets that tried to leave the kind network: ${egress}"
[[ -z "${where}" ]] || printf 'where they went (the kernel log, count first):\n%s\n' "${where}" >&2
((egress == 0)) || die "${egress} packets tried to leave the kind cluster's docker network (dropped): something in the cluster talks to an address outside it"
