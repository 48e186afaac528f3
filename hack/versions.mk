# Versions of everything the project builds or installs, pinned in one place.
# Shell scripts read this file too (hack/lib.sh), so keep it plain NAME := value.
KUBERNETES_VERSION := v1.34.4
KUBERNETES_STAGING_VERSION := v0.34.4
ETCD_VERSION := v3.6.16
KWOK_VERSION := v0.8.0
