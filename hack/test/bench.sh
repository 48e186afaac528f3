#!/usr/bin/env bash
# make bench: kube-proxy-sync against kubectl on the local control plane
# (hack/cluster/up.sh), at each node count of BENCH_NODES (10 and 1000). Prints markdown
# tables and writes bench/results/<date>.json. See bench/README.md for the
# method. Never fails on a time: only on real breakage (a command failing,
# an unchanged run that restarts a pod).
#
# make bench-small (BENCH_SMALL=1, part of make test): one round against the
# running cluster, scaled to 20 nodes and back; results stay in the cache.
#
# Environment:
#   BENCH_SMALL=0               1: the small run
#   BENCH_NODES="10 1000"       node counts (small: 20); a 5000-node cluster holds
#                               on 2 cores and 24 GiB with the heartbeat factor
#                               below; idle, each of its 6 restart rollouts
#                               takes about 10 minutes
#   BENCH_RESTART_NODES="1000 5000"   node counts that get the restart phase (small: all)
#   BENCH_KUBESPRAY_NODES=1000  node counts that get kubespray's delete (small: all)
#   BENCH_ROUNDS=5              restart rounds at 1000 nodes or fewer (small: 1)
#   BENCH_LARGE_ROUNDS=3        restart rounds above 1000 nodes
#   BENCH_MAX_UNAVAILABLE=10%   the DaemonSet's maxUnavailable in the restart phase
#   BENCH_ANSIBLE=1             time the Ansible task with the small build and
#                               48 MB ones (small: 0); needs the kubespray venv
#                               (made here, hack/build/venv.sh)
#   BENCH_OLD_COMMIT=3d17aa1    the 48 MB build of the Ansible phase: the last
#                               commit with client-go's full clientset
#   DISABLE_QPS_LIMITS=1        passed to hack/cluster/up.sh (small: what the running cluster has)
#   BENCH_HEARTBEAT_FACTOR=20   HEARTBEAT_FACTOR for hack/cluster/up.sh (small:
#                               what the running cluster has): kwok's node
#                               leases and status 20x less often than a kubelet's
#   BENCH_BINARY=bin/kube-proxy-sync  the build under test
#   KUBECONFIG                  when set, that cluster is used as it is (no scaling)
#   CACHE_DIR, CLUSTER_NAME     as for hack/cluster/up.sh
set -euo pipefail
# shellcheck source=hack/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
cd "${REPO_ROOT}"

BENCH_SMALL="${BENCH_SMALL:-0}"
CLUSTER_NAME="${CLUSTER_NAME:-kps}"
export CLUSTER_NAME
options_file="${CLUSTER_DIR}/kwok/clusters/${CLUSTER_NAME}/kps-options"
if ((BENCH_SMALL)); then
  nodes_list="${BENCH_NODES:-20}"
  restart_nodes="${BENCH_RESTART_NODES:-${nodes_list}}"
  kubespray_nodes="${BENCH_KUBESPRAY_NODES:-${nodes_list}}"
  rounds="${BENCH_ROUNDS:-1}"
  large_rounds="${BENCH_LARGE_ROUNDS:-1}"
  reps=3
  ansible="${BENCH_ANSIBLE:-0}"
  # keep the running cluster's settings: others would recreate it
  qps="$(sed -n 's/.*disable-qps-limits=\([01]\).*/\1/p' "${options_file}" 2>/dev/null || true)"
  qps="${qps:-${DISABLE_QPS_LIMITS:-0}}"
  heartbeat="$(sed -n 's/.*heartbeat-factor=\([0-9]*\).*/\1/p' "${options_file}" 2>/dev/null || true)"
else
  nodes_list="${BENCH_NODES:-10 1000}"
  restart_nodes="${BENCH_RESTART_NODES:-1000 5000}"
  kubespray_nodes="${BENCH_KUBESPRAY_NODES:-1000}"
  rounds="${BENCH_ROUNDS:-5}"
  large_rounds="${BENCH_LARGE_ROUNDS:-3}"
  reps=5
  ansible="${BENCH_ANSIBLE:-1}"
  qps="${DISABLE_QPS_LIMITS:-1}"
  # a kubelet renews its node lease every 10 s; kwokctl's default factor 5
  # makes it 50 s, still 100 lease writes a second at 5000 nodes, each one
  # fanned out to every node watcher; 20 makes it 25 (see bench/README.md)
  heartbeat="${BENCH_HEARTBEAT_FACTOR:-20}"
fi
max_unavailable="${BENCH_MAX_UNAVAILABLE:-10%}"

stamp="$(date -u +%Y%m%dT%H%M%SZ)"
work="${CACHE_DIR}/bench/${stamp}"
mkdir -p "${work}"
if ((BENCH_SMALL)); then
  results="${CACHE_DIR}/bench/small-results.json"
else
  results="${REPO_ROOT}/bench/results/$(date -u +%F).json"
fi

binary="${BENCH_BINARY:-bin/kube-proxy-sync}"
[[ -x "${binary}" ]] || make --no-print-directory build
log "building the benchmark helper (bench/cmd/kps-bench)"
go build -o bin/kps-bench ./bench/cmd/kps-bench

external=0
if [[ -n "${KUBECONFIG:-}" ]]; then
  external=1
  kubeconfig="${KUBECONFIG%%:*}"
  log "KUBECONFIG is set: benchmarking that cluster as it is (no scaling)"
else
  kubeconfig="${KUBECONFIG_PATH}"
fi
kubectl=("${TOOLS_BIN}/kubectl" --kubeconfig "${kubeconfig}")
[[ -x "${TOOLS_BIN}/kubectl" ]] || "${REPO_ROOT}/hack/build/tools.sh"

# cluster_at N: the local cluster with N kwok nodes.
cluster_at() {
  log "local cluster '${CLUSTER_NAME}' at $1 nodes (DISABLE_QPS_LIMITS=${qps}, HEARTBEAT_FACTOR=${heartbeat:-kwokctl default})"
  NODES="$1" DISABLE_QPS_LIMITS="${qps}" HEARTBEAT_FACTOR="${heartbeat}" "${REPO_ROOT}/hack/cluster/up.sh"
}

original_nodes=""
if ((BENCH_SMALL && !external)) && [[ -f "${KUBECONFIG_PATH}" ]]; then
  original_nodes="$("${kubectl[@]}" get nodes -l type=kwok --no-headers 2>/dev/null | grep -c . || true)"
  if [[ -n "${original_nodes}" ]] && ((original_nodes > 0)); then
    trap 'cluster_at "${original_nodes}" >/dev/null || log "could not scale the cluster back to ${original_nodes} nodes"' EXIT
  fi
fi

# The Ansible phase's builds: the release build (hack/build/dist.sh), the same
# padded with random bytes to the size of the old one (the copy alone), and
# the old one itself (the copy and its start: it registers every API group).
ansible_builds=""
if ((ansible)); then
  hack/build/venv.sh kubespray
  hack/build/dist.sh
  small_build="${REPO_ROOT}/dist/kube-proxy-sync-linux-amd64"
  old_commit="${BENCH_OLD_COMMIT:-3d17aa1}"
  old_dir="${CACHE_DIR}/bench/old-${old_commit}"
  old_build="${old_dir}/kube-proxy-sync"
  if [[ ! -x "${old_build}" ]] && git cat-file -e "${old_commit}^{commit}" 2>/dev/null; then
    log "building kube-proxy-sync at ${old_commit} (48 MB, the full clientset) for the Ansible phase"
    rm -rf "${old_dir}" && mkdir -p "${old_dir}/src"
    git archive "${old_commit}" | tar -x -C "${old_dir}/src"
    (cd "${old_dir}/src" && CGO_ENABLED=0 GOOS=linux GOARCH=amd64 go build -trimpath \
      -ldflags "-s -w -X github.com/kube-proxy-sync/kube-proxy-sync/internal/app.version=${old_commit}" \
      -o "${old_build}" ./cmd/kube-proxy-sync)
  fi
  ansible_builds="small=${small_build}"
  if [[ -x "${old_build}" ]]; then
    padded="${work}/kube-proxy-sync-padded"
    cp "${small_build}" "${padded}"
    head -c "$(($(stat -c %s "${old_build}") - $(stat -c %s "${small_build}")))" /dev/urandom >>"${padded}"
    ansible_builds+=",padded=${padded},old-${old_commit}=${old_build}"
  else
    log "no commit ${old_commit} in this clone: the Ansible phase times the small build only"
  fi
fi

helper=(bin/kps-bench)
common=(--dir "${work}" --kubeconfig "${kubeconfig}" --binary "${binary}" --kubectl "${TOOLS_BIN}/kubectl")
in_list() { [[ " $2 " == *" $1 "* ]]; }

phases_at() {
  local n="$1" r="${rounds}"
  ((n > 1000)) && r="${large_rounds}"
  log "[${n} nodes] no-change runs"
  "${helper[@]}" nochange "${common[@]}" --reps "${reps}"
  log "[${n} nodes] 10 unchanged reruns: no pod may restart"
  "${helper[@]}" needless "${common[@]}" --reruns 10
  if in_list "${n}" "${kubespray_nodes}" || ((external)); then
    log "[${n} nodes] kubespray's method: kubectl delete pod --force --grace-period=0"
    "${helper[@]}" kubespray "${common[@]}"
  fi
  if ((ansible)); then
    log "[${n} nodes] the Ansible task, module copy included: ${ansible_builds//,/, }"
    "${helper[@]}" ansible "${common[@]}" --reps "${reps}" --builds "${ansible_builds}" \
      --ansible-playbook "$(venv_dir kubespray)/bin/ansible-playbook"
  fi
  if in_list "${n}" "${restart_nodes}" || ((external)); then
    log "[${n} nodes] restart: kube-proxy-sync vs kubectl rollout restart + status, ${r} round(s), maxUnavailable ${max_unavailable}"
    "${helper[@]}" restart "${common[@]}" --rounds "${r}" --max-unavailable "${max_unavailable}"
  fi
}

start=${SECONDS}
if ((external)); then
  phases_at "$("${kubectl[@]}" -n kube-system get daemonset kube-proxy -o jsonpath='{.status.desiredNumberScheduled}')"
else
  for n in ${nodes_list}; do
    cluster_at "${n}"
    phases_at "${n}"
  done
fi

if ((!BENCH_SMALL && !ansible)); then
  log "stripped linux/amd64 and arm64 builds (hack/build/dist.sh)"
  hack/build/dist.sh
fi
if [[ -f dist/kube-proxy-sync-linux-amd64 && -f dist/kube-proxy-sync-linux-arm64 ]]; then
  "${helper[@]}" size --dir "${work}" --dist dist
fi

qps_note="DISABLE_QPS_LIMITS=${qps}"
((external)) && qps_note="external cluster"
small_flag=()
((BENCH_SMALL)) && small_flag=(--small)
"${helper[@]}" report --dir "${work}" --kubeconfig "${kubeconfig}" --kubectl "${TOOLS_BIN}/kubectl" --binary "${binary}" \
  --qps "${qps_note}" --results "${results}" "${small_flag[@]}" | tee "${work}/table.md"
log "benchmark done in $((SECONDS - start))s; results: ${results#"${REPO_ROOT}/"}; phase files: ${work#"${REPO_ROOT}/"}"
