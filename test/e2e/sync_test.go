//go:build e2e

package e2e

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kube-proxy-sync/kube-proxy-sync/internal/kpsync"
	"github.com/kube-proxy-sync/kube-proxy-sync/test/e2e/cluster"
)

// A changed server replaces every kube-proxy pod exactly once and waits for
// the rollout; an immediate rerun changes nothing. The config travels with
// the template: the pods started read an immutable copy of the new data,
// and the ConfigMap kube-proxy (the record kubeadm reads), which no pod
// mounts then, holds the same data at the end.
func TestServerChangeRollsOnceThenRerunIsNoop(t *testing.T) {
	c := cluster.Connect(t)
	c.Reset(t)
	// adopt first, so this test sees only the server change
	r := runSync(t, c, "--probe-path", "none")
	require.Equal(t, 0, r.Code, r.Msg)
	before := c.PodUIDs(t)
	require.NotEmpty(t, before)

	history := watchPods(t, c)
	r = runSync(t, c, "--server", "https://10.96.0.1:6443", "--probe-path", "none")
	require.Equal(t, 0, r.Code, r.Msg+"\n"+r.Stderr)
	perNode := history.Stop()

	f := r.facts()
	assert.True(t, r.Changed)
	assert.True(t, f.ConfigMapChanged)
	assert.True(t, f.Restarted)
	assert.Equal(t, kpsync.ReasonConfigChanged, f.RestartReason)
	assert.Equal(t, []string{"kubeconfig.conf:clusters[0].cluster.server"}, f.ChangedKeys)
	assert.Equal(t, int32(len(before)), f.Rollout.Updated)
	assert.Equal(t, int32(len(before)), f.Rollout.Available)

	after := c.PodUIDs(t)
	cluster.AssertAllReplaced(t, before, after)
	for node, n := range perNode {
		assert.Equal(t, 2, n, "node %s: want its pod replaced exactly once (old + new UID)", node)
	}
	cp := assertMountsCopy(t, c)
	assert.Contains(t, cp.Data["kubeconfig.conf"], "server: https://10.96.0.1:6443")
	assert.Equal(t, cp.Name, f.ConfigMapName)
	assert.Equal(t, cluster.Name, f.PreviousConfigMap, "the template mounted the ConfigMap itself before (kubeadm's layout)")
	for node, name := range c.PodConfigMaps(t) {
		assert.Equal(t, cp.Name, name, "node %s: its pod reads the copy", node)
	}
	assert.True(t, f.RecordChanged, "the record is written once no pod mounts it")
	assertRecordFollows(t, c)
	assert.True(t, hashConsistent(t, c))

	// the rerun: same input, nothing to do
	rv := c.ConfigMap(t).ResourceVersion
	r = runSync(t, c, "--server", "https://10.96.0.1:6443", "--probe-path", "none")
	require.Equal(t, 0, r.Code, r.Msg)
	assert.False(t, r.Changed)
	assert.False(t, r.facts().Restarted)
	assert.Equal(t, rv, c.ConfigMap(t).ResourceVersion, "a no-op run must not bump the resourceVersion")
	assert.Equal(t, cp.Name, cluster.MountedConfigMapName(c.DaemonSet(t)))
	// GET the record, GET the DaemonSet, GET the copy the template mounts
	// (every run checks it), GET the record again: flat with the fleet
	assert.LessOrEqual(t, r.facts().APIRequests, int64(4), "no-change run API requests")
	cluster.AssertNoneReplaced(t, after, c.PodUIDs(t))
}

// A 1.33 image gets the /livez readiness probe; that rolls the pods once,
// and moves the template from the ConfigMap itself (kubeadm's layout) onto
// a copy of the same data, in the same rollout.
func TestProbeFixOn133Image(t *testing.T) {
	c := cluster.Connect(t)
	c.Reset(t)
	require.Contains(t, c.DaemonSet(t).Spec.Template.Spec.Containers[0].Image, ":v1.33.")
	before := c.PodUIDs(t)

	r := runSync(t, c) // probe-path auto
	require.Equal(t, 0, r.Code, r.Msg+"\n"+r.Stderr)
	f := r.facts()
	assert.True(t, f.ProbeChanged)
	assert.True(t, f.Restarted)
	assert.Equal(t, "/livez", f.ProbePath)
	assert.Equal(t, "v1.33.6", f.KubeProxyVersion)
	assert.Equal(t, kpsync.ReasonProbeChanged, f.RestartReason)
	rv := c.ConfigMap(t).ResourceVersion

	probe := c.DaemonSet(t).Spec.Template.Spec.Containers[0].ReadinessProbe
	require.NotNil(t, probe)
	require.NotNil(t, probe.HTTPGet)
	assert.Equal(t, "/livez", probe.HTTPGet.Path)
	assert.Equal(t, "10256", probe.HTTPGet.Port.String())
	cluster.AssertAllReplaced(t, before, c.PodUIDs(t))
	cp := assertMountsCopy(t, c)
	assert.Equal(t, c.SeedConfigMap(t).Data, cp.Data, "a copy of the data as it was")
	assert.Equal(t, cp.Name, f.ConfigMapName)
	assert.False(t, f.ConfigMapChanged)
	assert.False(t, f.RecordChanged, "the record holds that data already")
	assert.Equal(t, rv, c.ConfigMap(t).ResourceVersion, "the record is not written")
	assert.True(t, hashConsistent(t, c))

	r = runSync(t, c)
	require.Equal(t, 0, r.Code, r.Msg)
	assert.False(t, r.Changed, "the probe is right now")
}

// Check mode computes everything and writes nothing.
func TestCheckModeChangesNothing(t *testing.T) {
	c := cluster.Connect(t)
	c.Reset(t)
	state, before := stateOf(t, c), c.PodUIDs(t)

	r := runSync(t, c, "--check", "--diff", "--server", "https://10.96.0.1:6443", "--set", "mode=ipvs", "--set", "ipvs.strictARP=true")
	require.Equal(t, 0, r.Code, r.Msg+"\n"+r.Stderr)
	assert.True(t, r.Changed)
	assert.True(t, r.facts().CheckMode)
	assert.True(t, r.facts().RestartRequired)
	assert.False(t, r.facts().Restarted)
	assert.Contains(t, r.Diff["after"], "strictARP: true")

	// Not the DaemonSet's resourceVersion: the controller may still write
	// its status after a fresh create (a CI run saw it move).
	assertUntouched(t, c, state)
	cluster.AssertNoneReplaced(t, before, c.PodUIDs(t))
}

// kube-proxy loads past fields it does not have, with a warning: a field
// no kube-proxy has in the live config.conf (written by a newer kubeadm,
// say), and the seed's fields newer than the kube-proxy in use. The run
// does the same: it carries them through, writes the change, and reports
// them as warnings.
func TestCarriesFieldsKubeProxyIgnores(t *testing.T) {
	c := cluster.Connect(t)
	c.Reset(t)
	breakLiveConfigMap(t, c, func(d map[string]string) { d["config.conf"] += "\nfutureField: 1\n" })

	r := runSync(t, c, "--set", "mode=ipvs", "--kube-proxy-version", "v1.28.15", "--probe-path", "none")
	require.Equal(t, 0, r.Code, r.Msg+"\n"+r.Stderr)
	assert.Equal(t, []string{"config.conf:mode"}, r.facts().ChangedKeys)
	conf := assertMountsCopy(t, c).Data["config.conf"]
	assertRecordFollows(t, c)
	assert.Contains(t, conf, "mode: ipvs")
	assert.Contains(t, conf, "futureField: 1", "carried through")
	assert.Contains(t, conf, "tcpBeLiberal:", "carried through")
	assert.Contains(t, r.Warnings, `configmap kube-system/kube-proxy: config.conf: unknown field "futureField" is ignored by kube-proxy 1.28 (no kube-proxy from 1.27 to 1.37 has it)`)
	assert.Contains(t, r.Warnings, `configmap kube-system/kube-proxy: config.conf: field "conntrack.tcpBeLiberal" is ignored by kube-proxy 1.28 (kube-proxy has it from 1.29 on)`)
}

// Bad input fails before any write.
func TestBadInputLeavesClusterUntouched(t *testing.T) {
	c := cluster.Connect(t)
	c.Reset(t)
	before := stateOf(t, c)
	for name, args := range map[string][]string{
		"unknown field":      {"--set", "ipvs.strictArp=true"},
		"wrong type":         {"--set", "ipvs.strictARP=maybe"},
		"missing configmap":  {"--configmap", "no-such-configmap", "--server", "https://10.96.0.1:6443"},
		"missing daemonset":  {"--daemonset", "no-such-daemonset", "--server", "https://10.96.0.1:6443"},
		"no such container":  {"--container", "nope", "--server", "https://10.96.0.1:6443"},
		"invalid server url": {"--server", "not a url"},
	} {
		t.Run(name, func(t *testing.T) {
			r := runSync(t, c, args...)
			assert.Equal(t, 1, r.Code)
			assert.True(t, r.Failed)
			assert.NotEmpty(t, r.Msg)
			assertUntouched(t, c, before)
		})
	}
}
