#!/usr/bin/env bash
# The collection as users get it, on each pinned toolchain (ANSIBLE_TOOLCHAINS):
# the tarball installed offline, ansible-doc, the module run by its FQCN; then
# ansible-test sanity (make test runs it all). ansible-test wants the collection at
# ansible_collections/NAMESPACE/NAME/, outside any git checkout (it lists
# files with git), so the tarball `make dist` built is unpacked under
# .cache/sanity with a git repository of its own.
#   hack/verify/sanity.sh [TOOLCHAIN...]
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
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
# Offline stand-in for pip's get-pip.py (written by hack/verify/sanity.sh): pip from its wheel, as "pip install ARGS".
import sys
sys.path.insert(0, "$(ls "$(dirname "${bootstrap}")"/pip-"${pip_version}"-*.whl)")
from pip._internal.cli.main import main
sys.exit(main(["install"] + [a for a in sys.argv[1:] if a not in ("--no-setuptools", "--no-wheel")]))
PY
    fi
    # What a user does: install the tarball offline into an empty path, read
    # the module's docs, run the module by its FQCN. A kubeconfig that is not
    # there makes it fail at once, with a message that names it.
    installed="${root}/installed"
    rm -rf "${installed}"
    log "[${toolchain}] ansible-galaxy collection install --offline ${tarball}"
    ANSIBLE_COLLECTIONS_PATH="${installed}" ansible-galaxy collection install --offline --force -p "${installed}" "${tarball}" >/dev/null
    arch="$(uname -m | sed -e 's/x86_64/amd64/' -e 's/aarch64/arm64/')"
    module="kube_proxy_sync.kube_proxy_sync.kube_proxy_sync_linux_${arch}"
    ANSIBLE_COLLECTIONS_PATH="${installed}" ansible-doc "${module}" | grep -q 'RETURN VALUES' ||
      die "ansible-doc ${module} shows no return values"
    out="$(ANSIBLE_COLLECTIONS_PATH="${installed}" ansible all -i localhost, -c local -m "${module}" \
      -a kubeconfig=/nonexistent/kube-proxy-sync/kubeconfig 2>&1 || true)"
    grep -q 'FAILED!' <<<"${out}" && grep -q '"msg": ".*/nonexistent/kube-proxy-sync/kubeconfig' <<<"${out}" ||
      die "the installed module ${module} did not run as expected: ${out}"

    log "[${toolchain}] ansible-test sanity ($(ansible --version | sed -n 1p))"
    cd "${collection}"
    # The binary modules themselves are left out: validate-modules reads a
    # module as text and cannot read an executable. Their sidecar docs
    # (plugins/modules/*.yml), which it validates, stay in.
    excludes=()
    for arch in ${RELEASE_ARCHES}; do excludes+=(--exclude "plugins/modules/kube_proxy_sync_linux_${arch}"); done
    ansible-test sanity --python "$(python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])')" --color no "${excludes[@]}"
  )
done
