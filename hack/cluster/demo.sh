#!/usr/bin/env bash
# make demo: three runs against the local control plane.
#   1. a server change    -> the ConfigMap changes, one rollout
#   2. the same again     -> nothing changes, no pod restarted
#   3. the probe fix      -> /livez for kube-proxy 1.33, one rollout
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
cd "${REPO_ROOT}"

kubectl=("${TOOLS_BIN}/kubectl" --kubeconfig "${KUBECONFIG_PATH}" -n kube-system)
bin=(bin/kube-proxy-sync --kubeconfig "${KUBECONFIG_PATH}" --audit-log "${CACHE_DIR}/demo-audit.jsonl")

log "resetting kube-proxy to the seed objects (test/manifests)"
"${kubectl[@]}" delete daemonset/kube-proxy configmap/kube-proxy serviceaccount/kube-proxy --ignore-not-found --wait=true >/dev/null
"${kubectl[@]}" apply -f test/manifests/ >/dev/null
"${kubectl[@]}" rollout status daemonset/kube-proxy --timeout=5m >/dev/null

uids() { "${kubectl[@]}" get pods -l k8s-app=kube-proxy -o jsonpath='{range .items[*]}{.metadata.uid}{"\n"}{end}' | sort; }
run() {
  local title=$1; shift
  printf '\n### %s\n$ kube-proxy-sync %s\n' "${title}" "$*"
  local before after
  before="$(uids)"
  "${bin[@]}" "$@"
  after="$(uids)"
  printf 'pods replaced: %s of %s\n' "$(comm -23 <(echo "${before}") <(echo "${after}") | grep -c . || true)" "$(echo "${before}" | grep -c .)"
}

run "1. a real change: one rollout" --server https://10.96.0.1:6443 --probe-path none
run "2. the same again: nothing happens" --server https://10.96.0.1:6443 --probe-path none
run "3. the probe fix for kube-proxy >= 1.28: one rollout" --server https://10.96.0.1:6443 --probe-path auto
printf '\nfacts of a rerun, as Ansible gets them:\n'
"${bin[@]}" --server https://10.96.0.1:6443 --output json
printf '\naudit log: %s\n' "${CACHE_DIR}/demo-audit.jsonl"
