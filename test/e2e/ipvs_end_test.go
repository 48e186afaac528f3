//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/kube-proxy-sync/kube-proxy-sync/internal/configmap"
	"github.com/kube-proxy-sync/kube-proxy-sync/internal/kpsync"
	"github.com/kube-proxy-sync/kube-proxy-sync/test/e2e/cluster"
)

// IPVS ends (kube-proxy 1.40 does not start in ipvs mode by default), and
// the move to nftables must not be the first to find a node that cannot
// run it. Each test here is a refusal or a stop on the real API server,
// with nothing restarted.

// setKernel writes a node's kernel version as its kubelet would report
// it, and puts the one before back when the test ends.
func setKernel(t *testing.T, c *cluster.Cluster, node, kernel string) {
	t.Helper()
	ctx := context.Background()
	n, err := c.Client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	require.NoError(t, err)
	patch := func(k string) error {
		body, _ := json.Marshal(map[string]any{"status": map[string]any{"nodeInfo": map[string]any{"kernelVersion": k}}})
		_, err := c.Client.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, body, metav1.PatchOptions{}, "status")
		return err
	}
	was := n.Status.NodeInfo.KernelVersion
	require.NoError(t, patch(kernel))
	t.Cleanup(func() { assert.NoError(t, patch(was)) })
}

// A node with a kernel older than 5.13 (status.nodeInfo) makes a move to
// nftables refuse before any write, naming the node.
func TestMigrationRefusedWhileANodeHasAnOldKernel(t *testing.T) {
	c := cluster.Connect(t)
	c.Reset(t)
	t.Cleanup(func() { c.Reset(t) })
	nodes := c.PodUIDs(t)
	var node string
	for n := range nodes {
		node = n
		break
	}
	require.NotEmpty(t, node)
	setKernel(t, c, node, "4.18.0-553.el8_10.x86_64")
	before := stateOf(t, c)
	r := runSync(t, c, "--set", "mode=nftables", "--probe-path", "none", "--verify-health", "auto")
	assert.Equal(t, 1, r.Code, r.Msg)
	assert.Contains(t, r.Msg, node+" (kernel 4.18.0-553.el8_10.x86_64)")
	assertUntouched(t, c, before)
	assert.Equal(t, nodes, c.PodUIDs(t), "no pod replaced")
}

// With default flags a migration checks every node's kube-proxy, and a
// node it cannot ask (kwok's nodes run none) stops it before any pod is
// replaced.
func TestMigrationStopsOnANodeThatCannotBeChecked(t *testing.T) {
	c := cluster.Connect(t)
	c.Reset(t)
	t.Cleanup(func() { c.Reset(t) })
	before := c.PodUIDs(t)
	r := runSync(t, c, "--set", "mode=nftables", "--probe-path", "none")
	assert.Equal(t, 1, r.Code, r.Msg)
	require.NotNil(t, r.facts().Migration, r.Msg)
	assert.Equal(t, "required", r.facts().Migration.VerifyHealth)
	assert.Contains(t, r.Msg, "cannot be reached")
	assert.Len(t, untouched(before, c.PodUIDs(t)), len(before), "every node kept its kube-proxy pod")
	_, err := c.Client.CoreV1().Services(c.Namespace).Get(context.Background(), kpsync.ProbeServiceName, metav1.GetOptions{})
	assert.True(t, apierrors.IsNotFound(err), "the run's own Service is gone after the stop: %v", err)
}

// An upgrade onto a kube-proxy that will not start in the running mode
// (ipvs from 1.40) is refused before any write, naming the migration.
func TestUpgradeOntoAKubeProxyThatWillNotStartIsRefused(t *testing.T) {
	c := cluster.Connect(t)
	c.Reset(t)
	t.Cleanup(func() { c.Reset(t) })
	setRecordMode(t, c, "ipvs")
	require.Equal(t, 0, runSync(t, c, "--probe-path", "none").Code) // adopt, in ipvs mode
	c.WaitRolloutComplete(t, time.Minute)
	before := stateOf(t, c)
	pods := c.PodUIDs(t)
	r := runSync(t, c, "--image", "registry.k8s.io/kube-proxy:v1.40.0", "--probe-path", "none")
	assert.Equal(t, 1, r.Code, r.Msg)
	assert.Contains(t, r.Msg, "kube-proxy in ipvs mode does not start from 1.40")
	assert.Contains(t, r.Msg, "--set mode=nftables")
	assertUntouched(t, c, before)
	assert.Equal(t, pods, c.PodUIDs(t), "no pod replaced")
}

// A migration checks traffic through a Service of its own when none is
// named: made before the first write, gone when the run ends; one a killed
// run left behind is deleted first. Followed by a watch on the Service.
func TestMigrationOwnServiceIsMadeAndRemoved(t *testing.T) {
	c := cluster.Connect(t)
	c.Reset(t)
	t.Cleanup(func() { c.Reset(t) })
	ctx := context.Background()
	api := c.Client.CoreV1().Services(c.Namespace)
	// what a SIGKILLed run leaves behind
	leftover, err := api.Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: kpsync.ProbeServiceName, Labels: map[string]string{configmap.ManagedByLabel: "kube-proxy-sync"}},
		Spec:       corev1.ServiceSpec{Selector: map[string]string{"k8s-app": "kube-proxy"}, Ports: []corev1.ServicePort{{Port: 10256}}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	w, err := api.Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + kpsync.ProbeServiceName, ResourceVersion: leftover.ResourceVersion})
	require.NoError(t, err)
	defer w.Stop()

	// kwok's nodes run no kube-proxy to ask: accepted (auto)
	r := runSync(t, c, "--set", "mode=nftables", "--probe-path", "none", "--verify-health", "auto")
	require.Equal(t, 0, r.Code, r.Msg+"\n"+r.Stderr)
	m := r.facts().Migration
	require.NotNil(t, m, r.Msg)
	assert.Equal(t, c.Namespace+"/"+kpsync.ProbeServiceName, m.VerifyTraffic)
	// the pod path too, from kube-proxy's own image: no node answered
	// healthy to try it on before any restart, so nothing left it out
	assert.Equal(t, []string{"node", "pod", "nodeport"}, m.VerifyTrafficPaths)

	_, err = api.Get(ctx, kpsync.ProbeServiceName, metav1.GetOptions{})
	assert.True(t, apierrors.IsNotFound(err), "no Service left behind: %v", err)
	// the watch's events up to the Service's deletion: the leftover
	// deleted, the run's own added, then deleted
	var events []string
	deadline := time.After(30 * time.Second)
	for len(events) < 3 {
		select {
		case ev, ok := <-w.ResultChan():
			require.True(t, ok, "the watch ended after %v", events)
			svc, isSvc := ev.Object.(*corev1.Service)
			require.True(t, isSvc, "%s %T", ev.Type, ev.Object)
			who := "own"
			if svc.UID == leftover.UID {
				who = "leftover"
			} else {
				assert.Equal(t, corev1.ServiceTypeNodePort, svc.Spec.Type)
			}
			if ev.Type != watch.Modified {
				events = append(events, string(ev.Type)+" "+who)
			}
		case <-deadline:
			t.Fatalf("the Service's events so far: %v", events)
		}
	}
	assert.Equal(t, []string{"DELETED leftover", "ADDED own", "DELETED own"}, events)
}
