#!/usr/bin/env bash
# Create the pinned Ansible toolchains (make venv): one virtualenv per file in
# requirements/, at .venv/<name>:
#   kubespray  kubespray's own pins (ansible 11.x, ansible-core 2.18)
#   newest     the newest ansible-core that runs on this Python
#   hack/build/venv.sh [NAME...]   (default: every toolchain in ANSIBLE_TOOLCHAINS, else all)
# Idempotent: a stamp holding the hash of the requirements file and of the
# Python version skips the install when nothing changed. Non-interactive.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
cd "${REPO_ROOT}"

python="${PYTHON:-python3}"
command -v "${python}" >/dev/null || die "${python} not found: install Python 3.11 or newer, or set PYTHON"
"${python}" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)' \
  || die "$("${python}" --version 2>&1) is too old: ansible-core 2.18 and 2.19 need Python 3.11 or newer (set PYTHON)"

# shellcheck disable=SC2206 # word splitting of the toolchain list is wanted
toolchains=("$@")
[[ ${#toolchains[@]} -gt 0 ]] || read -r -a toolchains <<<"${ANSIBLE_TOOLCHAINS}"

export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1
for name in "${toolchains[@]}"; do
  requirements="${REPO_ROOT}/requirements/${name}.txt"
  [[ -f "${requirements}" ]] || die "no toolchain '${name}': want one of $(ls requirements | sed 's/\.txt$//' | xargs)"
  venv="$(venv_dir "${name}")"
  stamp="${venv}/.requirements.sha256"
  want="$({ sha256sum "${requirements}"; "${python}" --version; } 2>&1 | sha256sum | cut -d' ' -f1)"
  if [[ -x "${venv}/bin/python" && -f "${stamp}" && "$(cat "${stamp}")" == "${want}" ]]; then
    log "venv ${venv} is up to date"
    continue
  fi
  [[ -x "${venv}/bin/python" ]] || { log "creating ${venv}"; "${python}" -m venv "${venv}"; }
  log "installing requirements/${name}.txt into ${venv}"
  "${venv}/bin/python" -m pip install --quiet -r "${requirements}"
  printf '%s\n' "${want}" > "${stamp}"
  log "venv ready: ${venv} ($("${venv}/bin/ansible" --version | sed -n 1p))"
done
