#!/usr/bin/env bash
# Starts the kind cluster with real kubelets and a real kube-proxy, offline:
# a Docker engine (hack/kind/docker.sh), the node image and every image in it
# built here (hack/kind/build.sh), then `kind create cluster` with one
# control plane and two workers, kube-proxy as kubeadm's DaemonSet, and the
# project's small pod network (hack/kind/cni) in place of kindnetd.
#
# Idempotent: a healthy cluster built from the current node image is reused;
# anything else is recreated. The admin kubeconfig is written to
# .cache/kind/kubeconfig. Packets leaving the cluster's docker network are
# counted and dropped while it runs (hack/kind/egress.sh); make kind-down
# reports the count.
#
# Environment: KIND_CLUSTER (default kps), KIND_WORKERS (default 2).
set -euo pipefail
# shellcheck source=hack/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"

KIND_CLUSTER="${KIND_CLUSTER:-kps}"
KIND_WORKERS="${KIND_WORKERS:-2}"
KIND_DIR="${CACHE_DIR}/kind"
KIND_KUBECONFIG="${KIND_DIR}/kubeconfig"
[[ "${KIND_WORKERS}" =~ ^[0-9]$ ]] || die "KIND_WORKERS must be 0..9, got '${KIND_WORKERS}'"
mkdir -p "${KIND_DIR}/logs"

start=${SECONDS}
"${REPO_ROOT}/hack/build/tools.sh" kind
"${REPO_ROOT}/hack/kind/docker.sh" up
docker_env
image="$("${REPO_ROOT}/hack/kind/build.sh")"
image_id="$(docker image inspect -f '{{.Id}}' "${image}")"

kind() { "${TOOLS_BIN}/kind" "$@"; }
kubectl() { "${TOOLS_BIN}/kubectl" --kubeconfig "${KIND_KUBECONFIG}" "$@"; }

# healthy: the cluster exists, runs the current node image, and answers.
healthy() {
  kind get clusters 2>/dev/null | grep -qx "${KIND_CLUSTER}" || return 1
  local node
  node="$(docker ps -q --filter "label=io.x-k8s.kind.cluster=${KIND_CLUSTER}" --filter "label=io.x-k8s.kind.role=control-plane" | head -n1)"
  [[ -n "${node}" ]] || return 1
  [[ "$(docker inspect -f '{{.Image}}' "${node}")" == "${image_id}" ]] || return 1
  [[ "$(docker ps -q --filter "label=io.x-k8s.kind.cluster=${KIND_CLUSTER}" | wc -l)" == "$((KIND_WORKERS + 1))" ]] || return 1
  kind get kubeconfig --name "${KIND_CLUSTER}" >"${KIND_KUBECONFIG}.tmp" 2>/dev/null &&
    mv -f "${KIND_KUBECONFIG}.tmp" "${KIND_KUBECONFIG}" &&
    kubectl --request-timeout=10s get --raw /readyz >/dev/null 2>&1
}

# mount_cgroup_v1_hierarchies: on a cgroup v1 host, mounts each controller
# hierarchy the kernel has (/proc/cgroups) that the host has not mounted.
# A systemd in a privileged container (another tool's test host) creates
# such hierarchies; kind's nodes then mount them too, the kubelet's cgroup
# is missing there, and the kubelet does not start ("cgroup [kubelet] has
# some missing paths: /sys/fs/cgroup/hugetlb/kubelet.slice"). Mounted on
# the host, as a cgroup v1 distribution mounts them, kind's nodes set them
# up like the others.
mount_cgroup_v1_hierarchies() {
  [[ "$(stat -f -c %T /sys/fs/cgroup 2>/dev/null)" == tmpfs ]] || return 0
  local ids id names
  ids="$(awk '!/^#/ && $2 != 0 {print $2}' /proc/cgroups | sort -u)"
  for id in ${ids}; do
    names="$(awk -v id="${id}" '!/^#/ && $2 == id {print $1}' /proc/cgroups | paste -sd, -)"
    # mounted already (as, say, "cpu" beside "cpuacct", or "net_cls,net_prio")
    if awk '{for (i = 1; i < NF; i++) if ($i == "-") {if ($(i + 1) == "cgroup") print $(i + 3); break}}' /proc/self/mountinfo | tr ',' '\n' | grep -qx "${names%%,*}"; then
      continue
    fi
    log "mounting the cgroup v1 hierarchy ${names} at /sys/fs/cgroup/${names} (the kernel has it, the host did not mount it)"
    mkdir -p "/sys/fs/cgroup/${names}"
    mount -t cgroup -o "${names}" cgroup "/sys/fs/cgroup/${names}" ||
      die "mount the cgroup v1 hierarchy ${names}: kind's kubelets would not start without it"
  done
}

if healthy; then
  log "kind cluster ${KIND_CLUSTER} is up (node image ${image})"
else
  mount_cgroup_v1_hierarchies
  if kind get clusters 2>/dev/null | grep -qx "${KIND_CLUSTER}"; then
    log "recreating kind cluster ${KIND_CLUSTER} (stale image or unhealthy)"
    kind delete cluster --name "${KIND_CLUSTER}" >"${KIND_DIR}/logs/kind-delete.log" 2>&1
  fi
  {
    printf 'kind: Cluster\napiVersion: kind.x-k8s.io/v1alpha4\nnodes:\n- role: control-plane\n'
    for ((i = 0; i < KIND_WORKERS; i++)); do printf -- '- role: worker\n'; done
    # No CoreDNS image exists here: skip kubeadm's addon (kind's own
    # default skip list is [preflight], which this replaces).
    printf 'kubeadmConfigPatches:\n- |\n  kind: InitConfiguration\n  skipPhases: [preflight, addon/coredns]\n'
  } >"${KIND_DIR}/cluster.yaml"
  log "kind create cluster ${KIND_CLUSTER}: 1 control plane + ${KIND_WORKERS} workers (log: ${KIND_DIR#"${REPO_ROOT}/"}/logs/kind-create.log)"
  create_start=${SECONDS}
  if ! kind create cluster --name "${KIND_CLUSTER}" --image "${image}" --config "${KIND_DIR}/cluster.yaml" \
    --kubeconfig "${KIND_KUBECONFIG}" --wait 5m >"${KIND_DIR}/logs/kind-create.log" 2>&1; then
    tail -n 30 "${KIND_DIR}/logs/kind-create.log" >&2
    kind export logs "${KIND_DIR}/logs/kind-export" --name "${KIND_CLUSTER}" >/dev/null 2>&1 || true
    die "kind create cluster failed (node logs: ${KIND_DIR#"${REPO_ROOT}/"}/logs/kind-export)"
  fi
  log "kind create cluster: $((SECONDS - create_start))s"
fi
"${REPO_ROOT}/hack/kind/egress.sh" add kind

kubectl wait --for=condition=Ready nodes --all --timeout=180s >/dev/null
kubectl -n kube-system rollout status daemonset/kps-cni --timeout=180s >/dev/null
kubectl -n kube-system rollout status daemonset/kube-proxy --timeout=180s >/dev/null
log "kind cluster ${KIND_CLUSTER} ready in $((SECONDS - start))s: $(kubectl get nodes --no-headers | wc -l) nodes, kubeconfig ${KIND_KUBECONFIG#"${REPO_ROOT}/"}"
