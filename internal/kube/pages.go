package kube

import (
	"k8s.io/client-go/tools/pager"
)

// ListPageSize is how many objects one LIST request asks for: 5000 nodes
// or pods take ten requests.
const ListPageSize = 500

// Pager lists page by page, holding at most the page its caller is
// working on and the next one: client-go's pager fetches up to ten pages
// ahead by default, which at 5000 pods can be the whole list in memory at
// once. Its EachListItem calls a function on every item.
func Pager(list pager.ListPageFunc) *pager.ListPager {
	pg := pager.New(list)
	pg.PageSize = ListPageSize
	pg.PageBufferSize = 0
	return pg
}
