#!/usr/bin/env bash
# The kubespray tier's machines, on a docker network of their own:
#
#   hack/kubespray/hosts.sh up     file server (and a UDP echo server),
#                                  registry (images pushed),
#                                  the hosts (systemd + sshd) reachable over SSH:
#                                  KS_CONTROL_PLANES control planes (cp1...),
#                                  KS_WORKERS workers (w1...)
#   hack/kubespray/hosts.sh down   remove all of them and the network;
#                                  report packets that tried to leave it
#                                  (exit 1 if any did but a host's to the
#                                  pod or Service subnet: hack/kind/egress.sh)
#
# up writes .cache/kubespray/hosts.env (names, addresses, files_repo, the
# file server's UDP echo port, registry_host) for hack/kubespray/inventory.sh
# and run.sh. Everything carries the label kps.kubespray, which down removes
# by. Needs hack/kubespray/build.sh first and the Docker engine
# hack/kind/docker.sh chose.
#
# Environment: KS_NETWORK (default kps-kubespray), KS_PREFIX (default kps-ks),
# KS_CONTROL_PLANES (1 or 3, default 1), KS_WORKERS (default 2).
set -euo pipefail
# shellcheck source=hack/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"

KS_DIR="${CACHE_DIR}/kubespray"
KS_NETWORK="${KS_NETWORK:-kps-kubespray}"
KS_PREFIX="${KS_PREFIX:-kps-ks}"
KS_WORKERS="${KS_WORKERS:-2}"
KS_CONTROL_PLANES="${KS_CONTROL_PLANES:-1}"
HOST_IMAGE="kps.local/ks-host:${DEBIAN_SUITE}"
SERVICES_IMAGE="kps.local/ks-services:${DEBIAN_SUITE}"
LABEL="kps.kubespray=${KS_NETWORK}"
SSH_KEY="${KS_DIR}/ssh/id_ed25519"
# the file server's UDP echo port (run.sh's traffic prober); not 53, which
# a host's resolver might claim
UDP_ECHO_PORT=5353
[[ "${KS_WORKERS}" =~ ^[0-9]$ ]] || die "KS_WORKERS must be 0..9, got '${KS_WORKERS}'"
# etcd runs on the control planes: an odd number keeps its quorum
[[ "${KS_CONTROL_PLANES}" == 1 || "${KS_CONTROL_PLANES}" == 3 ]] || die "KS_CONTROL_PLANES must be 1 or 3, got '${KS_CONTROL_PLANES}'"
docker_env

ip_of() { docker inspect -f "{{(index .NetworkSettings.Networks \"${KS_NETWORK}\").IPAddress}}" "$1"; }

# ssh_host IP CMD...: a command on a host as root, with the tier's key.
ssh_host() {
  local ip="$1"
  shift
  ssh -i "${SSH_KEY}" -o BatchMode=yes -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null \
    -o LogLevel=ERROR -o ConnectTimeout=5 "root@${ip}" "$@"
}

down() {
  docker info >/dev/null 2>&1 || return 0
  local egress=0 unrouted=0 ids
  if docker network inspect "${KS_NETWORK}" >/dev/null 2>&1; then
    egress="$("${REPO_ROOT}/hack/kind/egress.sh" count "${KS_NETWORK}")"
    unrouted="$("${REPO_ROOT}/hack/kind/egress.sh" count "${KS_NETWORK}" unrouted)"
    "${REPO_ROOT}/hack/kind/egress.sh" remove "${KS_NETWORK}"
  fi
  ids="$(docker ps -aq --filter "label=${LABEL}")"
  if [[ -n "${ids}" ]]; then
    log "removing $(wc -w <<<"${ids}") containers (${KS_PREFIX}-*)"
    # -v: the hosts' anonymous /var volumes go with them.
    # shellcheck disable=SC2086 # one id a word
    docker rm -f -v ${ids} >/dev/null
  fi
  docker network rm "${KS_NETWORK}" >/dev/null 2>&1 || true
  rm -f "${KS_DIR}/hosts.env"
  log "packets that tried to leave the ${KS_NETWORK} network: $((egress + unrouted)), of them from a host to the cluster's pod or Service addresses: ${unrouted}"
  [[ "${egress}" == 0 ]]
}

up() {
  [[ -f "${KS_DIR}/images.txt" && -f "${KS_DIR}/files.yml" ]] || die "no artifacts: run hack/kubespray/build.sh first"
  docker image inspect "${HOST_IMAGE}" "${SERVICES_IMAGE}" >/dev/null || die "missing images: run hack/kubespray/build.sh first"
  mkdir -p "${KS_DIR}/ssh"
  [[ -f "${SSH_KEY}" ]] || ssh-keygen -q -t ed25519 -N '' -C kps-kubespray -f "${SSH_KEY}"

  if ! docker network inspect "${KS_NETWORK}" >/dev/null 2>&1; then
    docker network create --label "${LABEL}" "${KS_NETWORK}" >/dev/null
  fi
  "${REPO_ROOT}/hack/kind/egress.sh" add "${KS_NETWORK}"
  local common=(--detach --network "${KS_NETWORK}" --label "${LABEL}" --pull never)

  # files_repo: busybox httpd over .cache/kubespray/files, read-only; beside
  # it, on UDP_ECHO_PORT, udpecho (hack/kubespray/udpecho), the UDP endpoint
  # of run.sh's traffic prober. Should udpecho not start, httpd still
  # serves: the prober then reports UDP as unanswered.
  docker run "${common[@]}" --name "${KS_PREFIX}-files" \
    -v "${KS_DIR}/files:/srv:ro" "${SERVICES_IMAGE}" \
    sh -c 'udpecho -listen ":$1" & exec busybox httpd -f -p 80 -h /srv' sh "${UDP_ECHO_PORT}" >/dev/null
  # registry_host: Debian's docker-registry, plain HTTP, storage inside the
  # container (pushed anew at each up). Published on loopback only, for the
  # engine's pushes.
  printf 'version: 0.1\nstorage:\n  filesystem:\n    rootdirectory: /var/lib/registry\nhttp:\n  addr: :5000\n' >"${KS_DIR}/registry.yml"
  docker run "${common[@]}" --name "${KS_PREFIX}-registry" -p 127.0.0.1::5000 \
    -v "${KS_DIR}/registry.yml:/etc/registry.yml:ro" "${SERVICES_IMAGE}" docker-registry serve /etc/registry.yml >/dev/null
  local port deadline
  port="$(docker port "${KS_PREFIX}-registry" 5000/tcp | head -n1)"
  port="${port##*:}"
  deadline=$((SECONDS + 30))
  until curl -fsS "http://127.0.0.1:${port}/v2/" >/dev/null 2>&1; do
    ((SECONDS < deadline)) || { docker logs "${KS_PREFIX}-registry" 2>&1 | tail -n 20 >&2; die "the registry did not answer within 30s"; }
    sleep 0.3
  done
  local start=${SECONDS} local_name name
  while read -r local_name name; do
    docker tag "${local_name}" "127.0.0.1:${port}/${name}"
    docker push -q "127.0.0.1:${port}/${name}" >"${KS_DIR}/logs/push.log" 2>&1 ||
      { cat "${KS_DIR}/logs/push.log" >&2; die "docker push ${name} failed"; }
    docker rmi "127.0.0.1:${port}/${name}" >/dev/null
  done <"${KS_DIR}/images.txt"
  log "registry: $(wc -l <"${KS_DIR}/images.txt") images pushed in $((SECONDS - start))s"

  # The hosts: what kind runs its nodes with.
  local hosts=() i h
  for ((i = 1; i <= KS_CONTROL_PLANES; i++)); do hosts+=("${KS_PREFIX}-cp${i}"); done
  for ((i = 1; i <= KS_WORKERS; i++)); do hosts+=("${KS_PREFIX}-w${i}"); done
  start=${SECONDS}
  for h in "${hosts[@]}"; do
    docker run "${common[@]}" --name "${h}" --hostname "${h}" --privileged \
      --security-opt seccomp=unconfined --security-opt apparmor=unconfined \
      --tmpfs /tmp --tmpfs /run --volume /var --volume /lib/modules:/lib/modules:ro \
      -v "${SSH_KEY}.pub:/root/.ssh/authorized_keys:ro" "${HOST_IMAGE}" >/dev/null
  done
  {
    printf 'FILES_REPO=http://%s\n' "$(ip_of "${KS_PREFIX}-files")"
    printf 'UDP_ECHO_PORT=%s\n' "${UDP_ECHO_PORT}"
    printf 'REGISTRY_HOST=%s:5000\n' "$(ip_of "${KS_PREFIX}-registry")"
    printf 'SSH_KEY=%s\n' "${SSH_KEY}"
    printf 'CONTROL_PLANES=%s\n' "${KS_CONTROL_PLANES}"
    for h in "${hosts[@]}"; do printf 'HOST=%s %s\n' "${h}" "$(ip_of "${h}")"; done
  } >"${KS_DIR}/hosts.env"
  # a host's packet to the cluster's own addresses that leaves the network
  # (its rules send it where no route leads: a service proxy's stale rules)
  # is counted apart, as a figure; any other still fails egress
  "${REPO_ROOT}/hack/kind/egress.sh" unrouted "${KS_NETWORK}" \
    "$(sed -n 's/^HOST=[^ ]* //p' "${KS_DIR}/hosts.env" | paste -sd,)" "${KS_POD_SUBNET},${KS_SERVICE_SUBNET}"
  # The pod network masquerades nothing (hack/kind/cni/kps-cni): a pod's
  # packet to the file server, CoreDNS's upstream (KS_DNS=coredns), keeps
  # the pod's address, and the file server would send its answer (an ICMP
  # port unreachable: it serves no DNS) to Docker's gateway, out of the
  # tier's network, where the egress rule drops and counts it (the file
  # server is no host: its packets are not excused). So the file
  # server routes the pod subnet through the first host, which routes each
  # node's podCIDR.
  nsenter -t "$(docker inspect -f '{{.State.Pid}}' "${KS_PREFIX}-files")" -n \
    ip route replace "${KS_POD_SUBNET}" via "$(ip_of "${hosts[0]}")" ||
    die "the file server's route to the pod subnet ${KS_POD_SUBNET} could not be set (nsenter, as root)"
  deadline=$((SECONDS + 120))
  for h in "${hosts[@]}"; do
    until ssh_host "$(ip_of "${h}")" timeout 30 systemctl is-system-running --wait >/dev/null 2>&1 ||
      [[ "$(ssh_host "$(ip_of "${h}")" systemctl is-system-running 2>/dev/null)" == degraded ]]; do
      ((SECONDS < deadline)) || { docker logs "${h}" 2>&1 | tail -n 20 >&2; die "${h} did not boot to a running systemd reachable over SSH within 120s"; }
      sleep 1
    done
  done
  # The open-files limit the hosts' processes get from the engine: kubespray's
  # base runtime spec must not ask for more (a container without
  # CAP_SYS_RESOURCE cannot raise it).
  printf 'NOFILE=%s\n' "$(ssh_host "$(ip_of "${hosts[0]}")" ulimit -Hn)" >>"${KS_DIR}/hosts.env"
  log "hosts up in $((SECONDS - start))s: ${hosts[*]} (SSH as root with ${SSH_KEY#"${REPO_ROOT}/"})"
}

case "${1:-}" in
  up) up ;;
  down) down ;;
  *) die "usage: hack/kubespray/hosts.sh up|down" ;;
esac
