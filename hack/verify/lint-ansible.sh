#!/usr/bin/env bash
# Lint the Ansible side (make lint-ansible) on each pinned toolchain
# (ANSIBLE_TOOLCHAINS, default: kubespray newest): yamllint, the playbooks'
# syntax check, ansible-lint (production profile) on the collection (roles/,
# plugins/, meta/), playbooks/ and molecule/, and that no role reads a
# variable it does not define (kubespray's, or any caller's). That the role's argument specs,
# defaults and pass-through and the two modules' docs agree is make verify's
# (they are generated from one table, hack/gen-options).
#   hack/verify/lint-ansible.sh [TOOLCHAIN...]
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
cd "${REPO_ROOT}"

# shellcheck disable=SC2206 # word splitting of the toolchain list is wanted
toolchains=("$@")
[[ ${#toolchains[@]} -gt 0 ]] || read -r -a toolchains <<<"${ANSIBLE_TOOLCHAINS}"

# The binary modules are build outputs (make dist). The syntax check only
# needs the files to exist, so stand in placeholders when they are missing
# and remove them afterwards.
placeholders=()
cleanup() { [[ ${#placeholders[@]} -eq 0 ]] || rm -f "${placeholders[@]}"; }
trap cleanup EXIT
for arch in ${RELEASE_ARCHES}; do
  module="plugins/modules/kube_proxy_sync_linux_${arch}"
  if [[ ! -e "${module}" ]]; then
    printf '#!/bin/sh\necho "{\\"failed\\": true, \\"msg\\": \\"placeholder: run make dist\\"}"\nexit 1\n' > "${module}"
    chmod 0755 "${module}"
    placeholders+=("${module}")
  fi
done
collections_link
# molecule/kubespray/layout.yml names kubespray's roles in its plays, as
# kubespray does: kubespray_defaults (its stub here) and the stand-ins with
# docs/kubespray/0004 that the scenario's prepare makes in its own directory.
# The syntax check needs them to exist: an empty stand-in for each of these.
lint_roles="${CACHE_DIR}/lint/roles"
for role in kubespray_control_plane kubespray_defaults_0004 kubespray_validate_inventory kubespray_download; do
  mkdir -p "${lint_roles}/${role}/tasks"
  printf -- '---\n[]\n' >"${lint_roles}/${role}/tasks/main.yml"
done
export ANSIBLE_ROLES_PATH="${REPO_ROOT}/roles:${REPO_ROOT}/molecule/resources/collections/ansible_collections/kubernetes_sigs/kubespray/roles:${lint_roles}"

for toolchain in "${toolchains[@]}"; do
  (
    ansible_env "${toolchain}"
    export ANSIBLE_CONFIG="${REPO_ROOT}/ansible.cfg"
    # the molecule kubespray scenario's stand-in for kubespray's collection
    export ANSIBLE_COLLECTIONS_PATH="${COLLECTIONS_DIR}:${REPO_ROOT}/molecule/resources/collections"
    log "[${toolchain}] $(ansible --version | sed -n 1p)"
    log "[${toolchain}] yamllint"
    yamllint --strict roles plugins meta playbooks molecule galaxy.yml .yamllint .ansible-lint
    log "[${toolchain}] syntax check of the playbooks"
    for playbook in playbooks/*.yml; do
      ansible-playbook --syntax-check -i playbooks/inventory/local.yml "${playbook}" >/dev/null
    done
    log "[${toolchain}] ansible-lint (production profile)"
    ansible-lint --strict --profile production
    log "[${toolchain}] the roles read only their own variables (hack/verify/role_vars.py)"
    python hack/verify/role_vars.py roles/*/
  )
done
