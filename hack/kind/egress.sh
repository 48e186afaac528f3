#!/usr/bin/env bash
# Counts (and drops) packets that would leave the kind cluster's docker
# network: a rule at the top of the host's DOCKER-USER chain for traffic
# coming in on the network's bridge and going out anywhere else. Every
# address the tests use is inside that network, so the count must stay 0.
#
#   hack/kind/egress.sh add NETWORK      install the rule (idempotent)
#   hack/kind/egress.sh count NETWORK    print the packets counted so far
#   hack/kind/egress.sh remove NETWORK   remove the rule (idempotent)
set -euo pipefail
# shellcheck source=hack/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"

action="${1:-}" network="${2:-}"
[[ -n "${network}" ]] || die "usage: hack/kind/egress.sh add|count|remove NETWORK"
docker_env

bridge() {
  local id
  id="$(docker network inspect -f '{{.Id}}' "${network}" 2>/dev/null)" || return 1
  printf 'br-%s' "${id:0:12}"
}
comment() { printf 'kps-egress-%s' "${network}"; }
rule() { printf '%s\n' -i "$1" ! -o "$1" -m comment --comment "$(comment)" -j DROP; }

case "${action}" in
  add)
    br="$(bridge)" || die "no docker network '${network}'"
    iptables -N DOCKER-USER 2>/dev/null || true
    mapfile -t r < <(rule "${br}")
    iptables -C DOCKER-USER "${r[@]}" 2>/dev/null || iptables -I DOCKER-USER 1 "${r[@]}"
    ;;
  count)
    iptables -L DOCKER-USER -v -x -n 2>/dev/null |
      awk -v c="$(comment)" 'index($0, "/* " c " */") {n += $1} END {print n + 0}'
    ;;
  remove)
    while read -r num; do
      iptables -D DOCKER-USER "${num}"
    done < <(iptables -L DOCKER-USER -n --line-numbers 2>/dev/null |
      awk -v c="$(comment)" 'index($0, "/* " c " */") {print $1}' | sort -rn)
    ;;
  *) die "usage: hack/kind/egress.sh add|count|remove NETWORK" ;;
esac
