#!/usr/bin/env bash
# The real-node e2e tier (test/realnode): real kubelets and a real
# kube-proxy, against $KUBECONFIG, else the kind cluster (make kind-up).
# E2E_REQUIRED=1 (set by make test and CI) turns "no cluster" into a failure.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
cd "${REPO_ROOT}"
# the tests that stop a node's kubelet reach the kind nodes through the
# project's Docker engine (tests needing it skip elsewhere)
docker_env
# kubectl rollout undo, as a user runs it (built with the kind tier's tools)
export KUBECTL="${KUBECTL:-${TOOLS_BIN}/kubectl}"
go test -count=1 -p 1 -tags e2e -timeout 40m ./test/realnode/... "$@"
