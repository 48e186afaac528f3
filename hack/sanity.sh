#!/usr/bin/env bash
# ansible-test sanity on the collection (make test runs it), on each pinned
# toolchain (ANSIBLE_TOOLCHAINS). ansible-test wants the collection at
# ansible_collections/NAMESPACE/NAME/, outside any git checkout (it lists
# files with git), so the tarball `make dist` built is unpacked under
# .cache/sanity with a git repository of its own.
#   hack/sanity.sh [TOOLCHAIN...]
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "${REPO_ROOT}"

# shellcheck disable=SC2206 # word splitting of the toolchain list is wanted
toolchains=("$@")
[[ ${#toolchains[@]} -gt 0 ]] || read -r -a toolchains <<<"${ANSIBLE_TOOLCHAINS}"
tarball="$(ls dist/kube_proxy_sync-kube_proxy_sync-*.tar.gz 2>/dev/null | head -n1 || true)"
[[ -n "${tarball}" ]] || die "no collection tarball in dist/: run make dist"

for toolchain in "${toolchains[@]}"; do
  (
    ansible_env "${toolchain}"
    root="${CACHE_DIR}/sanity/${toolchain}"
    collection="${root}/ansible_collections/kube_proxy_sync/kube_proxy_sync"
    rm -rf "${root}/ansible_collections"
    mkdir -p "${collection}"
    tar -xzf "${tarball}" -C "${collection}"
    git -C "${collection}" init --quiet
    git -C "${collection}" add --all
    # ansible-test keeps its per-test virtualenvs under ~/.ansible/test and
    # fetches a pip bootstrap script from the internet into it. Keep both in
    # the cache, and stand in for that script: pip's own wheel from PyPI,
    # run as `pip install` (what the script does).
    export HOME="${root}/home"
    pip_version="$(python3 -c 'from ansible_test._internal.python_requirements import get_venv_packages as p; from types import SimpleNamespace as n; print(p(n(version="3.11"))["pip"])')"
    bootstrap="${HOME}/.ansible/test/cache/get_pip_${pip_version//./_}.py"
    if [[ ! -f "${bootstrap}" ]]; then
      mkdir -p "$(dirname "${bootstrap}")"
      python3 -m pip download --quiet --no-deps --dest "$(dirname "${bootstrap}")" "pip==${pip_version}"
      cat > "${bootstrap}" <<PY
# Offline stand-in for pip's get-pip.py (written by hack/sanity.sh): pip from its wheel, as "pip install ARGS".
import sys
sys.path.insert(0, "$(ls "$(dirname "${bootstrap}")"/pip-"${pip_version}"-*.whl)")
from pip._internal.cli.main import main
sys.exit(main(["install"] + [a for a in sys.argv[1:] if a not in ("--no-setuptools", "--no-wheel")]))
PY
    fi
    log "[${toolchain}] ansible-test sanity ($(ansible --version | sed -n 1p))"
    cd "${collection}"
    # The binary modules themselves are left out: validate-modules reads a
    # module as text and cannot read an executable. Their sidecar docs
    # (plugins/modules/*.yml), which it validates, stay in.
    ansible-test sanity --python "$(python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])')" --color no \
      --exclude plugins/modules/kube_proxy_sync_linux_amd64 --exclude plugins/modules/kube_proxy_sync_linux_arm64
  )
done
