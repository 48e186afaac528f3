# kube-proxy-sync: see README.md. Long recipes live in hack/ (hack/README.md maps it).
# Every target says what it does in a "## " comment, which make help prints.
SHELL := /usr/bin/env bash
.DEFAULT_GOAL := build

include hack/versions.mk

# One version, galaxy.yml's, stamped in with the commit (kps_ldflags, hack/lib.sh).
LDFLAGS := $(shell source hack/lib.sh && kps_ldflags)
GO_BUILD := CGO_ENABLED=0 go build -trimpath -ldflags '$(LDFLAGS)'
NODES ?= 3
export NODES

.PHONY: help build dist release size test test-unit test-e2e lint lint-go lint-ansible verify generate sanity venv molecule molecule-kubespray molecule-kind \
	cluster-up cluster-down kind-up kind-down test-real test-kubespray demo bench bench-small fuzz difftest clean

help: ## every target and what it does (from the ## comments of this file)
	@awk -F ':[^#]*## ' '/^[a-z][a-z0-9-]*:[^=]*## / { printf "  %-20s %s\n", $$1, $$2 }' $(firstword $(MAKEFILE_LIST))

build: ## bin/kube-proxy-sync for this machine
	$(GO_BUILD) -o bin/kube-proxy-sync ./cmd/kube-proxy-sync

dist: venv ## static linux builds for amd64, arm64, arm and ppc64le (DIST_ARCHES for fewer), as the collection's binary modules, and the collection tarball
	hack/build/dist.sh

release: venv ## dist/release/: the collection tarball, the same static builds bare, SHA256SUMS and kubespray's checksums.yml lines (printed), all named by galaxy.yml's version, then checked
	hack/build/release.sh
	hack/verify/release.sh

size: ## stripped and gzipped size per architecture, and the top 15 packages
	hack/build/size.sh

test: ## everything CI runs: lint, unit, e2e against the local control plane, molecule, small bench
	hack/ci/test.sh

test-unit: ## fast hermetic tests
	go test -short -count=1 ./...

difftest: ## config validation against kube-proxy's own code, every supported minor (hack/difftest)
	hack/difftest/run.sh

test-e2e: ## e2e tests against $KUBECONFIG or the local cluster (make cluster-up first)
	hack/test/e2e.sh

lint: lint-go lint-ansible ## lint-go and lint-ansible

verify: ## fail when a generated file (module docs, the role's argument specs, defaults and README, the README's tables, the kubespray evidence page) is stale, a file names a make target or links to a page or section that does not exist, or the version differs between galaxy.yml, --version and CHANGELOG.md
	hack/verify/generated.sh
	hack/verify/version.sh

generate: ## rewrite the generated files from their sources (the option table internal/app/optiontable.go, and hack/gen-options lists the rest; the kubespray tier's evidence page from docs/kubespray/runs)
	hack/kubespray/evidence.py page docs/kubespray/runs docs/kubespray-evidence.md
	go run ./hack/gen-options

lint-go: ## gofmt and go vet over every build tag
	hack/verify/lint-go.sh

lint-ansible: venv ## yamllint, syntax check, ansible-lint (production) on every toolchain
	hack/verify/lint-ansible.sh

sanity: venv dist ## ansible-test sanity on the collection, on every toolchain
	hack/verify/sanity.sh

venv: ## the pinned Ansible toolchains in .venv/NAME (requirements/NAME.txt): kubespray, newest
	hack/build/venv.sh

molecule: venv dist ## molecule default scenario against the local cluster, on every toolchain (ANSIBLE_TOOLCHAINS)
	hack/test/molecule.sh default

molecule-kubespray: venv dist ## molecule kubespray scenario: kubespray's play layout, on its toolchain, local cluster only; KUBESPRAY_DIR=<kubespray checkout> checks kubespray's defaults
	ANSIBLE_TOOLCHAINS=kubespray hack/test/molecule.sh kubespray

molecule-kind: venv dist ## molecule kind scenario (needs Docker and kind)
	hack/test/molecule.sh kind

cluster-up: ## build (once) and start etcd, apiserver, controller-manager, scheduler, kwok; NODES=n fake nodes
	hack/cluster/up.sh

cluster-down: ## stop the local control plane
	hack/cluster/down.sh

kind-up: ## build (once, offline) and start a kind cluster: real kubelets and kube-proxy, 1 control plane + 2 workers
	hack/kind/up.sh

kind-down: ## delete the kind cluster and stop the project-owned Docker engine
	hack/kind/down.sh

test-real: ## real-node e2e tests against $KUBECONFIG or the kind cluster (make kind-up first)
	hack/test/e2e-real.sh

test-kubespray: ## kubespray's own cluster.yml, offline, on 3 container hosts, in three modes (KS_MODES): unpatched, toolfree (docs/kubespray 0001-0003), tool (0001-0004, this checkout's make release): KUBESPRAY_DIR=<kubespray checkout> (not part of make test; hack/kubespray); KS_UPGRADE=1 adds upgrade-cluster.yml from KUBESPRAY_UPGRADE_FROM, KS_UPGRADE=minor from KUBESPRAY_MINOR_FROM to KUBESPRAY_UPGRADE_TO
	KUBESPRAY_DIR="$(KUBESPRAY_DIR)" hack/kubespray/run.sh

demo: build cluster-up ## three runs: a change, an unchanged rerun, a probe fix
	hack/cluster/demo.sh

bench: build ## benchmarks at 10 and 1000 nodes, BENCH_NODES to change (see bench/README.md)
	hack/test/bench.sh

bench-small: build ## one small round, part of make test
	BENCH_SMALL=1 hack/test/bench.sh

fuzz: ## run each fuzz target for FUZZTIME (default 30s)
	hack/test/fuzz.sh

clean: cluster-down kind-down ## stop both clusters, delete bin, dist, .cache and .venv and the built modules
	rm -rf bin dist .cache .venv $(filter-out %.yml,$(wildcard plugins/modules/kube_proxy_sync_linux_*))
