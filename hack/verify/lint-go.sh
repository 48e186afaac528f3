#!/usr/bin/env bash
# gofmt and go vet, over every build tag the project uses.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
cd "${REPO_ROOT}"

unformatted="$(gofmt -l $(git ls-files --cached --others --exclude-standard '*.go'))"
if [[ -n "${unformatted}" ]]; then
  die "gofmt would change these files (run gofmt -w): ${unformatted}"
fi
go vet ./...
go vet -tags e2e ./test/...
# the pause hook of the crash tests builds only with testhooks
go vet -tags testhooks ./internal/app/
log "go lint clean"
