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
# The benchmark itself is `kps-bench run` (bench/cmd/kps-bench; `bin/kps-bench
# run --help`): this script only turns the variables below into its flags.
#
# Environment:
#   BENCH_SMALL=0               1: the small run
#   BENCH_NODES="10 1000"       node counts (small: 20); a 5000-node cluster holds
#                               on 2 cores and 24 GiB with the heartbeat factor
#                               below; idle, each of its 6 restart rollouts
#                               takes about 10 minutes; then 6 restarts of 5
#                               pools of 1000 (BENCH_POOLS_NODES)
#   BENCH_RESTART_NODES="1000 5000"   node counts that get the restart phase (small: all)
#   BENCH_KUBESPRAY_NODES=1000  node counts that get kubespray's delete (small: all)
#   BENCH_POOLS_NODES=5000      node counts that get the pools phase (small: all):
#                               the restart as one DaemonSet and as BENCH_POOLS
#                               pools; a count runs only if BENCH_NODES has it
#   BENCH_POOLS=5               pools in the pools phase, the nodes dealt out in turn
#   BENCH_ROUNDS=5              restart rounds (and pools rounds of each layout)
#                               at 1000 nodes or fewer (small: 1)
#   BENCH_LARGE_ROUNDS=3        the same above 1000 nodes (small: 1)
#   BENCH_MAX_UNAVAILABLE=10%   every DaemonSet's maxUnavailable in the restart
#                               and pools phases
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

args=(run --cache-dir "${CACHE_DIR}" --ansible-playbook "$(venv_dir kubespray)/bin/ansible-playbook")
# flag VARIABLE FLAG: --FLAG=value when VARIABLE is set and not empty; the
# defaults (full and small) are kps-bench's.
flag() {
  if [[ -n "${!1:-}" ]]; then args+=("--$2=${!1}"); fi
}
flag BENCH_SMALL small
flag BENCH_NODES nodes
flag BENCH_RESTART_NODES restart-nodes
flag BENCH_KUBESPRAY_NODES kubespray-nodes
flag BENCH_POOLS_NODES pools-nodes
flag BENCH_POOLS pools
flag BENCH_ROUNDS rounds
flag BENCH_LARGE_ROUNDS large-rounds
flag BENCH_MAX_UNAVAILABLE max-unavailable
flag BENCH_ANSIBLE ansible
flag BENCH_OLD_COMMIT old-commit
flag DISABLE_QPS_LIMITS disable-qps-limits
flag BENCH_HEARTBEAT_FACTOR heartbeat-factor
flag BENCH_BINARY binary
flag CLUSTER_NAME cluster-name
# the first file of KUBECONFIG, as kubectl reads a list
if [[ -n "${KUBECONFIG:-}" ]]; then args+=(--kubeconfig "${KUBECONFIG%%:*}"); fi

log "building the benchmark helper (bench/cmd/kps-bench)"
go build -o bin/kps-bench ./bench/cmd/kps-bench
exec bin/kps-bench "${args[@]}"
