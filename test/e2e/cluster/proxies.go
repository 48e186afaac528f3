//go:build e2e

package cluster

import (
	"context"
	"sort"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
)

// ProxyWatch follows the kube-proxy pods of several DaemonSets (a pod
// label selector over all of them) while pools split and merge, and
// records after every event what a node handover must never show.
type ProxyWatch struct {
	mu    sync.Mutex
	pods  map[types.UID]*corev1.Pod
	nodes []string
	seen  ProxySeen
	stop  func()
}

// ProxySeen is what a ProxyWatch saw at its worst moments.
type ProxySeen struct {
	// Most is the most pods not being deleted on one node at once, on
	// MostOn.
	Most   int
	MostOn string
	// TwoOwners names a node that at some moment had pods of two
	// DaemonSets, counting pods being deleted (their kube-proxy may still
	// run): empty when none ever had.
	TwoOwners string
	// Unready is the largest set of the watched nodes without a Ready
	// pod (not being deleted) at one moment.
	Unready []string
}

// WatchProxies lists the pods selector selects in ns, then follows them
// until Stop (or the test's end), over nodes.
func WatchProxies(t testing.TB, client kubernetes.Interface, ns, selector string, nodes []string) *ProxyWatch {
	t.Helper()
	pw := &ProxyWatch{pods: map[types.UID]*corev1.Pod{}, nodes: nodes}
	pods := client.CoreV1().Pods(ns)
	pw.stop = Follow(t, func(ctx context.Context) (watch.Interface, error) {
		list, err := pods.List(ctx, metav1.ListOptions{LabelSelector: selector})
		if err != nil {
			return nil, err
		}
		pw.mu.Lock()
		for i := range list.Items {
			pw.pods[list.Items[i].UID] = &list.Items[i]
		}
		pw.mu.Unlock()
		pw.add(watch.Modified, nil) // the list as it is, then every event
		return pods.Watch(ctx, metav1.ListOptions{LabelSelector: selector, ResourceVersion: list.ResourceVersion})
	}, func(_ context.Context, ev watch.EventType, p *corev1.Pod) { pw.add(ev, p) })
	return pw
}

func (pw *ProxyWatch) add(ev watch.EventType, p *corev1.Pod) {
	pw.mu.Lock()
	defer pw.mu.Unlock()
	switch {
	case p == nil:
	case ev == watch.Deleted:
		delete(pw.pods, p.UID)
	default:
		pw.pods[p.UID] = p
	}
	live, ready, owners := map[string]int{}, map[string]bool{}, map[string]map[string]bool{}
	for _, q := range pw.pods {
		n := q.Spec.NodeName
		if n == "" {
			continue
		}
		if owners[n] == nil {
			owners[n] = map[string]bool{}
		}
		if ref := metav1.GetControllerOf(q); ref != nil {
			owners[n][ref.Name] = true
		}
		if q.DeletionTimestamp == nil {
			live[n]++
			ready[n] = ready[n] || PodReady(q)
		}
	}
	for n, k := range live {
		if k > pw.seen.Most {
			pw.seen.Most, pw.seen.MostOn = k, n
		}
	}
	for n, o := range owners {
		if len(o) > 1 && pw.seen.TwoOwners == "" {
			pw.seen.TwoOwners = n
		}
	}
	var unready []string
	for _, n := range pw.nodes {
		if !ready[n] {
			unready = append(unready, n)
		}
	}
	sort.Strings(unready)
	if len(unready) > len(pw.seen.Unready) {
		pw.seen.Unready = unready
	}
}

// Stop ends the watch and returns what it saw.
func (pw *ProxyWatch) Stop() ProxySeen {
	pw.stop()
	pw.mu.Lock()
	defer pw.mu.Unlock()
	return pw.seen
}
