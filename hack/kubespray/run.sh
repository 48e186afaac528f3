#!/usr/bin/env bash
# make test-kubespray KUBESPRAY_DIR=<kubespray checkout>: kubespray's own
# cluster.yml, fully offline, on 3 container hosts (hack/kubespray/README.md),
# in three modes (KS_MODES, default all three, in this order), each on a copy
# of the checkout's HEAD (never written into):
#   unpatched  kubespray as it is
#   toolfree   docs/kubespray's tool-free series applied (0001 the addon after
#              the last control plane, 0002 a data-only server patch and a
#              rollout restart only when it changed, 0003 the ipvs warning)
#   tool       the whole series, 0004's opt-in too, set in the inventory:
#              kube_proxy_rollout_method: kube-proxy-sync, the binary of this
#              checkout (make release) from the tier's file server through
#              kubespray's downloads, with its sha256 from
#              dist/release/checksums.yml
#
# Steps, each timed and named; the first that fails stops the run, and the
# run says which step, which Ansible task and the error:
#   trees      each mode's copy of the checkout's HEAD (git archive), its
#              patches applied with git apply; KS_ONLY=patch runs only this
#              (no root, no Docker) and exits
#   engine     the static pause the engine check runs (hack/build/tools.sh kind)
#              and the Docker engine (hack/kind/docker.sh up)
#   build      every artifact and image (hack/kubespray/build.sh)
#   release    tool only: make release, and its amd64 binary on the file
#              server where 0004's offline kube_proxy_sync_download_url
#              points (hack/kubespray/inventory.sh binary-path)
#   venv       kubespray's pinned requirements (HEAD's) in .venv/kubespray-run
#   for each mode in KS_MODES:
#     hosts    fresh hosts, file server, registry (hack/kubespray/hosts.sh up)
#     cluster  ansible-playbook cluster.yml on the mode's copy; tool: 0004's
#              task ran once, on the last control plane, and the binary
#              kubespray downloaded there is this checkout's build
#     nodes    every node Ready, kube-proxy rolled out on every node; with
#              KS_DNS=coredns, CoreDNS's Deployment rolled out, every
#              replica Ready
#     rerun    cluster.yml again; counts the kube-proxy pods it replaced (by
#              UID); toolfree and tool must replace none (0002 restarts only
#              when the server changed; tool: its task ok, not changed);
#              unpatched recorded
#     check    cluster.yml --check --diff --tags facts,kube-proxy with
#              kube_proxy_min_sync_period changed in the inventory, the look
#              before a change docs/kubespray.md tells of: nothing written
#              (kube-proxy's ConfigMap at its resourceVersion, the
#              DaemonSet at its generation, the kubeadm config on the
#              control plane as it was, no pod made or restarted, /configz
#              as before). tool: its task changed (it would write), its
#              message naming the field and a restart, its diff the old and
#              new value. toolfree: the playbook passes. unpatched: recorded
#     limit    cluster.yml --limit to the last worker, the same change
#              pending: a limit without control planes changes no
#              kube-proxy (none made or restarted, no rollout, /configz as
#              before); tool: its task did not run
#     settings cluster.yml with kube_proxy_min_sync_period changed in the
#              inventory; the pods it replaced and the most nodes without a
#              Ready kube-proxy at once (from a watch). unpatched, toolfree:
#              kubespray does not apply kube_proxy_* to a running cluster:
#              no pod replaced, no rollout, /configz as before the step.
#              tool: its task changed, one rollout, each pod replaced once,
#              never more nodes down than maxUnavailable, /configz the new
#              value
#     upgrade  KS_UPGRADE=1 (or patch, or minor) only (cluster.yml then
#              installs KUBESPRAY_UPGRADE_FROM; minor: KUBESPRAY_MINOR_FROM):
#              upgrade-cluster.yml with -e kube_version=KUBERNETES_VERSION
#              (minor: KUBESPRAY_UPGRADE_TO), the settings change kept;
#              every node and kube-proxy on the new version; the pods it
#              replaced, the rollouts, the most nodes without a Ready
#              kube-proxy. unpatched: recorded. toolfree: no kube-proxy pod
#              newer than a kube-apiserver (0001), within maxUnavailable
#              (0002: no forced delete). tool: one rollout, each pod replaced
#              once, within maxUnavailable, no kubeadm write of kube-proxy's
#              DaemonSet or ConfigMap, canary first, no kube-proxy pod newer
#              than a kube-apiserver, one kube-proxy-sync run. Every mode,
#              recorded: once the rollout began, the last node still on a
#              pod the step began with has its kube-proxy container stopped,
#              as a reboot would (restart_mid), and what it came back on
#              (pod, image, ConfigMap and whether it is immutable,
#              /configz, and whether that is what it ran before the stop);
#              that pod is left out of the figures and counted apart. tool:
#              back in its old pod, it must run that config from an
#              immutable ConfigMap (restart_judged)
#     breaking cluster.yml with kube_proxy_conntrack_max_per_core back at
#              kubespray's default, which kube-proxy exits on here; the
#              nodes whose kube-proxy it replaced or restarted, the most
#              without a Ready one. unpatched, toolfree: kubespray does not
#              apply it to a running cluster, so nothing breaks (the summary
#              says so): the playbook passes, no kube-proxy touched,
#              /configz as before. tool: the playbook fails at 0004's task
#              "Kube-proxy-sync | Sync kube-proxy's config and restart
#              kube-proxy only if it changed", rolled back, only the canary's
#              pod replaced, every node runs the config before
#     breaking-upgrade  KS_UPGRADE=1 only: upgrade-cluster.yml again at the
#              same version, the breaking setting kept; the nodes it touched,
#              what the ConfigMap kubeadm reads holds afterwards, and whether
#              a kube-proxy pod started afterwards runs. unpatched, toolfree:
#              recorded (kubespray's "Update kube-proxy configmap after
#              upgrade" writes the setting). tool: fails at 0004's task,
#              rolled back, only the canary touched, the ConfigMap as before,
#              and a pod started afterwards runs. A kube-proxy stopped
#              mid-rollout, as in upgrade
#     egress   the packets that tried to leave the tier's network in the
#              mode (hack/kind/egress.sh); must be 0, but a host's to the
#              cluster's pod or Service subnet (counted apart, a figure)
#   nodes, rerun, check, limit, settings, upgrade and breaking end with kube-proxy's own
#   /configz on every node against kubespray's variables (mode, clusterCIDR,
#   minSyncPeriod, conntrack.maxPerCore) and the ConfigMap the DaemonSet
#   mounts (hack/kubespray/measure.py). rerun, settings, upgrade, breaking and
#   breaking-upgrade count the DaemonSet's rollouts (the newest
#   ControllerRevision's number, before and after), run the traffic prober,
#   and make a Service once their rollout began (service_mid): per host, the
#   seconds until its rules had it and it answered.
#
# KS_STEPS (default: rerun check limit settings upgrade breaking
# breaking-upgrade): the
# steps after nodes that run, in their own order; hosts, cluster, nodes and
# egress always run. Without settings, the steps after it carry its change
# too (upgrade then changes the setting and the image at once).
#
# KS_CONTROL_PLANES=3 (hack/kubespray/hosts.sh): three control planes with
# etcd, besides KS_WORKERS workers (2); with KS_LB=nginx (or haproxy),
# kubespray's own HA layout. The upgrade then rolls kube-proxy after the last
# one.
#
# Cleans up on exit (hosts, file server, registry, network; the project's
# Docker engine if this run started it) unless KS_KEEP=1. Logs and the step
# table: .cache/kubespray/logs, .cache/kubespray/summary.txt (ends with a
# table of the modes' steps: wall time, pods replaced, rollouts, most
# unavailable); at exit, passed or not, the run as JSON,
# .cache/kubespray/summary.json (hack/kubespray/evidence.py assemble).
set -euo pipefail
# shellcheck source=hack/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"

KUBESPRAY_DIR="${KUBESPRAY_DIR:-}"
KS_MODES="${KS_MODES:-unpatched toolfree tool}"
KS_DIR="${CACHE_DIR}/kubespray"
# a run that stops before its first step leaves no summary of an earlier one
rm -f "${KS_DIR}/summary.json"
LOGS="${KS_DIR}/logs"
SUMMARY="${KS_DIR}/summary.txt"
VENV="$(venv_dir kubespray-run)"
FIGURES="${KS_DIR}/figures"
# The settings step: a kubespray variable, the field of kube-proxy's config
# it renders to (kube_proxy_mode is iptables here), and its new value
# (kubespray's default: 0s).
SETTING_VAR=kube_proxy_min_sync_period SETTING_FIELD=iptables.minSyncPeriod SETTING_VALUE=2s
# The breaking step: a setting kube-proxy accepts but cannot run with on these
# hosts, kubespray's own default for it. nf_conntrack_max is read-only inside
# a container (hack/kubespray/inventory.sh sets 0, leave it as it is), and
# kube-proxy exits at start when it cannot raise it.
BREAK_VAR=kube_proxy_conntrack_max_per_core BREAK_FIELD=conntrack.maxPerCore BREAK_VALUE=32768 BREAK_BEFORE=0
# KS_UPGRADE=1: cluster.yml installs KUBESPRAY_UPGRADE_FROM
# (hack/kubespray/build.sh reads it too), and each mode ends with the upgrade
# step to KUBERNETES_VERSION; KS_UPGRADE=minor: KUBESPRAY_MINOR_FROM, and the
# upgrade to KUBESPRAY_UPGRADE_TO (UPGRADE_FROM and UPGRADE_TO, hack/lib.sh).
ks_upgrade
# KS_LB=nginx or haproxy: kubespray's local API server load balancer on every
# node, its default layout (hack/kubespray/build.sh builds the image,
# inventory.sh sets it); none (the default): nodes reach the control plane
# directly.
ks_lb
# KS_DNS=coredns: kubespray's dns_mode: coredns (build.sh builds CoreDNS,
# inventory.sh sets it); the nodes step waits for it, and the traffic prober
# asks it for its Service (dns); none (the default): no cluster DNS.
ks_dns

# Every mode runs a copy of the checkout's HEAD (git archive: a bare
# repository does too), so all of them run the same commit.
if [[ -z "${KUBESPRAY_DIR}" ]] || ! git -C "${KUBESPRAY_DIR}" cat-file -e HEAD:cluster.yml 2>/dev/null ||
  ! git -C "${KUBESPRAY_DIR}" cat-file -e HEAD:requirements.txt 2>/dev/null; then
  die "KUBESPRAY_DIR must be a kubespray git checkout (HEAD with cluster.yml, requirements.txt); got '${KUBESPRAY_DIR}'"
fi
KUBESPRAY_DIR="$(cd "${KUBESPRAY_DIR}" && pwd)"
for mode in ${KS_MODES}; do
  case "${mode}" in
    unpatched | toolfree | tool) ;;
    patched) die "KS_MODES: patched (the retired opt-in patches) is gone: tool runs docs/kubespray/0001..0004, toolfree 0001..0003" ;;
    *) die "KS_MODES: some of unpatched toolfree tool, got '${mode}'" ;;
  esac
done
case "${KS_ONLY:-}" in
  "" | patch) ;;
  *) die "KS_ONLY: patch (only each mode's copy of the checkout, then exit) or empty, got '${KS_ONLY}'" ;;
esac
commit="$(git -C "${KUBESPRAY_DIR}" rev-parse HEAD)"
if [[ "$(git -C "${KUBESPRAY_DIR}" rev-parse --is-bare-repository)" == false ]] &&
  [[ -n "$(git -C "${KUBESPRAY_DIR}" status --porcelain --untracked-files=no)" ]]; then
  log "warning: ${KUBESPRAY_DIR} has uncommitted changes; the run has none of them (every mode runs a copy of HEAD, ${commit:0:12})"
fi

# The patches of each mode, in order: toolfree the tool-free series,
# docs/kubespray/0*.patch but the opt-in (the one that adds
# kube_proxy_rollout_method, 0004); tool all of them.
mapfile -t SERIES < <(ls "${REPO_ROOT}"/docs/kubespray/0*.patch)
mapfile -t OPT_IN < <(grep -l '^+kube_proxy_rollout_method: ' "${SERIES[@]}")
((${#SERIES[@]} > ${#OPT_IN[@]} && ${#OPT_IN[@]} == 1)) ||
  die "docs/kubespray/0*.patch: want tool-free patches and one opt-in (adds kube_proxy_rollout_method), got ${#SERIES[@]} patches, opt-in: ${OPT_IN[*]:-none}"
# patches_of MODE: its patches, one a line.
patches_of() {
  local p
  case "$1" in
    toolfree) for p in "${SERIES[@]}"; do [[ "${p}" == "${OPT_IN[0]}" ]] || printf '%s\n' "${p}"; done ;;
    tool) printf '%s\n' "${SERIES[@]}" ;;
  esac
}
# tree_of MODE: the copy of the checkout MODE runs.
tree_of() { printf '%s/kubespray-%s' "${KS_DIR}" "$1"; }

# trees: for each mode, a copy of the checkout's HEAD (a repository of its
# own, so that git apply patches it, not this checkout around .cache), with
# the mode's patches applied in order; says which patch did not apply to
# which mode's copy (removed), and goes on with the next mode (false at the
# end).
trees() {
  local mode dir p applied failed=0
  for mode in ${KS_MODES}; do
    dir="$(tree_of "${mode}")"
    rm -rf "${dir}"
    mkdir -p "${dir}"
    git init -q "${dir}"
    git -C "${KUBESPRAY_DIR}" archive HEAD | tar -x -C "${dir}"
    applied=()
    while read -r p; do
      [[ -n "${p}" ]] || continue
      if ! git -C "${dir}" apply "${p}"; then
        echo "${mode}: FAILED: docs/kubespray/${p##*/} does not apply to kubespray ${commit:0:12} after ${applied[*]:-no patch} (its errors above)"
        failed=1
        rm -rf "${dir}"
        continue 2
      fi
      applied+=("${p##*/}")
    done < <(patches_of "${mode}")
    echo "${mode}: ${dir#"${REPO_ROOT}/"}: kubespray ${commit:0:12}${applied[*]:+ with }$(printf '%s\n' "${applied[@]}" | cut -c1-4 | paste -sd' ')"
  done
  ((!failed))
}
if [[ "${KS_ONLY:-}" == patch ]]; then
  trees
  exit 0
fi
# The steps KS_STEPS picks from, in the order they run.
OPTIONAL_STEPS="rerun check limit settings upgrade breaking breaking-upgrade"
KS_STEPS="${KS_STEPS:-${OPTIONAL_STEPS}}"
for name in ${KS_STEPS}; do
  [[ " ${OPTIONAL_STEPS} " == *" ${name} "* ]] || die "KS_STEPS: some of ${OPTIONAL_STEPS}, got '${name}'"
done
[[ " ${KS_STEPS} " != *" upgrade "* && " ${KS_STEPS} " != *" breaking-upgrade "* ]] || ((UPGRADE)) ||
  log "KS_STEPS names upgrade or breaking-upgrade, which run only with KS_UPGRADE=1 (or patch, or minor)"
# wanted STEP: STEP is one of KS_STEPS.
wanted() { [[ " ${KS_STEPS} " == *" $1 "* ]]; }
[[ "$(id -u)" == 0 ]] || die "make test-kubespray needs root (debootstrap, iptables)"
rm -rf "${FIGURES}" "${KS_DIR}/configz" "${KS_DIR}/summary.json"
mkdir -p "${LOGS}" "${FIGURES}"
[[ "${commit}" == "${KUBESPRAY_COMMIT}" ]] ||
  log "warning: ${KUBESPRAY_DIR} is at ${commit:0:12}, not KUBESPRAY_COMMIT ${KUBESPRAY_COMMIT:0:12} (hack/versions.mk)"

engine_was_up=0
if [[ -n "$("${REPO_ROOT}/hack/kind/docker.sh" env || true)" ]]; then engine_was_up=1; fi

# summary_json RC: the run as JSON, summary.json beside summary.txt
# (hack/kubespray/evidence.py assemble), from what the run wrote (the
# figures directory, the summary's first line) and its metadata, RC its exit
# code; docs/kubespray/runs/README.md says how a run's copy becomes
# evidence. The host's python3 (the stdlib only): a run that stopped before
# the venv step has one too.
summary_json() {
  python3 "${REPO_ROOT}/hack/kubespray/evidence.py" assemble "${FIGURES}" "${SUMMARY}" "${KS_DIR}/summary.json" \
    "kubespray_commit=${commit}" "project_commit=${PROJECT_COMMIT}" "project_dirty=${PROJECT_DIRTY}" \
    "started=${STARTED}" "ended=$(date -u +%FT%TZ)" "exit_code=$1" "modes=${KS_MODES}" "steps=${KS_STEPS}" \
    "control_planes=${KS_CONTROL_PLANES:-1}" "workers=${KS_WORKERS:-2}" "load_balancer=${LB}" "dns=${DNS}" \
    "upgrade=${KS_UPGRADE:-0}" "kubernetes=${KUBERNETES_VERSION}" "upgrade_from=${UPGRADE_FROM}" "upgrade_to=${UPGRADE_TO}" || return 1
  log "the run as JSON: ${KS_DIR#"${REPO_ROOT}/"}/summary.json"
}

cleanup() {
  local rc=$?
  if [[ "${KS_KEEP:-0}" == 1 ]]; then
    log "KS_KEEP=1: hosts left running; remove them with hack/kubespray/hosts.sh down"
  else
    "${REPO_ROOT}/hack/kubespray/hosts.sh" down || rc=1
    ((engine_was_up)) || "${REPO_ROOT}/hack/kind/docker.sh" down || true
  fi
  # evidence, never a verdict: whatever happens here, the run's exit code stays
  summary_json "${rc}" || log "warning: ${KS_DIR#"${REPO_ROOT}/"}/summary.json not written (above); the run's exit code stays ${rc}"
  exit "${rc}"
}
STARTED="$(date -u +%FT%TZ)"
# The checkout the run runs, read at its start: a commit made while it runs
# (hours) is not the one its scripts and its release build came from.
PROJECT_COMMIT="$(git -C "${REPO_ROOT}" rev-parse HEAD)" || PROJECT_COMMIT=unknown
PROJECT_DIRTY=0
changes="$(git -C "${REPO_ROOT}" status --porcelain --untracked-files=no)" || changes=unknown
[[ -z "${changes}" ]] || PROJECT_DIRTY=1
trap cleanup EXIT

versions="${KUBERNETES_VERSION}"
if ((UPGRADE)); then versions="${UPGRADE_FROM}, upgraded to ${UPGRADE_TO}"; fi
printf 'kubespray %s, modes: %s, Kubernetes %s, control planes: %s, workers: %s, local load balancer: %s, DNS: %s, steps: %s, started %s\n' \
  "${commit:0:12}" "${KS_MODES}" "${versions}" "${KS_CONTROL_PLANES:-1}" "${KS_WORKERS:-2}" "${LB}" "${DNS}" "${KS_STEPS}" "${STARTED}" >"${SUMMARY}"
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
  printf '%-28s %6ss  %s\n' "${name}" "$((SECONDS - start))" "$([[ ${rc} == 0 ]] && echo ok || echo FAILED)" >>"${SUMMARY}"
  printf '%s s%s\n' "$((SECONDS - start))" "$([[ ${rc} == 0 ]] || echo ', FAILED')" >"${FIGURES}/${name}.time"
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

# venv: kubespray's requirements.txt at HEAD, the commit every mode runs.
venv() {
  local stamp="${VENV}/.requirements.sha256" want requirements="${KS_DIR}/requirements.txt"
  git -C "${KUBESPRAY_DIR}" show HEAD:requirements.txt >"${requirements}"
  want="$({ sha256sum <"${requirements}"; python3 --version; } 2>&1 | sha256sum | cut -d' ' -f1)"
  if [[ -x "${VENV}/bin/ansible-playbook" && "$(cat "${stamp}" 2>/dev/null)" == "${want}" ]]; then
    echo "up to date: ${VENV}"
    return
  fi
  [[ -x "${VENV}/bin/python" ]] || python3 -m venv "${VENV}"
  PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1 "${VENV}/bin/python" -m pip install --quiet -r "${requirements}"
  printf '%s\n' "${want}" >"${stamp}"
  "${VENV}/bin/ansible" --version
}

# release: tool mode's binary. make release (dist/release: the binaries
# named by galaxy.yml's version, checksums.yml in the shape of kubespray's),
# then the amd64 one on the file server where 0004's offline
# kube_proxy_sync_download_url points (hack/kubespray/inventory.sh
# binary-path); inventory.sh checks it against checksums.yml.
release() {
  local file
  make -C "${REPO_ROOT}" release
  file="${KS_DIR}/files/$("${REPO_ROOT}/hack/kubespray/inventory.sh" binary-path)"
  mkdir -p "$(dirname "${file}")"
  install -m 0644 "${REPO_ROOT}/dist/release/kube-proxy-sync-$(kps_version)-linux-amd64" "${file}"
  figure release "kube-proxy-sync $(kps_version) on the file server: ${file#"${KS_DIR}/files/"}, sha256 $(sha256sum <"${file}" | cut -c1-12)"
}

# cluster MODE TREE [settings|breaking] [PLAYBOOK [ARG...]]: PLAYBOOK
# (default cluster.yml) from TREE against the mode's inventory (settings:
# with SETTING_VAR at SETTING_VALUE; breaking: and BREAK_VAR at BREAK_VALUE),
# with ARGs. tool: with this build's checksums as extra vars (inventory.sh).
cluster() {
  local mode="$1" tree="$2" settings="${3:-}" playbook="${4:-cluster.yml}" inv="${KS_DIR}/inventory-$1" extra=()
  shift "$(($# < 4 ? $# : 4))"
  "${REPO_ROOT}/hack/kubespray/inventory.sh" "${inv}" "${mode}"
  if [[ "${settings}" == settings || "${settings}" == breaking ]]; then
    printf '# The settings step of hack/kubespray/run.sh.\n%s: %s\n' "${SETTING_VAR}" "${SETTING_VALUE}" \
      >"${inv}/group_vars/all/settings.yml"
  fi
  if [[ "${settings}" == breaking ]]; then
    printf '# The breaking step of hack/kubespray/run.sh.\n%s: %s\n' "${BREAK_VAR}" "${BREAK_VALUE}" \
      >>"${inv}/group_vars/all/settings.yml"
  fi
  ansible_env kubespray-run
  # tool: the sha256 of this checkout's build, over the one 0004 pins in
  # kubespray's checksums.yml (role vars: only extra vars are above them)
  if [[ "${mode}" == tool ]]; then extra=(-e "@${inv}/kube-proxy-sync-checksums.yml"); fi
  # kubespray's ansible.cfg (read from the checkout) keeps SSH masters for
  # 30 min; a short ControlPersist lets them go with the hosts.
  export ANSIBLE_HOST_KEY_CHECKING=False ANSIBLE_FORCE_COLOR=0
  export ANSIBLE_SSH_ARGS="-o ControlMaster=auto -o ControlPersist=60s -o UserKnownHostsFile=/dev/null -o StrictHostKeyChecking=no"
  export ANSIBLE_SSH_CONTROL_PATH_DIR="${ANSIBLE_HOME}/cp"
  cd "${tree}"
  # system-packages: no Debian mirror on the hosts; the host image carries
  # kubespray's package list (hack/kubespray/build.sh).
  local rc=0 limit="${KS_PLAYBOOK_TIMEOUT:-3600}"
  timeout "${limit}" ansible-playbook -i "${inv}/hosts.yaml" "${playbook}" --skip-tags system-packages "${extra[@]}" "$@" || rc=$?
  ((rc != 124)) || echo "ansible-playbook ${playbook} did not end within ${limit}s (KS_PLAYBOOK_TIMEOUT): stopped"
  return "${rc}"
}

# cp_ssh CMD: CMD on the control plane host, with its admin kubeconfig,
# within CP_SSH_TIMEOUT seconds (600 unless set), else exit 124 with a
# message naming CMD; a connection that stops answering ends in a minute.
cp_ssh() {
  local ip key rc=0 limit="${CP_SSH_TIMEOUT:-600}"
  ip="$(sed -n 's/^HOST=//p' "${KS_DIR}/hosts.env" | head -n1 | cut -d' ' -f2)"
  key="$(sed -n 's/^SSH_KEY=//p' "${KS_DIR}/hosts.env")"
  timeout "${limit}" ssh -i "${key}" -o BatchMode=yes -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o LogLevel=ERROR \
    -o ConnectTimeout=10 -o ServerAliveInterval=15 -o ServerAliveCountMax=4 \
    "root@${ip}" "export KUBECONFIG=/etc/kubernetes/admin.conf; $1" || rc=$?
  ((rc != 124)) || echo "cp_ssh: no end within ${limit}s on the control plane: ${1:0:120}" >&2
  return "${rc}"
}

# ds_field JSONPATH: a field of kube-proxy's DaemonSet (JSONPATH without its
# braces, and without double quotes).
ds_field() {
  cp_ssh "kubectl -n kube-system get daemonset kube-proxy -o jsonpath='{$1}'"
}

# last_cp: the last control plane's host (hosts.env): where 0004 runs
# kube-proxy-sync (the play's last control plane; every play here has all).
last_cp() {
  local n
  n="$(sed -n 's/^CONTROL_PLANES=//p' "${KS_DIR}/hosts.env")"
  sed -n 's/^HOST=//p' "${KS_DIR}/hosts.env" | sed -n "${n:-1}p" | cut -d' ' -f1
}

# 0004's task that runs kube-proxy-sync (roles/kubernetes/control-plane/tasks/kube-proxy-sync.yml).
SYNC_TASK="Kube-proxy-sync | Sync kube-proxy's config and restart kube-proxy only if it changed"

# sync_task NAME STATUS...: tool mode, after step NAME's playbook (its log):
# SYNC_TASK ran once, on the last control plane, and ended in one of STATUS
# (ok: nothing written; changed; fatal); its result is a figure of NAME.
# Prints the result line (measure.py task).
sync_task() {
  local name="$1" results status host cp
  shift
  results="$("${VENV}/bin/python" "${REPO_ROOT}/hack/kubespray/measure.py" task "${LOGS}/${name}.log" "${SYNC_TASK}")"
  local shown="${results//"${KS_PREFIX:-kps-ks}-"/}"
  figure "${name}" "kube-proxy-sync's task (0004): $(paste -sd';' <<<"${shown:-did not run}" | cut -c1-300)"
  cp="$(last_cp)"
  if [[ -z "${results}" || "$(wc -l <<<"${results}")" != 1 ]]; then
    echo "0004's task \"${SYNC_TASK}\" must run once, on ${cp}; it ran ${results:+$(wc -l <<<"${results}") times: }${results:-never}" >&2
    return 1
  fi
  read -r status host _ <<<"${results}"
  if [[ "${host}" != "${cp}" || " $* " != *" ${status} "* ]]; then
    echo "0004's task \"${SYNC_TASK}\" must end $(printf '%s' "$*" | sed 's/ / or /g') on ${cp}, the last control plane; it ended: ${results}" >&2
    return 1
  fi
  printf '%s\n' "${results}"
}

# install_cluster MODE TREE: cluster.yml on fresh hosts. tool: 0004's task ran on the
# last control plane (ok or changed: a first run stamps the DaemonSet), and
# the binary kubespray's download role put there (downloads.kube_proxy_sync,
# local_release_dir /tmp/releases) is the one on the file server, this
# checkout's build.
install_cluster() {
  local dest want have
  cluster "$1" "$2"
  [[ "$1" == tool ]] || return 0
  sync_task "cluster-$1" ok changed >/dev/null
  dest="/tmp/releases/kube-proxy-sync-$(kps_version)-amd64"
  want="$(sha256sum <"${KS_DIR}/files/$("${REPO_ROOT}/hack/kubespray/inventory.sh" binary-path)" | cut -d' ' -f1)"
  have="$(docker exec "$(last_cp)" sha256sum "${dest}" | cut -d' ' -f1)" || have=""
  figure "cluster-$1" "kube-proxy-sync on $(last_cp | sed "s/^${KS_PREFIX:-kps-ks}-//"): ${dest}, sha256 ${have:0:12}"
  if [[ "${have}" != "${want}" ]]; then
    echo "$(last_cp):${dest} has sha256 '${have:-none (no file)}', not this checkout's build (${want}): kubespray's download of kube_proxy_sync did not fetch it from files_repo"
    return 1
  fi
}

# nodes MODE: every node Ready and kube-proxy's DaemonSet rolled out;
# KS_DNS=coredns: CoreDNS too (coredns_ready); kube-proxy runs kubespray's
# settings.
nodes() {
  cp_ssh 'set -e
    kubectl wait --for=condition=Ready nodes --all --timeout=300s
    kubectl -n kube-system rollout status daemonset/kube-proxy --timeout=300s
    kubectl get nodes -o wide; kubectl -n kube-system get pods -o wide'
  if [[ "${DNS}" == coredns ]]; then coredns_ready "$1"; fi
  configz "$1" nodes
}

# coredns_ready MODE: kubespray's CoreDNS Deployment (kube-system/coredns)
# rolled out within 300 s, every replica Ready (its readiness probe: the
# ready plugin's /ready on 8181), and one kube-dns Service (k8s-app=kube-dns)
# with a ClusterIP; a figure of nodes-MODE says how many replicas, which
# image and the Service's address.
coredns_ready() {
  local ready replicas image ip status
  cp_ssh 'kubectl -n kube-system rollout status deployment/coredns --timeout=300s' ||
    { echo "kubespray's CoreDNS Deployment (kube-system/coredns) did not roll out within 300s"; return 1; }
  # readyReplicas last: the API leaves it out at 0, and read would shift the
  # fields after an empty first one
  status="$(cp_ssh "kubectl -n kube-system get deployment coredns \
    -o jsonpath='{.spec.replicas} {.spec.template.spec.containers[0].image} {.status.readyReplicas}'")" ||
    { echo "cannot read kube-system/coredns's replicas and image"; return 1; }
  read -r replicas image ready <<<"${status}"
  ip="$(kube_dns_ip)" || return 1
  figure "nodes-$1" "CoreDNS: ${ready:-0} of ${replicas:-?} replicas Ready, ${image##*/}, kube-dns ${ip}"
}

# kube_dns_ip: the ClusterIP of the one kube-dns Service (kube-system,
# k8s-app=kube-dns: kubespray names it coredns); fails, saying why, unless
# there is exactly one.
kube_dns_ip() {
  local ip
  ip="$(cp_ssh "kubectl -n kube-system get services -l k8s-app=kube-dns -o jsonpath='{.items[*].spec.clusterIP}'")" || ip=""
  [[ "${ip}" =~ ^[0-9]+(\.[0-9]+){3}$ ]] ||
    { echo "want one kube-dns Service (kube-system, k8s-app=kube-dns) with an IPv4 ClusterIP, found: '${ip}'" >&2; return 1; }
  printf '%s\n' "${ip}"
}

# coredns_pods: every CoreDNS pod (k8s-app=kube-dns) as "IP on NODE", as
# they are (no wait), so a step's lost DNS answers and the pod addresses its
# packets out went to can be set against which pods held those addresses; a
# pod not yet given an address or a node reads "(no IP)" or "(no node)".
coredns_pods() {
  cp_ssh 'kubectl -n kube-system get pods -l k8s-app=kube-dns \
      -o jsonpath="{range .items[*]}{.status.podIP} on {.spec.nodeName}{\"\\n\"}{end}"' |
    sed -e "s/ on ${KS_PREFIX:-kps-ks}-/ on /" -e 's/^ on /(no IP) on /' -e 's/ on $/ on (no node)/' |
    sort | paste -sd, | sed 's/,/, /g'
}

# revision: the number of kube-proxy's newest ControllerRevision (each change
# of the DaemonSet's pod template makes one: a rollout).
revision() {
  cp_ssh 'kubectl -n kube-system get controllerrevisions -l k8s-app=kube-proxy \
    -o jsonpath="{range .items[*]}{.metadata.ownerReferences[0].name} {.revision}{\"\\n\"}{end}"' |
    awk '$1 == "kube-proxy" {print $2}' | sort -n | tail -n1
}

# proxy_uids: "NODE UID" of every kube-proxy pod, once the DaemonSet is
# rolled out.
proxy_uids() {
  cp_ssh 'kubectl -n kube-system rollout status daemonset/kube-proxy --timeout=300s >/dev/null &&
    kubectl -n kube-system get pods -l k8s-app=kube-proxy \
      -o jsonpath="{range .items[*]}{.spec.nodeName} {.metadata.uid}{\"\\n\"}{end}"' | sort
}

# proxy_uids_now: the same, without waiting for a rollout to end (one that
# cannot end: kube-proxy exits on every node).
proxy_uids_now() {
  cp_ssh 'kubectl -n kube-system get pods -l k8s-app=kube-proxy \
      -o jsonpath="{range .items[*]}{.spec.nodeName} {.metadata.uid}{\"\\n\"}{end}"' | sort
}

# figure STEP TEXT: one figure of STEP for the summary and its table.
figure() {
  printf '  %s: %s\n' "$1" "$2" >>"${SUMMARY}"
  printf '%s\n' "$2" >>"${FIGURES}/$1"
}

# configz MODE STEP [stale=ok] [FIELD=VALUE...]: kube-proxy's own /configz on
# every host (read on the host: its metrics bind is loopback) against the
# KubeProxyConfiguration kubespray rendered from its variables (the kubeadm
# config on the first control plane) and the ConfigMap kube-proxy's
# DaemonSet mounts: kubeadm's kube-proxy, or under kube-proxy-sync the
# immutable copy it points the template at, kube-proxy-HASH
# (hack/kubespray/measure.py); fails on a difference. FIELD=VALUE: what the
# inventory set, which kubespray's rendering must carry. stale=ok: kube-proxy
# may run other settings than kubespray's variables (then reported);
# stale=any: than its ConfigMap too (then reported).
configz() {
  local mode="$1" name="$2-$1" dir host files=() rc=0 cm
  shift 2
  dir="${KS_DIR}/configz/${name}"
  rm -rf "${dir}"
  mkdir -p "${dir}"
  cp_ssh 'cat /etc/kubernetes/kubeadm-config.yaml' >"${dir}/kubeadm-config.yaml"
  cm="$(cp_ssh 'kubectl -n kube-system get daemonset kube-proxy -o jsonpath="{range .spec.template.spec.volumes[*]}{.configMap.name}{\"\\n\"}{end}"' |
    grep -Ex 'kube-proxy(-[0-9a-f]{10})?' | head -n1 || true)"
  echo "the ConfigMap kube-proxy's DaemonSet mounts: ${cm:-not found, reading kube-proxy}"
  cp_ssh "kubectl -n kube-system get configmap ${cm:-kube-proxy} -o jsonpath='{.data.config\.conf}'" >"${dir}/config.conf"
  while read -r host; do
    docker exec "${host}" curl -fsS --max-time 10 http://127.0.0.1:10249/configz >"${dir}/${host}.json" ||
      { echo "${host}: kube-proxy's /configz did not answer within 10s"; return 1; }
    files+=("${host}=${dir}/${host}.json")
  done < <(sed -n 's/^HOST=//p' "${KS_DIR}/hosts.env" | cut -d' ' -f1)
  "${VENV}/bin/python" "${REPO_ROOT}/hack/kubespray/measure.py" configz \
    "${dir}/kubeadm-config.yaml" "${dir}/config.conf" "$@" -- "${files[@]}" >"${dir}/result.txt" || rc=$?
  cat "${dir}/result.txt"
  local runs
  runs="$(sed -n "s/^[^ ]* \([^:]*\): runs \([^,]*\),.*/\1=\2/p" "${dir}/result.txt" | sort -u | paste -sd' ')"
  if ((rc != 0)); then
    figure "${name}" "/configz FAILED: ${runs}"
    echo "kube-proxy's /configz differs from its ConfigMap or from kubespray's variables (above)"
    return 1
  elif grep -q "STALE (not the ConfigMap's)" "${dir}/result.txt"; then
    figure "${name}" "/configz: ${runs}, not all the ConfigMap's (a pod started before its last write)"
  elif grep -q STALE "${dir}/result.txt"; then
    figure "${name}" "/configz: ${runs}; not kubespray's variable: $(sed -n "s/^[^ ]* \([^:]*\): .*STALE.*/\1/p" "${dir}/result.txt" | sort -u | paste -sd' ')"
  else
    figure "${name}" "/configz: ${runs}"
  fi
}

# previous_configz MODE STEP: the step of MODE before STEP whose /configz
# was read last (this run's; nodes at least).
previous_configz() {
  local s last=nodes
  for s in nodes rerun check limit settings upgrade breaking; do
    [[ "${s}" != "$2" ]] || break
    [[ ! -f "${KS_DIR}/configz/${s}-$1/result.txt" ]] || last="${s}"
  done
  printf '%s\n' "${last}"
}

# configz_unchanged MODE STEP: after configz MODE STEP, what kube-proxy runs
# on every node (each field configz compares) is what it ran at the step
# before (previous_configz): nothing reached a running kube-proxy.
configz_unchanged() {
  local before now was
  before="$(previous_configz "$1" "$2")"
  # "NODE FIELD VALUE" of what each node runs
  now="$(sed -n 's/^\([^ ]* [^:]*\): runs \([^,]*\),.*/\1 \2/p' "${KS_DIR}/configz/$2-$1/result.txt")"
  was="$(sed -n 's/^\([^ ]* [^:]*\): runs \([^,]*\),.*/\1 \2/p' "${KS_DIR}/configz/${before}-$1/result.txt")"
  if [[ -z "${now}" || "${now}" != "${was}" ]]; then
    echo "kube-proxy's /configz changed since ${before}-$1, though nothing of this mode applies kube_proxy_* to a running cluster:"
    diff <(printf '%s\n' "${was}") <(printf '%s\n' "${now}") || true
    return 1
  fi
  figure "$2-$1" "/configz on every node as at ${before}-$1"
}

# files_service NAME [TYPE [UDP_PORT]]: a Service default/NAME (TYPE:
# ClusterIP, the default, or NodePort) whose one endpoint is the tier's file
# server, off the cluster, so that an answer through it proves a host's
# kube-proxy rules (DNAT to it) rather than a pod's life. Its port http is
# TCP 80 (httpd); with UDP_PORT also a port udp, UDP UDP_PORT (the file
# server's udpecho, hack/kubespray/hosts.sh). Prints its ClusterIP.
files_service() {
  local name="$1" type="${2:-ClusterIP}" udp="${3:-}" files cip
  local ports='{name: http, port: 80, targetPort: 80, protocol: TCP}' slice_ports='{name: http, port: 80, protocol: TCP}'
  files="$(sed -n 's|^FILES_REPO=http://||p' "${KS_DIR}/hosts.env")"
  [[ -n "${files}" ]] || { echo "no file server address in ${KS_DIR}/hosts.env" >&2; return 1; }
  if [[ -n "${udp}" ]]; then
    [[ "${udp}" =~ ^[0-9]+$ ]] || { echo "files_service ${name}: UDP_PORT must be a number, got '${udp}'" >&2; return 1; }
    ports+=", {name: udp, port: ${udp}, targetPort: ${udp}, protocol: UDP}"
    slice_ports+=", {name: udp, port: ${udp}, protocol: UDP}"
  fi
  cp_ssh "kubectl apply -f - >/dev/null <<'EOF'
apiVersion: v1
kind: Service
metadata: {name: ${name}, namespace: default}
spec:
  type: ${type}
  ports: [${ports}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: ${name}-files
  namespace: default
  labels: {kubernetes.io/service-name: ${name}, endpointslice.kubernetes.io/managed-by: kps-tier}
addressType: IPv4
ports: [${slice_ports}]
endpoints: [{addresses: [\"${files}\"]}]
EOF" || { echo "kubectl apply of default/${name} failed" >&2; return 1; }
  cip="$(cp_ssh "kubectl -n default get service ${name} -o jsonpath='{.spec.clusterIP}'")"
  [[ -n "${cip}" ]] || { echo "default/${name} has no ClusterIP" >&2; return 1; }
  echo "${cip}"
}

# reject_on_hosts CIP [udp]: a REJECT of TCP (and with udp of UDP too) to
# CIP in every host's filter OUTPUT, added before any try through a Service:
# a connection or datagram kube-proxy's nat rules redirected no longer has
# the ClusterIP as its destination there, so only a try the host's rules do
# not translate (yet) meets it, and stays on the host, counted as failed,
# instead of leaving the tier's network.
reject_on_hosts() {
  local host ip proto
  while read -r host ip; do
    for proto in tcp ${2:+"$2"}; do
      docker exec "${host}" sh -c "iptables -C OUTPUT -d $1/32 -p ${proto} -j REJECT 2>/dev/null ||
        iptables -A OUTPUT -d $1/32 -p ${proto} -j REJECT" || { echo "${host}: cannot add the ${proto} REJECT for $1"; return 1; }
    done
  done < <(sed -n 's/^HOST=//p' "${KS_DIR}/hosts.env")
}

# traffic_start NAME: the traffic prober of step NAME. A Service of the
# tier's own, default/kps-traffic (a ClusterIP and a NodePort), whose one
# endpoint is the tier's file server: off the cluster, so a connection
# proves the node's kube-proxy rules (DNAT to it), not a pod's life. Then on
# every host a loop that connects to its ClusterIP and to its NodePort on
# the host's own address, each about 4 times a second (one curl each, a
# second to connect, two to answer), and sends a datagram to its ClusterIP's
# UDP port (the file server's udpecho: a fresh socket each try, the same
# bytes back within a second is an answer), one line per try in
# /run/kps-traffic-NAME.log (measure.py traffic; targets cluster, nodeport,
# udp), for at most 3700 s. UDP as a DNS client asks: one query, a new
# source port each time, so each try is a new conntrack entry, NATed by the
# rules the host has then; what it shows is UDP through the Service while
# kube-proxy restarts. A long-lived UDP flow, whose conntrack entry a
# restart clears (kubernetes#122740), is not measured. With KS_DNS=coredns
# also a DNS query (target dns) for the Service's name,
# kps-traffic.default.svc.DOMAIN (DOMAIN the cluster's, dnsDomain in the
# control plane's kubeadm config), to the kube-dns Service's ClusterIP:
# dig, one UDP try from a socket of its own, 1 s; 200 when the answer holds
# the prober's Service's ClusterIP, 502 when it does not, 000 no answer.
# Its endpoints are CoreDNS's pods, not the file server. The loops start
# once every host's rules have the Service, and it waits up to 60 s for
# every host's first answer on every target; fails, saying why, when it
# cannot start or TCP does not answer (the step goes on without it); UDP
# (udp, dns) that does not answer by then is a figure (udp: or dns: no
# answer at start), and its tries go on.
traffic_start() {
  local name="$1" cip port udp host ip deadline answered want t dns_ip="" dns_name="" domain
  local -A silent=()
  udp="$(sed -n 's/^UDP_ECHO_PORT=//p' "${KS_DIR}/hosts.env")"
  cip="$(files_service kps-traffic NodePort "${udp}")" || return 1
  port="$(cp_ssh "kubectl -n default get service kps-traffic -o jsonpath='{.spec.ports[0].nodePort}'")"
  [[ -n "${port}" ]] || { echo "the prober's Service has no node port"; return 1; }
  if [[ "${DNS}" == coredns ]]; then
    dns_ip="$(kube_dns_ip)" || return 1
    domain="$(cp_ssh 'sed -n "s/^ *dnsDomain: *//p" /etc/kubernetes/kubeadm-config.yaml' | head -n1)"
    [[ "${domain}" =~ ^[a-z0-9.-]+$ ]] || { echo "no dnsDomain in the control plane's /etc/kubernetes/kubeadm-config.yaml: '${domain}'"; return 1; }
    dns_name="kps-traffic.default.svc.${domain}"
  fi
  # no try before the host's kube-proxy has the Service in its rules (a
  # connection to the ClusterIP would leave the tier's network unrouted, and
  # the egress step counts it apart), and should the rules lack it later, none
  # leaves the host (reject_on_hosts); the same for kube-dns's ClusterIP
  reject_on_hosts "${cip}" ${udp:+udp} || return 1
  if [[ -n "${dns_ip}" ]]; then reject_on_hosts "${dns_ip}" udp || return 1; fi
  deadline=$((SECONDS + 60))
  while read -r host ip; do
    until docker exec "${host}" sh -c '{ iptables-nft-save -t nat; iptables-legacy-save -t nat; nft list ruleset; } 2>/dev/null | grep -q default/kps-traffic'; do
      ((SECONDS < deadline)) || { echo "${host}: the prober's Service is in none of the host's rules after 60s"; return 1; }
      sleep 0.5
    done
  done < <(sed -n 's/^HOST=//p' "${KS_DIR}/hosts.env")
  while read -r host ip; do
    docker exec -i "${host}" sh -c 'cat >/run/kps-traffic.sh' <<'LOOP' || return 1
# kps-traffic.sh NAME CLUSTER_URL NODEPORT_URL [UDP_IP/UDP_PORT [DNS_IP DNS_NAME
# WANT]]: one try per target and round; bash for /dev/udp
log=/run/kps-traffic-$1.log stop=/run/kps-traffic-$1.stop end=$(($(date +%s) + 3700))
n=0
rm -f "${stop}"
: >"${log}"
while [ ! -e "${stop}" ] && [ "$(date +%s)" -lt "${end}" ]; do
  for target in "cluster $2" "nodeport $3"; do
    what=${target%% *} url=${target#* }
    code=$(curl -s -o /dev/null --connect-timeout 1 --max-time 2 -w '%{http_code}' "${url}")
    echo "$(date +%s%3N) ${what} ${code:-000}" >>"${log}"
  done
  if [ -n "$4" ]; then
    # a fresh socket each try (a new source port, a new conntrack entry);
    # read -N reads the datagram in one read(2) (bash reads a socket a
    # byte at a time otherwise, and the rest of a datagram is lost)
    n=$((n + 1)) payload="kps-$$-${n}" reply=
    { printf '%s' "${payload}" >&3 && read -r -t 1 -N "${#payload}" reply <&3; } 2>/dev/null 3<>"/dev/udp/$4"
    if [ "${reply}" = "${payload}" ]; then code=200; else code=000; fi
    echo "$(date +%s%3N) udp ${code}" >>"${log}"
  fi
  if [ -n "$5" ]; then
    # dig's own socket each try (a new source port): 200 an answer with
    # WANT among its addresses, 502 one without it, 000 none within 1 s
    if answer=$(dig +time=1 +tries=1 +notcp +short "@$5" "$6" A 2>/dev/null); then
      if printf '%s\n' "${answer}" | grep -qxF "$7"; then code=200; else code=502; fi
    else
      code=000
    fi
    echo "$(date +%s%3N) dns ${code}" >>"${log}"
  fi
  sleep 0.2
done
LOOP
    docker exec -d "${host}" bash /run/kps-traffic.sh "${name}" "http://${cip}/" "http://${ip}:${port}/" "${udp:+${cip}/${udp}}" \
      "${dns_ip}" "${dns_name}" "${cip}" || return 1
  done < <(sed -n 's/^HOST=//p' "${KS_DIR}/hosts.env")
  # TCP must answer on every host within 60 s (or the prober is not
  # measuring); UDP (udp, dns) is waited for as long, and a host where a
  # target has not answered by then is named in a figure, its tries recorded
  # as they are. An answer as measure.py traffic counts one: TCP any HTTP
  # status, UDP 200 alone.
  want="$(printf '%s\n' cluster nodeport ${udp:+udp} ${dns_ip:+dns} | sort | paste -sd,)"
  deadline=$((SECONDS + 60))
  while read -r host ip; do
    until answered="$(docker exec "${host}" awk '(($2 == "udp" || $2 == "dns") ? $3 == "200" : $3 != "000") {print $2}' \
      "/run/kps-traffic-${name}.log" | sort -u | paste -sd,)" && [[ "${answered}" == "${want}" ]]; do
      if ((SECONDS >= deadline)); then
        [[ ",${answered}," == *,cluster,* && ",${answered}," == *,nodeport,* ]] ||
          { echo "${host}: no answer through the prober's ClusterIP and NodePort within 60s"; return 1; }
        for t in udp dns; do
          [[ ",${want}," != *",${t},"* || ",${answered}," == *",${t},"* ]] || silent[${t}]+=" ${host#"${KS_PREFIX:-kps-ks}"-}"
        done
        break
      fi
      sleep 0.5
    done
  done < <(sed -n 's/^HOST=//p' "${KS_DIR}/hosts.env")
  if [[ -z "${udp}" ]]; then
    figure "${name}" "udp: not measured (hosts.env has no UDP_ECHO_PORT)"
  fi
  for t in udp dns; do
    [[ -z "${silent[${t}]:-}" ]] || figure "${name}" "${t}: no answer at start within 60s on${silent[${t}]} (tries go on)"
  done
}

# traffic_end NAME: ends the step's prober loops (on every host that has
# one); also when the step fails, so that none outlives it.
traffic_end() {
  local host ip
  while read -r host ip; do
    docker exec "${host}" touch "/run/kps-traffic-$1.stop" 2>/dev/null || true
  done < <(sed -n 's/^HOST=//p' "${KS_DIR}/hosts.env")
}

# traffic_stop NAME: ends the step's prober loops, and records per host and
# target the tries, the failed ones and the longest time without an answer;
# a host whose log cannot be read is named.
traffic_stop() {
  local name="$1" host ip files=() lines missing=()
  traffic_end "${name}"
  while read -r host ip; do
    if docker exec "${host}" cat "/run/kps-traffic-${name}.log" >"${LOGS}/${name}.traffic.${host}.log" &&
      [[ -s "${LOGS}/${name}.traffic.${host}.log" ]]; then
      files+=("${host}=${LOGS}/${name}.traffic.${host}.log")
    else
      missing+=("${host#"${KS_PREFIX:-kps-ks}"-}")
    fi
  done < <(sed -n 's/^HOST=//p' "${KS_DIR}/hosts.env")
  lines=""
  if ((${#files[@]})); then
    lines="$("${VENV}/bin/python" "${REPO_ROOT}/hack/kubespray/measure.py" traffic "${files[@]}")" || return 1
  fi
  echo "${lines}"
  # for the run's summary.json (hack/kubespray/evidence.py)
  [[ -z "${lines}" ]] || printf '%s\n' "${lines}" >"${FIGURES}/${name}.traffic" || true
  figure "${name}" "traffic through the rules, per host: $(sed "s/^${KS_PREFIX:-kps-ks}-//" <<<"${lines}" | paste -sd';' | sed 's/;/; /g')${missing[*]:+; no log from ${missing[*]}}"
}

# service_mid NAME WATCH BEFORE: once the step's watch of kube-proxy's pods
# (WATCH, being written) holds a pod that BEFORE (a file of "NODE UID" lines)
# lacks (a rollout began; measure.py new-pod), makes a Service of its own,
# default/kps-mid (ClusterIP, the file server as its one endpoint, as
# traffic_start's), and records per host the seconds from its creation until
# the host's rules have it (the time of the first look that found it) and a
# connection through its ClusterIP answers (deadline 120 s); prints "HOST
# RULES_S ANSWER_S" lines, - for not within the deadline. Follows the watch
# (what was added, twice a second) until /run/kps-mid-NAME.stop on this
# machine exists (no rollout: prints nothing). A REJECT in each host's filter OUTPUT, added before any
# try, keeps a try without rules on the host (see traffic_start).
service_mid() {
  local name="$1" watch="$2" before="$3" stop="/run/kps-mid-$1.stop" cip made host ip rules answer deadline
  local rc=0
  "${VENV}/bin/python" "${REPO_ROOT}/hack/kubespray/measure.py" new-pod "${watch}" "${before}" "${stop}" || rc=$?
  case "${rc}" in
    0) ;;
    3) return 0 ;; # the step ended with no pod replaced
    *) echo "measure.py new-pod failed (exit ${rc})"; return 1 ;;
  esac
  cip="$(files_service kps-mid)" || return 1
  made="$(date +%s.%N)"
  reject_on_hosts "${cip}" || return 1
  # every host in turn, each about once a second (a look is a docker exec
  # or two), until each answered or 120 s went by
  local -A rules=() answer=()
  local pending at
  deadline=$((SECONDS + 120))
  while ((SECONDS < deadline)); do
    pending=0
    while read -r host ip; do
      [[ -z "${answer[${host}]:-}" ]] || continue
      pending=1
      at="$(awk -v a="${made}" -v b="$(date +%s.%N)" 'BEGIN {printf "%.1f", b - a}')"
      if [[ -z "${rules[${host}]:-}" ]] && docker exec "${host}" sh -c '{ iptables-nft-save -t nat; iptables-legacy-save -t nat; nft list ruleset; } 2>/dev/null | grep -q default/kps-mid'; then
        rules[${host}]="${at}"
      fi
      # any HTTP answer is one (the file server has no index: 404), as the
      # prober counts them; 000 is none
      if [[ -n "${rules[${host}]:-}" ]] &&
        [[ "$(docker exec "${host}" curl -s -o /dev/null --connect-timeout 1 --max-time 2 -w '%{http_code}' "http://${cip}/")" != 000 ]]; then
        answer[${host}]="$(awk -v a="${made}" -v b="$(date +%s.%N)" 'BEGIN {printf "%.1f", b - a}')"
      fi
    done < <(sed -n 's/^HOST=//p' "${KS_DIR}/hosts.env")
    ((pending)) || break
    sleep 0.2
  done
  while read -r host ip; do
    echo "${host#"${KS_PREFIX:-kps-ks}"-} ${rules[${host}]:--} ${answer[${host}]:--}"
  done < <(sed -n 's/^HOST=//p' "${KS_DIR}/hosts.env")
  cp_ssh 'kubectl -n default delete service kps-mid --ignore-not-found >/dev/null
    kubectl -n default delete endpointslice kps-mid-files --ignore-not-found >/dev/null' >&2 || true
  while read -r host ip; do
    docker exec "${host}" iptables -D OUTPUT -d "${cip}/32" -p tcp -j REJECT >&2 || true
  done < <(sed -n 's/^HOST=//p' "${KS_DIR}/hosts.env")
}

# restart_mid NAME WATCH BEFORE: once WATCH holds a kube-proxy pod the step
# began without (a rollout began; measure.py new-pod, until the file
# /run/kps-mid-NAME.stop), kube-proxy's container on the last host whose pod
# is still one of BEFORE's ("NODE UID" lines) and not being deleted is
# stopped (crictl stop), as a reboot of that node would: the kubelet starts
# it again in the same pod, from the pod's template and the ConfigMap as the
# kubelet has it then. Writes RESTART_FILE (uid=UID, node=NODE) for
# cluster_watched, and prints one line: what it came back on (the pod, the
# same or one the rollout made meanwhile, its image, the ConfigMap it
# mounts and whether that is immutable, what its /configz runs: measure.py
# running, and whether that is, every field, what it ran just before the
# stop: measure.py same-config), or why no container was stopped.
restart_mid() {
  local name="$1" watch="$2" before="$3" rc=0 now still host="" uid cid new="" deadline started info pod_uid image cm runs same
  "${VENV}/bin/python" "${REPO_ROOT}/hack/kubespray/measure.py" new-pod "${watch}" "${before}" "/run/kps-mid-${name}.stop" || rc=$?
  case "${rc}" in
    0) ;;
    3) echo "not made: no kube-proxy pod replaced"; return 0 ;;
    *) echo "not made: measure.py new-pod failed (exit ${rc})"; return 1 ;;
  esac
  # the pods now, those being deleted left out: "NODE UID"
  now="$(cp_ssh 'kubectl -n kube-system get pods -l k8s-app=kube-proxy \
    -o jsonpath="{range .items[*]}{.spec.nodeName} {.metadata.uid} {.metadata.deletionTimestamp}{\"\\n\"}{end}"' |
    awk 'NF == 2 {print $1, $2}')" || { echo "not made: kube-proxy's pods could not be listed"; return 1; }
  # the pods the step began with that are still there; the last host with one
  # is the one stopped
  still="$(comm -12 <(sort "${before}") <(sort <<<"${now}"))"
  while read -r node _; do
    if grep -qx "${node} .*" <<<"${still}"; then host="${node}"; fi
  done < <(sed -n 's/^HOST=//p' "${KS_DIR}/hosts.env")
  [[ -n "${host}" ]] || { echo "not made: no node's kube-proxy pod was still one the step began with"; return 0; }
  uid="$(awk -v n="${host}" '$1 == n {print $2}' "${before}")"
  cid="$(docker exec "${host}" crictl ps --name kube-proxy --state running --label "io.kubernetes.pod.uid=${uid}" -q | head -n1)"
  [[ -n "${cid}" ]] || { echo "not made: ${host} runs no kube-proxy container of pod ${uid}"; return 1; }
  # what it runs just before the stop (10 s)
  rm -f "${LOGS}/${name}.before-configz.json"
  deadline=$((SECONDS + 10))
  until docker exec "${host}" curl -fsS --max-time 2 http://127.0.0.1:10249/configz >"${LOGS}/${name}.before-configz.json" 2>/dev/null; do
    ((SECONDS < deadline)) || { rm -f "${LOGS}/${name}.before-configz.json"; break; }
    sleep 1
  done
  started=${SECONDS}
  docker exec "${host}" crictl stop "${cid}" >/dev/null || { echo "not made: crictl stop ${cid} on ${host} failed"; return 1; }
  printf 'uid=%s\nnode=%s\n' "${uid}" "${host}" >"${RESTART_FILE}"
  # the kube-proxy container running on the host next, of any pod
  deadline=$((SECONDS + 120))
  while ((SECONDS < deadline)); do
    new="$(docker exec "${host}" crictl ps --name kube-proxy --state running -q | grep -vx "${cid}" | head -n1 || true)"
    [[ -z "${new}" ]] || break
    sleep 0.5
  done
  local short="${host#"${KS_PREFIX:-kps-ks}"-}"
  [[ -n "${new}" ]] || { echo "${short}: kube-proxy stopped as a reboot would, not running again within 120 s"; return 0; }
  info="$(docker exec "${host}" crictl inspect "${new}" | "${VENV}/bin/python" -c '
import json, sys
s = json.load(sys.stdin)["status"]
print(s.get("labels", {}).get("io.kubernetes.pod.uid", "?"), s.get("image", {}).get("image", "?"))')" || info="? ?"
  read -r pod_uid image <<<"${info}"
  cm="$(cp_ssh "kubectl -n kube-system get pods -l k8s-app=kube-proxy \
    -o jsonpath='{range .items[?(@.metadata.uid==\"${pod_uid}\")]}{.spec.volumes[*].configMap.name}{end}'")" || cm="?"
  if [[ "${cm}" =~ ^[a-z0-9.-]+$ ]] &&
    [[ "$(cp_ssh "kubectl -n kube-system get configmap ${cm} -o jsonpath='{.immutable}'" 2>/dev/null)" == true ]]; then
    cm+=" (immutable)"
  fi
  # its /configz once it answers (30 s); kube-proxy binds it on the host,
  # so it is this container's only while no other kube-proxy container
  # runs there (the rollout may replace its pod meanwhile: the DaemonSet
  # controller deletes an old pod that is not Ready at once)
  deadline=$((SECONDS + 30))
  until docker exec "${host}" curl -fsS --max-time 2 http://127.0.0.1:10249/configz >"${LOGS}/${name}.restart-configz.json" 2>/dev/null; do
    ((SECONDS < deadline)) || break
    sleep 1
  done
  runs="$("${VENV}/bin/python" "${REPO_ROOT}/hack/kubespray/measure.py" running "${LOGS}/${name}.restart-configz.json" 2>/dev/null)" ||
    runs="no /configz within 30 s"
  if [[ "$(docker exec "${host}" crictl ps --name kube-proxy --state running -q 2>/dev/null)" != "${new}" ]]; then
    same="not compared: another kube-proxy container ran on the host by then (the pod replaced meanwhile), so the /configz may be its"
  elif [[ ! -s "${LOGS}/${name}.before-configz.json" ]]; then
    same="before the stop: unknown, its /configz did not answer in 10 s"
  elif [[ "${runs}" == "no /configz"* ]]; then
    same="before the stop: $("${VENV}/bin/python" "${REPO_ROOT}/hack/kubespray/measure.py" running "${LOGS}/${name}.before-configz.json" 2>/dev/null || echo '?')"
  else
    # the image the container runs says which form its /configz comes in
    rc=0
    same="$("${VENV}/bin/python" "${REPO_ROOT}/hack/kubespray/measure.py" same-config \
      "${LOGS}/${name}.before-configz.json" "${LOGS}/${name}.restart-configz.json" "${image}" 2>&1)" || rc=$?
    case "${rc}" in
      0) same="as before the stop" ;;
      3) ;; # "not compared: another kube-proxy version answered (...)"
      *) same="before the stop: $("${VENV}/bin/python" "${REPO_ROOT}/hack/kubespray/measure.py" running "${LOGS}/${name}.before-configz.json" 2>/dev/null || echo '?'); ${same}" ;;
    esac
  fi
  echo "${short}'s kube-proxy stopped once the rollout began, as a reboot would: running again after $((SECONDS - started)) s in $(
    [[ "${pod_uid}" == "${uid}" ]] && echo "the same pod (one the step began with)" || echo "a pod the rollout made meanwhile"), image ${image##*/}, ConfigMap ${cm:-?}, running ${runs} (${same})"
}

# restart_judged NAME: with the tool, the kube-proxy restart_mid stopped in
# step NAME ran again and served its /configz, and, if back in the pod the
# step began with, from an immutable ConfigMap (which no later write can
# change) and on the config it ran just before the stop (every field:
# measure.py same-config), rather than what the run is rolling out. A
# restart that was not made (no pod replaced, or none old left), or whose
# /configz another kube-proxy container or version may have served, is only
# recorded.
restart_judged() {
  local line
  line="$(tail -n1 "${LOGS}/$1.restart.log" 2>/dev/null || true)"
  case "${line}" in
    "not made: no kube-proxy pod replaced" | "not made: no node's kube-proxy pod was still"*) return 0 ;;
    *"running again after "*) ;;
    *)
      echo "the kube-proxy stopped mid-rollout in $1 did not run again, or the stop was not made: ${line:-nothing recorded}"
      return 1
      ;;
  esac
  if [[ "${line}" == *"no /configz within"* ]]; then
    echo "the kube-proxy stopped mid-rollout ran again but served no /configz: ${line}"
    return 1
  fi
  [[ "${line}" == *" in the same pod "* ]] || return 0
  # back in its old pod: from an immutable ConfigMap, on the config it ran
  # before the stop
  if [[ "${line}" != *" (immutable), running "* ]]; then
    echo "the kube-proxy stopped mid-rollout ran again in its old pod, but its ConfigMap is not immutable (a later write would reach it): ${line}"
    return 1
  fi
  case "${line}" in
    *" (as before the stop)") ;;
    *"(not compared: another kube-proxy "*) ;;
    *"(before the stop: unknown"*)
      echo "the kube-proxy stopped mid-rollout ran again in its old pod, but what it ran before the stop is unknown (no /configz then): ${line}"
      return 1
      ;;
    *)
      echo "the kube-proxy stopped mid-rollout ran again in its old pod, but not on the config it ran before the stop: ${line}"
      return 1
      ;;
  esac
}

# cluster_watched MODE TREE STEP [settings [PLAYBOOK [ARG...]]]: cluster
# MODE TREE [settings [PLAYBOOK [ARG...]]] with kube-proxy's pods watched
# from the control plane; records the pods it replaced (by UID), the
# DaemonSet's rollouts (ControllerRevisions made) and the most nodes without
# a Ready kube-proxy at once (hack/kubespray/measure.py), and leaves them in
# REPLACED, TOTAL, NEW, MAX_PER_NODE, ROLLOUTS, MAX_UNAVAILABLE, RESTARTS,
# PER_NODE, TOUCHED and TOUCHED_NODES (the nodes where a pod was made or a
# container restarted). WATCH_ALL=1 watches every pod of kube-system (the
# kube-apiserver pods too: the upgrade's CANARY_FIRST, CANARY_NODE, SKEW and
# SKEW_DETAIL). RESTART_MID=1: restart_mid too, its line a figure, and the
# pod it stopped excused from the figures (measure.py watch UID), counted
# apart in MAX_UNAVAILABLE_ALL and EXCUSED_RESTARTS. MAY_FAIL=1: a failed playbook is measured as well, its exit
# code left in PLAYBOOK_RC (otherwise the step fails with it), and a rollout
# that does not end after it is measured as it is.
cluster_watched() {
  local mode="$1" tree="$2" name="$3-$1" before after out pidfile watch_pid deadline rev_before rev_after
  shift 3
  out="${LOGS}/${name}.watch.json"
  pidfile="/run/kps-watch-${name}.pid"
  before="$(proxy_uids)"
  [[ -n "${before}" ]] || { echo "no kube-proxy pod before ${name}"; return 1; }
  TOTAL="$(wc -l <<<"${before}")"
  rev_before="$(revision)"
  [[ "${rev_before}" =~ ^[0-9]+$ ]] || { echo "no ControllerRevision of kube-proxy's DaemonSet before ${name}"; return 1; }
  local dns_before=""
  if [[ "${DNS}" == coredns ]]; then dns_before="$(coredns_pods)" || dns_before="not read"; fi
  : >"${out}"
  # The watch lists the existing pods first (as ADDED events): cluster.yml
  # starts once it has. An API server restart (upgrade-cluster.yml) ends
  # kubectl's watch: it starts again, after a RELIST line
  # (hack/kubespray/measure.py). timeout's kill ends its process group.
  local again='while :; do kubectl -n kube-system get pods SELECTOR --watch --output-watch-events -o json; echo "{\"type\": \"RELIST\"}"; sleep 1; done'
  if ((${WATCH_ALL:-0})); then again="${again/SELECTOR /}"; else again="${again/SELECTOR/-l k8s-app=kube-proxy}"; fi
  CP_SSH_TIMEOUT=3660 cp_ssh "echo \$\$ >${pidfile}; exec timeout 3600 sh -c '${again}'" >"${out}" 2>"${LOGS}/${name}.watch.err" &
  watch_pid=$!
  # shellcheck disable=SC2064 # the pid and file of this step's watch
  trap "cp_ssh 'kill \$(cat ${pidfile})' 2>/dev/null; pkill -P ${watch_pid} 2>/dev/null; kill ${watch_pid} 2>/dev/null || true" EXIT
  deadline=$((SECONDS + 60))
  until (($(grep -o '"k8s-app": *"kube-proxy"' "${out}" | wc -l) >= TOTAL)); do
    kill -0 "${watch_pid}" 2>/dev/null || { cat "${LOGS}/${name}.watch.err"; echo "the watch of kube-proxy's pods ended"; return 1; }
    ((SECONDS < deadline)) || { echo "the watch listed fewer than ${TOTAL} kube-proxy pods within 60s"; return 1; }
    sleep 0.2
  done
  local traffic=1
  trap "touch '/run/kps-mid-${name}.stop'; traffic_end '${name}'; cp_ssh 'kill \$(cat ${pidfile})' 2>/dev/null; pkill -P ${watch_pid} 2>/dev/null; kill ${watch_pid} 2>/dev/null || true" EXIT
  traffic_start "${name}" >"${LOGS}/${name}.traffic.err" 2>&1 ||
    { traffic=0; traffic_end "${name}"; figure "${name}" "traffic: not measured ($(tail -n1 "${LOGS}/${name}.traffic.err"))"; }
  rm -f "/run/kps-mid-${name}.stop"
  printf '%s\n' "${before}" >"${LOGS}/${name}.before"
  service_mid "${name}" "${out}" "${LOGS}/${name}.before" >"${LOGS}/${name}.mid.log" 2>&1 &
  local mid_pid=$! restart_pid=""
  RESTART_FILE="${LOGS}/${name}.restart"
  rm -f "${RESTART_FILE}" "${LOGS}/${name}.restart.log"
  if ((${RESTART_MID:-0})); then
    restart_mid "${name}" "${out}" "${LOGS}/${name}.before" >"${LOGS}/${name}.restart.log" 2>&1 &
    restart_pid=$!
  fi
  PLAYBOOK_RC=0
  cluster "${mode}" "${tree}" "$@" || PLAYBOOK_RC=$?
  # the Service made mid-rollout: its hosts' times (at most 120 s after it
  # was made), or not made (no rollout)
  touch "/run/kps-mid-${name}.stop"
  deadline=$((SECONDS + 180))
  while { kill -0 "${mid_pid}" || { [[ -n "${restart_pid}" ]] && kill -0 "${restart_pid}"; }; } 2>/dev/null && ((SECONDS < deadline)); do sleep 1; done
  kill "${mid_pid}" ${restart_pid} 2>/dev/null || true
  wait "${mid_pid}" ${restart_pid} 2>/dev/null || true
  if [[ "${DNS}" == coredns ]]; then
    local dns_after
    dns_after="$(coredns_pods)" || dns_after="not read"
    figure "${name}" "CoreDNS pods (IP on node) before the step: ${dns_before:-none}; after: ${dns_after:-none}"
  fi
  if [[ -n "${restart_pid}" ]]; then
    figure "${name}" "a kube-proxy stopped mid-rollout (as a node reboot): $(tail -n1 "${LOGS}/${name}.restart.log" 2>/dev/null | sed "s/${KS_PREFIX:-kps-ks}-//g")"
  fi
  local mid
  mid="$(grep -E '^[^ ]+ ([0-9.]+|-) ([0-9.]+|-)$' "${LOGS}/${name}.mid.log" | paste -sd';' | sed 's/;/; /g' || true)"
  if [[ -n "${mid}" ]]; then
    figure "${name}" "a Service made once the rollout began, seconds until each host's rules had it and it answered (- : not within 120 s): ${mid}"
  elif [[ -s "${LOGS}/${name}.mid.log" ]]; then
    figure "${name}" "a Service made once the rollout began: not measured ($(tail -n1 "${LOGS}/${name}.mid.log"))"
  else
    figure "${name}" "a Service made once the rollout began: not made (no kube-proxy pod replaced)"
  fi
  if ((PLAYBOOK_RC != 0 && ${MAY_FAIL:-0} == 0)); then return "${PLAYBOOK_RC}"; fi
  if ((traffic)); then traffic_stop "${name}" || figure "${name}" "traffic: no figures (see ${LOGS}/${name}.traffic.*)"; fi
  # a step that may fail may leave a rollout that cannot end: then the pods as they are
  if ! after="$(proxy_uids)"; then
    ((${MAY_FAIL:-0})) || { echo "kube-proxy's DaemonSet did not roll out within 300s after ${name}"; return 1; }
    echo "kube-proxy's DaemonSet did not roll out within 300s after ${name}: its pods as they are"
    after="$(proxy_uids_now)"
  fi
  rev_after="$(revision)"
  cp_ssh "kill \$(cat ${pidfile})"
  # the watch's ssh ends with its remote command: give it 30s
  deadline=$((SECONDS + 30))
  while kill -0 "${watch_pid}" 2>/dev/null; do
    ((SECONDS < deadline)) || {
      echo "the watch of kube-proxy's pods did not end within 30s of its kill: killed here"
      pkill -P "${watch_pid}" 2>/dev/null || true
      kill "${watch_pid}" 2>/dev/null || true
      break
    }
    sleep 0.2
  done
  wait "${watch_pid}" || true
  trap - EXIT
  local key value
  RESTARTS='' CANARY_FIRST='' CANARY_NODE='' SKEW='' SKEW_DETAIL='' PER_NODE='' TOUCHED='' TOUCHED_NODES=''
  MAX_UNAVAILABLE_ALL='' EXCUSED_RESTARTS=''
  local excused
  excused="$(sed -n 's/^uid=//p' "${RESTART_FILE}" 2>/dev/null || true)"
  while IFS='=' read -r key value; do
    case "${key}" in
      new) NEW="${value}" ;;
      max_per_node) MAX_PER_NODE="${value}" ;;
      max_unavailable) MAX_UNAVAILABLE="${value}" ;;
      revisions) REVISIONS="${value}" ;;
      gaps) GAPS="${value}" ;;
      restarts) RESTARTS="${value}" ;;
      canary_first) CANARY_FIRST="${value}" ;;
      canary_node) CANARY_NODE="${value}" ;;
      skew) SKEW="${value}" ;;
      skew_detail) SKEW_DETAIL="${value}" ;;
      per_node) PER_NODE="${value}" ;;
      touched) TOUCHED="${value}" ;;
      touched_nodes) TOUCHED_NODES="${value}" ;;
      max_unavailable_all) MAX_UNAVAILABLE_ALL="${value}" ;;
      excused_restarts) EXCUSED_RESTARTS="${value}" ;;
    esac
  done < <("${VENV}/bin/python" "${REPO_ROOT}/hack/kubespray/measure.py" watch "${out}" ${excused:+"${excused}"} | tee "${FIGURES}/${name}.watch")
  [[ -n "${NEW:-}" && -n "${MAX_PER_NODE:-}" && -n "${MAX_UNAVAILABLE:-}" && -n "${REVISIONS:-}" && -n "${TOUCHED}" ]] || { echo "no figures from ${out}"; return 1; }
  REPLACED="$(comm -23 <(printf '%s\n' "${before}") <(printf '%s\n' "${after}") | wc -l)"
  ROLLOUTS=$((rev_after - rev_before))
  echo "kube-proxy pods before: ${before//$'\n'/, }"
  echo "kube-proxy pods after:  ${after//$'\n'/, }"
  figure "${name}" "kube-proxy pods replaced ${REPLACED} of ${TOTAL} (pods created ${NEW}, most on one node ${MAX_PER_NODE})"
  figure "${name}" "rollouts of the DaemonSet: ${ROLLOUTS} (ControllerRevision ${rev_before} to ${rev_after}; template revisions among the new pods: ${REVISIONS})"
  figure "${name}" "most nodes without a Ready kube-proxy at once: ${MAX_UNAVAILABLE}"
  figure "${name}" "kube-proxy container restarts in place (no pod replaced): ${RESTARTS:-?}"
  figure "${name}" "per node, kube-proxy pods made and container restarts: $(sed "s/${KS_PREFIX:-kps-ks}-//g" <<<"${PER_NODE:-?}")"
  if [[ -n "${excused}" ]]; then
    figure "${name}" "the kube-proxy stopped on purpose, left out above: its container restarts ${EXCUSED_RESTARTS:-?}; with it, most nodes without a Ready kube-proxy at once ${MAX_UNAVAILABLE_ALL:-?}"
  fi
  if ((${GAPS:-0} > 0)); then
    figure "${name}" "the watch started again ${GAPS} times (its connection to the API server ended): what happened while it was down is not seen"
  fi
}

# touched_nodes: " (w1, w2)", the hosts of TOUCHED_NODES by their short
# names; nothing when none.
touched_nodes() {
  [[ -z "${TOUCHED_NODES}" ]] || printf ' (%s)' "$(sed "s/${KS_PREFIX:-kps-ks}-//g; s/,/, /g" <<<"${TOUCHED_NODES}")"
}

# rerun MODE TREE: cluster.yml again, nothing changed in the inventory; counts
# the kube-proxy pods it replaced (by UID). toolfree and tool must replace
# none, in no rollout: 0002 patches the server and restarts only when it
# changed, and tool's kube-proxy-sync (its task ok: nothing written) only
# when the config did. unpatched: recorded.
rerun() {
  cluster_watched "$1" "$2" rerun
  if [[ "$1" == tool ]]; then sync_task "rerun-$1" ok >/dev/null; fi
  if [[ "$1" != unpatched ]] && ((REPLACED != 0 || NEW != 0 || ROLLOUTS != 0)); then
    echo "the $1 rerun replaced ${REPLACED} kube-proxy pods (created ${NEW}, rollouts ${ROLLOUTS}); it must replace none"
    return 1
  fi
  configz "$1" rerun
}

# allowed BUDGET: the most nodes without a Ready kube-proxy that BUDGET, the
# DaemonSet's maxUnavailable, allows (a number, or a percentage of TOTAL
# nodes rounded up, as the DaemonSet controller reads it; unset: 1).
allowed() {
  local budget="${1:-1}"
  if [[ "${budget}" =~ ^[0-9]+$ ]]; then
    echo "${budget}"
  elif [[ "${budget}" =~ ^([0-9]+)%$ ]]; then
    echo $(((BASH_REMATCH[1] * TOTAL + 99) / 100))
  else
    echo "the DaemonSet's maxUnavailable '${budget}' is neither a number nor a percentage" >&2
    return 1
  fi
}

# within_budget WHAT BUDGET: after cluster_watched, never more nodes without
# a Ready kube-proxy at once than the DaemonSet's maxUnavailable allows.
within_budget() {
  local n
  n="$(allowed "$2")" || return 1
  if ((MAX_UNAVAILABLE > n)); then
    echo "${MAX_UNAVAILABLE} nodes were without a Ready kube-proxy at once during $1; the DaemonSet's maxUnavailable is ${2:-1} (${n} of ${TOTAL} nodes)"
    return 1
  fi
}

# rolled_once WHAT BUDGET: after cluster_watched, tool's checks of a step
# that changes kube-proxy's settings or image: one rollout of the DaemonSet
# (docs/kubespray.md), each pod replaced once, within_budget.
rolled_once() {
  if ((ROLLOUTS != 1)); then
    echo "$1 rolled kube-proxy's DaemonSet ${ROLLOUTS} times; it needs one (docs/kubespray.md)"
    return 1
  fi
  if ((REPLACED != TOTAL || MAX_PER_NODE != 2)); then
    echo "$1 replaced ${REPLACED} of ${TOTAL} kube-proxy pods, up to $((MAX_PER_NODE - 1)) times on one node; it must replace each once"
    return 1
  fi
  within_budget "$1" "$2"
}

# judged MODE COMMAND...: COMMAND, its failure the step's; in the unpatched
# mode only recorded (its output stays in the step's log), since kubespray as
# it is fails what the patches fix.
judged() {
  local mode="$1"
  shift
  if [[ "${mode}" == unpatched ]]; then "$@" || true; else "$@"; fi
}

# untouched WHAT: after cluster_watched, no kube-proxy pod made, replaced or
# restarted, no rollout.
untouched() {
  if ((REPLACED != 0 || NEW != 0 || ROLLOUTS != 0 || TOUCHED != 0)); then
    echo "$1 replaced ${REPLACED} kube-proxy pods (created ${NEW}, rollouts ${ROLLOUTS}, nodes whose kube-proxy was replaced or restarted ${TOUCHED}); kubespray applies no kube_proxy_* to a running cluster, so it must touch none"
    return 1
  fi
}

# written: kube-proxy's ConfigMap's resourceVersion, its DaemonSet's
# generation, and the sha256 of the kubeadm config on the control plane:
# what a run that writes nothing leaves as it found.
written() {
  cp_ssh "kubectl -n kube-system get configmap kube-proxy -o jsonpath='configmap={.metadata.resourceVersion}'; echo;
    kubectl -n kube-system get daemonset kube-proxy -o jsonpath='daemonset={.metadata.generation}'; echo;
    echo kubeadm-config=\$(sha256sum </etc/kubernetes/kubeadm-config.yaml | cut -c1-16)"
}

# check MODE TREE: cluster.yml --check --diff --tags facts,kube-proxy with
# SETTING_VAR at SETTING_VALUE, the look before a change that
# docs/kubespray.md tells an operator to take. Every mode that passes it:
# nothing written (written, before and after), untouched, /configz as
# before. tool: 0004's task changed (it would write), what its result
# showed says the ConfigMap's config.conf would change and the DaemonSet
# restart, and its diff has SETTING_FIELD's old and new value. toolfree: the playbook passes. unpatched: recorded,
# the playbook's failure too.
check() {
  local before after shown leaf="${SETTING_FIELD##*.}"
  before="$(written)"
  MAY_FAIL=$([[ "$1" == unpatched ]] && echo 1 || echo 0) \
    cluster_watched "$1" "$2" check settings cluster.yml --check --diff --tags facts,kube-proxy
  figure "check-$1" "cluster.yml --check --diff --tags facts,kube-proxy, ${SETTING_VAR}: ${SETTING_VALUE} pending: $(
    ((PLAYBOOK_RC == 0)) && echo passed || echo "FAILED (exit ${PLAYBOOK_RC})")"
  after="$(written)"
  if [[ "${after}" != "${before}" ]]; then
    figure "check-$1" "written: before ${before//$'\n'/, }; after ${after//$'\n'/, }"
    [[ "$1" == unpatched ]] || { echo "the $1 check-mode run wrote (above)"; return 1; }
  else
    figure "check-$1" "written: nothing (${after//$'\n'/, })"
  fi
  judged "$1" untouched "the $1 check-mode run"
  # unpatched: a failed check-mode run is recorded, and the step ends here
  [[ "$1" != unpatched ]] || ((PLAYBOOK_RC == 0)) || return 0
  if [[ "$1" == tool ]]; then
    sync_task "check-$1" changed >/dev/null
    shown="$("${VENV}/bin/python" "${REPO_ROOT}/hack/kubespray/measure.py" shown "${LOGS}/check-$1.log" "Kube-proxy-sync | Show the result")"
    figure "check-$1" "0004's result shown: $(paste -sd';' <<<"${shown}" | cut -c1-400)"
    # the message names the data key that would change (config.conf), the
    # diff the field
    if ! grep -q "configmap kube-system/kube-proxy would change (config.conf)" <<<"${shown}" ||
      ! grep -q 'would restart daemonset kube-system/kube-proxy' <<<"${shown}"; then
      echo "0004's result must say kube-proxy's ConfigMap would change (config.conf) and its DaemonSet would restart; it showed: ${shown}"
      return 1
    fi
    if ! grep -Eq "^\+ *${leaf}: ${SETTING_VALUE}\$" <<<"${shown}" || ! grep -Eq "^- *${leaf}: " <<<"${shown}"; then
      echo "0004's diff must have ${leaf}'s old value and ${SETTING_VALUE}; it showed: ${shown}"
      return 1
    fi
  fi
  configz "$1" check
  configz_unchanged "$1" check
}

# limit MODE TREE: cluster.yml --limit to the last worker, SETTING_VAR at
# SETTING_VALUE pending: a limit that leaves no control plane in the play
# changes no kube-proxy (untouched, /configz as before; unpatched:
# recorded), and tool's 0004 task does not run (docs/kubespray.md: it runs
# on the last control plane the limit leaves in the play).
limit() {
  local worker results
  worker="$(sed -n 's/^HOST=//p' "${KS_DIR}/hosts.env" | tail -n1 | cut -d' ' -f1)"
  cluster_watched "$1" "$2" limit settings cluster.yml --limit "${worker}"
  figure "limit-$1" "cluster.yml --limit ${worker#"${KS_PREFIX:-kps-ks}-"}, ${SETTING_VAR}: ${SETTING_VALUE} pending"
  # unpatched: recorded, as its rerun (kubespray's kubeadm role rewrites
  # kube-proxy's ConfigMap from a worker too, delegated to the first
  # control plane, and deletes every kube-proxy pod if that changed it)
  judged "$1" untouched "the $1 run limited to ${worker}"
  if [[ "$1" == tool ]]; then
    results="$("${VENV}/bin/python" "${REPO_ROOT}/hack/kubespray/measure.py" task "${LOGS}/limit-$1.log" "${SYNC_TASK}")"
    if [[ -n "${results}" ]]; then
      echo "0004's task \"${SYNC_TASK}\" ran under --limit ${worker}, which leaves no control plane in the play: ${results}"
      return 1
    fi
    figure "limit-$1" "kube-proxy-sync's task (0004): did not run"
  fi
  configz "$1" limit
  configz_unchanged "$1" limit
}

# NOT_APPLIED: what unpatched and toolfree say of a kube_proxy_* change on a
# running cluster.
NOT_APPLIED="kubespray's cluster.yml does not apply kube_proxy_* to a running cluster (no patch of this mode changes that; kubeadm writes kube-proxy's ConfigMap only at init and at upgrade-cluster.yml)"

# settings MODE TREE: cluster.yml with SETTING_VAR at SETTING_VALUE in the
# inventory. tool: 0004's task changed, kube-proxy runs the new value, one
# rollout, each pod replaced once, never more nodes without a Ready
# kube-proxy than the DaemonSet's maxUnavailable. unpatched, toolfree:
# kubespray writes the kubeadm config but leaves a running cluster's
# kube-proxy ConfigMap alone: no pod replaced, no rollout, /configz as
# before the step.
settings() {
  local budget
  budget="$(ds_field .spec.updateStrategy.rollingUpdate.maxUnavailable)"
  cluster_watched "$1" "$2" settings settings
  figure "settings-$1" "${SETTING_VAR}: ${SETTING_VALUE}, the DaemonSet's maxUnavailable: ${budget}"
  if [[ "$1" == tool ]]; then
    sync_task "settings-$1" changed >/dev/null
    configz "$1" settings "${SETTING_FIELD}=${SETTING_VALUE}"
    rolled_once "the tool's settings change" "${budget}"
    return
  fi
  figure "settings-$1" "${NOT_APPLIED}"
  untouched "the $1 settings change"
  configz "$1" settings stale=ok "${SETTING_FIELD}=${SETTING_VALUE}"
  configz_unchanged "$1" settings
}

# breaking MODE TREE: cluster.yml with BREAK_VAR at BREAK_VALUE added to the
# settings step's inventory: a config kube-proxy accepts but exits on at
# start on these hosts. Recorded in every mode: the kube-proxy pods made and
# container restarts per node, the most nodes without a Ready kube-proxy at
# once, and what kube-proxy runs afterwards. tool: the playbook fails at
# 0004's SYNC_TASK, whose kube-proxy-sync rolled back; only one node's
# kube-proxy (the canary) was replaced; never more than one node without a
# Ready kube-proxy; every node runs BREAK_BEFORE again, as its ConfigMap
# says. unpatched, toolfree: cluster.yml leaves a running cluster's
# kube-proxy ConfigMap alone, so nothing breaks (said in the summary): the
# playbook passes, no kube-proxy touched, /configz as before the step; the
# setting reaches the ConfigMap at upgrade-cluster.yml (breaking-upgrade).
breaking() {
  local broken stale=stale=ok
  MAY_FAIL=1 cluster_watched "$1" "$2" breaking breaking
  figure "breaking-$1" "${BREAK_VAR}: ${BREAK_VALUE} (kube-proxy exits on it here); cluster.yml exit code ${PLAYBOOK_RC}"
  # the nodes that lost kube-proxy: a pod made or a container restarted there
  broken="${TOUCHED}"
  figure "breaking-$1" "nodes whose kube-proxy was replaced or restarted: ${broken} of ${TOTAL}$(touched_nodes)"
  if [[ "$1" != tool ]]; then
    figure "breaking-$1" "${NOT_APPLIED}: the setting reaches no kube-proxy, nothing to break"
    if ((PLAYBOOK_RC != 0)); then
      ansible_failure "${LOGS}/breaking-$1.log" || true
      echo "the $1 cluster.yml failed (exit ${PLAYBOOK_RC}, above)"
      return 1
    fi
    untouched "the $1 breaking setting"
    # an upgrade before may have left pods on another config than their
    # ConfigMap (kubespray writes it after kubeadm rolled the image)
    if ((UPGRADE)) && wanted upgrade; then stale=stale=any; fi
    configz "$1" breaking "${stale}" "${SETTING_FIELD}=${SETTING_VALUE}" "${BREAK_FIELD}=${BREAK_VALUE}"
    configz_unchanged "$1" breaking
    return
  fi
  if ((PLAYBOOK_RC == 0)); then
    echo "the tool's cluster.yml passed with ${BREAK_VAR}: ${BREAK_VALUE}; 0004's task must fail, having rolled back"
    return 1
  fi
  rolled_back_at_sync "breaking-$1" || return 1
  if ((broken != 1 || MAX_UNAVAILABLE > 1)); then
    echo "the breaking setting reached ${broken} nodes' kube-proxy, at most ${MAX_UNAVAILABLE} without a Ready one at once; with the tool, only the canary's (one node)"
    return 1
  fi
  ran_before "$1" breaking
}

# rolled_back_at_sync NAME: step NAME's playbook failed at 0004's SYNC_TASK,
# on the last control plane, and kube-proxy-sync's result says it rolled
# back; its message is a figure of NAME.
rolled_back_at_sync() {
  local sync status host
  sync="$(sync_task "$1" fatal failed)" || { ansible_failure "${LOGS}/$1.log" || true; echo "the playbook failed, but not at 0004's task (above)"; return 1; }
  read -r status host _ <<<"${sync}"
  if [[ "${sync}" != *" rolled_back=true "* ]]; then
    echo "0004's task failed on ${host}, but kube-proxy-sync did not roll back: ${sync}"
    return 1
  fi
  figure "$1" "kube-proxy-sync: ${sync#* msg=}"
}

# ran_before MODE STEP: after a change the tool rolled back, every node runs
# BREAK_BEFORE again (and SETTING_VALUE), from the ConfigMap the DaemonSet
# mounts, which holds it too.
ran_before() {
  local result
  result="$(configz "$1" "$2" stale=ok "${SETTING_FIELD}=${SETTING_VALUE}" "${BREAK_FIELD}=${BREAK_VALUE}")" ||
    { printf '%s\n' "${result}"; return 1; }
  printf '%s\n' "${result}"
  if (($(grep -c "${BREAK_FIELD}: runs ${BREAK_BEFORE}, ConfigMap ${BREAK_BEFORE}," <<<"${result}") != TOTAL)); then
    echo "after the rollback not every node runs ${BREAK_FIELD} ${BREAK_BEFORE} from its ConfigMap holding it (above)"
    return 1
  fi
}

# breaking_upgrade MODE TREE: with KS_UPGRADE=1, after breaking: the
# breaking setting still in the inventory, upgrade-cluster.yml again at the
# version the upgrade step reached (kubespray's way to apply control plane
# settings). Recorded in every mode (a figure says what could not be read):
# the exit code, the nodes whose kube-proxy the step replaced or restarted,
# the value kube-system/kube-proxy, the ConfigMap kubeadm reads, holds
# afterwards, and, as a node reboot or a drain would, a kube-proxy pod
# deleted on the last host and whether its replacement exits (a container
# restart within 90 s) or runs (Ready, and no restart in 90 s: kubeadm's
# kube-proxy has no readiness probe, so Ready alone says only that it
# started). unpatched, toolfree: not failed; kubespray's "Update kube-proxy
# configmap after upgrade" writes the setting into that ConfigMap (toolfree
# with a load balancer: 0002 then restarts kube-proxy, whose rollout status
# fails). tool: the playbook fails at 0004's SYNC_TASK, rolled back, only
# the canary touched, every node runs BREAK_BEFORE, the ConfigMap still
# holds it (kubeadm skips the addon), the kube-proxy stopped mid-rollout
# running again, and if in its old pod on the config it ran before the stop
# (restart_judged), and the pod started afterwards runs.
breaking_upgrade() {
  local name="breaking-upgrade-$1" cm node short old deadline state="" restarts outcome
  RESTART_MID=1 MAY_FAIL=1 cluster_watched "$1" "$2" breaking-upgrade breaking upgrade-cluster.yml -e "kube_version=${UPGRADE_TO#v}"
  figure "${name}" "upgrade-cluster.yml at ${UPGRADE_TO} with ${BREAK_VAR}: ${BREAK_VALUE}: exit code ${PLAYBOOK_RC}"
  figure "${name}" "nodes whose kube-proxy was replaced or restarted: ${TOUCHED} of ${TOTAL}$(touched_nodes)"
  cm="$(cp_ssh 'kubectl -n kube-system get configmap kube-proxy -o jsonpath="{.data.config\.conf}"' |
    "${VENV}/bin/python" -c 'import sys, yaml; print((yaml.safe_load(sys.stdin) or {}).get("conntrack", {}).get("maxPerCore"))')" || cm="not read"
  figure "${name}" "kube-proxy's ConfigMap afterwards: ${BREAK_FIELD} ${cm}"
  if [[ "$1" == tool ]]; then
    if ((PLAYBOOK_RC == 0)); then
      echo "the tool's upgrade-cluster.yml passed with ${BREAK_VAR}: ${BREAK_VALUE}; 0004's task must fail, having rolled back"
      return 1
    fi
    rolled_back_at_sync "${name}" || return 1
    if ((TOUCHED != 1 || MAX_UNAVAILABLE > 1)); then
      echo "the breaking setting reached ${TOUCHED} nodes' kube-proxy in upgrade-cluster.yml, at most ${MAX_UNAVAILABLE} without a Ready one at once; with the tool, only the canary's (one node)"
      return 1
    fi
    if [[ "${cm}" != "${BREAK_BEFORE}" ]]; then
      echo "kube-system/kube-proxy holds ${BREAK_FIELD} ${cm} after the tool's upgrade-cluster.yml rolled back; kubeadm skips the addon under 0004, so it must still hold ${BREAK_BEFORE}"
      return 1
    fi
    ran_before "$1" breaking-upgrade || return 1
    restart_judged "${name}" || return 1
  fi
  node="$(sed -n 's/^HOST=//p' "${KS_DIR}/hosts.env" | tail -n1 | cut -d' ' -f1)"
  short="${node#"${KS_PREFIX:-kps-ks}"-}"
  old="$(cp_ssh "kubectl -n kube-system get pods -l k8s-app=kube-proxy --field-selector spec.nodeName=${node} -o jsonpath='{.items[*].metadata.name}'")" || old=""
  if [[ -z "${old}" ]] || ! cp_ssh "kubectl -n kube-system delete pod ${old} --wait=true --timeout=120s >/dev/null"; then
    figure "${name}" "a kube-proxy pod started afterwards on ${short}: not measured (no pod there, or it was not deleted within 120 s)"
    [[ "$1" != tool ]] || { echo "tool: the kube-proxy pod on ${short} could not be deleted, so whether one started afterwards runs is unknown"; return 1; }
    return 0
  fi
  deadline=$((SECONDS + 90))
  while ((SECONDS < deadline)); do
    # the new pod's Ready condition and its container's restart count
    state="$(cp_ssh "kubectl -n kube-system get pods -l k8s-app=kube-proxy --field-selector spec.nodeName=${node} \
      -o jsonpath='{range .items[*]}{.status.conditions[?(@.type==\"Ready\")].status} {.status.containerStatuses[0].restartCount}{\"\\n\"}{end}'")" || state=""
    restarts="${state##* }"
    if [[ "${restarts}" =~ ^[1-9][0-9]*$ ]]; then break; fi
    sleep 2
  done
  if [[ "${restarts}" =~ ^[1-9][0-9]*$ ]]; then
    outcome=exits
    figure "${name}" "a kube-proxy pod started afterwards on ${short} (as after a reboot or a drain): exits (restarted ${restarts} times within 90 s), no service proxy on that node"
  elif [[ "${state}" == "True 0" ]]; then
    outcome=runs
    figure "${name}" "a kube-proxy pod started afterwards on ${short} (as after a reboot or a drain): runs (Ready, no restart in 90 s)"
  else
    outcome=unknown
    figure "${name}" "a kube-proxy pod started afterwards on ${short}: neither Ready nor restarted in 90 s (${state:-no pod})"
  fi
  if [[ "$1" == tool && "${outcome}" != runs ]]; then
    echo "tool: a kube-proxy pod started on ${short} after the rolled back upgrade-cluster.yml must run the config before (Ready, no restart in 90 s); it ${outcome}: ${state:-no pod}"
    return 1
  fi
}

# egress MODE: the packets that tried to leave the tier's network since
# hosts-MODE made it (hack/kind/egress.sh counts and drops them; hosts.sh
# down removes the counter with the network, so each mode counts its own).
# Every address the tier uses is on that network: they must be 0, but a
# host's to the cluster's pod or Service subnet, which are counted apart
# (hosts.sh): such a packet left a host whose rules or routes sent it where
# no route leads; read as stale rules of a kube-proxy that could not run
# when cp1 sent DNS to a CoreDNS pod address in tool-free's breaking-upgrade
# at cc99200. A figure, with the hosts and destinations the kernel log has,
# not a failure.
egress() {
  local network="${KS_NETWORK:-kps-kubespray}" n unrouted where=""
  n="$("${REPO_ROOT}/hack/kind/egress.sh" count "${network}")"
  unrouted="$("${REPO_ROOT}/hack/kind/egress.sh" count "${network}" unrouted)"
  if ((unrouted > 0)); then
    # "N logged from HOST to ADDRESS PROTO/PORT", the host by name
    where="$("${REPO_ROOT}/hack/kind/egress.sh" where "${network}" unrouted |
      awk -v prefix="${KS_PREFIX:-kps-ks}-" 'NR == FNR {if ($1 ~ /^HOST=/) name[$2] = substr($1, 6); next}
        {delete f; for (i = 1; i <= NF; i++) {split($i, kv, "="); f[kv[1]] = kv[2]}
         h = (f["SRC"] in name) ? name[f["SRC"]] : f["SRC"]; sub("^" prefix, "", h)
         print h " to " f["DST"] " " f["PROTO"] "/" f["DPT"]}' "${KS_DIR}/hosts.env" - |
      sort | uniq -c | sort -rn | awk 'NR <= 5 {n = $1; $1 = ""; printf "%s%d logged from%s", (NR > 1 ? ", " : ""), n, $0}')" || true
  fi
  figure "egress-$1" "packets that tried to leave the ${network} network: $((n + unrouted)), of them from a host to the cluster's pod or Service addresses: ${unrouted}${where:+ (${where})}"
  if [[ "${n}" != 0 ]]; then
    echo "${n} packets tried to leave the ${network} network (dropped): something in the ${1} run reached for an address outside the tier; the kernel log has (at most 20 a minute; count, source, destination, protocol, ports):"
    "${REPO_ROOT}/hack/kind/egress.sh" where "${network}" | sort | uniq -c | sort -rn | head -20
    return 1
  fi
}

# upgrade MODE TREE: upgrade-cluster.yml from UPGRADE_FROM to UPGRADE_TO
# (hack/lib.sh ks_upgrade; kubespray's documented -e kube_version=...), the
# settings step's inventory kept, every pod of kube-system watched. Every
# node's kubelet and every kube-proxy pod on the new version afterwards.
# Recorded in every mode: who wrote kube-proxy's DaemonSet and ConfigMap
# during the step (their managedFields), the first pod replaced and whether it
# was Ready before a second one was made, the kube-proxy pods made while some
# kube-apiserver ran an older version (hack/kubespray/measure.py), and
# kube-proxy-sync's runs (its audit log, on the last control plane).
# unpatched: recorded, and kube-proxy may run settings its ConfigMap got
# after the pod started (kubespray writes the ConfigMap after kubeadm rolled
# the new image). toolfree: the same may happen, but no kube-proxy pod newer
# than a kube-apiserver (0001: the addon after the last control plane) and
# never more nodes without a Ready kube-proxy than maxUnavailable (0002: a
# rollout restart, not a forced delete of every pod). tool: 0004's task
# changed, one rollout, the new image's, each pod replaced once, within
# maxUnavailable; no kubeadm write of either object; canary first; no pod
# newer than an API server; one run of kube-proxy-sync that restarted, with
# the canary strategy, its canary the first pod replaced, to the new image;
# the kube-proxy stopped mid-rollout running again, and if in its old pod on
# the config it ran before the stop (restart_judged).
# toolfree and tool: kubeadm's kube-proxy addon, as the upgraded kubeadm
# renders it from the cluster's config, in place afterwards (DaemonSet
# template and RBAC; hack/kubespray/measure.py addon); unpatched: recorded.
upgrade() {
  local budget image kubelets since writes runs
  image="$(ds_field ".spec.template.spec.containers[0].image")"
  [[ "${image}" == *":${UPGRADE_FROM}" ]] ||
    { echo "kube-proxy runs ${image}, not ${UPGRADE_FROM}: cluster.yml did not install it (is .cache/kubespray/files.yml from a build with another KS_UPGRADE than ${KS_UPGRADE}?)"; return 1; }
  budget="$(ds_field .spec.updateStrategy.rollingUpdate.maxUnavailable)"
  # the API server's clock: managedFields and the audit log are stamped by it
  # and by the control planes (containers on this machine's clock)
  since="$(cp_ssh 'date -u +%Y-%m-%dT%H:%M:%SZ')"
  RESTART_MID=1 WATCH_ALL=1 cluster_watched "$1" "$2" upgrade settings upgrade-cluster.yml -e "kube_version=${UPGRADE_TO#v}"
  image="$(ds_field ".spec.template.spec.containers[0].image")"
  kubelets="$(cp_ssh 'kubectl get nodes -o jsonpath="{range .items[*]}{.status.nodeInfo.kubeletVersion}{\"\\n\"}{end}"')"
  figure "upgrade-$1" "${UPGRADE_FROM} to ${UPGRADE_TO}: kube-proxy ${image##*/}, kubelets $(sort <<<"${kubelets}" | uniq -c | awk '{printf "%s%s x%s", s, $2, $1; s=", "}'); the DaemonSet's maxUnavailable: ${budget}"
  [[ "${image}" == *":${UPGRADE_TO}" ]] || { echo "after upgrade-cluster.yml kube-proxy's DaemonSet runs ${image}, not ${UPGRADE_TO}"; return 1; }
  if grep -vqx "${UPGRADE_TO}" <<<"${kubelets}"; then
    echo "after upgrade-cluster.yml not every kubelet is at ${UPGRADE_TO}: ${kubelets//$'\n'/, }"
    return 1
  fi
  # kubectl leaves managedFields out unless asked
  cp_ssh 'kubectl -n kube-system get daemonset kube-proxy -o json --show-managed-fields' >"${LOGS}/upgrade-$1.daemonset.json"
  cp_ssh 'kubectl -n kube-system get configmap kube-proxy -o json --show-managed-fields' >"${LOGS}/upgrade-$1.configmap.json"
  writes="$("${VENV}/bin/python" "${REPO_ROOT}/hack/kubespray/measure.py" writers "${since}" \
    "${LOGS}/upgrade-$1.daemonset.json" "${LOGS}/upgrade-$1.configmap.json")" ||
    { echo "who wrote kube-proxy's DaemonSet and ConfigMap cannot be read (above)"; return 1; }
  figure "upgrade-$1" "writes of kube-proxy's DaemonSet and ConfigMap since ${since}: ${writes//$'\n'/; }"
  figure "upgrade-$1" "first kube-proxy pod replaced on ${CANARY_NODE:-none}, Ready before a second one was made: ${CANARY_FIRST:-?}"
  figure "upgrade-$1" "kube-proxy pods made while some kube-apiserver ran an older version: ${SKEW:-?}${SKEW_DETAIL:+ (${SKEW_DETAIL})}"
  docker exec "$(last_cp)" sh -c 'cat /var/log/kube-proxy-sync/audit.log 2>/dev/null || true' >"${LOGS}/upgrade-$1.audit.log"
  runs="$("${VENV}/bin/python" "${REPO_ROOT}/hack/kubespray/measure.py" audit "${since}" "${LOGS}/upgrade-$1.audit.log")"
  figure "upgrade-$1" "kube-proxy-sync's runs: ${runs:-none}"
  # kubeadm's addon as the upgraded kubeadm renders it, against the live
  # objects: what kubeadm changes across versions must be in place (under
  # 0004 kubeadm's addon phase is skipped: the tool brings it)
  # (read as evidence: a command that fails here fails the step only
  # where the addon must be in place, below)
  local addon addon_rc=0
  if ! cp_ssh 'kubeadm init phase addon kube-proxy --config /etc/kubernetes/kubeadm-config.yaml --print-manifest' >"${LOGS}/upgrade-$1.addon.yaml"; then
    addon_rc=1 addon="kubeadm init phase addon kube-proxy --print-manifest failed on the control plane"
  elif ! cp_ssh 'kubectl -n kube-system get daemonset/kube-proxy serviceaccount/kube-proxy role/kube-proxy rolebinding/kube-proxy clusterrolebinding/kubeadm:node-proxier --ignore-not-found -o json' >"${LOGS}/upgrade-$1.addon-live.json"; then
    addon_rc=1 addon="kubectl get of the addon's live objects failed"
  else
    addon="$("${VENV}/bin/python" "${REPO_ROOT}/hack/kubespray/measure.py" addon "${LOGS}/upgrade-$1.addon.yaml" "${LOGS}/upgrade-$1.addon-live.json")" || addon_rc=$?
  fi
  figure "upgrade-$1" "kubeadm ${UPGRADE_TO}'s kube-proxy addon in place: ${addon//$'\n'/; }"
  if ((addon_rc)) && [[ "$1" != unpatched ]]; then
    echo "after upgrade-cluster.yml kubeadm ${UPGRADE_TO}'s kube-proxy addon is not in place (${LOGS}/upgrade-$1.addon.yaml against the live objects): ${addon//$'\n'/; }"
    return 1
  fi
  if [[ "$1" != tool ]]; then
    configz "$1" upgrade stale=any "${SETTING_FIELD}=${SETTING_VALUE}"
    [[ "$1" == toolfree ]] || return 0
    if [[ "${SKEW:-}" != 0 ]]; then
      echo "the toolfree upgrade made ${SKEW:-an unknown number of} kube-proxy pods newer than a kube-apiserver (0001 writes the addon after the last control plane): ${SKEW_DETAIL:-no kube-apiserver pod in the watch}"
      return 1
    fi
    within_budget "the toolfree upgrade (0002 restarts by a rollout)" "${budget}"
    return
  fi
  sync_task "upgrade-$1" changed >/dev/null
  configz "$1" upgrade "${SETTING_FIELD}=${SETTING_VALUE}"
  rolled_once "the tool's upgrade" "${budget}"
  restart_judged "upgrade-$1"
  if grep -E '^(DaemonSet|ConfigMap)/kube-proxy kubeadm ' <<<"${writes}"; then
    echo "kubeadm wrote kube-proxy's DaemonSet or ConfigMap during the tool's upgrade; under kube_proxy_rollout_method: kube-proxy-sync only kube-proxy-sync may (0004 skips kubeadm's addon/kube-proxy)"
    return 1
  fi
  if [[ "${CANARY_FIRST:-}" != yes ]]; then
    echo "the tool's upgrade did not replace one kube-proxy pod first (canary_first: ${CANARY_FIRST:-none seen}): a second pod was made before the first new one was Ready"
    return 1
  fi
  if [[ "${SKEW:-}" != 0 ]]; then
    echo "the tool's upgrade made ${SKEW:-an unknown number of} kube-proxy pods newer than a kube-apiserver: ${SKEW_DETAIL:-no kube-apiserver pod in the watch}"
    return 1
  fi
  if [[ "$(grep -c 'restart=yes' <<<"${runs}")" != 1 ]] ||
    ! grep -q "restart=yes .*image=.*->.*:${UPGRADE_TO} strategy=canary canary=${CANARY_NODE:-?}\$" <<<"${runs}"; then
    echo "the tool's upgrade needs one run of kube-proxy-sync that restarts kube-proxy onto ${UPGRADE_TO}, canary first on ${CANARY_NODE:-?}, the pod the watch saw replaced first; its runs: ${runs:-none}"
    return 1
  fi
}

# table: the modes' steps, one row each, for the end of the summary.
table() {
  local s mode row cell
  row="| step |" cell="| --- |"
  for mode in ${KS_MODES}; do row+=" ${mode} |" cell+=" --- |"; done
  printf '\n%s\n%s\n' "${row}" "${cell}"
  local steps="hosts cluster nodes rerun check limit settings"
  if ((UPGRADE)); then steps+=" upgrade"; fi
  steps+=" breaking"
  if ((UPGRADE)); then steps+=" breaking-upgrade"; fi
  steps+=" egress"
  for s in ${steps}; do
    row="| ${s} |"
    for mode in ${KS_MODES}; do
      # hosts has a time only; a mode that stopped early, not even that.
      cell="$(cat "${FIGURES}/${s}-${mode}.time" "${FIGURES}/${s}-${mode}" 2>/dev/null | paste -sd';' | sed 's/;/; /g' || true)"
      row+=" ${cell:--} |"
    done
    printf '%s\n' "${row}"
  done
}

# The engine's check runs a container made from the static pause, which the
# kind group builds (as hack/kind/up.sh does); a fresh checkout has none yet.
engine() {
  "${REPO_ROOT}/hack/build/tools.sh" kind && "${REPO_ROOT}/hack/kind/docker.sh" up
}
step trees trees
step engine engine
docker_env
step build "${REPO_ROOT}/hack/kubespray/build.sh"
if [[ " ${KS_MODES} " == *" tool "* ]]; then step release release; fi
step venv venv
for mode in ${KS_MODES}; do
  "${REPO_ROOT}/hack/kubespray/hosts.sh" down >/dev/null 2>&1 || true
  step "hosts-${mode}" "${REPO_ROOT}/hack/kubespray/hosts.sh" up
  tree="$(tree_of "${mode}")"
  step "cluster-${mode}" install_cluster "${mode}" "${tree}"
  step "nodes-${mode}" nodes "${mode}"
  if wanted rerun; then step "rerun-${mode}" rerun "${mode}" "${tree}"; fi
  if wanted check; then step "check-${mode}" check "${mode}" "${tree}"; fi
  if wanted limit; then step "limit-${mode}" limit "${mode}" "${tree}"; fi
  if wanted settings; then step "settings-${mode}" settings "${mode}" "${tree}"; fi
  if ((UPGRADE)) && wanted upgrade; then step "upgrade-${mode}" upgrade "${mode}" "${tree}"; fi
  if wanted breaking; then step "breaking-${mode}" breaking "${mode}" "${tree}"; fi
  if ((UPGRADE)) && wanted breaking-upgrade; then step "breaking-upgrade-${mode}" breaking_upgrade "${mode}" "${tree}"; fi
  step "egress-${mode}" egress "${mode}"
done
table >>"${SUMMARY}"
log "kubespray tier: every step passed"
cat "${SUMMARY}" >&2
