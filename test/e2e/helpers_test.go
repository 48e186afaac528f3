//go:build e2e

// Package e2e runs kube-proxy-sync against a real API server: the local
// control plane (make cluster-up) or any cluster given by KUBECONFIG.
package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/clock"

	"github.com/kube-proxy-sync/kube-proxy-sync/internal/app"
	"github.com/kube-proxy-sync/kube-proxy-sync/internal/kpsync"
	"github.com/kube-proxy-sync/kube-proxy-sync/test/e2e/cluster"
)

type result struct {
	Code    int
	Changed bool   `json:"changed"`
	Failed  bool   `json:"failed"`
	Msg     string `json:"msg"`
	kpsync.Facts
	Diff     map[string]string `json:"diff"`
	Warnings []string          `json:"warnings"`
	Stderr   string
}

func (r result) facts() kpsync.Facts { return r.Facts }

// runSync runs the command in-process against the cluster, JSON output.
func runSync(t *testing.T, c *cluster.Cluster, args ...string) result {
	t.Helper()
	var out, errOut bytes.Buffer
	args = append([]string{"--kubeconfig", c.KubeconfigPath, "--output", "json", "--timeout", "3m"}, args...)
	code := app.Run(context.Background(), app.Streams{Out: &out, ErrOut: &errOut}, args, app.Deps{Clock: clock.RealClock{}})
	var r result
	require.NoError(t, json.Unmarshal(out.Bytes(), &r), "stdout: %s\nstderr: %s", out.String(), errOut.String())
	r.Code, r.Stderr = code, errOut.String()
	return r
}

// podHistory records, per node, every kube-proxy pod UID that appeared
// while it ran: a node whose pod was replaced once shows two.
type podHistory struct {
	mu   sync.Mutex
	uids map[string]map[types.UID]bool
	stop func()
}

func watchPods(t *testing.T, c *cluster.Cluster) *podHistory {
	t.Helper()
	h := &podHistory{uids: map[string]map[types.UID]bool{}}
	h.stop = onPodEvents(t, c, true, func(_ context.Context, p *corev1.Pod) { h.add(p) })
	return h
}

// listed is the event type podEvents gives the pods of its first list.
const listed watch.EventType = "LISTED"

// onPodEvents calls fn with each kube-proxy pod listed now (when withList is
// set), then, from a watch, with every pod added or modified after, until
// the returned stop is called (at the test's cleanup at the latest).
func onPodEvents(t *testing.T, c *cluster.Cluster, withList bool, fn func(ctx context.Context, p *corev1.Pod)) (stop func()) {
	t.Helper()
	return podEvents(t, c, func(ctx context.Context, ev watch.EventType, p *corev1.Pod) {
		if ev != watch.Deleted && (withList || ev != listed) {
			fn(ctx, p)
		}
	})
}

// podEvents calls fn with each kube-proxy pod listed now (event type
// listed), then with every watch event from that list on, deletions
// included, until the returned stop is called (at cleanup at the latest).
func podEvents(t *testing.T, c *cluster.Cluster, fn func(ctx context.Context, ev watch.EventType, p *corev1.Pod)) (stop func()) {
	t.Helper()
	pods := c.Client.CoreV1().Pods(c.Namespace)
	return cluster.Follow(t, func(ctx context.Context) (watch.Interface, error) {
		list, err := pods.List(ctx, metav1.ListOptions{LabelSelector: cluster.PodSelector})
		if err != nil {
			return nil, err
		}
		for i := range list.Items {
			fn(ctx, listed, &list.Items[i])
		}
		return pods.Watch(ctx, metav1.ListOptions{LabelSelector: cluster.PodSelector, ResourceVersion: list.ResourceVersion})
	}, fn)
}

// podStates follows the kube-proxy DaemonSet's pods (by its controller
// reference: a pod that only carries its labels is none of them) and,
// after every watch event, passes observe the nodes that have a Ready pod
// not being deleted. It records the order in which the pods there at the
// start went away.
type podStates struct {
	mu            sync.Mutex
	replacedOrder []string
	events        int
	stop          func()
}

func followPods(t *testing.T, c *cluster.Cluster, observe func(readyNodes map[string]bool)) *podStates {
	t.Helper()
	type pod struct {
		node       string
		ready, old bool
	}
	st := &podStates{}
	pods := map[types.UID]pod{}
	gone := map[types.UID]bool{}
	owner := c.DaemonSet(t).UID
	st.stop = podEvents(t, c, func(_ context.Context, ev watch.EventType, p *corev1.Pod) {
		if ref := metav1.GetControllerOf(p); ref == nil || ref.UID != owner {
			return
		}
		st.mu.Lock()
		defer st.mu.Unlock()
		if ev == listed {
			pods[p.UID] = pod{p.Spec.NodeName, podIsReady(p), true}
			return
		}
		st.events++
		prev, known := pods[p.UID]
		if ev == watch.Deleted || p.DeletionTimestamp != nil {
			if known && prev.old && !gone[p.UID] {
				gone[p.UID] = true
				st.replacedOrder = append(st.replacedOrder, prev.node)
			}
			delete(pods, p.UID)
		} else if p.Spec.NodeName != "" {
			pods[p.UID] = pod{p.Spec.NodeName, podIsReady(p), known && prev.old}
		}
		ready := map[string]bool{}
		for _, q := range pods {
			if q.ready {
				ready[q.node] = true
			}
		}
		observe(ready)
	})
	return st
}

// Stop ends the watch and returns the replaced order and the event count.
func (st *podStates) Stop() (replacedOrder []string, events int) {
	st.stop()
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.replacedOrder, st.events
}

func (h *podHistory) add(p *corev1.Pod) {
	if p.Spec.NodeName == "" {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.uids[p.Spec.NodeName] == nil {
		h.uids[p.Spec.NodeName] = map[types.UID]bool{}
	}
	h.uids[p.Spec.NodeName][p.UID] = true
}

// Stop ends the watch and returns how many pods each node had.
func (h *podHistory) Stop() map[string]int {
	h.stop()
	h.mu.Lock()
	defer h.mu.Unlock()
	out := map[string]int{}
	for node, uids := range h.uids {
		out[node] = len(uids)
	}
	return out
}

// kubectl finds the kubectl that make cluster-up built, else the one on
// PATH. Without one the test skips, or fails where the tier is required
// (cluster.Required: CI, make test).
func kubectl(t *testing.T, c *cluster.Cluster) string {
	t.Helper()
	if p := filepath.Join(c.RepoRoot, ".cache", "bin", "kubectl"); fileExists(p) {
		return p
	}
	p, err := exec.LookPath("kubectl")
	if err != nil {
		msg := "no kubectl in .cache/bin nor on PATH: run make cluster-up (or hack/build/tools.sh), which builds .cache/bin/kubectl"
		if cluster.Required() {
			t.Fatalf("kubectl required (CI=true or E2E_REQUIRED=1): %s", msg)
		}
		t.Skip(msg)
	}
	return p
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}
