package kpsync

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/kube-proxy-sync/kube-proxy-sync/internal/kube"
)

// Observe once: what the plan knows of the cluster's nodes is one list,
// read on first use and asked by every guard and preview of the plan (the
// kernel check, the migration's canary and batches, the zones). A plan
// under the Lease observes again (see plan); the restart's survey of the
// nodes, just before its PATCH, and the wait read afresh, where freshness
// is the point.

// observedNodes is kube.NodeReader whose List (without selectors) answers from
// one full list of the nodes, paged once through the API server.
type observedNodes struct {
	api  kube.NodeReader
	list *corev1.NodeList
}

func (n *observedNodes) Get(ctx context.Context, name string, opts metav1.GetOptions) (*corev1.Node, error) {
	return n.api.Get(ctx, name, opts)
}

func (n *observedNodes) List(ctx context.Context, opts metav1.ListOptions) (*corev1.NodeList, error) {
	if opts.LabelSelector != "" || opts.FieldSelector != "" || opts.ResourceVersion != "" {
		return n.api.List(ctx, opts)
	}
	if opts.Continue != "" {
		// every node came in the first answer
		return &corev1.NodeList{}, nil
	}
	if n.list == nil {
		all := &corev1.NodeList{}
		err := kube.Pager(func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			return n.api.List(ctx, o)
		}).EachListItem(ctx, metav1.ListOptions{}, func(obj runtime.Object) error {
			if node, ok := obj.(*corev1.Node); ok {
				all.Items = append(all.Items, *node)
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
		n.list = all
	}
	out := *n.list
	return &out, nil
}
