#!/usr/bin/env bash
# The refusals are not theoretical: each value of issue 12 that
# internal/kpvalidate refuses makes the real kube-proxy binary exit at
# start-up, and a value it accepts gets past kube-proxy's own checks. Uses
# the kube-proxy binaries the kind harness builds into .cache/bin
# (kube-proxy, kube-proxy-v1.27.16); skipped when there are none, except
# under CI=true or REALBINARY_REQUIRED=1, where that fails (make test runs it
# after hack/build/tools.sh kind has built them).
#
# Usage: hack/difftest/realbinary.sh
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"

dir="$(mktemp -d)"
trap 'rm -rf "${dir}"' EXIT
# kube-proxy reads the kubeconfig right after its own checks: a missing one
# stops an accepted config there, before it touches iptables or conntrack
header=$'apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\nclientConnection:\n  kubeconfig: '"${dir}"$'/no-such-kubeconfig\n'
failures=0
ran=0

# check BINARY WANT NAME BODY: WANT is "refused" or "accepted"
check() {
  local bin="$1" want="$2" name="$3" body="$4" out rc got
  printf '%s%s' "${header}" "${body}" >"${dir}/config.conf"
  set +e
  out="$(cd "${dir}" && timeout 10 "${bin}" --config=config.conf --hostname-override=difftest 2>&1)"
  rc=$?
  set -e
  got="neither refused nor past its checks"
  # (not "strict decoding error": kube-proxy logs that too when it goes on
  # with its lenient decoding)
  if grep -qE 'failed (validate|complete|to decode|lenient)|unrecognized feature gate' <<<"${out}"; then
    got=refused
  elif grep -q 'no-such-kubeconfig' <<<"${out}"; then
    got=accepted
  fi
  ran=$((ran + 1))
  if [[ "${got}" != "${want}" ]]; then
    failures=$((failures + 1))
    log "FAIL $(basename "${bin}") ${name}: ${got} (exit ${rc}), want ${want}: $(grep -m1 -E 'failed|error' <<<"${out}" || true)"
  else
    log "ok   $(basename "${bin}") ${name}: ${got} (exit ${rc})"
  fi
}

found=0
for bin in "${TOOLS_BIN}/kube-proxy" "${TOOLS_BIN}/kube-proxy-v1.27.16"; do
  [[ -x "${bin}" ]] || continue
  found=1
  check "${bin}" refused "conntrack.maxPerCore=-1" $'conntrack:\n  maxPerCore: -1\n'
  check "${bin}" refused "iptables.masqueradeBit=99" $'iptables:\n  masqueradeBit: 99\n'
  check "${bin}" refused "clusterCIDR=foo" $'clusterCIDR: foo\n'
  check "${bin}" refused "healthzBindAddress=:10256" $'healthzBindAddress: ":10256"\n'
  check "${bin}" refused "featureGates.NoSuchGate=true" $'featureGates:\n  NoSuchGate: true\n'
  check "${bin}" refused "ipvs.minSyncPeriod > ipvs.syncPeriod" $'mode: ipvs\nipvs:\n  syncPeriod: 30s\n  minSyncPeriod: 1m\n'
  check "${bin}" accepted "conntrack.maxPerCore=32768" $'conntrack:\n  maxPerCore: 32768\n'
  # kube-proxy's lenient fallback: unknown fields and keys given twice are
  # warnings, the last of a duplicate counts (internal/kpvalidate warns alike)
  check "${bin}" accepted "unknown field" $'bogus: 1\nipvs:\n  strictArp: true\n'
  check "${bin}" accepted "duplicate key" $'mode: foo\nmode: iptables\n'
  check "${bin}" refused "duplicate key, the last invalid" $'clusterCIDR: 10.0.0.0/8\nclusterCIDR: foo\n'
  check "${bin}" refused "unknown field and a wrong type" $'bogus: 1\nipvs:\n  strictARP: maybe\n'
done
if [[ -x "${TOOLS_BIN}/kube-proxy-v1.27.16" ]]; then
  check "${TOOLS_BIN}/kube-proxy-v1.27.16" refused "mode=nftables on 1.27" $'mode: nftables\n'
  # fields newer than 1.27 are dropped unread, whatever their values
  check "${TOOLS_BIN}/kube-proxy-v1.27.16" accepted "newer fields on 1.27" $'nftables:\n  masqueradeBit: 99\nlogging:\n  format: xml\nconntrack:\n  udpTimeout: soon\n'
fi
if [[ -x "${TOOLS_BIN}/kube-proxy" ]]; then
  check "${TOOLS_BIN}/kube-proxy" accepted "mode=nftables on 1.34" $'mode: nftables\n'
fi
if ((!found)); then
  if [[ "${CI:-}" == true || "${REALBINARY_REQUIRED:-0}" == 1 ]]; then
    die "no kube-proxy binary in ${TOOLS_BIN#"${REPO_ROOT}/"}: the check against the real kube-proxy cannot run (build them with hack/build/tools.sh kind)"
  fi
  log "no kube-proxy binary in ${TOOLS_BIN#"${REPO_ROOT}/"} (hack/build/tools.sh kind builds them): the check against the real kube-proxy is SKIPPED"
  exit 0
fi
((failures == 0)) || die "${failures} of ${ran} real kube-proxy checks did not go as internal/kpvalidate says"
log "the real kube-proxy agreed on all ${ran} checks"
