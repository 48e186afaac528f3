//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"sort"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kube-proxy-sync/kube-proxy-sync/internal/rollout"
	"github.com/kube-proxy-sync/kube-proxy-sync/test/e2e/cluster"
)

const zoneLabel = "topology.kubernetes.io/zone"

// zonedNodes adds 3 kwok nodes in each of zone-a, zone-b and zone-c (the
// harness's own nodes have no zone label) and returns node -> zone for all
// nodes, "" for the unlabelled ones.
func zonedNodes(t *testing.T, c *cluster.Cluster, prefix string) map[string]string {
	t.Helper()
	added := addNodes(t, c, prefix, 9)
	zoneOf := map[string]string{}
	for n := range c.PodUIDs(t) {
		zoneOf[n] = ""
	}
	for i, n := range added {
		z := fmt.Sprintf("zone-%c", 'a'+i/3)
		patch := fmt.Sprintf(`{"metadata":{"labels":{%q:%q}}}`, zoneLabel, z)
		_, err := c.Client.CoreV1().Nodes().Patch(context.Background(), n, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
		require.NoError(t, err)
		zoneOf[n] = z
	}
	return zoneOf
}

type zoneSamples struct {
	// maxZones is the most zones seen at once with a node whose
	// kube-proxy was not Ready (in flight); maxPerZone the most such nodes
	// of one zone, maxTotal of all zones together
	maxZones, maxPerZone, maxTotal int
	// replacedOrder: the nodes, in the order their old pod went away
	replacedOrder []string
	events        int
}

// sampleZones watches kube-proxy pods and, at every event, counts per zone
// the nodes without a Ready, non-terminating pod.
func sampleZones(t *testing.T, c *cluster.Cluster, zoneOf map[string]string) func() zoneSamples {
	t.Helper()
	var out zoneSamples
	follow := followPods(t, c, func(ready map[string]bool) {
		perZone := map[string]int{}
		total := 0
		for n, z := range zoneOf {
			if !ready[n] {
				perZone[z]++
				total++
			}
		}
		out.maxZones = max(out.maxZones, len(perZone))
		out.maxTotal = max(out.maxTotal, total)
		for _, k := range perZone {
			out.maxPerZone = max(out.maxPerZone, k)
		}
	})
	return func() zoneSamples {
		out.replacedOrder, out.events = follow.Stop()
		return out
	}
}

// 9 nodes in 3 zones plus the unlabelled ones: the restart goes zone by
// zone (canary zone first, unlabelled last), a watch never sees two zones
// in flight at once nor more nodes than the batch size.
func TestZonalRolloutOneZoneAtATime(t *testing.T) {
	c := cluster.Connect(t)
	c.Reset(t)
	require.Equal(t, 0, runSync(t, c, "--probe-path", "none").Code) // adopt
	zoneOf := zonedNodes(t, c, "zonal")
	before := c.PodUIDs(t)

	stop := sampleZones(t, c, zoneOf)
	r := runSync(t, c, "--server", "https://10.96.0.7:6443", "--probe-path", "none", "--timeout", "3m",
		"--strategy", "zonal", "--canary-nodes", "1", "--batch-size", "2")
	s := stop()
	require.Equal(t, 0, r.Code, r.Msg+"\n"+r.Stderr)
	// the watch's view
	assert.Equal(t, 1, s.maxZones, "never two zones in flight at once (%d events sampled)", s.events)
	assert.LessOrEqual(t, s.maxTotal, 2, "never more than the batch size in flight")
	assert.LessOrEqual(t, s.maxPerZone, 2)
	require.Len(t, s.replacedOrder, len(zoneOf), "every node's pod replaced once")
	var order []string
	for _, n := range s.replacedOrder {
		z := zoneOf[n]
		if z == "" {
			z = rollout.NoZone
		}
		if len(order) == 0 || order[len(order)-1] != z {
			order = append(order, z)
		}
	}
	f := r.facts()
	assert.Equal(t, "zonal", f.Rollout.Strategy)
	var names []string
	for _, z := range f.Rollout.Zones {
		names = append(names, z.Name)
		assert.True(t, z.Done, z.Name)
		want := []string{}
		for n, zz := range zoneOf {
			if zz == z.Name || zz == "" && z.Name == rollout.NoZone {
				want = append(want, n)
			}
		}
		sort.Strings(want)
		assert.Equal(t, want, z.Nodes, z.Name)
		assert.Len(t, z.Canary, 1, z.Name)
	}
	assert.Equal(t, []string{"zone-a", "zone-b", "zone-c", rollout.NoZone}, names, "by name, unlabelled last")
	require.Len(t, f.Rollout.Zones, 4)
	assert.Equal(t, f.Rollout.Zones[0].Canary, f.Rollout.CanaryNodes)

	assert.Equal(t, names, order, "pods replaced zone after zone, each zone once")
	assert.Equal(t, f.Rollout.CanaryNodes[0], s.replacedOrder[0], "the canary first")
	cluster.AssertAllReplaced(t, before, c.PodUIDs(t))
}

// The canary of the first zone never comes back. Without rollback: the run
// fails, the DaemonSet stays on OnDelete so nothing rolls the other zones
// later, and no pod outside that canary node was replaced (UIDs unchanged).
// With the default rollback: the template goes back, and still no other
// pod is replaced.
func TestZonalFailedCanaryLeavesOtherZonesUntouched(t *testing.T) {
	for _, tc := range []struct {
		name     string
		args     []string
		rollback bool
	}{
		{"no rollback", []string{"--no-rollback"}, false},
		{"rollback", nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := cluster.Connect(t)
			c.Reset(t)
			require.Equal(t, 0, runSync(t, c, "--probe-path", "none").Code) // adopt
			prefix := "zfail"
			if tc.rollback {
				prefix = "zback"
			}
			zoneOf := zonedNodes(t, c, prefix)
			canary := prefix + "-00" // zone-a sorts first, its first node is its canary
			require.Equal(t, "zone-a", zoneOf[canary])
			denyKubeProxyPodsOn(t, c, canary)
			before := c.PodUIDs(t)
			template := c.DaemonSet(t).Spec.Template.Annotations[rollout.RestartedAtAnnotation]

			args := append([]string{"--server", "https://10.96.0.8:6443", "--probe-path", "none", "--progress-deadline", "15s",
				"--strategy", "zonal", "--canary-nodes", "1", "--batch-size", "2"}, tc.args...)
			r := runSync(t, c, args...)
			require.Equal(t, 1, r.Code, r.Msg+"\n"+r.Stderr)
			f := r.facts()
			assert.Equal(t, []string{canary}, f.Rollout.CanaryNodes)
			require.NotEmpty(t, f.Rollout.Zones)
			assert.Equal(t, "zone-a", f.Rollout.Zones[0].Name)
			assert.False(t, f.Rollout.Zones[0].Done)
			assert.Equal(t, tc.rollback, f.RolledBack, r.Msg)

			ds := c.DaemonSet(t)
			if tc.rollback {
				assert.Equal(t, template, ds.Spec.Template.Annotations[rollout.RestartedAtAnnotation], "the template is the one the pods run")
			} else {
				assert.Equal(t, appsv1.OnDeleteDaemonSetStrategyType, ds.Spec.UpdateStrategy.Type, "nothing rolls the other zones after the run")
			}
			after := c.PodUIDs(t)
			for n, uid := range before {
				if n == canary {
					continue
				}
				assert.Equal(t, uid, after[n], "node %s (zone %q): its kube-proxy pod must not be replaced", n, zoneOf[n])
			}
		})
	}
}
