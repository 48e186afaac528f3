package kube

import (
	"context"
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// Pager asks for ListPageSize items a page, follows the continue
// token to the end, and never runs more than one page ahead of fn.
func TestPagerStaysOnePageAhead(t *testing.T) {
	const pages = 12
	var fetched atomic.Int32
	list := func(_ context.Context, o metav1.ListOptions) (runtime.Object, error) {
		assert.Equal(t, int64(ListPageSize), o.Limit)
		page := 0
		if o.Continue != "" {
			page, _ = strconv.Atoi(o.Continue)
		}
		fetched.Add(1)
		l := &corev1.PodList{Items: []corev1.Pod{{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("pod-%d", page)}}}}
		if page+1 < pages {
			l.Continue = strconv.Itoa(page + 1)
		}
		return l, nil
	}
	var seen []string
	err := Pager(list).EachListItem(context.Background(), metav1.ListOptions{}, func(obj runtime.Object) error {
		seen = append(seen, obj.(*corev1.Pod).Name)
		// working on page len(seen): the next one may be fetched, no more
		assert.LessOrEqual(t, int(fetched.Load()), len(seen)+1, "pages fetched while fn works on page %d", len(seen))
		return nil
	})
	require.NoError(t, err)
	assert.Len(t, seen, pages)
	assert.Equal(t, "pod-11", seen[pages-1])
}
