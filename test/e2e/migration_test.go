//go:build e2e

package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kube-proxy-sync/kube-proxy-sync/internal/configmap"
	"github.com/kube-proxy-sync/kube-proxy-sync/internal/kpsync"
	"github.com/kube-proxy-sync/kube-proxy-sync/test/e2e/cluster"
)

// IPVS -> nftables (kubespray's default mode to the GA one) on kwok, for
// the plan and the control flow: IPVS cannot run on the kind tier's
// kernel, where iptables <-> nftables runs on real kube-proxies
// (test/realnode). --check plans the migration and writes nothing; a
// canary whose pod cannot come back stops the migration there, rolled
// back, every other node's pod untouched; then the migration goes canary
// first, never more than one node without a Ready kube-proxy, and the
// template ends on a copy in nftables mode.
func TestProxyModeMigrationFromIPVS(t *testing.T) {
	c := cluster.Connect(t)
	c.Reset(t)
	setRecordMode(t, c, "ipvs")
	require.Equal(t, 0, runSync(t, c, "--probe-path", "none").Code) // adopt, in ipvs mode
	extra := addNodes(t, c, "ipvs", 4)                              // sort before node-*
	// kwok's nodes run no kube-proxy to ask: the operator accepts that
	// each node is reported unchecked (by default it stops the migration,
	// see TestMigrationStopsOnANodeThatCannotBeChecked)
	args := []string{"--set", "mode=nftables", "--probe-path", "none", "--timeout", "3m", "--verify-health", "auto"}

	t.Run("the plan writes nothing", func(t *testing.T) {
		cm, ds := c.ConfigMap(t), c.DaemonSet(t)
		r := runSync(t, c, append([]string{"--check"}, args...)...)
		require.Contains(t, []int{0, 2}, r.Code, r.Msg+"\n"+r.Stderr)
		m := r.facts().Migration
		require.NotNil(t, m, "%s", r.Msg)
		assert.Equal(t, "ipvs", m.From)
		assert.Equal(t, "nftables", m.To)
		assert.Equal(t, kpsync.StrategyCanary, m.Strategy, "canary first, whatever --strategy")
		assert.Equal(t, "rolling", m.StrategyAsked)
		assert.Equal(t, "auto", m.VerifyHealth, "each migrated node's kube-proxy checked")
		assert.Contains(t, m.Cleanup, "IPVS")
		assert.Len(t, m.CanaryNodes, 1)
		assert.Equal(t, cm.ResourceVersion, c.ConfigMap(t).ResourceVersion)
		// the DaemonSet controller writes its status meanwhile: compare what
		// a run writes, the spec (generation) and the annotations
		after := c.DaemonSet(t)
		assert.Equal(t, ds.Generation, after.Generation, "the DaemonSet's spec is as it was")
		assert.Equal(t, ds.Annotations, after.Annotations)
	})

	t.Run("a canary that cannot come back stops it", func(t *testing.T) {
		remove := denyKubeProxyPodsOn(t, c, extra[0]) // the first node by name: the canary
		before := c.PodUIDs(t)
		r := runSync(t, c, append([]string{"--progress-deadline", "15s"}, args...)...)
		assert.Equal(t, 1, r.Code, r.Msg+"\n"+r.Stderr)
		f := r.facts()
		assert.True(t, f.RolledBack, "%s", r.Msg)
		assert.Equal(t, []string{extra[0]}, f.Rollout.CanaryNodes)
		require.NotNil(t, f.Migration)
		assert.Equal(t, "ipvs", f.Migration.From)
		kept := untouched(before, c.PodUIDs(t))
		assert.Len(t, kept, len(before)-1, "only the canary lost its pod: %v", kept)
		assert.NotContains(t, kept, extra[0])
		remove()
		c.WaitRolloutComplete(t, 3*time.Minute)
		assert.Contains(t, c.MountedConfigMap(t).Data[configmap.ConfigKey], "mode: ipvs", "the template points back at the ipvs config")
	})

	t.Run("migrated, canary first", func(t *testing.T) {
		before := c.PodUIDs(t)
		s := sampleRollout(t, c)
		r := runSync(t, c, args...)
		samples := s.stop()
		require.Equal(t, 0, r.Code, r.Msg+"\n"+r.Stderr)
		f := r.facts()
		require.NotNil(t, f.Migration)
		assert.Equal(t, "nftables", f.Migration.To)
		assert.Equal(t, kpsync.StrategyCanary, f.Rollout.Strategy)
		require.Len(t, f.Rollout.CanaryNodes, 1)
		require.Len(t, samples.replacedOrder, len(before), "every node's pod replaced")
		assert.Equal(t, f.Rollout.CanaryNodes[0], samples.replacedOrder[0], "the canary's pod first: %v", samples.replacedOrder)
		assert.LessOrEqual(t, samples.maxUnavailable, 1, "never more than maxUnavailable (1) without a Ready kube-proxy (sampled by a watch)")
		assert.Empty(t, untouched(before, c.PodUIDs(t)), "every pod replaced")
		assert.Contains(t, assertMountsCopy(t, c).Data[configmap.ConfigKey], "mode: nftables")
		assertRecordFollows(t, c)
	})
}

// setRecordMode writes mode into the record ConfigMap, as a cluster that
// was set up in that mode has it.
func setRecordMode(t *testing.T, c *cluster.Cluster, mode string) {
	t.Helper()
	cm := c.ConfigMap(t)
	conf := cm.Data[configmap.ConfigKey]
	require.Contains(t, conf, "\nmode: iptables\n", "the seed record's mode")
	cm.Data[configmap.ConfigKey] = strings.Replace(conf, "\nmode: iptables\n", "\nmode: "+mode+"\n", 1)
	_, err := c.Client.CoreV1().ConfigMaps(c.Namespace).Update(context.Background(), cm, metav1.UpdateOptions{})
	require.NoError(t, err)
}
