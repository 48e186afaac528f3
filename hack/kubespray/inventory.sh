#!/usr/bin/env bash
# Writes a kubespray inventory for the hosts of hack/kubespray/hosts.sh up:
#
#   hack/kubespray/inventory.sh DIR unpatched|toolfree|tool
#
#   DIR/hosts.yaml                    the first CONTROL_PLANES hosts
#                                     (hosts.env) as control planes and etcd,
#                                     the others as workers
#   DIR/group_vars/all/artifacts.yml  .cache/kubespray/files.yml (versions,
#                                     download URLs, checksums)
#   DIR/group_vars/all/offline.yml    files_repo, registry_host, and what
#                                     kubespray needs to run in containers
#   DIR/kps-cni.yaml.j2               the project's pod network
#                                     (hack/kind/cni) as custom_cni_manifests
#
# tool (docs/kubespray/0001..0004) also writes
#
#   DIR/group_vars/all/kube-proxy-sync.yml
#                                     kube_proxy_rollout_method:
#                                     kube-proxy-sync, and
#                                     kube_proxy_sync_download_url as 0004's
#                                     offline.yml has it, under files_repo
#   DIR/kube-proxy-sync-checksums.yml dist/release/checksums.yml (make
#                                     release) as it is: the sha256 of this
#                                     checkout's build, for hack/kubespray/run.sh
#                                     to pass as extra vars (-e @FILE): 0004
#                                     pins kube_proxy_sync_binary_checksums in
#                                     kubespray's checksums.yml, role vars
#                                     (roles/kubespray_defaults/vars), which
#                                     no group_vars of an inventory override
#
# and checks that the file server has the amd64 binary where that URL points,
# with that sha256 (hack/kubespray/run.sh's release step puts it there).
#
#   hack/kubespray/inventory.sh binary-path
#
# prints where under files_repo that URL points for the amd64 binary of this
# checkout's version (galaxy.yml's).
# KS_LB=nginx or haproxy: kubespray's local API server load balancer on every
# node. KS_DNS=coredns: kubespray's dns_mode: coredns, without nodelocaldns
# and the DNS autoscaler, forwarding what is not the cluster's to the file
# server (which answers no DNS), so that no query leaves the tier's network.
set -euo pipefail
# shellcheck source=hack/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"

KS_DIR="${CACHE_DIR}/kubespray"
RELEASE="${REPO_ROOT}/dist/release"

# offline_url: the offline kube_proxy_sync_download_url 0004 adds to
# kubespray's inventory/sample offline.yml (the upstream release URL under
# {{ files_repo }}), quoted as there.
offline_url() {
  local url
  url="$(sed -n 's/^+# kube_proxy_sync_download_url: //p' "${REPO_ROOT}"/docs/kubespray/0*.patch)"
  [[ "${url}" == '"{{ files_repo }}/'*'"' && "${url}" != *$'\n'* ]] ||
    die "docs/kubespray/0*.patch: not one offline kube_proxy_sync_download_url under files_repo (0004's offline.yml), found: '${url}'"
  printf '%s\n' "${url}"
}

# binary_path: where offline_url points under files_repo for the amd64
# binary of this checkout's version.
binary_path() {
  local url path
  url="$(offline_url)"
  path="${url#'"{{ files_repo }}/'}"
  path="${path%'"'}"
  path="${path//"{{ kube_proxy_sync_version }}"/$(kps_version)}"
  path="${path//"{{ image_arch }}"/amd64}"
  [[ "${path}" != *"{{"* ]] ||
    die "0004's offline kube_proxy_sync_download_url names more than files_repo, the version and image_arch: ${url}"
  printf '%s\n' "${path}"
}
if [[ "${1:-}" == binary-path ]]; then
  binary_path
  exit 0
fi

dir="${1:-}" mode="${2:-}"
[[ -n "${dir}" && ("${mode}" == unpatched || "${mode}" == toolfree || "${mode}" == tool) ]] ||
  die "usage: hack/kubespray/inventory.sh DIR unpatched|toolfree|tool, or hack/kubespray/inventory.sh binary-path"
[[ -f "${KS_DIR}/hosts.env" ]] || die "no ${KS_DIR#"${REPO_ROOT}/"}/hosts.env: run hack/kubespray/hosts.sh up first"

files_repo="" registry_host="" ssh_key="" nofile="" control_planes=1 names=() ips=()
while IFS='=' read -r key value; do
  case "${key}" in
    FILES_REPO) files_repo="${value}" ;;
    REGISTRY_HOST) registry_host="${value}" ;;
    SSH_KEY) ssh_key="${value}" ;;
    NOFILE) nofile="${value}" ;;
    CONTROL_PLANES) control_planes="${value}" ;;
    HOST)
      names+=("${value%% *}")
      ips+=("${value#* }")
      ;;
  esac
done <"${KS_DIR}/hosts.env"
((${#names[@]} >= 1)) || die "hosts.env names no host"
[[ "${control_planes}" =~ ^[13]$ ]] && ((control_planes <= ${#names[@]})) ||
  die "hosts.env: CONTROL_PLANES must be 1 or 3 and at most the hosts (${#names[@]}), got '${control_planes}'"
[[ "${nofile}" =~ ^[0-9]+$ ]] || die "hosts.env has no NOFILE (the hosts' open-files limit)"

ks_lb
if [[ "${LB}" != none ]]; then
  lb_vars="# KS_LB=${LB}: kubespray's default layout, a local API server load
# balancer on every node (the image: hack/kubespray/build.sh, files.yml);
loadbalancer_apiserver_localhost: true
loadbalancer_apiserver_type: ${LB}"
else
  lb_vars="# no local load balancer (KS_LB=nginx or haproxy for one): workers talk
# to the control plane directly;
loadbalancer_apiserver_localhost: false"
fi
ks_dns
if [[ "${DNS}" == coredns ]]; then
  # the file server's address, without scheme or port: DNS goes to its port 53
  files_host="${files_repo#*://}"
  dns_vars="# KS_DNS=coredns: kubespray's CoreDNS (the image: hack/kubespray/build.sh,
# files.yml), the hosts' resolv.conf untouched; no nodelocaldns (its image,
# k8s.io/dns's node-cache, is not built here, and its link-local address
# takes pods' queries to a cache on their own node instead of through the
# kube-dns Service's rules) and no DNS autoscaler (its image,
# cluster-proportional-autoscaler, is not built here: CoreDNS runs
# kubespray's coredns_replicas); names outside the cluster domain go to the
# file server, which answers no DNS, so none of CoreDNS's queries leaves the
# tier's network (kubespray's default upstream, the hosts' resolv.conf,
# names Docker's resolver, which asks the machine's);
dns_mode: coredns
resolvconf_mode: none
enable_nodelocaldns: false
enable_dns_autoscaler: false
upstream_dns_servers: [\"${files_host%%:*}\"]"
else
  dns_vars="# no DNS server image: no CoreDNS, no nodelocaldns, resolv.conf untouched
# (KS_DNS=coredns for CoreDNS);
dns_mode: none
resolvconf_mode: none
enable_nodelocaldns: false
# and so no CoreDNS Deployment to scale down: upgrade-cluster.yml's \"Kubeadm |
# scale down coredns replicas to 0 if not using coredns dns_mode\" fails on it
# (deployments.apps \"coredns\" not found); only the upgrade reads this;
kubeadm_scale_down_coredns_enabled: false"
fi

rm -rf "${dir}"
mkdir -p "${dir}/group_vars/all"
{
  printf 'all:\n  hosts:\n'
  for i in "${!names[@]}"; do
    printf '    %s:\n      ansible_host: %s\n      ip: %s\n      access_ip: %s\n' \
      "${names[i]}" "${ips[i]}" "${ips[i]}" "${ips[i]}"
  done
  printf '  vars:\n    ansible_user: root\n    ansible_ssh_private_key_file: %s\n' "${ssh_key}"
  printf '  children:\n    kube_control_plane:\n      hosts:\n'
  for ((i = 0; i < control_planes; i++)); do printf '        %s:\n' "${names[i]}"; done
  printf '    etcd:\n      hosts:\n'
  for ((i = 0; i < control_planes; i++)); do printf '        %s:\n' "${names[i]}"; done
  printf '    kube_node:\n      hosts:\n'
  for i in "${!names[@]}"; do ((i < control_planes)) || printf '        %s:\n' "${names[i]}"; done
  printf '    k8s_cluster:\n      children:\n        kube_control_plane:\n        kube_node:\n'
} >"${dir}/hosts.yaml"

cp "${KS_DIR}/files.yml" "${dir}/group_vars/all/artifacts.yml"

# The project's pod network, templated by kubespray's custom_cni role: kind's
# markers and comments out, the image from registry_host, the API server
# given directly (kps-cni does not go through kube-proxy).
{
  grep -v '^#' "${REPO_ROOT}/hack/kind/cni/default-cni.yaml" |
    sed -e 's#image: kps.local/kps-cni:v1#image: "{{ registry_host }}/kps-cni:v1"#' \
      -e 's#imagePullPolicy: Never#imagePullPolicy: IfNotPresent#' \
      -e 's#"{{ .PodSubnet }}"#"{{ kube_pods_subnet }}"#' \
      -e "s#^          env:\$#          env:\\n            - name: CONTROL_PLANE_ENDPOINT\\n              value: \"${ips[0]}:6443\"#"
} >"${dir}/kps-cni.yaml.j2"
if ! grep -q 'CONTROL_PLANE_ENDPOINT' "${dir}/kps-cni.yaml.j2" || ! grep -q 'registry_host' "${dir}/kps-cni.yaml.j2"; then
  die "hack/kind/cni/default-cni.yaml changed shape: the kubespray manifest lacks the endpoint or the image"
fi

cat >"${dir}/group_vars/all/offline.yml" <<EOF
# Generated by hack/kubespray/inventory.sh (${mode}).
# Offline (docs/operations/offline-environment.md): every file from
# files_repo, every image from registry_host, both on the tier's network.
files_repo: "${files_repo}"
registry_host: "${registry_host}"
kube_image_repo: "{{ registry_host }}"
gcr_image_repo: "{{ registry_host }}"
github_image_repo: "{{ registry_host }}"
docker_image_repo: "{{ registry_host }}"
quay_image_repo: "{{ registry_host }}"
# The registry speaks plain HTTP.
containerd_registries_mirrors:
  - prefix: "{{ registry_host }}"
    mirrors:
      - host: "http://{{ registry_host }}"
        capabilities: ["pull", "resolve"]
        skip_verify: true
container_manager: containerd
etcd_deployment_type: host
download_run_once: false
download_localhost: false

# Containers as hosts:
# no IPVS in this kernel;
kube_proxy_mode: iptables
# nf_conntrack_max is read-only inside a container;
kube_proxy_conntrack_max_per_core: 0
# the machine runs cgroup v1;
kubelet_fail_cgroup_v1: false
# kubeadm's preflight checks (swap, kernel config, ...) fail in containers;
kubeadm_ignore_preflight_errors: ["all"]
${dns_vars}
${lb_vars}
# this VM cannot grant CAP_SYS_RESOURCE (hack/kind/runc-wrapper): no
# oom_score_adj below containerd's own, no open-files limit above the hosts'
# (kubespray's default, 65535, fails every container with "error setting
# rlimit type 7");
containerd_extra_runtime_args:
  restrict_oom_score_adj: true
containerd_base_runtime_spec_rlimit_nofile: ${nofile}
# the project's pod network, on kubespray's default pod and Service subnets
# (the file server routes the pods': hack/kubespray/hosts.sh).
kube_network_plugin: custom_cni
kube_pods_subnet: ${KS_POD_SUBNET}
kube_service_addresses: ${KS_SERVICE_SUBNET}
custom_cni_manifests:
  - "${dir}/kps-cni.yaml.j2"
EOF
if [[ "${mode}" == tool ]]; then
  version="$(kps_version)"
  [[ -f "${RELEASE}/checksums.yml" ]] || die "no dist/release/checksums.yml: run make release first"
  # checksums.yml: kube_proxy_sync_binary_checksums, ARCH:, VERSION: sha256:...
  sum="$(awk -v v="${version}:" '/^  [^ ]/ {arch = ($1 == "amd64:")} arch && $1 == v {print $2}' "${RELEASE}/checksums.yml")"
  [[ "${sum}" =~ ^sha256:[0-9a-f]{64}$ ]] ||
    die "dist/release/checksums.yml has no amd64 sha256 of ${version} (galaxy.yml's version): run make release again"
  binary="${KS_DIR}/files/$(binary_path)"
  [[ -f "${binary}" && "sha256:$(sha256sum <"${binary}" | cut -d' ' -f1)" == "${sum}" ]] ||
    die "the file server has no ${binary#"${REPO_ROOT}/"} with ${sum} (dist/release/checksums.yml): hack/kubespray/run.sh's release step puts it there"
  cat >"${dir}/group_vars/all/kube-proxy-sync.yml" <<EOF
# Generated by hack/kubespray/inventory.sh (tool): docs/kubespray/0004's
# opt-in, the binary of this checkout (make release) from files_repo, where
# the offline.yml 0004 adds has it. Its sha256: kube-proxy-sync-checksums.yml
# next to hosts.yaml, passed as extra vars.
kube_proxy_rollout_method: kube-proxy-sync
kube_proxy_sync_download_url: $(offline_url)
EOF
  {
    printf '# Generated by hack/kubespray/inventory.sh from dist/release/checksums.yml\n'
    printf "# (make release), for ansible-playbook -e @FILE: kubespray's checksums.yml\n"
    printf '# is role vars, above any group_vars.\n'
    cat "${RELEASE}/checksums.yml"
  } >"${dir}/kube-proxy-sync-checksums.yml"
fi
log "inventory ${dir#"${REPO_ROOT}/"} (${mode}): ${names[*]}"
