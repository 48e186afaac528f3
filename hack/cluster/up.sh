#!/usr/bin/env bash
# Starts the local control plane: real etcd, kube-apiserver,
# kube-controller-manager and kube-scheduler built from source
# (hack/build/tools.sh), plus kwok faking NODES kubelets; then applies the
# seed objects from test/manifests and waits until the kube-proxy DaemonSet
# has NODES Ready pods.
#
# Idempotent: a healthy cluster is reused (only the node count and the seed
# objects are ensured), a stopped one is restarted, a broken one recreated.
#
# Environment:
#   NODES=3                 number of kwok fake nodes
#   CLUSTER_NAME=kps        kwokctl cluster name
#   DISABLE_QPS_LIMITS=0    1: components run without client rate limits
#                           (a 1000-node rollout is ~3x faster); changing it
#                           recreates the cluster
#   HEARTBEAT_FACTOR=       kwokctl's --heartbeat-factor (its default: 5): kwok
#                           renews node leases and posts node status that many
#                           times less often than a kubelet, and the node
#                           lifecycle controller waits that much longer. make
#                           bench raises it so that 5000 nodes' heartbeats do
#                           not take the 2 cores (see bench/README.md); setting
#                           it recreates the cluster
#
# The admin kubeconfig is written to .cache/cluster/kubeconfig.
set -euo pipefail
# shellcheck source=hack/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"

NODES="${NODES:-3}"
CLUSTER_NAME="${CLUSTER_NAME:-kps}"
DISABLE_QPS_LIMITS="${DISABLE_QPS_LIMITS:-0}"
[[ "${NODES}" =~ ^[0-9]+$ ]] || die "NODES must be a whole number, got '${NODES}'"
[[ "${CLUSTER_NAME}" =~ ^[a-z0-9]([-a-z0-9]*[a-z0-9])?$ ]] ||
  die "CLUSTER_NAME must be a DNS label, got '${CLUSTER_NAME}'"
[[ "${DISABLE_QPS_LIMITS}" =~ ^[01]$ ]] || die "DISABLE_QPS_LIMITS must be 0 or 1, got '${DISABLE_QPS_LIMITS}'"
HEARTBEAT_FACTOR="${HEARTBEAT_FACTOR:-}"
[[ -z "${HEARTBEAT_FACTOR}" || "${HEARTBEAT_FACTOR}" =~ ^[1-9][0-9]*$ ]] ||
  die "HEARTBEAT_FACTOR must be a whole number from 1, got '${HEARTBEAT_FACTOR}'"

KWOK_WORKDIR="${CLUSTER_DIR}/kwok"
KWOK_CLUSTER_DIR="${KWOK_WORKDIR}/clusters/${CLUSTER_NAME}"

# fd 9 is the lock below: closed for kwokctl, whose daemons would inherit it.
# Its own log lines go to .cache/cluster/kwokctl.log (shown when it fails).
KWOKCTL_LOG="${CLUSTER_DIR}/kwokctl.log"
kwokctl() {
  mkdir -p "${CLUSTER_DIR}"
  printf '\n$ kwokctl %s\n' "$*" >>"${KWOKCTL_LOG}"
  if ! KWOK_WORKDIR="${KWOK_WORKDIR}" "${TOOLS_BIN}/kwokctl" --name "${CLUSTER_NAME}" "$@" >>"${KWOKCTL_LOG}" 2>&1 9>&-; then
    tail -n 20 "${KWOKCTL_LOG}" >&2
    return 1
  fi
}
kubectl() { "${TOOLS_BIN}/kubectl" --kubeconfig "${KUBECONFIG_PATH}" "$@"; }

# dump_logs: the last lines of every component's log, for a failed start.
dump_logs() {
  local f
  for f in "${KWOK_CLUSTER_DIR}"/logs/*.log; do
    [[ -f "${f}" ]] || continue
    printf '\n----- last 25 lines of %s -----\n' "${f#"${REPO_ROOT}/"}" >&2
    tail -n 25 "${f}" >&2
  done
}

# cluster_ready: kube-apiserver answers /readyz through kwokctl's kubeconfig.
cluster_ready() {
  [[ -f "${KWOK_CLUSTER_DIR}/kubeconfig.yaml" ]] &&
    "${TOOLS_BIN}/kubectl" --kubeconfig "${KWOK_CLUSTER_DIR}/kubeconfig.yaml" \
      --request-timeout=10s get --raw /readyz >/dev/null 2>&1
}

# components_running: any process of kwokctl's PID files is alive.
components_running() {
  local f pid
  for f in "${KWOK_CLUSTER_DIR}"/pids/*.pid; do
    [[ -f "${f}" ]] || continue
    pid="$(<"${f}")"
    [[ "${pid}" =~ ^[0-9]+$ ]] && kill -0 "${pid}" 2>/dev/null && return 0
  done
  return 1
}

# wait_ready SECONDS: polls /readyz until it answers ok or the deadline passes.
wait_ready() {
  local deadline=$((SECONDS + $1))
  until cluster_ready; do
    ((SECONDS < deadline)) || return 1
    sleep 0.5
  done
}

# write_kubeconfig: the admin kubeconfig, self-contained (certificates
# embedded), at the documented path.
write_kubeconfig() {
  mkdir -p "${CLUSTER_DIR}"
  (umask 077 && "${TOOLS_BIN}/kubectl" --kubeconfig "${KWOK_CLUSTER_DIR}/kubeconfig.yaml" \
    config view --raw --flatten --minify >"${KUBECONFIG_PATH}.tmp")
  mv -f "${KUBECONFIG_PATH}.tmp" "${KUBECONFIG_PATH}"
}

START=${SECONDS}
# One cluster-up or cluster-down at a time.
mkdir -p "${CLUSTER_DIR}"
exec 9>"${CLUSTER_DIR}/.lock"
if ! flock -n 9; then
  log "another cluster-up or cluster-down is running; waiting for it"
  flock 9
fi
"${REPO_ROOT}/hack/build/tools.sh"

# The options a running cluster was created with; a change recreates it.
# bump harness= when the cluster configuration below changes: running clusters get recreated
options="kubernetes=${KUBERNETES_VERSION} etcd=${ETCD_VERSION} kwok=${KWOK_VERSION} harness=3"
options+=" disable-qps-limits=${DISABLE_QPS_LIMITS}"
# only when set, so that clusters made before this knob are reused
[[ -n "${HEARTBEAT_FACTOR}" ]] && options+=" heartbeat-factor=${HEARTBEAT_FACTOR}"
for bin in etcd kube-apiserver kube-controller-manager kube-scheduler kwok; do
  options+=" ${bin}=$(cat "${TOOLS_BIN}/${bin}.stamp")"
done
options_file="${KWOK_CLUSTER_DIR}/kps-options"

create_cluster() {
  log "creating cluster '${CLUSTER_NAME}' (kwokctl, binary runtime, loopback, random free ports)"
  mkdir -p "${KWOK_WORKDIR}"
  # Flags cannot set the bind address (kwokctl's default is 0.0.0.0).
  cat >"${KWOK_WORKDIR}/kwokctl.yaml" <<EOF
apiVersion: config.kwok.x-k8s.io/v1alpha1
kind: KwokctlConfiguration
options:
  bindAddress: 127.0.0.1
  kubectlBinary: ${TOOLS_BIN}/kubectl
# kwok manages only nodes annotated kwok.x-k8s.io/node=fake (kwokctl's own
# nodes are), so a test can take a node away from it: its kubelet "stops",
# its status goes stale and its pods never start.
componentsPatches:
- name: kwok-controller
  extraArgs:
  - key: manage-all-nodes
    value: "false"
  - key: manage-nodes-with-annotation-selector
    value: kwok.x-k8s.io/node=fake
# one of each: no leader election, whose lease an overloaded 2-core machine
# can miss (the controller manager then exits and nothing restarts it)
- name: kube-controller-manager
  extraArgs:
  - key: leader-elect
    value: "false"
- name: kube-scheduler
  extraArgs:
  - key: leader-elect
    value: "false"
EOF
  local args=(
    create cluster
    --runtime binary
    --config "${KWOK_WORKDIR}/kwokctl.yaml"
    --kubeconfig= # do not add a context to the user's kubeconfig
    --timeout 5m
    --etcd-binary "${TOOLS_BIN}/etcd"
    --kube-apiserver-binary "${TOOLS_BIN}/kube-apiserver"
    --kube-controller-manager-binary "${TOOLS_BIN}/kube-controller-manager"
    --kube-scheduler-binary "${TOOLS_BIN}/kube-scheduler"
    --kwok-controller-binary "${TOOLS_BIN}/kwok"
  )
  ((DISABLE_QPS_LIMITS)) && args+=(--disable-qps-limits)
  [[ -n "${HEARTBEAT_FACTOR}" ]] && args+=(--heartbeat-factor "${HEARTBEAT_FACTOR}")
  if ! kwokctl "${args[@]}"; then
    dump_logs
    die "kwokctl create cluster failed (component logs above)"
  fi
  printf '%s\n' "${options}" >"${options_file}"
}

if [[ -d "${KWOK_CLUSTER_DIR}" ]]; then
  if [[ "$(cat "${options_file}" 2>/dev/null)" != "${options}" ]]; then
    log "cluster '${CLUSTER_NAME}' was created with other options or binaries; recreating it"
    kwokctl delete cluster --kubeconfig="${KWOK_WORKDIR}/kubeconfig" || true
    create_cluster
  elif cluster_ready; then
    log "cluster '${CLUSTER_NAME}' is already running and ready; reusing it"
  elif components_running; then
    # Running but slow (e.g. a busy machine): never recreate a live cluster.
    log "cluster '${CLUSTER_NAME}' is running but not ready yet; waiting for it"
  else
    log "cluster '${CLUSTER_NAME}' exists but is stopped; starting it"
    if ! kwokctl start cluster || ! wait_ready 60; then
      log "could not start it; recreating it"
      kwokctl delete cluster --kubeconfig="${KWOK_WORKDIR}/kubeconfig" || true
      create_cluster
    fi
  fi
else
  create_cluster
fi

write_kubeconfig
wait_ready 120 || {
  dump_logs
  die "kube-apiserver did not become ready (component logs above)"
}
log "API server ready at $(kubectl config view -o jsonpath='{.clusters[0].cluster.server}')"

# Fake nodes. kwok's default node template labels them kubernetes.io/os=linux;
# their addresses are put on loopback (127.1.0.1, 127.1.0.2, ...) so that
# anything that follows a node or host-network pod IP stays on this machine.
log "scaling kwok nodes to ${NODES}"
kwokctl scale node --replicas "${NODES}" \
  --param '.nodeIPs = ["127.1.0.1"]' --param '.podCIDRs = ["10.0.0.0/24"]' ||
  die "kwokctl scale node --replicas ${NODES} failed"
# ready_nodes: how many kwok nodes have condition Ready=True. One list call:
# `kubectl wait` on 1000 nodes watches them one by one and takes minutes.
ready_nodes() {
  kubectl get nodes -l type=kwok --request-timeout=30s \
    -o jsonpath='{range .items[*]}{.status.conditions[?(@.type=="Ready")].status}{"\n"}{end}' |
    grep -c '^True$' || true
}
node_timeout=$((60 + NODES / 10))
log "waiting for ${NODES} nodes to be Ready (timeout ${node_timeout}s)"
deadline=$((SECONDS + node_timeout))
until [[ "$(ready_nodes)" == "${NODES}" ]]; do
  if ((SECONDS >= deadline)); then
    dump_logs
    die "only $(ready_nodes) of ${NODES} kwok nodes are Ready after ${node_timeout}s"
  fi
  sleep 1
done

log "applying seed objects from test/manifests (existing ones are kept)"
# DaemonSets last: their pods need the ServiceAccount and ConfigMap.
manifests=()
for manifest in "${REPO_ROOT}"/test/manifests/*.yaml; do
  [[ "${manifest}" == *daemonset* ]] || manifests+=("${manifest}")
done
manifests+=("${REPO_ROOT}"/test/manifests/*daemonset*.yaml)
for manifest in "${manifests[@]}"; do
  if kubectl get -f "${manifest}" -o name >/dev/null 2>&1; then
    log "  kept    $(kubectl get -f "${manifest}" -o name)"
  else
    kubectl create -f "${manifest}" -o name | sed 's/^/==>   created /' >&2 ||
      die "creating ${manifest#"${REPO_ROOT}/"} failed"
  fi
done

rollout_timeout=$((120 + NODES / 5))
log "waiting for daemonset kube-system/kube-proxy: ${NODES} pods Ready (timeout ${rollout_timeout}s)"
ds_wait() {
  kubectl -n kube-system wait daemonset/kube-proxy --timeout="${rollout_timeout}s" "$@" >/dev/null
}
# The DaemonSet controller may not have counted every node yet, so wait for
# the counts first; rollout status then checks the rollout itself.
if ! ds_wait --for=jsonpath='{.status.desiredNumberScheduled}'="${NODES}" ||
  ! ds_wait --for=jsonpath='{.status.numberReady}'="${NODES}" ||
  ! kubectl -n kube-system rollout status daemonset/kube-proxy --timeout="${rollout_timeout}s" >&2; then
  kubectl -n kube-system get daemonset kube-proxy -o wide >&2 || true
  dump_logs
  die "daemonset kube-system/kube-proxy did not get ${NODES} Ready pods within ${rollout_timeout}s"
fi
log "cluster '${CLUSTER_NAME}' is up in $((SECONDS - START))s with ${NODES} nodes"
log "use it: export KUBECONFIG=${KUBECONFIG_PATH#"${REPO_ROOT}/"}; ${TOOLS_BIN#"${REPO_ROOT}/"}/kubectl get nodes"
