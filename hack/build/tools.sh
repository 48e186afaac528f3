#!/usr/bin/env bash
# Builds the local control plane's binaries from source into .cache/bin:
# etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubectl,
# kwok and kwokctl. Everything comes through the Go module proxy; nothing
# else is downloaded. Each binary has a stamp file (<binary>.stamp) holding
# its version and a hash of its build module, and is skipped while the stamp
# matches, so a second run builds nothing.
#
# The first build takes about 10 minutes on 2 cores (the Go build cache in
# the user's home makes later builds after `make clean` much faster).
#
# Usage: hack/build/tools.sh [--force] [control-plane|kind|kubespray|upgrade|minor-from|upgrade-to|coredns]
#   control-plane (default): what hack/cluster/up.sh needs
#   kind: what the kind node image needs (hack/kind/build.sh): kind, kubelet,
#         kubeadm and kube-proxy at KUBERNETES_VERSION, kube-proxy at
#         KUBE_PROXY_OLD_VERSION, and a static pause
#   kubespray: what kubespray's download role takes besides those
#         (hack/kubespray/build.sh): containerd, runc, the CNI plugins,
#         crictl, nerdctl, etcdctl and etcdutl
#   upgrade: the kubespray tier's upgrade (KS_UPGRADE=1): kubeadm, kubelet,
#         kubectl, kube-apiserver, kube-controller-manager, kube-scheduler
#         and kube-proxy at KUBESPRAY_UPGRADE_FROM, named NAME-VERSION
#   minor-from, upgrade-to: the same at KUBESPRAY_MINOR_FROM and
#         KUBESPRAY_UPGRADE_TO, for the tier's minor upgrade (KS_UPGRADE=minor)
#   coredns: the kubespray tier's cluster DNS (KS_DNS=coredns): CoreDNS at
#         COREDNS_VERSION, static
set -euo pipefail
# shellcheck source=hack/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"

TOOLS_DIR="${REPO_ROOT}/hack/tools"
FORCE=0 GROUP=control-plane
for arg in "$@"; do
  case "${arg}" in
    --force) FORCE=1 ;;
    control-plane | kind | kubespray | upgrade | minor-from | upgrade-to | coredns) GROUP="${arg}" ;;
    *) die "usage: hack/build/tools.sh [--force] [control-plane|kind|kubespray|upgrade|minor-from|upgrade-to|coredns]" ;;
  esac
done

command -v go >/dev/null || die "go is not on PATH: install Go (see go.mod for the version)"
mkdir -p "${TOOLS_BIN}"

# One build at a time (make cluster-up may run from two shells at once).
exec 8>"${TOOLS_BIN}/.build.lock"
if ! flock -n 8; then
  log "another build of the tools is running; waiting for it"
  flock 8
fi

# module_hash DIR: identifies the dependency set a binary was built from.
module_hash() {
  cat "$1/go.mod" "$1/go.sum" | sha256sum | cut -c1-16
}

# stale NAME STAMP: true when NAME must be (re)built.
stale() {
  local name="$1" stamp="$2"
  ((FORCE)) && return 0
  [[ -x "${TOOLS_BIN}/${name}" ]] || return 0
  [[ "$(cat "${TOOLS_BIN}/${name}.stamp" 2>/dev/null)" != "${stamp}" ]]
}

# build MODULE_DIR LDFLAGS STAMP NAME=PACKAGE...: builds the stale ones of the
# given binaries in one `go build`, so that they compile their shared
# packages once and link side by side (a cold build of Kubernetes' binaries
# one after the other left a core idle through each link).
# Static (CGO_ENABLED=0) unless BUILD_CGO=1; build tags from BUILD_TAGS.
build() {
  local dir="$1" ldflags="$2" stamp="$3"
  shift 3
  local pair name pkg start out base i blog names=() pkgs=()
  for pair in "$@"; do
    name="${pair%%=*}"
    pkg="${pair#*=}"
    if ! stale "${name}" "${stamp}"; then
      log "up to date: ${name} (${stamp%% *})"
      continue
    fi
    names+=("${name}")
    pkgs+=("${pkg}")
  done
  ((${#names[@]} > 0)) || return 0
  log "building ${names[*]} ${stamp%% *} from ${pkgs[*]} ..."
  start=${SECONDS}
  mkdir -p "${CACHE_DIR}/logs"
  blog="${CACHE_DIR}/logs/build-${names[0]}.log"
  out="${TOOLS_BIN}/.build-${names[0]}"
  rm -rf "${out}"
  mkdir -p "${out}"
  # one package: -o names the file; more: a directory, each binary named
  # by go after its package path
  local target="${out}/${names[0]}"
  ((${#pkgs[@]} == 1)) || target="${out}/"
  if ! (cd "${dir}" && CGO_ENABLED="${BUILD_CGO:-0}" go build -trimpath -tags "${BUILD_TAGS:-}" -ldflags "${ldflags}" \
    -o "${target}" "${pkgs[@]}") >"${blog}" 2>&1; then
    tail -n 30 "${blog}" >&2
    rm -rf "${out}"
    die "building ${names[*]} failed (log: ${blog#"${REPO_ROOT}/"})"
  fi
  for i in "${!names[@]}"; do
    name="${names[i]}"
    if ((${#pkgs[@]} == 1)); then
      base="${name}"
    else
      # go's name for a main package: its last path element, or the one
      # before a major version suffix, v2 and up (etcdctl/v3)
      base="${pkgs[i]##*/}"
      [[ ! "${base}" =~ ^v([2-9]|[1-9][0-9]+)$ ]] || { base="${pkgs[i]%/*}"; base="${base##*/}"; }
    fi
    # Renamed, so a running copy of the old binary is not written over.
    mv -f "${out}/${base}" "${TOOLS_BIN}/${name}"
    printf '%s\n' "${stamp}" >"${TOOLS_BIN}/${name}.stamp"
  done
  rm -rf "${out}"
  log "built ${names[*]} in $((SECONDS - start))s"
}

# k8s_ldflags VERSION: the version stamps Kubernetes' own build sets (kubeadm
# compares its own version with the cluster's).
k8s_ldflags() {
  local v="$1" minor major pkg flags="-s -w"
  minor="${v#v*.}"
  minor="${minor%%.*}"
  major="${v#v}"
  major="${major%%.*}"
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    flags+=" -X ${pkg}.gitVersion=${v}"
    flags+=" -X ${pkg}.gitMajor=${major} -X ${pkg}.gitMinor=${minor}"
    flags+=" -X ${pkg}.gitTreeState=clean"
  done
  printf '%s' "${flags}"
}

if [[ "${GROUP}" == kind ]]; then
  build "${TOOLS_DIR}/kind" "-s -w" "${KIND_VERSION} $(module_hash "${TOOLS_DIR}/kind")" \
    kind=sigs.k8s.io/kind
  build "${TOOLS_DIR}/node" "$(k8s_ldflags "${KUBERNETES_VERSION}")" \
    "${KUBERNETES_VERSION} $(module_hash "${TOOLS_DIR}/node")" \
    kubeadm=k8s.io/kubernetes/cmd/kubeadm \
    kubelet=k8s.io/kubernetes/cmd/kubelet \
    kube-proxy=k8s.io/kubernetes/cmd/kube-proxy
  # The checksum database lacks many k8s.io/*@v0.27.x: go.sum is the record.
  GONOSUMDB=k8s.io build "${TOOLS_DIR}/kube-proxy-${KUBE_PROXY_OLD_VERSION%.*}" \
    "$(k8s_ldflags "${KUBE_PROXY_OLD_VERSION}")" \
    "${KUBE_PROXY_OLD_VERSION} $(module_hash "${TOOLS_DIR}/kube-proxy-${KUBE_PROXY_OLD_VERSION%.*}")" \
    "kube-proxy-${KUBE_PROXY_OLD_VERSION}=k8s.io/kubernetes/cmd/kube-proxy"
  # pause: the C source ships in the kubernetes module.
  pause_src="$(cd "${TOOLS_DIR}/node" && go list -m -f '{{.Dir}}' k8s.io/kubernetes)/build/pause/linux/pause.c"
  if stale pause "${KUBERNETES_VERSION} $(sha256sum <"${pause_src}" | cut -c1-16)"; then
    command -v gcc >/dev/null || die "gcc is needed for the static pause binary: apt-get install gcc libc6-dev"
    gcc -Os -static -DVERSION="${KUBERNETES_VERSION}" -o "${TOOLS_BIN}/pause" "${pause_src}" ||
      die "building pause from ${pause_src} failed"
    printf '%s\n' "${KUBERNETES_VERSION} $(sha256sum <"${pause_src}" | cut -c1-16)" >"${TOOLS_BIN}/pause.stamp"
    log "built pause"
  fi
  log "kind tools in ${TOOLS_BIN#"${REPO_ROOT}/"}: kind ${KIND_VERSION}, $("${TOOLS_BIN}/kubelet" --version), kube-proxy ${KUBE_PROXY_OLD_VERSION}"
  exit 0
fi
if [[ "${GROUP}" == kubespray ]]; then
  # The version stamps kubespray's tasks read back (crictl/nerdctl/containerd
  # --version) are set as each project's Makefile sets them.
  build "${TOOLS_DIR}/containerd" "-s -w -X github.com/containerd/containerd/v2/version.Version=${CONTAINERD_VERSION}" \
    "${CONTAINERD_VERSION} $(module_hash "${TOOLS_DIR}/containerd")" \
    containerd=github.com/containerd/containerd/v2/cmd/containerd \
    containerd-shim-runc-v2=github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2 \
    ctr=github.com/containerd/containerd/v2/cmd/ctr
  # runc needs cgo (its nsenter is C) and seccomp: kubeadm's static pods ask
  # for the RuntimeDefault profile. Linked to Debian's libseccomp, which the
  # hosts have (libseccomp2).
  if ! pkg-config --exists libseccomp 2>/dev/null; then
    [[ "$(id -u)" == 0 ]] || die "runc needs libseccomp-dev and pkg-config: apt-get install libseccomp-dev pkg-config"
    log "installing Debian's libseccomp-dev and pkg-config for runc (apt-get)"
    mkdir -p "${CACHE_DIR}/logs"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libseccomp-dev pkg-config >"${CACHE_DIR}/logs/apt-libseccomp.log" 2>&1 ||
      die "apt-get install libseccomp-dev pkg-config failed (log: ${CACHE_DIR#"${REPO_ROOT}/"}/logs/apt-libseccomp.log)"
  fi
  BUILD_CGO=1 BUILD_TAGS=seccomp build "${TOOLS_DIR}/runc" "-s -w -X main.version=${RUNC_VERSION#v}" \
    "${RUNC_VERSION} seccomp $(module_hash "${TOOLS_DIR}/runc")" runc=github.com/opencontainers/runc
  cni=()
  for p in main/bridge main/ptp main/loopback main/host-device ipam/host-local ipam/static \
    meta/portmap meta/bandwidth meta/firewall meta/tuning; do
    cni+=("cni-${p#*/}=github.com/containernetworking/plugins/plugins/${p}")
  done
  build "${TOOLS_DIR}/cni-plugins" "-s -w -X github.com/containernetworking/plugins/pkg/utils/buildversion.BuildVersion=${CNI_PLUGINS_VERSION}" \
    "${CNI_PLUGINS_VERSION} $(module_hash "${TOOLS_DIR}/cni-plugins")" "${cni[@]}"
  build "${TOOLS_DIR}/crictl" "-s -w -X sigs.k8s.io/cri-tools/pkg/version.Version=${CRICTL_VERSION}" \
    "${CRICTL_VERSION} $(module_hash "${TOOLS_DIR}/crictl")" crictl=sigs.k8s.io/cri-tools/cmd/crictl
  build "${TOOLS_DIR}/nerdctl" "-s -w -X github.com/containerd/nerdctl/pkg/version.Version=${NERDCTL_VERSION}" \
    "${NERDCTL_VERSION} $(module_hash "${TOOLS_DIR}/nerdctl")" nerdctl=github.com/containerd/nerdctl/cmd/nerdctl
  build "${TOOLS_DIR}/etcdctl" "-s -w" "${ETCD_VERSION} $(module_hash "${TOOLS_DIR}/etcdctl")" \
    etcdctl=go.etcd.io/etcd/etcdctl/v3 etcdutl=go.etcd.io/etcd/etcdutl/v3
  log "kubespray tools in ${TOOLS_BIN#"${REPO_ROOT}/"}: containerd ${CONTAINERD_VERSION}, runc ${RUNC_VERSION}, CNI plugins ${CNI_PLUGINS_VERSION}, crictl ${CRICTL_VERSION}, nerdctl ${NERDCTL_VERSION}, etcdctl ${ETCD_VERSION}"
  exit 0
fi
# upgrade_tools MODULE VERSION VARIABLE: Kubernetes' binaries at VERSION,
# named NAME-VERSION, from hack/tools/MODULE, which must pin that version.
upgrade_tools() {
  local dir="${TOOLS_DIR}/$1" version="$2" var="$3" pinned name pairs=()
  pinned="$(cd "${dir}" && go list -m -f '{{.Version}}' k8s.io/kubernetes)"
  [[ "${pinned}" == "${version}" ]] ||
    die "hack/tools/$1 pins k8s.io/kubernetes ${pinned}, hack/versions.mk says ${var} ${version}: set the module's kubernetes and staging versions (replace block) to it and run go mod tidy there"
  for name in kubeadm kubelet kubectl kube-apiserver kube-controller-manager kube-scheduler kube-proxy; do
    pairs+=("${name}-${version}=k8s.io/kubernetes/cmd/${name}")
  done
  build "${dir}" "$(k8s_ldflags "${version}")" "${version} $(module_hash "${dir}")" "${pairs[@]}"
  log "upgrade tools in ${TOOLS_BIN#"${REPO_ROOT}/"}: $("${TOOLS_BIN}/kubeadm-${version}" version -o short) and its kubelet, kubectl, control plane and kube-proxy"
}
if [[ "${GROUP}" == upgrade ]]; then
  upgrade_tools upgrade-from "${KUBESPRAY_UPGRADE_FROM}" KUBESPRAY_UPGRADE_FROM
  exit 0
fi
if [[ "${GROUP}" == minor-from ]]; then
  upgrade_tools minor-from "${KUBESPRAY_MINOR_FROM}" KUBESPRAY_MINOR_FROM
  exit 0
fi
if [[ "${GROUP}" == upgrade-to ]]; then
  upgrade_tools upgrade-to "${KUBESPRAY_UPGRADE_TO}" KUBESPRAY_UPGRADE_TO
  exit 0
fi
if [[ "${GROUP}" == coredns ]]; then
  # CoreDNS's main package is its module's root; its version is a constant
  # in its source (coremain.CoreVersion), its Makefile stamps only the commit.
  pinned="$(cd "${TOOLS_DIR}/coredns" && go list -m -f '{{.Version}}' github.com/coredns/coredns)"
  [[ "${pinned}" == "${COREDNS_VERSION}" ]] ||
    die "hack/tools/coredns pins github.com/coredns/coredns ${pinned}, hack/versions.mk says COREDNS_VERSION ${COREDNS_VERSION}: set it there and run go mod tidy"
  build "${TOOLS_DIR}/coredns" "-s -w" "${COREDNS_VERSION} $(module_hash "${TOOLS_DIR}/coredns")" \
    coredns=github.com/coredns/coredns
  log "coredns in ${TOOLS_BIN#"${REPO_ROOT}/"}: $("${TOOLS_BIN}/coredns" -version | head -n1)"
  exit 0
fi
k8s_ldflags="$(k8s_ldflags "${KUBERNETES_VERSION}")"

# etcd's main package is the root of go.etcd.io/etcd/server/v3.
build "${TOOLS_DIR}/etcd" "-s -w" "${ETCD_VERSION} $(module_hash "${TOOLS_DIR}/etcd")" \
  etcd=go.etcd.io/etcd/server/v3
build "${TOOLS_DIR}/kwok" "-s -w -X sigs.k8s.io/kwok/pkg/consts.Version=${KWOK_VERSION#v}" \
  "${KWOK_VERSION} $(module_hash "${TOOLS_DIR}/kwok")" \
  kwok=sigs.k8s.io/kwok/cmd/kwok kwokctl=sigs.k8s.io/kwok/cmd/kwokctl
build "${TOOLS_DIR}" "${k8s_ldflags}" "${KUBERNETES_VERSION} $(module_hash "${TOOLS_DIR}")" \
  kube-apiserver=k8s.io/kubernetes/cmd/kube-apiserver \
  kube-controller-manager=k8s.io/kubernetes/cmd/kube-controller-manager \
  kube-scheduler=k8s.io/kubernetes/cmd/kube-scheduler \
  kubectl=k8s.io/kubernetes/cmd/kubectl

log "tools in ${TOOLS_BIN#"${REPO_ROOT}/"}: $("${TOOLS_BIN}/kube-apiserver" --version), etcd $("${TOOLS_BIN}/etcd" --version | awk '/etcd Version/ {print $3}'), $("${TOOLS_BIN}/kwok" --version 2>&1 | head -1)"
