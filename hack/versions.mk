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
# The kubespray tier (hack/kubespray): what kubespray's download role takes,
# built from Go modules (hack/tools/<name>), one module each. nerdctl is the
# last 1.x: 2.2.1's main package imports nerdctl's test module (mod/tigron),
# which the module proxy does not serve, and it refuses 2.0.5 and 2.1.6.
CONTAINERD_VERSION := v2.1.5
RUNC_VERSION := v1.3.3
CNI_PLUGINS_VERSION := v1.9.1
CRICTL_VERSION := v1.34.0
NERDCTL_VERSION := v1.7.7
# The kubespray tier's cluster DNS (KS_DNS=coredns, hack/tools/coredns): the
# CoreDNS kubespray pins for KUBERNETES_VERSION's minor
# (coredns_supported_versions at KUBESPRAY_COMMIT: 1.34 takes 1.12.1), kept
# through the tier's upgrades (its coredns_image_tag).
COREDNS_VERSION := v1.12.1
# The kubespray tier's upgrade (KS_UPGRADE=1 make test-kubespray): cluster.yml
# installs this version, upgrade-cluster.yml takes the cluster to
# KUBERNETES_VERSION (hack/tools/upgrade-from builds it). A patch release of
# the same minor: kubespray at KUBESPRAY_COMMIT refuses anything older than
# 1.34.0 (kube_version_min_required, the first version of its checksum
# tables), so a 1.33 install is not possible there.
KUBESPRAY_UPGRADE_FROM := v1.34.3
# The tier's minor upgrade (KS_UPGRADE=minor): cluster.yml installs
# KUBESPRAY_MINOR_FROM (hack/tools/minor-from builds it), upgrade-cluster.yml
# takes the cluster to KUBESPRAY_UPGRADE_TO (hack/tools/upgrade-to), a minor
# above it: kubespray's default minor at KUBESPRAY_COMMIT and the one before.
# Its default, 1.36.4, is not served by the Go module proxy here (its newest
# 1.36 is 1.36.3, which kubespray's checksum tables carry too).
KUBESPRAY_MINOR_FROM := v1.35.4
KUBESPRAY_UPGRADE_TO := v1.36.3
