#!/usr/bin/env bash
# make verify: fail when a generated file is stale. go run ./hack/gen-options
# writes, from the option table (internal/app/optiontable.go), the modules'
# docs, the role's argument specs, defaults and pass-through, and the
# README's flag table; here it writes them into a temporary directory, and
# each one must be byte for byte what is in the checkout.
#   hack/verify/generated.sh
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
cd "${REPO_ROOT}"

out="$(mktemp -d)"
trap 'rm -rf "${out}"' EXIT
go run ./hack/gen-options -out "${out}"

stale=()
while IFS= read -r -d '' generated; do
  file="${generated#"${out}/"}"
  if ! cmp -s "${generated}" "${file}"; then
    diff -u --label "${file} (in the checkout)" --label "${file} (generated)" "${file}" "${generated}" >&2 || true
    stale+=("${file}")
  fi
done < <(find "${out}" -type f -print0 | sort -z)

if [[ ${#stale[@]} -gt 0 ]]; then
  die "not what go run ./hack/gen-options writes from internal/app/optiontable.go: ${stale[*]} (edit the table or hack/gen-options, not the generated lines, and run go run ./hack/gen-options)"
fi
log "generated files are up to date ($(find "${out}" -type f | wc -l) files)"
