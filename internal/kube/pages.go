package kube

import (
	"context"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/pager"
)

// ListPageSize is how many objects one LIST request asks for: 5000 nodes
// or pods take ten requests.
const ListPageSize = 500

// EachListItem lists page by page and calls fn on every item, holding at
// most the page fn is working on and the next one: client-go's pager
// fetches up to ten pages ahead by default, which at 5000 pods can be the
// whole list in memory at once.
func EachListItem(ctx context.Context, list pager.ListPageFunc, fn func(runtime.Object) error) error {
	pg := pager.New(list)
	pg.PageSize = ListPageSize
	pg.PageBufferSize = 0
	return pg.EachListItem(ctx, metav1.ListOptions{}, fn)
}
