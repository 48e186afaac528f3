#!/usr/bin/env bash
# Counts (and drops) packets that would leave the kind cluster's docker
# network: a rule at the top of the host's DOCKER-USER chain for traffic
# coming in on the network's bridge and going out anywhere else. Every
# address the tests use is inside that network, so the count must stay 0.
# A rule in front of it logs such packets to the kernel log (at most 20 a
# minute), so a count above 0 can say where they went.
#
# CIDR...: the cluster's own address ranges that no route leads to outside
# the network (kubespray's pod and Service subnets). A packet to one of them
# that leaves the bridge comes from a host whose service proxy or routes are
# out of date; it is dropped and counted apart (count NETWORK unrouted), in
# front of the logging rule, so that the log keeps the other ones.
#
#   hack/kind/egress.sh add NETWORK [CIDR...]
#                                        install the rules (idempotent)
#   hack/kind/egress.sh check NETWORK    exit 1, saying why, when the
#                                        counting rule is not in place
#                                        (count then prints 0 whatever left)
#   hack/kind/egress.sh count NETWORK    print the packets counted so far,
#                                        but those to a CIDR
#   hack/kind/egress.sh count NETWORK unrouted
#                                        print those to a CIDR
#   hack/kind/egress.sh where NETWORK    print the ones logged: source,
#                                        destination, protocol, port
#   hack/kind/egress.sh remove NETWORK   remove the rules (idempotent)
set -euo pipefail
# shellcheck source=hack/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"

action="${1:-}" network="${2:-}"
[[ -n "${network}" ]] || die "usage: hack/kind/egress.sh add|check|count|where|remove NETWORK"
shift 2
docker_env

bridge() {
  local id
  id="$(docker network inspect -f '{{.Id}}' "${network}" 2>/dev/null)" || return 1
  printf 'br-%s' "${id:0:12}"
}
comment() { printf 'kps-egress-%s' "${network}"; }
rule() { printf '%s\n' -i "$1" ! -o "$1" -m comment --comment "$(comment)" -j DROP; }
unrouted() { printf 'kps-egress-unrouted-%s' "${network}"; }
unrouted_rule() { printf '%s\n' -i "$1" ! -o "$1" -d "$2" -m comment --comment "$(unrouted)" -j DROP; }
logged() { printf 'kps-egress-log-%s' "${network}"; }
prefix() { printf 'kps-egress-%s: ' "${network}"; }
log_rule() {
  printf '%s\n' -i "$1" ! -o "$1" -m comment --comment "$(logged)" -m limit --limit 20/minute --limit-burst 20 \
    -j LOG --log-prefix "$(prefix)"
}

case "${action}" in
  add)
    br="$(bridge)" || die "no docker network '${network}'"
    iptables -N DOCKER-USER 2>/dev/null || true
    mapfile -t r < <(rule "${br}")
    iptables -C DOCKER-USER "${r[@]}" 2>/dev/null || iptables -I DOCKER-USER 1 "${r[@]}"
    # the kernel log's lines from now on are this cluster's
    mkdir -p "${CACHE_DIR}/kind"
    cut -d' ' -f1 /proc/uptime >"${CACHE_DIR}/kind/egress-since"
    mapfile -t l < <(log_rule "${br}")
    iptables -C DOCKER-USER "${l[@]}" 2>/dev/null || iptables -I DOCKER-USER 1 "${l[@]}"
    for cidr in "$@"; do
      mapfile -t u < <(unrouted_rule "${br}" "${cidr}")
      iptables -C DOCKER-USER "${u[@]}" 2>/dev/null || iptables -I DOCKER-USER 1 "${u[@]}"
    done
    ;;
  check)
    rules="$(iptables -L DOCKER-USER -n 2>&1)" ||
      die "cannot list the host's DOCKER-USER chain (iptables -L DOCKER-USER: ${rules}): the packets that leave docker network '${network}' are not counted; make kind-up installs the rule, as root"
    [[ "${rules}" == *"/* $(comment) */"* ]] ||
      die "no rule in the host's DOCKER-USER chain counts the packets that leave docker network '${network}': make kind-up installs it (hack/kind/egress.sh add ${network}, as root)"
    ;;
  count)
    case "${1:-}" in
      '') c="$(comment)" ;;
      unrouted) c="$(unrouted)" ;;
      *) die "usage: hack/kind/egress.sh count NETWORK [unrouted]" ;;
    esac
    iptables -L DOCKER-USER -v -x -n 2>/dev/null |
      awk -v c="${c}" 'index($0, "/* " c " */") {n += $1} END {print n + 0}'
    ;;
  where)
    # the kernel log's lines of the LOG rule since add, reduced to what
    # says where
    since="$(cat "${CACHE_DIR}/kind/egress-since" 2>/dev/null || echo 0)"
    { dmesg 2>/dev/null || true; } | awk -v p="$(prefix)" -v since="${since}" 'index($0, p) {
        t = $0; sub(/^\[ */, "", t); sub(/\].*/, "", t)
        if (t + 0 < since + 0) next
        out = ""
        for (i = 1; i <= NF; i++) if ($i ~ /^(SRC|DST|PROTO|SPT|DPT)=/) out = out " " $i
        print substr(out, 2)
      }'
    ;;
  remove)
    while read -r num; do
      iptables -D DOCKER-USER "${num}"
    done < <(iptables -L DOCKER-USER -n --line-numbers 2>/dev/null |
      awk -v c="$(comment)" -v l="$(logged)" -v u="$(unrouted)" '
        index($0, "/* " c " */") || index($0, "/* " l " */") || index($0, "/* " u " */") {print $1}' | sort -rn)
    ;;
  *) die "usage: hack/kind/egress.sh add|check|count|where|remove NETWORK" ;;
esac
