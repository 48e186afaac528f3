# Versions of everything the project builds or installs, pinned in one place.
# Shell scripts read this file too (hack/lib.sh), so keep it plain NAME := value.
KUBERNETES_VERSION := v1.34.4
KUBERNETES_STAGING_VERSION := v0.34.4
ETCD_VERSION := v3.6.16
KWOK_VERSION := v0.8.0
# The kind cluster (hack/kind/up.sh): kind's release whose node files target
# KUBERNETES_VERSION's minor on Debian bookworm, and an older kube-proxy for
# the probe tests (the last minor without /livez).
KIND_VERSION := v0.31.0
KUBE_PROXY_OLD_VERSION := v1.27.16
DEBIAN_SUITE := bookworm
# The kubespray commit the molecule scenario kubespray expects in
# KUBESPRAY_DIR (a checkout of your own; its expected defaults are this
# commit's; another one runs with a warning), and docs/kubespray*.patch were
# checked against.
KUBESPRAY_COMMIT := 46dbdd3994b32640bcd806b0097f50e8fdf1d514
