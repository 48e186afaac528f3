#!/usr/bin/env bash
# Checks what make release wrote in dist/release/ against what a kubespray
# downloads entry and Galaxy need, reading the files again, not the script's
# own figures:
# - every file of SHA256SUMS is there with that sha256;
# - checksums.yml is kubespray's checksums.yml shape
#   (kube_proxy_sync_binary_checksums: ARCH: VERSION: sha256:HEX), with
#   exactly the release architectures, galaxy.yml's version, and each
#   binary's real sha256 (kube-proxy-sync-VERSION-linux-ARCH);
# - the collection tarball is under galaxy.ansible.com's 20 MB.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
cd "${REPO_ROOT}/dist/release" 2>/dev/null || die "no dist/release: run make release first"

sha256sum --quiet -c SHA256SUMS || die "dist/release: a file differs from its SHA256SUMS line"

galaxy_max=$((20 * 1000 * 1000))
tarball="kube_proxy_sync-kube_proxy_sync-$(kps_version).tar.gz"
size="$(stat -c %s "${tarball}")"
((size < galaxy_max)) ||
  die "${tarball} is ${size} bytes, over galaxy.ansible.com's limit (${galaxy_max}): fewer architectures, or one collection per architecture"

python="$(venv_dir "${ANSIBLE_TOOLCHAINS##* }")/bin/python"
[[ -x "${python}" ]] || die "no ${python}: make venv"
"${python}" - "$(kps_version)" "${RELEASE_ARCHES}" <<'PY'
import hashlib, re, sys, yaml
version, arches = sys.argv[1], sorted(sys.argv[2].split())
with open("checksums.yml") as f:
    doc = yaml.safe_load(f)
fail = []
if list(doc) != ["kube_proxy_sync_binary_checksums"]:
    fail.append(f"top-level keys {list(doc)}, want kube_proxy_sync_binary_checksums only")
sums = doc.get("kube_proxy_sync_binary_checksums") or {}
if sorted(sums) != arches:
    fail.append(f"architectures {sorted(sums)}, want {arches}")
for arch, versions in sums.items():
    # kubespray's own entries are bare versions (1.36.0: sha256:...)
    if list(versions) != [version]:
        fail.append(f"{arch}: versions {list(versions)}, want [{version}]")
        continue
    with open(f"kube-proxy-sync-{version}-linux-{arch}", "rb") as b:
        want = "sha256:" + hashlib.sha256(b.read()).hexdigest()
    if versions[version] != want:
        fail.append(f"{arch}: {versions[version]}, the file is {want}")
if fail:
    sys.exit("dist/release/checksums.yml: " + "; ".join(fail))
PY
log "dist/release: SHA256SUMS checks, checksums.yml names every architecture's binary by its sha256, ${tarball} is $((size / 1000)) kB (under 20 MB)"
