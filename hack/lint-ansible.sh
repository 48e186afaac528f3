#!/usr/bin/env bash
# Lint the Ansible side (make lint-ansible): yamllint and ansible-lint
# (production profile) on roles/, playbooks/ and molecule/, then the check that
# meta/argument_specs.yml matches defaults/main.yml, and that check's self-test.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "${REPO_ROOT}"

[[ -x "${VENV_DIR}/bin/ansible-lint" ]] || die "no ${VENV_DIR}: run make venv (hack/venv.sh) first"
export PATH="${VENV_DIR}/bin:${PATH}"
export ANSIBLE_CONFIG="${REPO_ROOT}/ansible.cfg"
# Keep Ansible's and ansible-lint's caches and temp files inside the checkout.
export ANSIBLE_HOME="${CACHE_DIR}/ansible"
export ANSIBLE_LOCAL_TEMP="${ANSIBLE_HOME}/tmp"
export XDG_CACHE_HOME="${CACHE_DIR}/xdg"
mkdir -p "${ANSIBLE_LOCAL_TEMP}" "${XDG_CACHE_HOME}"
# playbooks/cluster.yml imports kubespray's collection, which is not installed
# here (no Galaxy): lint it against a stub of that collection.
export ANSIBLE_COLLECTIONS_PATH="${REPO_ROOT}/molecule/resources/collections"

# The role's binary modules are build outputs (make dist). ansible-lint's
# syntax check only needs the files to exist, so stand in empty placeholders
# when they are missing and remove them afterwards.
library="roles/kube_proxy_sync/library"
placeholders=()
cleanup() { [[ ${#placeholders[@]} -eq 0 ]] || rm -f "${placeholders[@]}"; }
trap cleanup EXIT
for arch in amd64 arm64; do
  module="${library}/kube_proxy_sync_linux_${arch}"
  if [[ ! -e "${module}" ]]; then
    mkdir -p "${library}"
    printf '#!/bin/sh\necho "{\\"failed\\": true, \\"msg\\": \\"placeholder: run make dist\\"}"\nexit 1\n' > "${module}"
    chmod 0755 "${module}"
    placeholders+=("${module}")
  fi
done

log "yamllint"
yamllint --strict roles playbooks molecule .yamllint .ansible-lint

log "ansible-lint (production profile)"
ansible-lint --strict --profile production

log "argument specs match the defaults"
python hack/check-argument-specs.py
python -m unittest hack/test_check_argument_specs.py 2>&1 | tail -n 3
