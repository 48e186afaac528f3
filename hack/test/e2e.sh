#!/usr/bin/env bash
# e2e tests against $KUBECONFIG, else the local cluster (make cluster-up).
# Packages run one at a time: they share the cluster.
# E2E_REQUIRED=1 (set by make test and CI) turns "no cluster" into a failure.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
cd "${REPO_ROOT}"
go test -count=1 -p 1 -tags e2e -timeout 45m ./test/e2e/... "$@"
