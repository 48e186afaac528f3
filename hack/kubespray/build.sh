#!/usr/bin/env bash
# Builds, offline, everything kubespray's download role fetches and every
# image the kubespray tier runs, and leaves them under .cache/kubespray:
#
#   files/          what files_repo serves (the layout files.yml names):
#                   kubeadm, kubelet, kubectl (KUBERNETES_VERSION), the etcd
#                   tarball (etcd, etcdctl, etcdutl at ETCD_VERSION), the CNI
#                   plugins, containerd, runc, crictl and nerdctl tarballs,
#                   each shaped like its upstream release asset
#   files.yml       kubespray variables: versions, *_download_url (under
#                   {{ files_repo }}) and *_checksum of each file above
#   images.txt      the images to push to registry_host: the control plane,
#                   kube-proxy, pause and the pod network (hack/kind/build.sh
#                   images), one "LOCAL-NAME REPOSITORY:TAG" a line
#
# With KS_UPGRADE=1 (hack/kubespray/run.sh's upgrade step) also kubeadm,
# kubelet, kubectl and the control plane and kube-proxy images at
# KUBESPRAY_UPGRADE_FROM (hack/build/tools.sh upgrade, hack/kind/build.sh
# images-at), and files.yml sets kube_version to that version, with the
# Kubernetes URLs and checksums following kube_version: cluster.yml installs
# it, upgrade-cluster.yml -e kube_version=KUBERNETES_VERSION upgrades. With
# KS_UPGRADE=minor the same at KUBESPRAY_MINOR_FROM and KUBESPRAY_UPGRADE_TO
# (tools.sh minor-from and upgrade-to), kube_version KUBESPRAY_MINOR_FROM, and
# the upgrade to KUBESPRAY_UPGRADE_TO (hack/lib.sh ks_upgrade).
#
# With KS_LB=nginx or haproxy also the image of kubespray's local API server
# load balancer: Debian's nginx and its stream module, or Debian's haproxy
# (debootstrapped with their libraries), started as kubespray's manifest
# expects (nginx: its nginx.conf in /etc/nginx, which loads no module, so the
# image's command loads the stream module and keeps nginx in the foreground;
# haproxy: its config in /usr/local/etc/haproxy), pushed as
# nginx:DEBIAN_SUITE or haproxy:DEBIAN_SUITE.
#
# With KS_DNS=coredns also CoreDNS's image: the static binary of
# hack/build/tools.sh coredns (COREDNS_VERSION) alone, as /coredns, its
# entrypoint (kubespray's Deployment passes -conf /etc/coredns/Corefile),
# pushed as coredns:COREDNS_VERSION.
#
# and two local images: the hosts' (a debootstrapped Debian with systemd and
# sshd, started by kind's node entrypoint) and the services' (Debian's
# docker-registry, busybox httpd and udpecho, hack/kubespray/udpecho, on the
# base image).
#
# Every binary comes from hack/build/tools.sh (Go modules), but udpecho
# (this checkout), every package from Debian's archive. Steps are stamped
# and skipped when their inputs did not change. Needs root (debootstrap)
# and a Docker engine (DOCKER_HOST from hack/kind/docker.sh).
set -euo pipefail
# shellcheck source=hack/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"

KS_DIR="${CACHE_DIR}/kubespray"
FILES="${KS_DIR}/files"
LOGS="${KS_DIR}/logs"
HOST_IMAGE="kps.local/ks-host:${DEBIAN_SUITE}"
SERVICES_IMAGE="kps.local/ks-services:${DEBIAN_SUITE}"
PATH_ENV="PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# What kubespray's hosts need before it runs (we skip its system-packages
# step: no package mirror here): its own package list for Debian 12
# (roles/system_packages) minus the ones for other modes, plus systemd, sshd
# and Python for Ansible, and dig (bind9-dnsutils) for run.sh's traffic
# prober's DNS queries (KS_DNS=coredns; in every build, so that the hosts'
# image is one).
HOST_PACKAGES="systemd,systemd-sysv,dbus,openssh-server,python3,python3-apt,sudo,iptables,nftables,conntrack,ipset,iproute2,ethtool,util-linux,mount,kmod,libseccomp2,bash,ca-certificates,curl,jq,procps,socat,openssl,rsync,unzip,tar,e2fsprogs,ebtables,iputils-ping,apparmor,bind9-dnsutils"
HOST_RECIPE=1
ARCH=amd64
ks_upgrade
ks_lb
ks_dns
LB_RECIPE=1
COREDNS_IMAGE="kps.local/ks-coredns:${COREDNS_VERSION}"
COREDNS_RECIPE=1

[[ "$(id -u)" == 0 ]] || die "building the kubespray tier needs root (debootstrap, chroot)"
mkdir -p "${FILES}" "${LOGS}"
exec 6>"${KS_DIR}/build.lock"
flock 6

docker_env
docker info >/dev/null 2>&1 || die "no Docker engine answers: run hack/kind/docker.sh up first"

# --- 1. binaries (Go modules only)
start=${SECONDS}
"${REPO_ROOT}/hack/build/tools.sh" >&2
"${REPO_ROOT}/hack/build/tools.sh" kind >&2
"${REPO_ROOT}/hack/build/tools.sh" kubespray >&2
if ((UPGRADE)); then
  for group in ${UPGRADE_TOOLS}; do "${REPO_ROOT}/hack/build/tools.sh" "${group}" >&2; done
fi
if [[ "${DNS}" == coredns ]]; then "${REPO_ROOT}/hack/build/tools.sh" coredns >&2; fi
log "binaries: $((SECONDS - start))s"

# --- 2. files_repo
# tarball NAME STAMP PREFIX BIN...: FILES/NAME holding BIN... under PREFIX
# (as the upstream release asset lays them out), rebuilt when STAMP changes.
tarball() {
  local name="$1" h="$2" prefix="$3"
  shift 3
  [[ -f "${FILES}/${name}" && "$(cat "${FILES}/${name}.stamp" 2>/dev/null)" == "${h}" ]] && return
  local tmp b
  tmp="$(mktemp -d)"
  mkdir -p "${tmp}/${prefix}" "$(dirname "${FILES}/${name}")"
  for b in "$@"; do install -m 0755 "${TOOLS_BIN}/${b}" "${tmp}/${prefix}/${b#cni-}"; done
  tar --owner=0 --group=0 -C "${tmp}" -czf "${FILES}/${name}.tmp" "${prefix:-.}"
  mv -f "${FILES}/${name}.tmp" "${FILES}/${name}"
  printf '%s\n' "${h}" >"${FILES}/${name}.stamp"
  rm -rf "${tmp}"
  log "file ${name}"
}
# single NAME BIN: FILES/NAME, a copy of one binary.
single() {
  mkdir -p "$(dirname "${FILES}/$1")"
  cmp -s "${TOOLS_BIN}/$2" "${FILES}/$1" || install -m 0755 "${TOOLS_BIN}/$2" "${FILES}/$1"
}

k8s="k8s/${KUBERNETES_VERSION}/${ARCH}"
single "${k8s}/kubeadm" kubeadm
single "${k8s}/kubelet" kubelet
single "${k8s}/kubectl" kubectl
if ((UPGRADE)); then
  for v in ${UPGRADE_EXTRA}; do
    for b in kubeadm kubelet kubectl; do single "k8s/${v}/${ARCH}/${b}" "${b}-${v}"; done
  done
fi
etcd_tar="etcd/etcd-${ETCD_VERSION}-linux-${ARCH}.tar.gz"
tarball "${etcd_tar}" "$(bin_hash etcd etcdctl etcdutl)" "etcd-${ETCD_VERSION}-linux-${ARCH}" etcd etcdctl etcdutl
cni_bins=()
for b in "${TOOLS_BIN}"/cni-*; do [[ "${b}" == *.stamp ]] || cni_bins+=("${b##*/}"); done
((${#cni_bins[@]} > 0)) || die "no CNI plugins in ${TOOLS_BIN#"${REPO_ROOT}/"} (hack/build/tools.sh kubespray)"
cni_tar="cni/cni-plugins-linux-${ARCH}-${CNI_PLUGINS_VERSION}.tgz"
tarball "${cni_tar}" "$(bin_hash "${cni_bins[@]}")" "." "${cni_bins[@]}"
containerd_tar="containerd/containerd-${CONTAINERD_VERSION#v}-linux-${ARCH}.tar.gz"
tarball "${containerd_tar}" "$(bin_hash containerd containerd-shim-runc-v2 ctr)" bin containerd containerd-shim-runc-v2 ctr
runc_file="runc/${RUNC_VERSION}/runc.${ARCH}"
single "${runc_file}" runc
crictl_tar="crictl/crictl-${CRICTL_VERSION}-linux-${ARCH}.tar.gz"
tarball "${crictl_tar}" "$(bin_hash crictl)" "." crictl
nerdctl_tar="nerdctl/nerdctl-${NERDCTL_VERSION#v}-linux-${ARCH}.tar.gz"
tarball "${nerdctl_tar}" "$(bin_hash nerdctl)" "." nerdctl

sum() { printf 'sha256:%s' "$(sha256sum <"${FILES}/$1" | cut -d' ' -f1)"; }
# entry VAR CHECKSUM_VAR FILE: kubespray's URL and checksum variables of FILE.
entry() {
  printf '%s_download_url: "{{ files_repo }}/%s"\n%s: "%s"\n' "$1" "$3" "$2" "$(sum "$3")"
}
# kubernetes_entries: kubeadm, kubelet and kubectl's variables. KS_UPGRADE:
# both versions, kube_version the older one; the URLs and checksums follow
# kube_version (-e kube_version=... on upgrade-cluster.yml), as kubespray's
# own defaults do (roles/kubespray_defaults, download.yml).
kubernetes_entries() {
  local b v
  if ((!UPGRADE)); then
    for b in kubeadm kubelet kubectl; do entry "${b}" "${b}_binary_checksum" "${k8s}/${b}"; done
    return
  fi
  printf '# KS_UPGRADE=%s: cluster.yml installs %s, upgrade-cluster.yml takes it\n' "${KS_UPGRADE}" "${UPGRADE_FROM}"
  printf '# to %s (-e kube_version=%s).\n' "${UPGRADE_TO}" "${UPGRADE_TO#v}"
  printf 'kps_kubernetes_checksums:\n'
  for v in "${UPGRADE_FROM}" "${UPGRADE_TO}"; do
    printf '  "%s":\n' "${v#v}"
    for b in kubeadm kubelet kubectl; do printf '    %s: "%s"\n' "${b}" "$(sum "k8s/${v}/${ARCH}/${b}")"; done
  done
  for b in kubeadm kubelet kubectl; do
    printf '%s_download_url: "{{ files_repo }}/k8s/v{{ kube_version }}/%s/%s"\n' "${b}" "${ARCH}" "${b}"
    printf '%s_binary_checksum: "{{ kps_kubernetes_checksums[kube_version].%s }}"\n' "${b}" "${b}"
  done
}
{
  printf '# Generated by hack/kubespray/build.sh: the artifacts built here, as\n'
  printf "# kubespray's download role takes them from files_repo.\n"
  printf 'kube_version: "%s"\n' "${UPGRADE_FROM#v}"
  printf 'etcd_version: "%s"\ncni_version: "%s"\ncontainerd_version: "%s"\n' \
    "${ETCD_VERSION#v}" "${CNI_PLUGINS_VERSION#v}" "${CONTAINERD_VERSION#v}"
  printf 'runc_version: "%s"\ncrictl_version: "%s"\nnerdctl_version: "%s"\n' \
    "${RUNC_VERSION#v}" "${CRICTL_VERSION#v}" "${NERDCTL_VERSION#v}"
  kubernetes_entries
  entry etcd etcd_binary_checksum "${etcd_tar}"
  entry cni cni_binary_checksum "${cni_tar}"
  entry containerd containerd_archive_checksum "${containerd_tar}"
  entry runc runc_binary_checksum "${runc_file}"
  entry crictl crictl_binary_checksum "${crictl_tar}"
  entry nerdctl nerdctl_archive_checksum "${nerdctl_tar}"
} >"${KS_DIR}/files.yml.tmp"
mv -f "${KS_DIR}/files.yml.tmp" "${KS_DIR}/files.yml"

# --- 3. images for registry_host: the kind tier's, renamed to their last
# path element (kube_image_repo is registry_host itself).
mapfile -t kind_images < <("${REPO_ROOT}/hack/kind/build.sh" images)
base_image="${kind_images[0]}"
: >"${KS_DIR}/images.txt.tmp"
for image in "${kind_images[@]:1}"; do
  [[ "${image}" == *:"${KUBE_PROXY_OLD_VERSION}" ]] && continue
  printf '%s %s\n' "${image}" "${image##*/}" >>"${KS_DIR}/images.txt.tmp"
done
if ((UPGRADE)); then
  for v in ${UPGRADE_EXTRA}; do
    mapfile -t from_images < <("${REPO_ROOT}/hack/kind/build.sh" images-at "${v}")
    ((${#from_images[@]} > 0)) || die "hack/kind/build.sh images-at ${v} named no image"
    for image in "${from_images[@]}"; do
      grep -q "^${image} " "${KS_DIR}/images.txt.tmp" || printf '%s %s\n' "${image}" "${image##*/}" >>"${KS_DIR}/images.txt.tmp"
    done
  done
fi
# lb_image TYPE PACKAGES CMD: kubespray's local API server load balancer of
# loadbalancer_apiserver_type TYPE: Debian's PACKAGES and their libraries
# (hack/kind/build.sh rootfs ks-TYPE), CMD (JSON) in the foreground as PID 1,
# reading the config kubespray mounts; pushed as TYPE:DEBIAN_SUITE, which
# files.yml names (TYPE_image_repo, TYPE_image_tag).
lb_image() {
  local type="$1" packages="$2" cmd="$3" image="kps.local/ks-$1:${DEBIAN_SUITE}" root h
  root="$("${REPO_ROOT}/hack/kind/build.sh" rootfs "ks-${type}" "${packages}")"
  if [[ "${type}" == nginx && ! -f "${root}/usr/lib/nginx/modules/ngx_stream_module.so" ]]; then
    die "Debian's libnginx-mod-stream left no /usr/lib/nginx/modules/ngx_stream_module.so in ${root#"${REPO_ROOT}/"}: the nginx image's command loads it"
  fi
  h="$(printf '%s %s %s' "${LB_RECIPE}" "$(cat "${CACHE_DIR}/kind/stamps/rootfs-ks-${type}")" "${cmd}" | hash_of)"
  if ! image_fresh "${image}" "${h}"; then
    import_dir "${root}" "${image}" "${h}" "ENV ${PATH_ENV}" "CMD ${cmd}"
    log "image ${image}"
  fi
  printf '%s %s:%s\n' "${image}" "${type}" "${DEBIAN_SUITE}" >>"${KS_DIR}/images.txt.tmp"
  printf '# KS_LB=%s: kubespray'"'"'s local API server load balancer.\n%s_image_repo: "{{ registry_host }}/%s"\n%s_image_tag: "%s"\n' \
    "${type}" "${type}" "${type}" "${type}" "${DEBIAN_SUITE}" >>"${KS_DIR}/files.yml"
}
case "${LB}" in
  # kubespray's nginx.conf (roles/kubernetes/node/templates/loadbalancer),
  # mounted in /etc/nginx, nginx's default config path, has a stream block
  # but loads no module: Debian builds the stream module as a dynamic one,
  # so the command loads it (-g is read before the config file), and keeps
  # nginx in the foreground (the config does not say daemon off, which a
  # second time would be an error)
  nginx)
    lb_image nginx nginx,libnginx-mod-stream \
      '["nginx", "-g", "daemon off; load_module /usr/lib/nginx/modules/ngx_stream_module.so;"]'
    ;;
  haproxy) lb_image haproxy haproxy '["haproxy", "-db", "-f", "/usr/local/etc/haproxy/haproxy.cfg"]' ;;
esac
if [[ "${DNS}" == coredns ]]; then
  # kubespray's CoreDNS Deployment: its image's entrypoint with args -conf
  # /etc/coredns/Corefile (the ConfigMap it mounts); the static binary is
  # all the image holds (it runs as root: the pod drops every capability
  # but NET_BIND_SERVICE, and sets no user)
  coredns_hash="$(printf '%s %s' "${COREDNS_RECIPE}" "$(bin_hash coredns)" | hash_of)"
  if ! image_fresh "${COREDNS_IMAGE}" "${coredns_hash}"; then
    tmp="$(mktemp -d)"
    chmod 0755 "${tmp}"
    install -m 0755 "${TOOLS_BIN}/coredns" "${tmp}/coredns"
    import_dir "${tmp}" "${COREDNS_IMAGE}" "${coredns_hash}" 'ENTRYPOINT ["/coredns"]'
    rm -rf "${tmp}"
    log "image ${COREDNS_IMAGE}"
  fi
  printf '%s coredns:%s\n' "${COREDNS_IMAGE}" "${COREDNS_VERSION}" >>"${KS_DIR}/images.txt.tmp"
  # the tag set here, not computed from kube_version: the tier's upgrades
  # keep this CoreDNS (kubespray's table would take others at 1.35 and 1.36)
  printf '# KS_DNS=coredns: the cluster DNS (dns_mode: coredns).\ncoredns_image_repo: "{{ registry_host }}/coredns"\ncoredns_image_tag: "%s"\n' \
    "${COREDNS_VERSION}" >>"${KS_DIR}/files.yml"
fi
mv -f "${KS_DIR}/images.txt.tmp" "${KS_DIR}/images.txt"

# --- 4. the services' image: Debian's docker-registry, busybox (httpd) and
# udpecho (hack/kubespray/udpecho: the traffic prober's UDP endpoint, built
# here from this checkout, again when its sources, go.mod or Go change).
udpecho="${KS_DIR}/udpecho"
udpecho_stamp="$(
  {
    go version
    cat "${REPO_ROOT}/go.mod"
    find "${REPO_ROOT}/hack/kubespray/udpecho" -name '*.go' ! -name '*_test.go' | sort | xargs cat
  } | hash_of
)"
if [[ ! -x "${udpecho}" || "$(cat "${udpecho}.stamp" 2>/dev/null)" != "${udpecho_stamp}" ]]; then
  # no VCS stamp: the binary, and so the image, stays the same across
  # commits that do not change it
  (cd "${REPO_ROOT}" && run_logged udpecho-build env CGO_ENABLED=0 GOOS=linux GOARCH="${ARCH}" \
    go build -trimpath -buildvcs=false -ldflags '-s -w' -o "${udpecho}.tmp" ./hack/kubespray/udpecho)
  mv -f "${udpecho}.tmp" "${udpecho}"
  printf '%s\n' "${udpecho_stamp}" >"${udpecho}.stamp"
  log "udpecho"
fi
debs="${KS_DIR}/debs"
mkdir -p "${debs}"
# the image's stamp: the base image, the packages and udpecho's binary
services_stamp() {
  printf '%s %s %s' "$(docker image inspect -f '{{.Id}}' "${base_image}")" "$(ls "${debs}")" \
    "$(sha256sum <"${udpecho}")" | hash_of
}
services_hash="$(services_stamp)"
if ! ls "${debs}"/docker-registry_*.deb "${debs}"/busybox_*.deb >/dev/null 2>&1; then
  # apt-get download writes to the current directory.
  (cd "${debs}" && run_logged apt-download apt-get download docker-registry busybox)
  services_hash="$(services_stamp)"
fi
if ! image_fresh "${SERVICES_IMAGE}" "${services_hash}"; then
  tmp="$(mktemp -d)"
  for d in "${debs}"/docker-registry_*.deb "${debs}"/busybox_*.deb; do dpkg-deb -x "${d}" "${tmp}"; done
  cid="$(docker create "${base_image}" /bin/true)"
  docker cp "${tmp}/usr/bin/docker-registry" "${cid}:/usr/local/bin/docker-registry"
  docker cp "${tmp}/bin/busybox" "${cid}:/usr/local/bin/busybox"
  docker cp "${udpecho}" "${cid}:/usr/local/bin/udpecho"
  docker commit --change "ENV ${PATH_ENV}" --change "LABEL kps.stamp=${services_hash}" "${cid}" "${SERVICES_IMAGE}" >/dev/null
  docker rm -f "${cid}" >/dev/null
  rm -rf "${tmp}"
  log "image ${SERVICES_IMAGE}"
fi

# --- 5. the hosts' image
rootfs="$("${REPO_ROOT}/hack/kind/build.sh" rootfs ks-host "${HOST_PACKAGES}")"
KIND_FILES="$(cd "${REPO_ROOT}/hack/tools/kind" && go list -m -f '{{.Dir}}' sigs.k8s.io/kind)/images/base/files"
host_hash="$(
  {
    printf '%s %s\n' "${HOST_RECIPE}" "$(cat "${CACHE_DIR}/kind/stamps/rootfs-ks-host")"
    cat "${KIND_FILES}/usr/local/bin/entrypoint"
  } | hash_of
)"
if ! image_fresh "${HOST_IMAGE}" "${host_hash}"; then
  start=${SECONDS}
  root="${KS_DIR}/host-root"
  rm -rf "${root}"
  cp -a "${rootfs}" "${root}"
  # kind's node entrypoint: cgroup v1 nesting, shared mounts, machine id,
  # product uuid, the iptables flavour; its DNS lookup of
  # host.docker.internal confined to /etc/hosts (hack/kind/build.sh).
  install -m 0755 "${KIND_FILES}/usr/local/bin/entrypoint" "${root}/usr/local/bin/entrypoint"
  sed -i "s#getent ahostsv4 'host.docker.internal'#getent -s files ahostsv4 'host.docker.internal'#" "${root}/usr/local/bin/entrypoint"
  grep -q "getent -s files ahostsv4 'host.docker.internal'" "${root}/usr/local/bin/entrypoint" ||
    die "kind's entrypoint changed shape: the host.docker.internal lookup was not confined to /etc/hosts"
  mkdir -p "${root}/kind"
  # A new machine id per container (the entrypoint makes one when absent).
  rm -f "${root}/etc/machine-id" "${root}/var/lib/dbus/machine-id"
  # systemd in a container: no consoles, no timers that reach out, no udev.
  for unit in getty@tty1.service console-getty.service systemd-udevd.service systemd-udev-trigger.service \
    apt-daily.timer apt-daily-upgrade.timer e2scrub_all.timer e2scrub_reap.service systemd-timesyncd.service \
    systemd-binfmt.service; do
    ln -sf /dev/null "${root}/etc/systemd/system/${unit}"
  done
  echo "ReadKMsg=no" >>"${root}/etc/systemd/journald.conf"
  # sshd: keys only (the run mounts the public key as root's authorized_keys).
  printf 'PermitRootLogin prohibit-password\nPasswordAuthentication no\nUseDNS no\n' >"${root}/etc/ssh/sshd_config.d/kps.conf"
  run_logged host-enable chroot "${root}" systemctl enable ssh.service
  tar --numeric-owner --xattrs -C "${root}" -c . |
    docker import --change 'ENV container=docker' --change "ENV ${PATH_ENV}" \
      --change 'ENTRYPOINT ["/usr/local/bin/entrypoint", "/sbin/init"]' - "${HOST_IMAGE}-rootfs" >/dev/null
  # docker import cannot set STOPSIGNAL: a metadata-only build on the local image.
  printf 'FROM %s\nSTOPSIGNAL SIGRTMIN+3\nLABEL kps.stamp=%s\n' "${HOST_IMAGE}-rootfs" "${host_hash}" |
    DOCKER_BUILDKIT=0 docker build -q -t "${HOST_IMAGE}" - >"${LOGS}/docker-build-host.log" 2>&1
  docker rmi "${HOST_IMAGE}-rootfs" >/dev/null
  rm -rf "${root}"
  log "image ${HOST_IMAGE} in $((SECONDS - start))s"
fi
log "kubespray artifacts ready in ${KS_DIR#"${REPO_ROOT}/"}"
