#!/usr/bin/env bash
# make verify: fail when a generated file is stale. go run ./hack/gen-options
# writes, from one source each, the modules' docs, the role's argument
# specs, defaults and pass-through, and the README's tables (hack/gen-options
# lists them); with -verify it writes nothing and fails, showing the lines,
# when one in the checkout is not byte for byte what it would write, and
# when a file names a make target the Makefile does not have (or a target
# has no "## " comment for make help), or a markdown link leads nowhere.
# Before that, the kubespray tier's evidence page against what
# hack/kubespray/evidence.py writes from the runs in docs/kubespray/runs.
#   hack/verify/generated.sh
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
cd "${REPO_ROOT}"

python3 hack/kubespray/evidence.py page docs/kubespray/runs docs/kubespray-evidence.md --verify
go run ./hack/gen-options -verify
