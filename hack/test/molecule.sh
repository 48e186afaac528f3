#!/usr/bin/env bash
# Run a molecule scenario of the kpsync role on each pinned toolchain
# (ANSIBLE_TOOLCHAINS, default: kubespray newest, one after the other):
#   hack/test/molecule.sh [default|kind|kubespray] [molecule test options...]
# default: against the local control plane (hack/cluster/up.sh); keeps the
#          cluster unless KUBE_PROXY_SYNC_MOLECULE_DESTROY=true.
# kind:    against the kind cluster of make kind-up when it is up, else a
#          throw-away one; when kind or a Docker engine is not available,
#          skipped (exit 0, saying what is missing), or a failure under
#          CI=true or E2E_REQUIRED=1 (make test sets it).
# kubespray: kubespray's opt-in (docs/kubespray/0004-*.patch, or
#          KPS_KUBESPRAY_PATCH) running this checkout's binary
#          (dist/kube-proxy-sync-linux-<this machine's arch>, make dist), against
#          the local control plane, on kubespray's toolchain only;
#          KUBESPRAY_DIR=<a kubespray checkout> checks kubespray's own defaults
#          (without it, says so and runs kubeadm's default config).
# Set MOLECULE_COMMAND=converge|verify|... to run one step instead of `test`.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
cd "${REPO_ROOT}"

scenario="${1:-default}"
shift || true
[[ -f "molecule/${scenario}/molecule.yml" ]] || die "no molecule scenario '${scenario}' (molecule/*/molecule.yml)"
# the kubespray scenario runs the bare binary through kubespray's tasks, the others the collection's modules
if [[ "${scenario}" != kubespray ]]; then
  for arch in ${RELEASE_ARCHES}; do
    [[ -x "plugins/modules/kube_proxy_sync_linux_${arch}" ]] ||
      die "plugins/modules/kube_proxy_sync_linux_${arch} is missing: run make dist"
  done
fi

if [[ "${scenario}" == kind ]]; then
  # The project's own kind cluster (make kind-up), when it is up: its engine,
  # its node image and config, its control plane's address; kept afterwards
  # for make kind-down.
  if [[ -f "${CACHE_DIR}/kind/kubeconfig" ]]; then
    docker_env
    export PATH="${TOOLS_BIN}:${PATH}"
    export KPS_KIND_CLUSTER="${KIND_CLUSTER:-kps}"
    export KPS_KIND_IMAGE="kps.local/kind-node:${KUBERNETES_VERSION}"
    export KPS_KIND_CONFIG="${CACHE_DIR}/kind/cluster.yaml"
    export KUBE_PROXY_SYNC_MOLECULE_KEEP=true
    KPS_KIND_CONTROL_PLANE_ADDRESS="$(docker inspect -f '{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}' "${KPS_KIND_CLUSTER}-control-plane")" ||
      die "no control-plane container of the kind cluster ${KPS_KIND_CLUSTER}: run make kind-up"
    export KPS_KIND_CONTROL_PLANE_ADDRESS
  fi
  # Without kind or a Docker engine the scenario cannot run: a developer's
  # machine skips it, saying so (exit 0); where it is required (CI=true, or
  # E2E_REQUIRED=1, which make test sets) that is a failure.
  missing=()
  command -v kind >/dev/null 2>&1 ||
    missing+=("no kind CLI on PATH (make kind-up builds one, and this scenario uses it while that cluster is up)")
  docker info >/dev/null 2>&1 ||
    missing+=("no Docker engine answers 'docker info'${DOCKER_HOST:+ at DOCKER_HOST=${DOCKER_HOST}} (make kind-up starts one of its own where the machine has none)")
  if ((${#missing[@]} > 0)); then
    why="$(printf '%s; ' "${missing[@]}")"
    why="${why%; }"
    if [[ "${CI:-}" == true || "${E2E_REQUIRED:-}" == 1 ]]; then
      die "molecule scenario kind is required here (CI=true or E2E_REQUIRED=1) but cannot run: ${why}; run make kind-up first, then make molecule-kind; nothing was run"
    fi
    log "SKIP molecule scenario kind: ${why}; nothing was run (make kind-up, then make molecule-kind, runs it; CI=true or E2E_REQUIRED=1 makes this a failure)"
    exit 0
  fi
fi

# kubespray: with a kubespray checkout (KUBESPRAY_DIR, the user's own; this
# project never downloads kubespray), kubespray's real kubespray_defaults and
# control-plane defaults and kubeadm-config template; without one (CI),
# kubeadm's own default config and a stub of kubespray_defaults
# (molecule/resources/collections), so kubespray's defaults are not checked.
# Either way the real kubeadm (the kind tier's build) renders, as kubespray's bin_dir.
kubespray_mode=""
if [[ "${scenario}" == kubespray ]]; then
  [[ -x "${TOOLS_BIN}/kubeadm" ]] || die "no kubeadm in ${TOOLS_BIN}: run hack/build/tools.sh kind, which builds it"
  case "$(uname -m)" in
    x86_64) arch=amd64 ;;
    aarch64) arch=arm64 ;;
    *) arch="$(uname -m)" ;;
  esac
  KPS_BINARY="${REPO_ROOT}/dist/kube-proxy-sync-linux-${arch}"
  [[ -x "${KPS_BINARY}" ]] || die "${KPS_BINARY#"${REPO_ROOT}/"} is missing: run make dist (DIST_ARCHES=${arch} builds only it)"
  # kubespray's opt-in, whose tasks and variables the scenario takes from the patch
  if [[ -z "${KPS_KUBESPRAY_PATCH:-}" ]]; then
    patches=(docs/kubespray/0004-*.patch)
    [[ -f "${patches[0]}" ]] || die "no docs/kubespray/0004-*.patch: the kubespray scenario tests kubespray's opt-in from it"
    KPS_KUBESPRAY_PATCH="${REPO_ROOT}/${patches[0]}"
  fi
  [[ -f "${KPS_KUBESPRAY_PATCH}" ]] || die "KPS_KUBESPRAY_PATCH=${KPS_KUBESPRAY_PATCH}: no such file"
  export KPS_BINARY KPS_KUBESPRAY_PATCH
  # kubespray's templates need its full ansible package (ansible.utils) and netaddr
  [[ "${ANSIBLE_TOOLCHAINS}" == kubespray ]] ||
    die "the kubespray scenario runs on kubespray's toolchain only: ANSIBLE_TOOLCHAINS=kubespray hack/test/molecule.sh kubespray"
  if [[ -n "${KUBESPRAY_DIR:-}" ]]; then
    KPS_KUBESPRAY_DIR="$(cd "${KUBESPRAY_DIR}" 2>/dev/null && pwd)" || die "KUBESPRAY_DIR=${KUBESPRAY_DIR}: no such directory"
    for f in roles/kubespray_defaults/defaults/main/main.yml roles/kubernetes/control-plane/templates/kubeadm-config.v1beta4.yaml.j2; do
      [[ -f "${KPS_KUBESPRAY_DIR}/${f}" ]] || die "KUBESPRAY_DIR=${KUBESPRAY_DIR} is not a kubespray checkout: no ${f}"
    done
    commit="$(git -C "${KPS_KUBESPRAY_DIR}" rev-parse HEAD 2>/dev/null || echo "an unknown commit (not a git checkout)")"
    if [[ "${commit}" == "${KUBESPRAY_COMMIT}" ]]; then
      kubespray_mode="kubespray's defaults and kubeadm-config template checked, from KUBESPRAY_DIR at KUBESPRAY_COMMIT ${KUBESPRAY_COMMIT:0:12}"
    else
      log "WARNING: KUBESPRAY_DIR is at ${commit}, not KUBESPRAY_COMMIT ${KUBESPRAY_COMMIT} (hack/versions.mk): the expected defaults (molecule/kubespray/vars/defaults.yml) are KUBESPRAY_COMMIT's, so a default kubespray has changed since fails here"
      kubespray_mode="kubespray's defaults and kubeadm-config template checked, from KUBESPRAY_DIR at ${commit}, NOT KUBESPRAY_COMMIT ${KUBESPRAY_COMMIT:0:12}"
    fi
    KPS_KUBESPRAY_ROLES="${KPS_KUBESPRAY_DIR}/roles"
  else
    KPS_KUBESPRAY_DIR=""
    KPS_KUBESPRAY_ROLES="${REPO_ROOT}/molecule/resources/collections/ansible_collections/kubernetes_sigs/kubespray/roles"
    kubespray_mode="kubespray's defaults: NOT checked, no KUBESPRAY_DIR (kubespray's play layout with kubeadm's own default config; for kubespray's: make molecule-kubespray KUBESPRAY_DIR=<a kubespray checkout at ${KUBESPRAY_COMMIT:0:12}>)"
  fi
  export KPS_KUBESPRAY_DIR KPS_KUBESPRAY_ROLES
  log "kubespray scenario: ${kubespray_mode}"
fi

# The role runs the collection's binary modules by FQCN: put this checkout,
# which is the collection, on the collections path.
collections_link
# The stub of kubespray's collection stands in for kubespray's cluster playbook and defaults role
# (playbooks/cluster.yml).
export ANSIBLE_COLLECTIONS_PATH="${COLLECTIONS_DIR}:${REPO_ROOT}/molecule/resources/collections"
export ANSIBLE_FORCE_COLOR="${ANSIBLE_FORCE_COLOR:-$([[ -t 1 ]] && echo 1 || echo 0)}"
export PY_COLORS="${ANSIBLE_FORCE_COLOR}"
# kubectl for the scenarios' own checks: the one hack/build/tools.sh built, else PATH's.
if [[ -z "${KPS_KUBECTL:-}" ]]; then
  if [[ -x "${TOOLS_BIN}/kubectl" ]]; then KPS_KUBECTL="${TOOLS_BIN}/kubectl"; else KPS_KUBECTL="$(command -v kubectl || echo kubectl)"; fi
fi
export KPS_KUBECTL

command="${MOLECULE_COMMAND:-test}"
for toolchain in ${ANSIBLE_TOOLCHAINS}; do
  (
    ansible_env "${toolchain}"
    log "[${toolchain}] molecule ${command} -s ${scenario} ($(ansible --version | sed -n 1p))"
    start="${SECONDS}"
    molecule "${command}" -s "${scenario}" "$@"
    log "[${toolchain}] molecule ${command} -s ${scenario}: $((SECONDS - start))s${kubespray_mode:+; ${kubespray_mode}}"
  )
done
