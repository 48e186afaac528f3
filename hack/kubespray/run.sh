#!/usr/bin/env bash
# make test-kubespray KUBESPRAY_DIR=<kubespray checkout>: kubespray's own
# cluster.yml, fully offline, on 3 container hosts (hack/kubespray/README.md).
#
# Steps, each timed and named; the first that fails stops the run, and the
# run says which step, which Ansible task and the error:
#   engine     the Docker engine (hack/kind/docker.sh up)
#   build      every artifact and image (hack/kubespray/build.sh)
#   venv       kubespray's pinned requirements in .venv/kubespray-run
#   for each mode in KS_MODES (default: unpatched patched):
#     hosts    fresh hosts, file server, registry (hack/kubespray/hosts.sh up)
#     dist     patched only: the collection's amd64 module (hack/build/dist.sh)
#     patch    patched only: a copy of the checkout, docs/kubespray*.patch applied
#     cluster  ansible-playbook cluster.yml (patched: on that copy, with
#              this checkout as the collection, kube_proxy_sync_enabled: true)
#     nodes    every node Ready, kube-proxy rolled out on every node
#     rerun    cluster.yml again; counts the kube-proxy pods it replaced (by
#              UID); patched, it must replace none
#
# Cleans up on exit (hosts, file server, registry, network; the project's
# Docker engine if this run started it) unless KS_KEEP=1. Logs and the step
# table: .cache/kubespray/logs, .cache/kubespray/summary.txt.
set -euo pipefail
# shellcheck source=hack/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"

KUBESPRAY_DIR="${KUBESPRAY_DIR:-}"
KS_MODES="${KS_MODES:-unpatched patched}"
KS_DIR="${CACHE_DIR}/kubespray"
LOGS="${KS_DIR}/logs"
SUMMARY="${KS_DIR}/summary.txt"
VENV="$(venv_dir kubespray-run)"

[[ -n "${KUBESPRAY_DIR}" && -f "${KUBESPRAY_DIR}/cluster.yml" && -f "${KUBESPRAY_DIR}/requirements.txt" ]] ||
  die "KUBESPRAY_DIR must be a kubespray checkout (cluster.yml, requirements.txt); got '${KUBESPRAY_DIR}'"
KUBESPRAY_DIR="$(cd "${KUBESPRAY_DIR}" && pwd)"
for mode in ${KS_MODES}; do
  [[ "${mode}" == unpatched || "${mode}" == patched ]] || die "KS_MODES: unpatched and/or patched, got '${mode}'"
done
[[ "$(id -u)" == 0 ]] || die "make test-kubespray needs root (debootstrap, iptables)"
mkdir -p "${LOGS}"
commit="$(git -C "${KUBESPRAY_DIR}" rev-parse HEAD 2>/dev/null || echo unknown)"
[[ "${commit}" == "${KUBESPRAY_COMMIT}" ]] ||
  log "warning: ${KUBESPRAY_DIR} is at ${commit:0:12}, not KUBESPRAY_COMMIT ${KUBESPRAY_COMMIT:0:12} (hack/versions.mk)"

engine_was_up=0
if [[ -n "$("${REPO_ROOT}/hack/kind/docker.sh" env || true)" ]]; then engine_was_up=1; fi

cleanup() {
  local rc=$?
  if [[ "${KS_KEEP:-0}" == 1 ]]; then
    log "KS_KEEP=1: hosts left running; remove them with hack/kubespray/hosts.sh down"
  else
    "${REPO_ROOT}/hack/kubespray/hosts.sh" down || rc=1
    ((engine_was_up)) || "${REPO_ROOT}/hack/kind/docker.sh" down || true
  fi
  exit "${rc}"
}
trap cleanup EXIT

printf 'kubespray %s, Kubernetes %s, started %s\n' "${commit:0:12}" "${KUBERNETES_VERSION}" "$(date -u +%FT%TZ)" >"${SUMMARY}"
step_no=0
# step NAME CMD...: runs CMD with its output in logs/NAME.log; records the
# wall time; on failure says where the run stopped and exits.
step() {
  local name="$1" start=${SECONDS} rc=0
  shift
  step_no=$((step_no + 1))
  log "step ${step_no}: ${name} (log: ${LOGS#"${REPO_ROOT}/"}/${name}.log)"
  # In the background so that errexit holds inside CMD (it is off in a
  # command tested with ||), and so that a step's cd or exports stay its own.
  "$@" >"${LOGS}/${name}.log" 2>&1 &
  wait $! || rc=$?
  printf '%-24s %6ss  %s\n' "${name}" "$((SECONDS - start))" "$([[ ${rc} == 0 ]] && echo ok || echo FAILED)" >>"${SUMMARY}"
  if ((rc != 0)); then
    {
      printf '\nSTOPPED at step %d (%s) after %ss, exit %d.\n' "${step_no}" "${name}" "$((SECONDS - start))" "${rc}"
      ansible_failure "${LOGS}/${name}.log" || tail -n 25 "${LOGS}/${name}.log"
    } | tee -a "${SUMMARY}" >&2
    exit 1
  fi
  log "step ${step_no}: ${name} done in $((SECONDS - start))s"
}

# ansible_failure LOG: the tasks that failed and their errors, from an
# ansible-playbook log (failures Ansible went on after, "...ignoring", left
# out); false when the log has none.
ansible_failure() {
  local failures
  failures="$(awk '
    /^TASK \[/ {task = $0}
    /^(fatal|failed): / {pending = "task: " task "\n" $0; next}
    /^\.\.\.ignoring/ {pending = ""; next}
    pending != "" {print pending; pending = ""}
    END {if (pending != "") print pending}' "$1")"
  [[ -n "${failures}" ]] || return 1
  printf '%s\n' "${failures}" | tail -n 6 | cut -c1-2000
  grep -A4 '^PLAY RECAP' "$1" || true
}

venv() {
  local stamp="${VENV}/.requirements.sha256" want
  want="$({ sha256sum <"${KUBESPRAY_DIR}/requirements.txt"; python3 --version; } 2>&1 | sha256sum | cut -d' ' -f1)"
  if [[ -x "${VENV}/bin/ansible-playbook" && "$(cat "${stamp}" 2>/dev/null)" == "${want}" ]]; then
    echo "up to date: ${VENV}"
    return
  fi
  [[ -x "${VENV}/bin/python" ]] || python3 -m venv "${VENV}"
  PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1 "${VENV}/bin/python" -m pip install --quiet -r "${KUBESPRAY_DIR}/requirements.txt"
  printf '%s\n' "${want}" >"${stamp}"
  "${VENV}/bin/ansible" --version
}

# patch: a copy of the user's checkout with the project's patches (never
# applied to the user's checkout).
PATCHED="${KS_DIR}/kubespray-patched"
patch() {
  local p
  rm -rf "${PATCHED}"
  cp -a "${KUBESPRAY_DIR}" "${PATCHED}"
  # kubespray.patch first, as docs/kubespray.md checks them.
  for p in "${REPO_ROOT}/docs/kubespray.patch" "${REPO_ROOT}/docs/kubespray-upgrade.patch"; do
    echo "applying docs/${p##*/}"
    git -C "${PATCHED}" apply "${p}"
  done
}

# cluster MODE TREE: cluster.yml from TREE against the mode's inventory.
cluster() {
  local mode="$1" tree="$2" inv="${KS_DIR}/inventory-$1"
  "${REPO_ROOT}/hack/kubespray/inventory.sh" "${inv}" "${mode}"
  ansible_env kubespray-run
  # patched: the role comes from this checkout, as a collection
  # (hack/build/dist.sh links it under .cache/collections).
  if [[ "${mode}" == patched ]]; then export ANSIBLE_COLLECTIONS_PATH="${COLLECTIONS_DIR}"; fi
  # kubespray's ansible.cfg (read from the checkout) keeps SSH masters for
  # 30 min; a short ControlPersist lets them go with the hosts.
  export ANSIBLE_HOST_KEY_CHECKING=False ANSIBLE_FORCE_COLOR=0
  export ANSIBLE_SSH_ARGS="-o ControlMaster=auto -o ControlPersist=60s -o UserKnownHostsFile=/dev/null -o StrictHostKeyChecking=no"
  export ANSIBLE_SSH_CONTROL_PATH_DIR="${ANSIBLE_HOME}/cp"
  cd "${tree}"
  # system-packages: no Debian mirror on the hosts; the host image carries
  # kubespray's package list (hack/kubespray/build.sh).
  ansible-playbook -i "${inv}/hosts.yaml" cluster.yml --skip-tags system-packages
}

# cp_ssh CMD: CMD on the control plane host, with its admin kubeconfig.
cp_ssh() {
  local ip key
  ip="$(sed -n 's/^HOST=//p' "${KS_DIR}/hosts.env" | head -n1 | cut -d' ' -f2)"
  key="$(sed -n 's/^SSH_KEY=//p' "${KS_DIR}/hosts.env")"
  ssh -i "${key}" -o BatchMode=yes -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o LogLevel=ERROR \
    "root@${ip}" "export KUBECONFIG=/etc/kubernetes/admin.conf; $1"
}

# nodes: every node Ready and kube-proxy's DaemonSet rolled out.
nodes() {
  cp_ssh 'set -e
    kubectl wait --for=condition=Ready nodes --all --timeout=300s
    kubectl -n kube-system rollout status daemonset/kube-proxy --timeout=300s
    kubectl get nodes -o wide; kubectl -n kube-system get pods -o wide'
}

# proxy_uids: "NODE UID" of every kube-proxy pod, once the DaemonSet is
# rolled out.
proxy_uids() {
  cp_ssh 'kubectl -n kube-system rollout status daemonset/kube-proxy --timeout=300s >/dev/null &&
    kubectl -n kube-system get pods -l k8s-app=kube-proxy \
      -o jsonpath="{range .items[*]}{.spec.nodeName} {.metadata.uid}{\"\\n\"}{end}"' | sort
}

# rerun MODE TREE: cluster.yml again, nothing changed in the inventory; counts
# the kube-proxy pods it replaced (by UID). Patched, it must replace none.
rerun() {
  local mode="$1" before after replaced total
  before="$(proxy_uids)"
  [[ -n "${before}" ]] || { echo "no kube-proxy pod before the rerun"; return 1; }
  cluster "$@"
  after="$(proxy_uids)"
  total="$(wc -l <<<"${before}")"
  replaced="$(comm -23 <(printf '%s\n' "${before}") <(printf '%s\n' "${after}") | wc -l)"
  echo "kube-proxy pods before: ${before//$'\n'/, }"
  echo "kube-proxy pods after:  ${after//$'\n'/, }"
  printf '  %s: kube-proxy pods replaced by the rerun: %s of %s\n' "${mode}" "${replaced}" "${total}" | tee -a "${SUMMARY}"
  if [[ "${mode}" == patched ]] && ((replaced != 0)); then
    echo "the patched rerun replaced ${replaced} kube-proxy pods; it must replace none"
    return 1
  fi
}

step engine "${REPO_ROOT}/hack/kind/docker.sh" up
docker_env
step build "${REPO_ROOT}/hack/kubespray/build.sh"
step venv venv
for mode in ${KS_MODES}; do
  "${REPO_ROOT}/hack/kubespray/hosts.sh" down >/dev/null 2>&1 || true
  step "hosts-${mode}" "${REPO_ROOT}/hack/kubespray/hosts.sh" up
  tree="${KUBESPRAY_DIR}"
  if [[ "${mode}" == patched ]]; then
    # The collection's amd64 binary module, and the collection on a path.
    DIST_ARCHES=amd64 step dist "${REPO_ROOT}/hack/build/dist.sh"
    step patch patch
    tree="${PATCHED}"
  fi
  step "cluster-${mode}" cluster "${mode}" "${tree}"
  step "nodes-${mode}" nodes
  step "rerun-${mode}" rerun "${mode}" "${tree}"
done
log "kubespray tier: every step passed"
cat "${SUMMARY}" >&2
