#!/usr/bin/env bash
# Builds, with no image registry, the kind node image and every image in it,
# and prints the node image's name on stdout.
#
#   hack/kind/build.sh                          everything below
#   hack/kind/build.sh rootfs                   only the Debian root filesystems
#   hack/kind/build.sh rootfs NAME PACKAGES     another trimmed debootstrap
#                                               (.cache/kind/rootfs-NAME; path on stdout)
#   hack/kind/build.sh images                   steps 1 and 2 only; the images'
#                                               names on stdout, one a line
#   hack/kind/build.sh images-at VERSION        the control plane and kube-proxy
#                                               images kubeadm VERSION asks for,
#                                               from the binaries NAME-VERSION
#                                               (hack/build/tools.sh upgrade);
#                                               their names on stdout
#
#   1. Go binaries (hack/build/tools.sh kind): kind, kubelet, kubeadm,
#      kube-proxy (KUBERNETES_VERSION and KUBE_PROXY_OLD_VERSION), pause;
#      the control plane's own binaries (hack/build/tools.sh).
#   2. A Debian base image from debootstrap + docker import; from it, one
#      image per component, named exactly as kubeadm asks
#      (`kubeadm config images list`), plus kube-proxy at the old version
#      and the pod network stand-in (hack/kind/cni).
#   3. The node image, assembled as kind's base image is (kind's node files
#      come from the kind module in the Go module cache), with the images
#      above imported into its containerd.
#
# Each step is stamped with a hash of its inputs and skipped while the stamp
# matches, so a second run builds nothing. Logs of the long steps go to
# .cache/kind/logs. Needs root (debootstrap, chroot) and a Docker engine
# (hack/kind/docker.sh up; DOCKER_HOST is taken from it).
set -euo pipefail
# shellcheck source=hack/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"

KIND_DIR="${CACHE_DIR}/kind"
LOGS="${KIND_DIR}/logs"
STAMPS="${KIND_DIR}/stamps"
NODE_IMAGE="kps.local/kind-node:${KUBERNETES_VERSION}"
BASE_IMAGE="kps.local/base:${DEBIAN_SUITE}"
CNI_IMAGE="kps.local/kps-cni:v1"
PATH_ENV="PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# Packages of kind's base image (images/base/Dockerfile) that the cluster
# uses, plus containerd, runc and the CNI plugins from Debian.
NODE_PACKAGES="systemd,systemd-sysv,dbus,conntrack,iptables,nftables,iproute2,ethtool,util-linux,mount,kmod,libseccomp2,pigz,bash,ca-certificates,curl,jq,procps,socat,ipset,containerd,runc,containernetworking-plugins"
BASE_PACKAGES="iptables,nftables,conntrack,ipset,iproute2,kmod,ca-certificates"
ROOTFS_RECIPE=1

mkdir -p "${LOGS}" "${STAMPS}"
[[ "$(id -u)" == 0 ]] || die "building the kind node image needs root (debootstrap, chroot)"
# One build at a time.
exec 7>"${KIND_DIR}/build.lock"
flock 7

# fresh NAME HASH: true when the step NAME was last done with inputs HASH.
fresh() { [[ "$(cat "${STAMPS}/$1" 2>/dev/null)" == "$2" ]]; }
stamp() { printf '%s\n' "$2" >"${STAMPS}/$1"; }

# debian_mirror: the Debian archive this machine's apt uses (deb822 or
# one-line sources), so debootstrap fetches from the same place.
debian_mirror() {
  local f uri
  for f in /etc/apt/sources.list.d/*.sources; do
    [[ -f "${f}" ]] || continue
    uri="$(awk -v suite="${DEBIAN_SUITE}" '
      /^URIs:/ {u=$2} /^Suites:/ {for (i=2;i<=NF;i++) if ($i==suite) s=1}
      /^$/ {if (s && u != "") {print u; exit} u=""; s=0}
      END {if (s && u != "") print u}' "${f}" | head -n1)"
    [[ -n "${uri}" ]] && { printf '%s\n' "${uri}"; return; }
  done
  for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
    [[ -f "${f}" ]] || continue
    uri="$(awk -v suite="${DEBIAN_SUITE}" '$1=="deb" && $3==suite {print $2; exit}' "${f}")"
    [[ -n "${uri}" ]] && { printf '%s\n' "${uri}"; return; }
  done
  die "no apt source for Debian ${DEBIAN_SUITE} on this machine: debootstrap needs one"
}

# rootfs NAME PACKAGES: a trimmed debootstrap of DEBIAN_SUITE with PACKAGES,
# left in KIND_DIR/rootfs-NAME (recreated when the inputs change).
rootfs() {
  local name="$1" packages="$2" dir="${KIND_DIR}/rootfs-$1" h
  # Bump ROOTFS_RECIPE when the steps below change.
  h="$(printf '%s %s %s' "${ROOTFS_RECIPE}" "${DEBIAN_SUITE}" "${packages}" | hash_of)"
  if fresh "rootfs-${name}" "${h}" && [[ -d "${dir}" ]]; then
    return
  fi
  command -v debootstrap >/dev/null || run_logged apt-debootstrap apt-get install -y -qq debootstrap
  rm -rf "${dir}"
  log "debootstrap ${DEBIAN_SUITE} (${name}) ..."
  local start=${SECONDS}
  mkdir -p "${KIND_DIR}/debs"
  run_logged "debootstrap-${name}" debootstrap --variant=minbase --cache-dir="${KIND_DIR}/debs" \
    --include="${packages}" "${DEBIAN_SUITE}" "${dir}" "$(debian_mirror)"
  rm -rf "${dir}"/usr/share/{doc,man,info,locale}/* "${dir}"/var/cache/apt/* \
    "${dir}"/var/lib/apt/lists/* "${dir}"/var/log/*.log
  log "debootstrap ${name}: $((SECONDS - start))s, $(du -sh "${dir}" | cut -f1)"
  stamp "rootfs-${name}" "${h}"
}

# component IMAGE HASH ENTRYPOINT SRC:DEST...: BASE_IMAGE plus binaries.
component() {
  local image="$1" h="$2" entrypoint="$3"
  shift 3
  image_fresh "${image}" "${h}" && return
  local cid pair
  cid="$(docker create "${BASE_IMAGE}" /bin/true)"
  for pair in "$@"; do
    docker cp "${pair%%:*}" "${cid}:${pair#*:}"
  done
  docker commit --change "ENTRYPOINT ${entrypoint}" --change 'CMD []' --change "ENV ${PATH_ENV}" \
    --change "LABEL kps.stamp=${h}" "${cid}" "${image}" >/dev/null
  docker rm -f "${cid}" >/dev/null
  log "image ${image}"
}

if [[ "${1:-}" == rootfs && $# -eq 3 ]]; then
  # Another tier's root filesystem (hack/kubespray), made the same way.
  [[ "$2" =~ ^[a-z0-9-]+$ && "$2" != base && "$2" != node ]] || die "rootfs NAME: lowercase letters, digits, dashes; not base or node"
  rootfs "$2" "$3"
  printf '%s\n' "${KIND_DIR}/rootfs-$2"
  exit 0
fi
if [[ "${1:-}" == rootfs ]]; then
  # Only the two debootstraps (network-bound; can run beside a Go build).
  rootfs base "${BASE_PACKAGES}"
  rootfs node "${NODE_PACKAGES}"
  exit 0
fi

docker_env
docker info >/dev/null 2>&1 || die "no Docker engine answers: run hack/kind/docker.sh up first"

# --- 1. binaries
"${REPO_ROOT}/hack/build/tools.sh" >&2
"${REPO_ROOT}/hack/build/tools.sh" kind >&2

# --- 2. base and component images
rootfs base "${BASE_PACKAGES}"
base_hash="$(cat "${STAMPS}/rootfs-base")"
if ! image_fresh "${BASE_IMAGE}" "${base_hash}"; then
  import_dir "${KIND_DIR}/rootfs-base" "${BASE_IMAGE}" "${base_hash}" "ENV ${PATH_ENV}"
  log "image ${BASE_IMAGE}"
fi

# kubeadm_images VERSION SUFFIX: the images kubeadm VERSION asks for, named
# as it asks, built from the binaries NAME-SUFFIX in TOOLS_BIN (etcd and pause
# from the project's own, ETCD_VERSION and KUBERNETES_VERSION's); appended to
# images, the pause image's name left in pause_image.
kubeadm_images() {
  local version="$1" suffix="$2" image name h tmp list=()
  mapfile -t list < <("${TOOLS_BIN}/kubeadm${suffix}" config images list --kubernetes-version "${version}" 2>/dev/null)
  ((${#list[@]} > 0)) || die "kubeadm${suffix} config images list printed nothing"
  for image in "${list[@]}"; do
    name="${image##*/}"
    name="${name%%:*}"
    case "${name}" in
      coredns) continue ;; # not deployed: the kind config skips kubeadm's addon/coredns phase
      pause)
        pause_image="${image}"
        h="$(printf '%s %s' "${base_hash}" "$(bin_hash pause)" | hash_of)"
        if ! image_fresh "${image}" "${h}"; then
          tmp="$(mktemp -d)"
          install -m 0755 "${TOOLS_BIN}/pause" "${tmp}/pause"
          import_dir "${tmp}" "${image}" "${h}" 'ENTRYPOINT ["/pause"]'
          rm -rf "${tmp}"
          log "image ${image}"
        fi
        ;;
      etcd)
        # kubeadm's tag, the project's etcd build (ETCD_VERSION) inside.
        component "${image}" "$(printf '%s %s' "${base_hash}" "$(bin_hash etcd)" | hash_of)" \
          '["/usr/local/bin/etcd"]' "${TOOLS_BIN}/etcd:/usr/local/bin/etcd"
        ;;
      kube-apiserver | kube-controller-manager | kube-scheduler | kube-proxy)
        [[ -x "${TOOLS_BIN}/${name}${suffix}" ]] || die "no ${TOOLS_BIN#"${REPO_ROOT}/"}/${name}${suffix} for ${image}: build it first (hack/build/tools.sh)"
        component "${image}" "$(printf '%s %s' "${base_hash}" "$(bin_hash "${name}${suffix}")" | hash_of)" \
          "[\"/usr/local/bin/${name}\"]" "${TOOLS_BIN}/${name}${suffix}:/usr/local/bin/${name}"
        ;;
      *) die "kubeadm asks for an image this script does not build: ${image}" ;;
    esac
    images+=("${image}")
  done
}

images=()
pause_image=""
if [[ "${1:-}" == images-at ]]; then
  [[ $# -eq 2 && "$2" =~ ^v[0-9]+\.[0-9]+\.[0-9]+$ ]] || die "usage: hack/kind/build.sh images-at vMAJOR.MINOR.PATCH"
  [[ -x "${TOOLS_BIN}/kubeadm-$2" ]] || die "no ${TOOLS_BIN#"${REPO_ROOT}/"}/kubeadm-$2: build the binaries at $2 first (hack/build/tools.sh upgrade builds KUBESPRAY_UPGRADE_FROM, minor-from KUBESPRAY_MINOR_FROM, upgrade-to KUBESPRAY_UPGRADE_TO)"
  kubeadm_images "$2" "-$2"
  printf '%s\n' "${images[@]}"
  exit 0
fi
kubeadm_images "${KUBERNETES_VERSION}" ""
[[ -n "${pause_image}" ]] || die "kubeadm config images list named no pause image"
old_proxy="registry.k8s.io/kube-proxy:${KUBE_PROXY_OLD_VERSION}"
component "${old_proxy}" "$(printf '%s %s' "${base_hash}" "$(bin_hash "kube-proxy-${KUBE_PROXY_OLD_VERSION}")" | hash_of)" \
  '["/usr/local/bin/kube-proxy"]' "${TOOLS_BIN}/kube-proxy-${KUBE_PROXY_OLD_VERSION}:/usr/local/bin/kube-proxy"
images+=("${old_proxy}")
component "${CNI_IMAGE}" "$(printf '%s %s %s' "${base_hash}" "$(bin_hash kubectl)" "$(sha256sum <"${REPO_ROOT}/hack/kind/cni/kps-cni")" | hash_of)" \
  '["/usr/local/bin/kps-cni"]' "${TOOLS_BIN}/kubectl:/usr/local/bin/kubectl" "${REPO_ROOT}/hack/kind/cni/kps-cni:/usr/local/bin/kps-cni"
images+=("${CNI_IMAGE}")
if [[ "${1:-}" == images ]]; then
  printf '%s\n' "${BASE_IMAGE}" "${images[@]}"
  exit 0
fi

# --- 3. the node image
KIND_FILES="$(cd "${REPO_ROOT}/hack/tools/kind" && go list -m -f '{{.Dir}}' sigs.k8s.io/kind)/images/base/files"
[[ -d "${KIND_FILES}" ]] || die "kind's node files are missing from the module cache: ${KIND_FILES}"
image_ids="$(for i in "${images[@]}"; do docker image inspect -f '{{.Id}}' "${i}"; done | hash_of)"
node_hash="$(
  {
    printf '%s %s %s\n' "${NODE_PACKAGES}" "${image_ids}" "$(bin_hash kubelet kubeadm kubectl)"
    cat "${BASH_SOURCE[0]}" "${REPO_ROOT}"/hack/kind/cni/default-*.yaml
    (cd "${KIND_FILES}" && find . -type f | sort | xargs sha256sum)
  } | hash_of
)"
if image_fresh "${NODE_IMAGE}" "${node_hash}"; then
  log "up to date: ${NODE_IMAGE}"
  printf '%s\n' "${NODE_IMAGE}"
  exit 0
fi

start=${SECONDS}
rootfs node "${NODE_PACKAGES}"
root="${KIND_DIR}/node-root"
rm -rf "${root}"
log "assembling the node image ..."
cp -a "${KIND_DIR}/rootfs-node" "${root}"
# kind's node files are read-only (0444, dirs 0555) in the module cache:
# copy them writable and without touching the modes of existing dirs.
tar --owner=0 --group=0 --mode=u+w -C "${KIND_FILES}" -c . | tar -C "${root}" --no-overwrite-dir -x
chmod 0755 "${root}"/usr/local/bin/* "${root}"/kind/bin/*
# Debian's paths for containerd and the CNI plugins.
sed -i 's#^ExecStart=/usr/local/bin/containerd#ExecStart=/usr/bin/containerd#' "${root}/etc/systemd/system/containerd.service"
mkdir -p "${root}/opt/cni"
rm -rf "${root}/opt/cni/bin"
ln -s /usr/lib/cni "${root}/opt/cni/bin"
# containerd: the pause image kubeadm wants; and restrict_oom_score_adj,
# since this VM cannot grant CAP_SYS_RESOURCE (every sandbox fails without it).
sed -i -e "s#sandbox_image = .*#sandbox_image = \"${pause_image}\"#" \
  -e 's#restrict_oom_score_adj = false#restrict_oom_score_adj = true#' "${root}/etc/containerd/config.toml"
grep -q 'restrict_oom_score_adj = true' "${root}/etc/containerd/config.toml" ||
  die "kind's containerd config changed shape: restrict_oom_score_adj not set"
# The base runtime spec, as kind's Dockerfile makes it.
chroot "${root}" ctr oci spec |
  jq '.hooks.createContainer[.hooks.createContainer | length] |= . + {"path": "/kind/bin/mount-product-files.sh"}' |
  jq 'del(.process.rlimits)' >"${root}/etc/containerd/cri-base.json"
# kind's systemd trimming.
find "${root}/lib/systemd/system/sysinit.target.wants/" -name systemd-tmpfiles-setup.service -delete
rm -f "${root}"/lib/systemd/system/multi-user.target.wants/* "${root}"/etc/systemd/system/*.wants/* \
  "${root}"/lib/systemd/system/local-fs.target.wants/* "${root}"/lib/systemd/system/sockets.target.wants/*udev* \
  "${root}"/lib/systemd/system/sockets.target.wants/*initctl* "${root}"/lib/systemd/system/basic.target.wants/*
echo "ReadKMsg=no" >>"${root}/etc/systemd/journald.conf"
run_logged systemctl-enable chroot "${root}" systemctl enable kubelet.service containerd.service undo-mount-hacks.service
run_logged systemctl-mask chroot "${root}" systemctl mask systemd-binfmt.service
mkdir -p "${root}/etc/kubernetes/manifests" "${root}/kind/manifests"
# Keep the network closed: kind's entrypoint looks up host.docker.internal,
# which on Linux docker forwards to the host's resolver. Files only: kind
# then uses the default gateway.
sed -i "s#getent ahostsv4 'host.docker.internal'#getent -s files ahostsv4 'host.docker.internal'#" "${root}/usr/local/bin/entrypoint"
grep -q "getent -s files ahostsv4 'host.docker.internal'" "${root}/usr/local/bin/entrypoint" ||
  die "kind's entrypoint changed shape: the host.docker.internal lookup was not confined to /etc/hosts"
for b in kubelet kubeadm kubectl; do install -m 0755 "${TOOLS_BIN}/${b}" "${root}/usr/bin/${b}"; done
printf '%s' "${KUBERNETES_VERSION}" >"${root}/kind/version"
install -m 0644 "${REPO_ROOT}/hack/kind/cni/default-cni.yaml" "${root}/kind/manifests/default-cni.yaml"
install -m 0644 "${REPO_ROOT}/hack/kind/cni/default-storage.yaml" "${root}/kind/manifests/default-storage.yaml"

# Preload the images into the node's containerd: a containerd of this
# machine's, run on the node's /var/lib/containerd, imports them unpacked
# later by the node (--no-unpack).
log "importing ${#images[@]} images into the node's containerd ..."
docker save "${images[@]}" -o "${KIND_DIR}/images.tar"
ctrd="$(mktemp -d /tmp/kps-ctrd.XXXXXX)"
cat >"${ctrd}/config.toml" <<EOF
version = 2
root = "${root}/var/lib/containerd"
state = "${ctrd}/state"
disabled_plugins = ["io.containerd.grpc.v1.cri"]
[grpc]
  address = "${ctrd}/sock"
EOF
command -v containerd >/dev/null || run_logged apt-containerd apt-get install -y -qq containerd
containerd --config "${ctrd}/config.toml" >"${LOGS}/containerd-import.log" 2>&1 &
ctrd_pid=$!
deadline=$((SECONDS + 30))
until ctr --address "${ctrd}/sock" version >/dev/null 2>&1; do
  ((SECONDS < deadline)) || { kill "${ctrd_pid}"; die "containerd for the image import did not start (log: ${LOGS#"${REPO_ROOT}/"}/containerd-import.log)"; }
  sleep 0.2
done
run_logged ctr-import ctr --address "${ctrd}/sock" -n k8s.io images import --all-platforms --no-unpack "${KIND_DIR}/images.tar"
kill "${ctrd_pid}"
wait "${ctrd_pid}" || true
rm -rf "${ctrd}" "${KIND_DIR}/images.tar"

log "committing ${NODE_IMAGE} ..."
import_dir "${root}" "${NODE_IMAGE}-rootfs" "${node_hash}" 'ENV container=docker' \
  'ENTRYPOINT ["/usr/local/bin/entrypoint", "/sbin/init"]'
# docker import cannot set STOPSIGNAL: a metadata-only build on the local image.
printf 'FROM %s\nSTOPSIGNAL SIGRTMIN+3\nLABEL kps.stamp=%s\n' "${NODE_IMAGE}-rootfs" "${node_hash}" |
  DOCKER_BUILDKIT=0 docker build -q -t "${NODE_IMAGE}" - >"${LOGS}/docker-build.log" 2>&1
docker rmi "${NODE_IMAGE}-rootfs" >/dev/null
rm -rf "${root}"
log "built ${NODE_IMAGE} in $((SECONDS - start))s ($(docker image inspect -f '{{.Size}}' "${NODE_IMAGE}" | awk '{printf "%.0f MB", $1/1e6}'))"
printf '%s\n' "${NODE_IMAGE}"
