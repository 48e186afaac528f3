# Shared helpers for hack/*.sh. Source it; it defines no behaviour on its own.
# shellcheck shell=bash

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE_DIR="${CACHE_DIR:-${REPO_ROOT}/.cache}"
TOOLS_BIN="${CACHE_DIR}/bin"
CLUSTER_DIR="${CACHE_DIR}/cluster"
KUBECONFIG_PATH="${CLUSTER_DIR}/kubeconfig"
# The pinned Ansible toolchains (requirements/NAME.txt, one virtualenv each
# under VENV_ROOT), in the order make test runs them: kubespray's own pins
# first, then the newest ansible-core this Python runs.
VENV_ROOT="${VENV_ROOT:-${REPO_ROOT}/.venv}"
ANSIBLE_TOOLCHAINS="${ANSIBLE_TOOLCHAINS:-kubespray newest}"
venv_dir() { printf '%s/%s' "${VENV_ROOT}" "$1"; }
# Ansible's, ansible-lint's and molecule's state and temp files stay inside
# the checkout's cache, one directory per toolchain (their caches differ).
ansible_env() {
  local venv
  venv="$(venv_dir "$1")"
  [[ -x "${venv}/bin/ansible-playbook" ]] || die "no ${venv}: run make venv (hack/build/venv.sh $1) first"
  export PATH="${venv}/bin:${PATH}"
  export ANSIBLE_HOME="${CACHE_DIR}/ansible/$1"
  export ANSIBLE_LOCAL_TEMP="${ANSIBLE_HOME}/tmp"
  export XDG_CACHE_HOME="${CACHE_DIR}/xdg/$1"
  mkdir -p "${ANSIBLE_LOCAL_TEMP}" "${XDG_CACHE_HOME}"
}

# This checkout is also the Ansible collection kube_proxy_sync.kube_proxy_sync
# (galaxy.yml). collections_link puts it on a collections path under the
# cache, so playbooks run from the checkout find its modules and role by FQCN.
COLLECTIONS_DIR="${CACHE_DIR}/collections"
collections_link() {
  local link="${COLLECTIONS_DIR}/ansible_collections/kube_proxy_sync/kube_proxy_sync"
  # left alone when right: nothing written under the cache while a molecule
  # run beside this one (CI runs the kind scenario beside the others) reads it
  [[ -L "${link}" && "$(readlink "${link}")" == "${REPO_ROOT}" ]] && return 0
  mkdir -p "$(dirname "${link}")"
  ln -sfn "${REPO_ROOT}" "${link}"
}

# Pinned versions, from the one file the Makefile includes too.
while IFS=':=' read -r name _ value; do
  name="${name// /}"
  [[ -z "${name}" || "${name}" == \#* ]] && continue
  value="${value#"${value%%[![:space:]]*}"}"
  printf -v "${name}" '%s' "${value}"
  export "${name?}"
done < "${REPO_ROOT}/hack/versions.mk"

log() { printf '==> %s\n' "$*" >&2; }
die() { printf 'error: %s\n' "$*" >&2; exit 1; }

# ks_upgrade: what KS_UPGRADE asks make test-kubespray for (hack/kubespray/
# run.sh, and build.sh for its artifacts): UPGRADE=1 for an upgrade step,
# else 0; UPGRADE_FROM, the version cluster.yml installs, and UPGRADE_TO,
# the one upgrade-cluster.yml takes the cluster to; UPGRADE_EXTRA, those of
# the two that are not KUBERNETES_VERSION, and UPGRADE_TOOLS, the groups of
# hack/build/tools.sh that build them (both space-separated lists).
#   1 or patch: KUBESPRAY_UPGRADE_FROM to KUBERNETES_VERSION
#   minor:      KUBESPRAY_MINOR_FROM to KUBESPRAY_UPGRADE_TO (kubespray's
#               default minor and the one before)
ks_upgrade() {
  UPGRADE_FROM="${KUBERNETES_VERSION}" UPGRADE_TO="${KUBERNETES_VERSION}" UPGRADE_EXTRA="" UPGRADE_TOOLS=""
  case "${KS_UPGRADE:-0}" in
    0 | "") UPGRADE=0 ;;
    1 | patch) UPGRADE=1 UPGRADE_FROM="${KUBESPRAY_UPGRADE_FROM}" UPGRADE_EXTRA="${KUBESPRAY_UPGRADE_FROM}" UPGRADE_TOOLS=upgrade ;;
    minor)
      UPGRADE=1 UPGRADE_FROM="${KUBESPRAY_MINOR_FROM}" UPGRADE_TO="${KUBESPRAY_UPGRADE_TO}"
      UPGRADE_EXTRA="${KUBESPRAY_MINOR_FROM} ${KUBESPRAY_UPGRADE_TO}" UPGRADE_TOOLS="minor-from upgrade-to"
      ;;
    *) die "KS_UPGRADE: 1 or patch (cluster.yml installs KUBESPRAY_UPGRADE_FROM, then upgrade-cluster.yml upgrades to KUBERNETES_VERSION), minor (KUBESPRAY_MINOR_FROM, then KUBESPRAY_UPGRADE_TO) or 0, got '${KS_UPGRADE}'" ;;
  esac
}

# ks_lb: LB, the local API server load balancer on every node that KS_LB asks
# make test-kubespray for (loadbalancer_apiserver_localhost, kubespray's
# default layout): nginx (loadbalancer_apiserver_type's default, Debian's
# nginx with its stream module) or haproxy (Debian's haproxy); else LB=none:
# nodes reach the control plane directly.
ks_lb() {
  case "${KS_LB:-none}" in
    none | "") LB=none ;;
    nginx | haproxy) LB="${KS_LB}" ;;
    *) die "KS_LB: nginx or haproxy (kubespray's local API server load balancer on every node, from Debian's package) or none, got '${KS_LB}'" ;;
  esac
}

# ks_dns: DNS, the cluster DNS KS_DNS asks make test-kubespray for: coredns
# (kubespray's dns_mode: coredns, CoreDNS built from its Go module at
# COREDNS_VERSION, without nodelocaldns), else DNS=none (dns_mode: none).
ks_dns() {
  case "${KS_DNS:-none}" in
    none | "") DNS=none ;;
    coredns) DNS=coredns ;;
    *) die "KS_DNS: coredns (kubespray's dns_mode: coredns, CoreDNS ${COREDNS_VERSION}, no nodelocaldns) or none, got '${KS_DNS}'" ;;
  esac
}

# KS_POD_SUBNET: the kubespray tier's pod subnet, kubespray's default
# kube_pods_subnet, which hack/kubespray/inventory.sh sets and
# hack/kubespray/hosts.sh routes from the file server.
KS_POD_SUBNET=10.233.64.0/18
# KS_SERVICE_SUBNET: its Service subnet, kubespray's default
# kube_service_addresses, which hack/kubespray/inventory.sh sets. No route
# leads to either outside the tier's network: hack/kubespray/hosts.sh counts
# the packets to them that leave it apart (hack/kind/egress.sh).
KS_SERVICE_SUBNET=10.233.0.0/18

# The architectures the collection carries as binary modules and `make
# release` publishes, by GOARCH: every one a kubespray control plane can
# have, as kubespray's kubeadm checksums and image_arch name them: amd64,
# arm64, ppc64le (kubespray ships kubectl for arm, but no kubeadm or kubelet,
# so no control plane is arm). The binary runs on the first control plane
# (the role delegates its module there; kubespray's opt-in runs the command
# there), so these are all it needs, and the collection stays under
# galaxy.ansible.com's 20 MB. hack/gen-options (arches) writes a module's
# docs for each, and its tests fail when a list of them here, in galaxy.yml,
# in tests/sanity or in the role differs.
RELEASE_ARCHES="amd64 arm64 ppc64le"

# kps_version: the one version of what this repository ships, galaxy.yml's
# (the collection's): the binary reports it (--version), make dist names the
# collection tarball with it, make release the release, and CHANGELOG.md has
# an entry for it (hack/verify/version.sh checks all of that).
kps_version() {
  sed -n 's/^version: *//p' "${REPO_ROOT}/galaxy.yml"
}

# kps_ldflags [nostrip]: the linker flags of every build of the binary
# (make build, build_static): stripped unless nostrip, with kps_version and
# the git commit it was built from (git describe) stamped in.
kps_ldflags() {
  local strip="-s -w" pkg=github.com/kube-proxy-sync/kube-proxy-sync/internal/app commit
  [[ "${1:-}" == nostrip ]] && strip=""
  commit="$(git -C "${REPO_ROOT}" describe --tags --always --dirty 2>/dev/null || echo unknown)"
  printf '%s -X %s.version=%s -X %s.commit=%s' "${strip}" "${pkg}" "$(kps_version)" "${pkg}" "${commit}"
}

# build_static ARCH OUT [nostrip]: the release build of the binary for
# linux/ARCH (static, trimmed paths, stripped unless nostrip).
build_static() {
  local arch="$1" out="$2"
  CGO_ENABLED=0 GOOS=linux GOARCH="${arch}" go build -trimpath \
    -ldflags "$(kps_ldflags "${3:-}")" -o "${out}" ./cmd/kube-proxy-sync
}

# run_logged NAME CMD...: runs CMD with its output in LOGS/NAME.log (LOGS:
# the calling script's log directory), and shows the log's tail if it fails.
run_logged() {
  local name="$1"
  shift
  if ! "$@" >"${LOGS}/${name}.log" 2>&1; then
    tail -n 30 "${LOGS}/${name}.log" >&2
    die "${name} failed (log: ${LOGS#"${REPO_ROOT}/"}/${name}.log)"
  fi
}

# hash_of: a short hash of stdin, for the stamps of build steps and images.
hash_of() { sha256sum | cut -c1-16; }
# bin_hash BIN...: the hash of binaries hack/build/tools.sh built in
# TOOLS_BIN (of their stamps).
bin_hash() { local b; for b in "$@"; do cat "${TOOLS_BIN}/${b}.stamp"; done | hash_of; }

# docker_env points docker at the engine hack/kind/docker.sh chose (its own
# dockerd, or a working engine of the machine's; none chosen yet: docker's
# default).
docker_env() {
  DOCKER_HOST="$("${REPO_ROOT}/hack/kind/docker.sh" env || true)"
  if [[ -n "${DOCKER_HOST}" ]]; then export DOCKER_HOST; else unset DOCKER_HOST; fi
}

# image_fresh IMAGE HASH: IMAGE exists and carries the label kps.stamp=HASH
# (hash_of of what it is built from), so a build skips it.
image_fresh() {
  [[ "$(docker image inspect -f '{{index .Config.Labels "kps.stamp"}}' "$1" 2>/dev/null)" == "$2" ]]
}

# import_dir DIR IMAGE HASH CHANGES...: DIR as a one-layer image, labelled
# kps.stamp=HASH, with each of CHANGES a Dockerfile instruction (ENV, CMD,
# ENTRYPOINT) of docker import --change.
import_dir() {
  local dir="$1" image="$2" h="$3"
  shift 3
  local args=() c
  for c in "$@"; do args+=(--change "${c}"); done
  tar --numeric-owner --xattrs -C "${dir}" -c . |
    docker import "${args[@]}" --change "LABEL kps.stamp=${h}" - "${image}" >/dev/null
}
