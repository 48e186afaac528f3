#!/usr/bin/env bash
# The tool-free kubespray patches (docs/kubespray/0*.patch), checked against a
# kubespray checkout, never written into it (each check works on a copy of its
# committed tree, from git archive):
#   KUBESPRAY_DIR=<kubespray checkout> hack/kubespray/patches.sh
# For each patch: git apply --check on the checkout alone (a patch whose
# description says "Applies on top of" the ones before it, the opt-in, on top
# of them), then the series in order; on each copy (each patch alone, and the
# series), kubespray's own yamllint config on the touched YAML files,
# ansible-lint (kubespray's .ansible-lint, --offline) on the touched files
# when the toolchain has it, ansible-playbook --syntax-check of cluster.yml
# and upgrade-cluster.yml, and their --list-tasks --tags kube-proxy against
# the unpatched checkout's: every task a patch adds or removes there must be
# kube-proxy's (its name or file says so), so the tag pulls in nothing else.
# KUBESPRAY_PRS="13066 13392 13397" also checks each patch alone on those pull
# requests' heads, when the checkout has their refs/pull/N/head.
# Needs the kubespray toolchain (hack/build/venv.sh kubespray). Prints one line
# per check and ends non-zero if a check of the checkout itself failed (a pull
# request a patch does not apply on is reported, not failed).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"

[[ -n "${KUBESPRAY_DIR:-}" ]] || die "set KUBESPRAY_DIR to a kubespray checkout"
git -C "${KUBESPRAY_DIR}" rev-parse --verify -q HEAD >/dev/null \
  || die "${KUBESPRAY_DIR} is not a git checkout: give KUBESPRAY_DIR a kubespray clone"
ansible_env kubespray
mapfile -t patches < <(ls "${REPO_ROOT}"/docs/kubespray/0*.patch)
[[ ${#patches[@]} -gt 0 ]] || die "no docs/kubespray/0*.patch"

work="$(mktemp -d "${CACHE_DIR}/kubespray-patches.XXXXXX")"
trap 'rm -rf "${work}"' EXIT
failed=0
report() { printf '%-6s %s\n' "$1" "$2"; [[ "$1" != FAIL ]] || failed=1; }

# tree REF DIR: the committed tree of REF in the checkout, copied to DIR, a
# repository of its own so that git apply there patches it, not this checkout
tree() { git init -q "$2" && git -C "${KUBESPRAY_DIR}" archive "$1" | tar -x -C "$2"; }
# touched PATCH: the files a patch changes
touched() { sed -n 's|^+++ b/||p' "$1"; }

# tasks DIR PLAYBOOK: its --list-tasks --tags kube-proxy, one task per line
tasks() {
  (cd "$1" && ansible-playbook -i "${work}/inventory.ini" "$2" --list-tasks --tags kube-proxy) 2>"${work}/err" |
    sed -n 's/^      //p' | sed 's/[[:space:]]*TAGS: .*//'
}

lint() { # DIR NAME PATCH...: the checks on a patched copy
  local dir="$1" name="$2" files=() yaml=()
  shift 2
  mapfile -t files < <(for p in "$@"; do touched "${p}"; done | sort -u)
  mapfile -t yaml < <(printf '%s\n' "${files[@]}" | grep -E '\.ya?ml$' || true)
  if [[ ${#yaml[@]} -gt 0 ]]; then
    if (cd "${dir}" && yamllint -c .yamllint --strict "${yaml[@]}") >"${work}/out" 2>&1; then
      report ok "${name}: yamllint ${yaml[*]}"
    else
      report FAIL "${name}: yamllint"; sed 's/^/       /' "${work}/out"
    fi
  fi
  if command -v ansible-lint >/dev/null; then
    if (cd "${dir}" && ansible-lint --offline --nocolor -q -c .ansible-lint "${files[@]}") >"${work}/out" 2>&1; then
      report ok "${name}: ansible-lint ${files[*]}"
    else
      report FAIL "${name}: ansible-lint"; sed 's/^/       /' "${work}/out"
    fi
  else
    report skip "${name}: ansible-lint not in the toolchain"
  fi
  for playbook in cluster.yml upgrade-cluster.yml; do
    if (cd "${dir}" && ansible-playbook -i inventory/sample/inventory.ini --syntax-check "${playbook}") \
      >"${work}/out" 2>&1; then
      report ok "${name}: --syntax-check ${playbook}"
    else
      report FAIL "${name}: --syntax-check ${playbook}"; sed 's/^/       /' "${work}/out"
    fi
    local added
    added="$(diff <(tasks "${work}/base" "${playbook}") <(tasks "${dir}" "${playbook}") | sed -n 's/^[<>] //p' || true)"
    if [[ -z "${added}" ]]; then
      report ok "${name}: --list-tasks --tags kube-proxy ${playbook}: the same tasks as unpatched"
    elif ! grep -viE 'kube[-_]proxy' <<<"${added}" >"${work}/out"; then
      report ok "${name}: --list-tasks --tags kube-proxy ${playbook}: adds or removes only kube-proxy's: $(tr '\n' ';' <<<"${added}")"
    else
      report FAIL "${name}: --list-tasks --tags kube-proxy ${playbook} adds tasks that are not kube-proxy's"
      sed 's/^/       /' "${work}/out"
    fi
  done
}

head="$(git -C "${KUBESPRAY_DIR}" rev-parse HEAD)"
log "kubespray ${head} ($(git -C "${KUBESPRAY_DIR}" log -1 --format='%cs %s' HEAD)), $(ansible --version | sed -n 1p)"

# an inventory for --list-tasks: two control planes, a worker
printf '%s\n' '[kube_control_plane]' 'cp1 ansible_host=192.0.2.1' 'cp2 ansible_host=192.0.2.2' \
  '[etcd]' 'cp1' '[kube_node]' 'w1 ansible_host=192.0.2.3' >"${work}/inventory.ini"
tree HEAD "${work}/base"

before=()
for p in "${patches[@]}"; do
  name="$(basename "${p}")"
  dir="${work}/alone-${name%%-*}"
  tree HEAD "${dir}"
  under=() how="alone"
  if grep -q '^Applies on top of' "${p}"; then
    under=("${before[@]}") how="on top of the ones before it"
  fi
  if (cd "${dir}" && for q in "${under[@]}"; do git apply "${q}"; done && git apply --check "${p}" && git apply "${p}") 2>"${work}/out"; then
    report ok "${name}: applies ${how} ($(touched "${p}" | xargs))"
    lint "${dir}" "${name%%-*} ${how}" "${under[@]}" "${p}"
  else
    report FAIL "${name}: does not apply ${how}"; sed 's/^/       /' "${work}/out"
  fi
  before+=("${p}")
done

dir="${work}/series"
tree HEAD "${dir}"
ok=1
for p in "${patches[@]}"; do
  if ! (cd "${dir}" && git apply "${p}") 2>"${work}/out"; then
    report FAIL "$(basename "${p}"): does not apply after the ones before it"
    sed 's/^/       /' "${work}/out"; ok=0; break
  fi
done
if [[ ${ok} == 1 ]]; then
  report ok "series: ${#patches[@]} patches apply in order"
  lint "${dir}" "series" "${patches[@]}"
fi

for pr in ${KUBESPRAY_PRS:-}; do
  if ! git -C "${KUBESPRAY_DIR}" rev-parse --verify -q "refs/pull/${pr}/head" >/dev/null; then
    report skip "#${pr}: no refs/pull/${pr}/head in the checkout (git fetch origin pull/${pr}/head:refs/pull/${pr}/head)"
    continue
  fi
  short="$(git -C "${KUBESPRAY_DIR}" rev-parse --short "refs/pull/${pr}/head")"
  before=()
  for p in "${patches[@]}"; do
    # alone, or (the opt-in) on top of those before it that apply there
    dir="${work}/pr-${pr}-$(basename "${p%%-*}")"
    tree "refs/pull/${pr}/head" "${dir}"
    how="" under=()
    if grep -q '^Applies on top of' "${p}"; then
      for q in "${before[@]}"; do
        if (cd "${dir}" && git apply "${q}") 2>/dev/null; then under+=("${q##*/}"); fi
      done
      how=" on top of ${#under[@]} of the ${#before[@]} before it"
    fi
    if (cd "${dir}" && git apply --check "${p}") >"${work}/out" 2>&1; then
      report ok "#${pr} (${short}): $(basename "${p}") applies${how}"
    else
      report no "#${pr} (${short}): $(basename "${p}") does not apply${how}: $(head -c 200 "${work}/out" | tr '\n' ' ')"
    fi
    before+=("${p}")
  done
done

[[ ${failed} == 0 ]] || die "a check failed (above)"
log "every check passed"
