#!/usr/bin/env bash
# Create .venv with the pinned Python tools from requirements.txt (make venv).
# Idempotent: a stamp holding the hash of requirements.txt and of the Python
# version skips the install when nothing changed. Non-interactive (CI=true ok).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "${REPO_ROOT}"

python="${PYTHON:-python3}"
command -v "${python}" >/dev/null || die "${python} not found: install Python 3.11 or newer, or set PYTHON"
"${python}" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)' \
  || die "$("${python}" --version 2>&1) is too old: ansible-core 2.19 needs Python 3.11 or newer (set PYTHON)"

requirements="${REPO_ROOT}/requirements.txt"
stamp="${VENV_DIR}/.requirements.sha256"
want="$({ sha256sum "${requirements}"; "${python}" --version; } 2>&1 | sha256sum | cut -d' ' -f1)"

if [[ -x "${VENV_DIR}/bin/python" && -f "${stamp}" && "$(cat "${stamp}")" == "${want}" ]]; then
  log "venv ${VENV_DIR} is up to date"
  exit 0
fi

if [[ ! -x "${VENV_DIR}/bin/python" ]]; then
  log "creating ${VENV_DIR}"
  "${python}" -m venv "${VENV_DIR}"
fi
log "installing pinned tools from requirements.txt into ${VENV_DIR}"
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1
"${VENV_DIR}/bin/python" -m pip install --quiet --upgrade pip
"${VENV_DIR}/bin/python" -m pip install --quiet -r "${requirements}"
printf '%s\n' "${want}" > "${stamp}"
log "venv ready: ${VENV_DIR}/bin/{ansible-playbook,ansible-lint,molecule,yamllint}"
