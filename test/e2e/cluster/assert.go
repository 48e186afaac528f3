//go:build e2e

package cluster

import (
	"sort"
	"testing"

	"github.com/stretchr/testify/assert"
	"k8s.io/apimachinery/pkg/types"
)

// AssertAllReplaced asserts that every node of before still has a
// kube-proxy pod in after, and that each of those pods is a new one.
func AssertAllReplaced(t testing.TB, before, after map[string]types.UID) bool {
	t.Helper()
	ok := assert.NotEmpty(t, before, "no kube-proxy pods before")
	ok = assert.ElementsMatch(t, nodeNames(before), nodeNames(after), "nodes with a kube-proxy pod") && ok
	var kept []string
	for _, node := range nodeNames(before) {
		if uid, found := after[node]; found && uid == before[node] {
			kept = append(kept, node)
		}
	}
	return assert.Empty(t, kept, "kube-proxy pods NOT replaced on these nodes (of %d)", len(before)) && ok
}

// AssertNoneReplaced asserts that after holds exactly the pods of before:
// no pod was replaced, added or removed.
func AssertNoneReplaced(t testing.TB, before, after map[string]types.UID) bool {
	t.Helper()
	ok := assert.NotEmpty(t, before, "no kube-proxy pods before")
	var replaced []string
	for _, node := range nodeNames(before) {
		if uid, found := after[node]; !found || uid != before[node] {
			replaced = append(replaced, node)
		}
	}
	ok = assert.Empty(t, replaced, "kube-proxy pods replaced or gone on these nodes (of %d)", len(before)) && ok
	return assert.ElementsMatch(t, nodeNames(before), nodeNames(after), "nodes with a kube-proxy pod") && ok
}

func nodeNames(uids map[string]types.UID) []string {
	names := make([]string, 0, len(uids))
	for n := range uids {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}
