#!/usr/bin/env bash
# Stops every local cluster hack/cluster/up.sh started (kwokctl delete
# cluster), then checks that no etcd, kube-* or kwok process started from
# .cache/bin is left, and ends any that is. Safe to run twice or when
# nothing runs. The built binaries in .cache/bin are kept.
set -euo pipefail
# shellcheck source=hack/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"

KWOK_WORKDIR="${CLUSTER_DIR}/kwok"
COMPONENTS=(etcd kube-apiserver kube-controller-manager kube-scheduler kwok)

# our_pids: processes of this checkout's clusters: their executable is one of
# the components in TOOLS_BIN (a rebuilt one shows as "<path> (deleted)") and
# their command line names KWOK_WORKDIR (kwokctl starts them from there).
our_pids() {
  local proc pid exe name bin
  bin="$(realpath -m "${TOOLS_BIN}")"
  for proc in /proc/[0-9]*; do
    pid="${proc#/proc/}"
    exe="$(readlink "${proc}/exe" 2>/dev/null)" || continue
    exe="${exe% (deleted)}"
    [[ "${exe}" == "${bin}/"* ]] || continue
    for name in "${COMPONENTS[@]}"; do
      if [[ "${exe}" == "${bin}/${name}" ]] &&
        tr '\0' ' ' <"${proc}/cmdline" 2>/dev/null | grep -qF "${KWOK_WORKDIR}/"; then
        printf '%s\n' "${pid}"
      fi
    done
  done
  return 0
}

mkdir -p "${CLUSTER_DIR}"
exec 9>"${CLUSTER_DIR}/.lock"
if ! flock -n 9; then
  log "another cluster-up or cluster-down is running; waiting for it"
  flock 9
fi

shopt -s nullglob
clusters=("${KWOK_WORKDIR}"/clusters/*/)
if ((${#clusters[@]} == 0)); then
  log "no local cluster to delete"
elif [[ ! -x "${TOOLS_BIN}/kwokctl" ]]; then
  log "kwokctl is not built; removing cluster state and checking for processes"
else
  for dir in "${clusters[@]}"; do
    name="$(basename "${dir}")"
    log "deleting cluster '${name}'"
    KWOK_WORKDIR="${KWOK_WORKDIR}" "${TOOLS_BIN}/kwokctl" --name "${name}" \
      delete cluster --kubeconfig="${CLUSTER_DIR}/kwok/kubeconfig" 9>&- ||
      log "kwokctl delete cluster '${name}' failed; ending its processes directly"
  done
fi

mapfile -t pids < <(our_pids)
if ((${#pids[@]} > 0)); then
  log "ending leftover processes: $(ps -o pid=,comm= -p "$(IFS=,; echo "${pids[*]}")" | tr -s ' \n' ' ')"
  kill -TERM "${pids[@]}" 2>/dev/null || true
  deadline=$((SECONDS + 20))
  while mapfile -t pids < <(our_pids) && ((${#pids[@]} > 0)) && ((SECONDS < deadline)); do
    sleep 0.2
  done
  if ((${#pids[@]} > 0)); then
    log "still running after 20s, killing: ${pids[*]}"
    kill -KILL "${pids[@]}" 2>/dev/null || true
  fi
fi

rm -rf "${KWOK_WORKDIR}/clusters" "${KUBECONFIG_PATH}"
deadline=$((SECONDS + 5))
while mapfile -t pids < <(our_pids) && ((${#pids[@]} > 0)); do
  ((SECONDS < deadline)) || die "processes still running: ${pids[*]}"
  sleep 0.2
done
log "local cluster is down; no etcd, kube-* or kwok process from ${TOOLS_BIN#"${REPO_ROOT}/"} is left"
