#!/usr/bin/env bash
# What `make test` and CI run: the builds both tiers need, then the kind
# tier in the background (its cluster, the real-node tests, molecule's kind
# scenario, then the differential test) beside lint, unit tests, Ansible
# lint and sanity, and the kwok tier (e2e tests, a small benchmark, molecule
# default and kubespray); every cluster is brought down at the end, also
# when something failed.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
cd "${REPO_ROOT}"
export E2E_REQUIRED=1

step() { printf '\n==== %s\n' "$*" >&2; }

# With KUBECONFIG set, make test runs one tier on that cluster (below); CI
# must run everything, so it refuses before spending an hour.
if [[ "${CI:-}" == true && -n "${KUBECONFIG:-}" ]]; then
  die "KUBECONFIG is set (${KUBECONFIG}): make test would run one tier on that cluster and skip the other, the molecule scenarios and the benchmark; CI runs both tiers on clusters of its own, so unset KUBECONFIG"
fi

# The kind tier's Debian root filesystems (debootstrap) are network- and
# disk-bound: made in the background, in a session of their own, beside the
# CPU-bound Go builds below. The kind step waits for them (and the node
# image build takes the same lock). The Docker engine is not started here:
# hack/kind/docker.sh checks it with the pause binary the kind tools build.
bg_pid=""
bg_log="${CACHE_DIR}/kind/logs/prepare-background.log"
bg_stop() {
  if [[ -n "${bg_pid}" ]]; then
    kill -- "-${bg_pid}" 2>/dev/null || true
  fi
}
if [[ -z "${KUBECONFIG:-}" ]]; then
  mkdir -p "$(dirname "${bg_log}")"
  setsid hack/kind/build.sh rootfs >"${bg_log}" 2>&1 </dev/null &
  bg_pid=$!
  trap bg_stop EXIT
fi

# What both tiers and the molecule scenarios run on, built first: the
# Ansible toolchains, the Go binaries of both clusters (kind's node image
# takes the control plane's too) and the release. On a cold machine these
# builds are most of CI's first half hour; the kind tier, the longest chain
# (its cluster, then a suite that mostly waits on real rollouts, then its
# molecule scenario), starts as soon as they are done, and the checks below
# run beside it.
step "Ansible toolchains (${ANSIBLE_TOOLCHAINS})"
hack/build/venv.sh
cp_tools=", the local control plane (hack/build/tools.sh)"
[[ -z "${KUBECONFIG:-}" ]] || cp_tools="; not the local control plane's, KUBECONFIG is set"
step "the binaries: kubeadm, kubelet, kube-proxy and kind (hack/build/tools.sh kind)${cp_tools}"
hack/build/tools.sh kind
[[ -n "${KUBECONFIG:-}" ]] || hack/build/tools.sh
step "build the binary and the release (make release: the size budget, the collection's modules and tarball, the bare binaries, SHA256SUMS, kubespray's checksums.yml lines)"
make --no-print-directory build
hack/build/release.sh
hack/verify/release.sh
step "differential test against the real kube-proxy binaries"
REALBINARY_REQUIRED=1 hack/difftest/realbinary.sh

# checks: lint, generated files, unit tests, Ansible lint and sanity; the
# same with or without a cluster of the user's. The differential test
# (hack/ci/difftest.sh) runs in the kind tier's lane once its cluster is
# down (below), or after these with a cluster of the user's.
checks() {
  step "go lint"
  hack/verify/lint-go.sh
  step "generated files up to date, one version (make verify)"
  hack/verify/generated.sh
  hack/verify/version.sh
  step "unit tests"
  go test -short -count=1 ./...
  # the crash tests' pause hook exists only in a testhooks build
  go test -short -count=1 -tags testhooks ./internal/app/
  step "the kubespray tier's measurements (hack/kubespray/measure_test.py; the tier itself is make test-kubespray)"
  "$(venv_dir "${ANSIBLE_TOOLCHAINS##* }")/bin/python" -m unittest discover -s hack/kubespray -p '*_test.py'
  step "the check that roles read only their own variables (hack/verify/role_vars_test.py)"
  "$(venv_dir "${ANSIBLE_TOOLCHAINS##* }")/bin/python" -m unittest discover -s hack/verify -p '*_test.py'
  step "ansible lint"
  hack/verify/lint-ansible.sh
  step "ansible-test sanity on the collection"
  hack/verify/sanity.sh
}

# The kwok tier: scale and API behaviour, on a local control plane whose
# nodes are fake (kwok marks every pod Ready whatever its probe or config).
if [[ -n "${KUBECONFIG:-}" ]]; then
  # A cluster of the user's: the tier that fits its nodes (the kwok suite
  # writes made-up server addresses and refuses real nodes).
  kubectl_bin="${TOOLS_BIN}/kubectl"
  [[ -x "${kubectl_bin}" ]] || kubectl_bin="kubectl"
  checks
  hack/ci/difftest.sh
  if [[ -n "$("${kubectl_bin}" get nodes -l 'type!=kwok' -o name)" ]]; then
    step "real-node e2e tests against KUBECONFIG"
    hack/test/e2e-real.sh
    skipped="the kwok tier (test/e2e), the molecule scenarios, the benchmark"
  else
    step "e2e tests against KUBECONFIG"
    hack/test/e2e.sh
    skipped="the real-node tier (test/realnode), the molecule scenarios, the benchmark"
  fi
  step "green on KUBECONFIG's cluster; NOT run: ${skipped} (unset KUBECONFIG for everything)"
  exit 0
fi
# The real tier: real kubelets and a real kube-proxy in a kind cluster,
# built offline; then the molecule kind scenario on that cluster, on the
# newest toolchain only (the default scenario covers both; each kind run
# rolls real kube-proxies). Everything promised about kube-proxy itself is
# shown here. It runs in the background, beside the checks and the kwok
# tier below: its suite mostly waits (kubelets stopped until their nodes go
# NotReady, real rollouts), so the two share the cores with little loss, and
# CI's time is the longer of them rather than their sum. Once its cluster
# is down, the same lane runs the differential test (CPU only, no cluster),
# which would otherwise lengthen the kwok lane, the longer one cold. Its log
# follows once the kwok tier is done.
step "kind cluster, the real-node e2e tests, the molecule kind scenario and the differential test, in the background"
if [[ -n "${bg_pid}" ]]; then
  # the root filesystems, made since the start
  if ! wait "${bg_pid}"; then
    tail -n 30 "${bg_log}" >&2
    die "preparing the kind tier in the background failed (log: ${bg_log#"${REPO_ROOT}/"})"
  fi
  bg_pid=""
fi
real_log="${CACHE_DIR}/kind/logs/real-node-tier.log"
mkdir -p "$(dirname "${real_log}")"
# in a session of its own, so that stopping it stops its tests and tools
# shellcheck disable=SC2016
setsid bash -c '
  set -euo pipefail
  printf "\n==== kind cluster\n" >&2
  hack/kind/up.sh
  printf "\n==== real-node e2e tests\n" >&2
  KUBECONFIG="$1/kind/kubeconfig" hack/test/e2e-real.sh
  printf "\n==== molecule kind scenario (newest)\n" >&2
  ANSIBLE_TOOLCHAINS=newest hack/test/molecule.sh kind
  printf "\n==== kind down\n" >&2
  hack/kind/down.sh
  hack/ci/difftest.sh
' kind-tier "${CACHE_DIR}" >"${real_log}" 2>&1 </dev/null &
real_pid=$!
real_stop() {
  if [[ -n "${real_pid}" ]]; then
    kill -- "-${real_pid}" 2>/dev/null || true
    wait "${real_pid}" 2>/dev/null || true
    # stopped by a failure here: how far it got
    step "the kind tier, stopped (the end of ${real_log#"${REPO_ROOT}/"}):"
    tail -n 40 "${real_log}" >&2 || true
  fi
}
trap 'real_stop; step "cluster down"; hack/cluster/down.sh; step "kind down"; hack/kind/down.sh' EXIT

checks

step "local control plane"
hack/cluster/up.sh
step "e2e tests"
hack/test/e2e.sh
if [[ -x hack/test/bench.sh ]]; then
  step "benchmark, small"
  BENCH_SMALL=1 hack/test/bench.sh
fi
step "molecule default scenario (${ANSIBLE_TOOLCHAINS})"
hack/test/molecule.sh default
# kubespray's play layout and variable combinations on kubespray's own
# toolchain, with the kubeadm built above. kubespray's own defaults only with
# a checkout of the user's (KUBESPRAY_DIR; never downloaded here): without
# one, kubeadm's default config, and the script says so.
kubespray_mode="kubespray's defaults not checked: no KUBESPRAY_DIR"
[[ -z "${KUBESPRAY_DIR:-}" ]] || kubespray_mode="kubespray's defaults from KUBESPRAY_DIR=${KUBESPRAY_DIR}"
step "molecule kubespray scenario (kubespray; ${kubespray_mode})"
ANSIBLE_TOOLCHAINS=kubespray hack/test/molecule.sh kubespray
step "cluster down"
hack/cluster/down.sh

step "the kind tier, run in the background (${real_log#"${REPO_ROOT}/"}):"
real_rc=0
wait "${real_pid}" || real_rc=$?
real_pid=""
cat "${real_log}" >&2
((real_rc == 0)) || die "the kind tier failed (exit ${real_rc}, its log above)"
trap - EXIT
step "kind down"
hack/kind/down.sh
step "all green"
