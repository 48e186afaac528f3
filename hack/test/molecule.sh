#!/usr/bin/env bash
# Run a molecule scenario of the kube_proxy_sync role on each pinned toolchain
# (ANSIBLE_TOOLCHAINS, default: kubespray newest, one after the other):
#   hack/test/molecule.sh [default|kind] [molecule test options...]
# default: against the local control plane (hack/cluster/up.sh); keeps the
#          cluster unless KUBE_PROXY_SYNC_MOLECULE_DESTROY=true.
# kind:    against a throw-away kind cluster; skipped (exit 0, with a message)
#          when kind or a Docker engine is not available.
# Set MOLECULE_COMMAND=converge|verify|... to run one step instead of `test`.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
cd "${REPO_ROOT}"

scenario="${1:-default}"
shift || true
[[ -f "molecule/${scenario}/molecule.yml" ]] || die "no molecule scenario '${scenario}' (molecule/*/molecule.yml)"
for arch in amd64 arm64; do
  [[ -x "plugins/modules/kube_proxy_sync_linux_${arch}" ]] ||
    die "plugins/modules/kube_proxy_sync_linux_${arch} is missing: run make dist"
done

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
  if ! command -v kind >/dev/null 2>&1; then
    log "SKIP molecule scenario kind: the kind CLI is not installed (https://kind.sigs.k8s.io); nothing was run"
    exit 0
  fi
  if ! docker info >/dev/null 2>&1; then
    log "SKIP molecule scenario kind: no Docker engine answers 'docker info'; nothing was run"
    exit 0
  fi
fi

if [[ "${scenario}" == kubespray ]]; then
  # kubespray's own roles and template, at the pinned commit, and the real
  # kubeadm (the kind tier's build) as kubespray's bin_dir.
  export KPS_KUBESPRAY_DIR="${KPS_KUBESPRAY_DIR:-${CACHE_DIR}/kubespray}"
  [[ -f "${KPS_KUBESPRAY_DIR}/roles/kubespray_defaults/defaults/main/main.yml" ]] ||
    die "no kubespray checkout at ${KPS_KUBESPRAY_DIR}: git clone https://github.com/kubernetes-sigs/kubespray ${KPS_KUBESPRAY_DIR} && git -C ${KPS_KUBESPRAY_DIR} checkout ${KUBESPRAY_COMMIT} (or set KPS_KUBESPRAY_DIR)"
  [[ "$(git -C "${KPS_KUBESPRAY_DIR}" rev-parse HEAD 2>/dev/null)" == "${KUBESPRAY_COMMIT}" ]] ||
    die "${KPS_KUBESPRAY_DIR} is not at KUBESPRAY_COMMIT ${KUBESPRAY_COMMIT} (hack/versions.mk): git -C ${KPS_KUBESPRAY_DIR} checkout ${KUBESPRAY_COMMIT}"
  [[ -x "${TOOLS_BIN}/kubeadm" ]] || die "no kubeadm in ${TOOLS_BIN}: run hack/build/tools.sh kind, which builds it"
  # kubespray's templates need its full ansible package (ansible.utils) and netaddr
  [[ "${ANSIBLE_TOOLCHAINS}" == kubespray ]] ||
    die "the kubespray scenario runs on kubespray's toolchain only: ANSIBLE_TOOLCHAINS=kubespray hack/test/molecule.sh kubespray"
fi

# The role runs the collection's binary modules by FQCN: put this checkout,
# which is the collection, on the collections path.
collections_link
# The stub of kubespray's collection stands in for kubespray's cluster playbook and defaults role
# (playbooks/cluster.yml); the kubespray scenario uses kubespray's own roles (KPS_KUBESPRAY_DIR).
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
    log "[${toolchain}] molecule ${command} -s ${scenario}: $((SECONDS - start))s"
  )
done
