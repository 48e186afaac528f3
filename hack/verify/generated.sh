#!/usr/bin/env bash
# make verify: fail when a generated file is stale. go run ./hack/gen-options
# writes, from one source each, the modules' docs, the role's argument
# specs, defaults and pass-through, and the README's tables (hack/gen-options
# lists them); with -verify it writes nothing and fails, showing the lines,
# when one in the checkout is not byte for byte what it would write, and
# when a file names a make target the Makefile does not have (or a target
# has no "## " comment for make help), or a markdown link leads nowhere.
#   hack/verify/generated.sh
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
cd "${REPO_ROOT}"

go run ./hack/gen-options -verify
