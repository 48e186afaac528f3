#!/usr/bin/env bash
# Counts (and drops) packets that would leave the kind cluster's docker
# network: a rule at the top of the host's DOCKER-USER chain for traffic
# coming in on the network's bridge and going out anywhere else. Every
# address the tests use is inside that network, so the count must stay 0.
# A rule in front of it logs such packets to the kernel log (at most 20 a
# minute), so a count above 0 can say where they went.
#
# The kubespray tier excuses one kind of packet from that rule: one from a
# host of its own to the cluster's own addresses (kubespray's pod and
# Service subnets), which no route leads to outside the network. Such a
# packet left a host whose rules or routes send it nowhere, as a service
# proxy's stale rules do; it is dropped, counted apart and logged with a
# prefix of its own (unrouted; at most 20 a minute for each source and
# CIDR), so that it is a figure, not a reach out.
#
#   hack/kind/egress.sh add NETWORK      install the rules (idempotent)
#   hack/kind/egress.sh unrouted NETWORK SOURCES CIDRS
#                                        in front of them, the excused rules
#                                        for packets from SOURCES to CIDRS
#                                        (each a comma-separated list;
#                                        idempotent)
#   hack/kind/egress.sh check NETWORK    exit 1, saying why, when the
#                                        counting rule is not in place
#                                        (count then prints 0 whatever left)
#   hack/kind/egress.sh count NETWORK [unrouted]
#                                        print the packets counted so far
#                                        (the excused ones apart)
#   hack/kind/egress.sh where NETWORK [unrouted]
#                                        print the ones logged: source,
#                                        destination, protocol, port
#   hack/kind/egress.sh remove NETWORK   remove the rules (idempotent)
set -euo pipefail
# shellcheck source=hack/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"

action="${1:-}" network="${2:-}"
usage="usage: hack/kind/egress.sh add|unrouted|check|count|where|remove NETWORK (see the script's head)"
[[ -n "${network}" ]] || die "${usage}"
shift 2
docker_env

bridge() {
  local id
  id="$(docker network inspect -f '{{.Id}}' "${network}" 2>/dev/null)" || return 1
  printf 'br-%s' "${id:0:12}"
}
comment() { printf 'kps-egress-%s' "${network}"; }
rule() { printf '%s\n' -i "$1" ! -o "$1" -m comment --comment "$(comment)" -j DROP; }
logged() { printf 'kps-egress-log-%s' "${network}"; }
prefix() { printf 'kps-egress-%s: ' "${network}"; }
log_rule() {
  printf '%s\n' -i "$1" ! -o "$1" -m comment --comment "$(logged)" -m limit --limit 20/minute --limit-burst 20 \
    -j LOG --log-prefix "$(prefix)"
}
# the excused ones: BRIDGE SOURCE CIDR; the kernel takes a log prefix of
# at most 29 characters
unrouted() { printf 'kps-egress-unrouted-%s' "${network}"; }
unrouted_logged() { printf 'kps-egress-unrouted-log-%s' "${network}"; }
unrouted_prefix() { printf '%.27s: ' "kps-unrouted-${network}"; }
unrouted_rule() { printf '%s\n' -i "$1" ! -o "$1" -s "$2" -d "$3" -m comment --comment "$(unrouted)" -j DROP; }
unrouted_log_rule() {
  printf '%s\n' -i "$1" ! -o "$1" -s "$2" -d "$3" -m comment --comment "$(unrouted_logged)" \
    -m limit --limit 20/minute --limit-burst 20 -j LOG --log-prefix "$(unrouted_prefix)"
}
# since_log PREFIX: the kernel log's lines with PREFIX since add, reduced to
# what says where
since_log() {
  local since
  since="$(cat "${CACHE_DIR}/kind/egress-since" 2>/dev/null || echo 0)"
  { dmesg 2>/dev/null || true; } | awk -v p="$1" -v since="${since}" 'index($0, p) {
      t = $0; sub(/^\[ */, "", t); sub(/\].*/, "", t)
      if (t + 0 < since + 0) next
      out = ""
      for (i = 1; i <= NF; i++) if ($i ~ /^(SRC|DST|PROTO|SPT|DPT)=/) out = out " " $i
      print substr(out, 2)
    }'
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
    ;;
  unrouted)
    [[ $# == 2 && -n "$1" && -n "$2" ]] || die "usage: hack/kind/egress.sh unrouted NETWORK SOURCES CIDRS (comma-separated lists)"
    br="$(bridge)" || die "no docker network '${network}'"
    iptables -L DOCKER-USER -n 2>/dev/null | grep -qF "/* $(comment) */" ||
      die "no counting rule for docker network '${network}': hack/kind/egress.sh add ${network} first"
    IFS=, read -ra sources <<<"$1"
    IFS=, read -ra cidrs <<<"$2"
    for src in "${sources[@]}"; do
      for cidr in "${cidrs[@]}"; do
        # each pair's LOG in front of its DROP, both in front of the rest
        mapfile -t u < <(unrouted_rule "${br}" "${src}" "${cidr}")
        iptables -C DOCKER-USER "${u[@]}" 2>/dev/null || iptables -I DOCKER-USER 1 "${u[@]}"
        mapfile -t ul < <(unrouted_log_rule "${br}" "${src}" "${cidr}")
        iptables -C DOCKER-USER "${ul[@]}" 2>/dev/null || iptables -I DOCKER-USER 1 "${ul[@]}"
      done
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
      *) die "${usage}" ;;
    esac
    iptables -L DOCKER-USER -v -x -n 2>/dev/null |
      awk -v c="${c}" 'index($0, "/* " c " */") {n += $1} END {print n + 0}'
    ;;
  where)
    case "${1:-}" in
      '') since_log "$(prefix)" ;;
      unrouted) since_log "$(unrouted_prefix)" ;;
      *) die "${usage}" ;;
    esac
    ;;
  remove)
    while read -r num; do
      iptables -D DOCKER-USER "${num}"
    done < <(iptables -L DOCKER-USER -n --line-numbers 2>/dev/null |
      awk -v c="$(comment)" -v l="$(logged)" -v u="$(unrouted)" -v ul="$(unrouted_logged)" '
        index($0, "/* " c " */") || index($0, "/* " l " */") || index($0, "/* " u " */") || index($0, "/* " ul " */") {
          print $1
        }' | sort -rn)
    ;;
  *) die "${usage}" ;;
esac
