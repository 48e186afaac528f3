// Package cluster connects e2e tests to a real Kubernetes cluster and keeps
// its kube-proxy seed objects (test/manifests) in a known state.
//
// The cluster is the local control plane started by `make cluster-up`
// (kubeconfig .cache/cluster/kubeconfig), or any cluster named by
// $KUBECONFIG, e.g. a kind cluster. The helpers are built only with the
// `e2e` build tag: go test -tags e2e ./test/e2e/...
package cluster
