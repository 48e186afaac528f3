//go:build e2e

package e2e

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kube-proxy-sync/kube-proxy-sync/internal/configmap"
	"github.com/kube-proxy-sync/kube-proxy-sync/internal/kpsync"
	"github.com/kube-proxy-sync/kube-proxy-sync/internal/rollout"
	"github.com/kube-proxy-sync/kube-proxy-sync/test/e2e/cluster"
)

// A change no running kube-proxy reads (ipvs.* in iptables mode) replaces
// no pod. While the template mounts the ConfigMap kube-proxy itself
// (kubeadm's layout) it is written nowhere, since the pods read that
// ConfigMap, and is reported as deferred; the next run that restarts
// carries it. While the template mounts a copy, the no-effect change is
// written to the ConfigMap, which no pod reads, and replaces no pod; a
// rerun writes nothing; a later real change (the mode) replaces each pod
// exactly once, onto a copy holding both changes, and the DaemonSet is
// then stamped with that data; a rerun after that replaces nothing.
func TestNoEffectChangeThenRealChangeRestartsOnce(t *testing.T) {
	c := cluster.Connect(t)
	c.Reset(t)
	// adopt first, so this test sees only its own changes
	r := runSync(t, c, "--probe-path", "none")
	require.Equal(t, 0, r.Code, r.Msg)
	require.Contains(t, c.ConfigMap(t).Data[configmap.ConfigKey], "mode: iptables")
	require.Equal(t, cluster.Name, cluster.MountedConfigMapName(c.DaemonSet(t)), "kubeadm's layout")

	// a. kubeadm's layout: the no-effect change is not written anywhere
	state, pods := stateOf(t, c), c.PodUIDs(t)
	r = runSync(t, c, "--set", "ipvs.strictARP=true", "--probe-path", "none")
	require.Equal(t, 0, r.Code, r.Msg+"\n"+r.Stderr)
	assert.False(t, r.Changed)
	assert.Equal(t, []string{"config.conf:ipvs.strictARP"}, r.facts().DeferredKeys)
	assert.False(t, r.facts().ConfigMapChanged)
	assert.False(t, r.facts().Restarted)
	assertUntouched(t, c, state)
	assert.NotContains(t, c.ConfigMap(t).Data[configmap.ConfigKey], "strictARP: true")
	cluster.AssertNoneReplaced(t, pods, c.PodUIDs(t))

	// b. the next run that restarts (here forced) carries it, onto a copy
	r = runSync(t, c, "--set", "ipvs.strictARP=true", "--restart", "always", "--probe-path", "none")
	require.Equal(t, 0, r.Code, r.Msg+"\n"+r.Stderr)
	assert.True(t, r.facts().Restarted)
	assert.Equal(t, kpsync.ReasonForced, r.facts().RestartReason)
	assert.Empty(t, r.facts().DeferredKeys)
	cluster.AssertAllReplaced(t, pods, c.PodUIDs(t))
	assert.Contains(t, assertMountsCopy(t, c).Data[configmap.ConfigKey], "strictARP: true")
	assertRecordFollows(t, c)

	stamp := c.DaemonSet(t).Annotations[rollout.HashAnnotation]
	require.NotEmpty(t, stamp)
	dsBefore := c.DaemonSet(t)
	mounted := cluster.MountedConfigMapName(dsBefore)
	before := c.PodUIDs(t)
	require.NotEmpty(t, before)

	// 0. check mode and diff show the effect and write nothing
	r = runSync(t, c, "--check", "--diff", "--set", "ipvs.scheduler=lc", "--probe-path", "none")
	require.Equal(t, 0, r.Code, r.Msg+"\n"+r.Stderr)
	assert.True(t, r.Changed)
	assert.False(t, r.facts().RestartRequired)
	assert.Equal(t, kpsync.ReasonNoEffect, r.facts().RestartReason)
	assert.Equal(t, map[string]string{"config.conf:ipvs.scheduler": "no-effect"}, r.facts().ChangedKeysEffect)
	assert.Contains(t, r.Diff["after_header"], "config.conf:ipvs.scheduler: no-effect")
	assert.Equal(t, dsBefore.Annotations, c.DaemonSet(t).Annotations, "check mode writes nothing")
	assert.NotContains(t, c.ConfigMap(t).Data[configmap.ConfigKey], "scheduler: lc")

	// 1. the no-effect change, while the template mounts a copy
	r = runSync(t, c, "--set", "ipvs.scheduler=lc", "--probe-path", "none")
	require.Equal(t, 0, r.Code, r.Msg+"\n"+r.Stderr)
	f := r.facts()
	assert.True(t, r.Changed)
	assert.True(t, f.ConfigMapChanged)
	assert.False(t, f.Restarted)
	assert.False(t, f.RestartRequired)
	assert.Equal(t, kpsync.ReasonNoEffect, f.RestartReason)
	assert.Equal(t, map[string]string{"config.conf:ipvs.scheduler": "no-effect"}, f.ChangedKeysEffect)
	// 2 captures and the copy the template mounts (checked by every run),
	// 12 access reviews (no pod or node verbs: nothing rolls), the Lease
	// (acquire 2, release 1), the same 3 reads under it, one LIST of
	// the DaemonSets (none other mounts the record, which is written in
	// place), the record on the DaemonSet, the ConfigMap write, the capture
	// after it, 1 Event (the template mounts a copy, so no pod of the
	// current template mounts the record; no copy made, so no history to
	// collect); one LIST of the pods more while the DaemonSet's status
	// says a rollout is not complete (pods of an older template may mount
	// the record)
	t.Logf("the no-effect run: %d API requests", f.APIRequests)
	assert.LessOrEqual(t, f.APIRequests, int64(27), "no-effect run API requests")
	assert.True(t, f.RecordChanged)
	cm := c.ConfigMap(t)
	assert.Contains(t, cm.Data[configmap.ConfigKey], "scheduler: lc")
	ds := c.DaemonSet(t)
	assert.Equal(t, mounted, cluster.MountedConfigMapName(ds), "the template mounts the copy it did")
	assert.NotContains(t, c.MountedConfigMap(t).Data[configmap.ConfigKey], "scheduler: lc", "a copy is never written")
	assert.Equal(t, stamp, ds.Annotations[rollout.HashAnnotation], "the pods still run what they were restarted for")
	assert.Equal(t, configmap.Hash(cm.Data, cm.BinaryData)+"@"+stamp, ds.Annotations[rollout.NoEffectAnnotation])
	assert.Equal(t, dsBefore.Generation, ds.Generation, "the pod template is untouched")
	assert.Equal(t, dsBefore.Spec.Template.Annotations, ds.Spec.Template.Annotations)
	cluster.AssertNoneReplaced(t, before, c.PodUIDs(t))

	// 2. a rerun writes nothing
	rv := cm.ResourceVersion
	r = runSync(t, c, "--set", "ipvs.scheduler=lc", "--probe-path", "none")
	require.Equal(t, 0, r.Code, r.Msg)
	assert.False(t, r.Changed)
	assert.False(t, r.facts().RestartRequired)
	assert.Equal(t, rv, c.ConfigMap(t).ResourceVersion)
	assert.Equal(t, ds.Annotations, c.DaemonSet(t).Annotations, "nor the DaemonSet")
	cluster.AssertNoneReplaced(t, before, c.PodUIDs(t))

	// 3. a real change: every pod replaced exactly once
	history := watchPods(t, c)
	r = runSync(t, c, "--set", "mode=ipvs", "--probe-path", "none")
	require.Equal(t, 0, r.Code, r.Msg+"\n"+r.Stderr)
	perNode := history.Stop()
	f = r.facts()
	assert.True(t, f.Restarted)
	assert.Equal(t, kpsync.ReasonConfigChanged, f.RestartReason)
	assert.Equal(t, map[string]string{"config.conf:mode": "restart"}, f.ChangedKeysEffect)
	after := c.PodUIDs(t)
	cluster.AssertAllReplaced(t, before, after)
	require.Len(t, perNode, len(before))
	for node, n := range perNode {
		assert.Equal(t, 2, n, "node %s: want its pod replaced exactly once (old + new UID)", node)
	}
	cm = assertMountsCopy(t, c)
	assert.NotEqual(t, mounted, cm.Name, "a new copy")
	assert.Equal(t, cm.Name, f.ConfigMapName)
	assert.Equal(t, mounted, f.PreviousConfigMap)
	assert.Contains(t, cm.Data[configmap.ConfigKey], "scheduler: lc", "the pods started now read the earlier change")
	assert.Contains(t, cm.Data[configmap.ConfigKey], "mode: ipvs")
	assert.Contains(t, cm.Data[configmap.ConfigKey], "strictARP: true")
	assertRecordFollows(t, c)
	ds = c.DaemonSet(t)
	assert.Equal(t, configmap.Hash(cm.Data, cm.BinaryData), ds.Annotations[rollout.HashAnnotation])
	assert.NotContains(t, ds.Annotations, rollout.NoEffectAnnotation, "the restart drops the record")

	// 4. a rerun replaces nothing
	r = runSync(t, c, "--set", "mode=ipvs", "--set", "ipvs.scheduler=lc", "--probe-path", "none")
	require.Equal(t, 0, r.Code, r.Msg)
	assert.False(t, r.Changed)
	assert.False(t, r.facts().Restarted)
	cluster.AssertNoneReplaced(t, after, c.PodUIDs(t))
}
