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
	"k8s.io/apimachinery/pkg/types"

	"github.com/kube-proxy-sync/kube-proxy-sync/internal/configmap"
	"github.com/kube-proxy-sync/kube-proxy-sync/test/e2e/cluster"
)

// Judge the transition, not the request: each test here reaches a move of
// kube-proxy by a road other than the flag that usually causes it (an
// edit of the record, an image upgrade, a fleet already past a version),
// and gets the guard that move needs, on the real API server.

// editRecordConfig rewrites config.conf of the record with edit.
func editRecordConfig(t *testing.T, c *cluster.Cluster, edit func(string) string) {
	t.Helper()
	cm := c.ConfigMap(t)
	cm.Data[configmap.ConfigKey] = edit(cm.Data[configmap.ConfigKey])
	_, err := c.Client.CoreV1().ConfigMaps(c.Namespace).Update(context.Background(), cm, metav1.UpdateOptions{})
	require.NoError(t, err)
}

// setFleetImage points the DaemonSet's kube-proxy at image and waits until
// every node runs a pod of that template: a fleet that runs image.
func setFleetImage(t *testing.T, c *cluster.Cluster, image string) {
	t.Helper()
	before := c.PodUIDs(t)
	patch := `{"spec":{"template":{"spec":{"containers":[{"name":"kube-proxy","image":"` + image + `"}]}}}}`
	_, err := c.Client.AppsV1().DaemonSets(c.Namespace).Patch(context.Background(), cluster.Name, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		now := c.PodUIDs(t)
		return len(now) == len(before) && len(untouched(before, now)) == 0
	}, 2*time.Minute, 200*time.Millisecond, "every node's pod replaced for image %s", image)
	c.WaitRolloutComplete(t, 2*time.Minute)
}

// nftablesFleetOn130 makes the fleet kube-proxy 1.30 in nftables mode (the
// gate on, as 1.30 needs), its pods started on that record, adopted.
func nftablesFleetOn130(t *testing.T, c *cluster.Cluster) {
	t.Helper()
	editRecordConfig(t, c, func(conf string) string {
		require.Contains(t, conf, "\nmode: iptables\n")
		conf = strings.Replace(conf, "\nmode: iptables\n", "\nmode: nftables\n", 1)
		return strings.TrimRight(conf, "\n") + "\nfeatureGates:\n  NFTablesProxyMode: true\n"
	})
	setFleetImage(t, c, "registry.k8s.io/kube-proxy:v1.30.4") // its pods start on the nftables record
	adopted := runSync(t, c, "--probe-path", "none")
	require.Equal(t, 0, adopted.Code, adopted.Msg)
}

// someNode is one node of the fleet, and every node's pod UID.
func someNode(t *testing.T, c *cluster.Cluster) (string, map[string]types.UID) {
	t.Helper()
	pods := c.PodUIDs(t)
	for n := range pods {
		return n, pods
	}
	t.Fatal("no kube-proxy pod")
	return "", nil
}

// refused runs kube-proxy-sync with args and asserts it refused before any
// write, saying each of says: exit 1, the cluster and every pod as they
// were.
func refused(t *testing.T, c *cluster.Cluster, says []string, args ...string) {
	t.Helper()
	before, pods := stateOf(t, c), c.PodUIDs(t)
	r := runSync(t, c, append(args, "--probe-path", "none")...)
	assert.Equal(t, 1, r.Code, r.Msg)
	for _, s := range says {
		assert.Contains(t, r.Msg, s)
	}
	assertUntouched(t, c, before)
	assert.Equal(t, pods, c.PodUIDs(t), "no pod replaced")
}

// The documented kubeadm way on an adopted fleet: edit the record to
// mode: nftables, then run with that mode (kubespray: kube_proxy_mode).
// The pods run what they started on, which the cluster no longer tells:
// the run is judged as the riskiest move into nftables, refused while a
// node's kernel is too old and otherwise rolled canary first with the
// migration's checks, as --set mode=nftables before the edit is.
func TestTransitionEditedRecordOnKubeadmLayoutIsAMigration(t *testing.T) {
	c := cluster.Connect(t)
	c.Reset(t)
	t.Cleanup(func() { c.Reset(t) })
	require.Equal(t, 0, runSync(t, c, "--probe-path", "none").Code) // adopt
	// the edit comes after the DaemonSet was made, in a later second than
	// its creationTimestamp tells (a write in that same second is taken as
	// kubeadm's, made with the DaemonSet)
	made := c.DaemonSet(t).CreationTimestamp.Time
	require.Eventually(t, func() bool { return time.Now().Truncate(time.Second).After(made) }, 5*time.Second, 20*time.Millisecond)
	setRecordMode(t, c, "nftables")
	node, pods := someNode(t, c)
	setKernel(t, c, node, "4.18.0-553.el8_10.x86_64")
	refused(t, c, []string{node + " (kernel 4.18.0-553.el8_10.x86_64)", "nothing was written"}, "--set", "mode=nftables", "--verify-health", "auto")

	setKernel(t, c, node, "6.8.0-49-generic")
	r := runSync(t, c, "--set", "mode=nftables", "--probe-path", "none", "--verify-health", "auto")
	require.Equal(t, 0, r.Code, r.Msg+"\n"+r.Stderr)
	m := r.facts().Migration
	require.NotNil(t, m, "a migration: %s", r.Msg)
	assert.Equal(t, "unknown", m.From)
	assert.Equal(t, "nftables", m.To)
	assert.Equal(t, "canary", m.Strategy)
	require.Len(t, m.CanaryNodes, 1)
	assert.Empty(t, untouched(pods, c.PodUIDs(t)), "every pod replaced")
	assert.Contains(t, assertMountsCopy(t, c).Data[configmap.ConfigKey], "mode: nftables")
}

// An nftables fleet on kube-proxy 1.30 upgraded to 1.31, the first that
// does not start in nftables mode below kernel 5.13: refused before any
// write while a node has an older kernel, as a move into nftables is.
func TestTransitionImageUpgradeOfAnNFTablesFleetChecksTheKernels(t *testing.T) {
	c := cluster.Connect(t)
	c.Reset(t)
	t.Cleanup(func() { c.Reset(t) })
	nftablesFleetOn130(t, c)
	node, _ := someNode(t, c)
	setKernel(t, c, node, "5.10.0-32-amd64")
	refused(t, c, []string{node + " (kernel 5.10.0-32-amd64)", "nothing was written"}, "--image", "registry.k8s.io/kube-proxy:v1.31.2")
}

// A fleet already on kube-proxy 1.40, where ipvs mode does not start
// unless its gate is on: --set mode=ipvs (kubespray's default
// kube_proxy_mode) is refused with no --image in sight.
func TestTransitionIPVSOnAFleetPastItsEndIsRefused(t *testing.T) {
	c := cluster.Connect(t)
	c.Reset(t)
	t.Cleanup(func() { c.Reset(t) })
	setFleetImage(t, c, "registry.k8s.io/kube-proxy:v1.40.0")
	require.Equal(t, 0, runSync(t, c, "--probe-path", "none").Code)
	refused(t, c, []string{"does not start from 1.40", "--set mode=nftables", "nothing was written"}, "--set", "mode=ipvs")
}

// An image given by digest onto a config that sets no mode may be 1.40 or
// later, whose default is nftables: the run writes the mode the fleet
// runs (iptables, from its 1.33 image) with the image, so the fleet does
// not move to nftables past every check.
func TestTransitionImageByDigestKeepsTheMode(t *testing.T) {
	c := cluster.Connect(t)
	c.Reset(t)
	t.Cleanup(func() { c.Reset(t) })
	editRecordConfig(t, c, func(conf string) string {
		require.Contains(t, conf, "\nmode: iptables\n")
		return strings.Replace(conf, "\nmode: iptables\n", "\n", 1)
	})
	require.Equal(t, 0, runSync(t, c, "--probe-path", "none").Code) // adopt
	pods := c.PodUIDs(t)
	image := "registry.k8s.io/kube-proxy@sha256:" + strings.Repeat("0", 64)
	r := runSync(t, c, "--image", image, "--probe-path", "none")
	require.Equal(t, 0, r.Code, r.Msg+"\n"+r.Stderr)
	assert.Nil(t, r.facts().Migration, "no mode change")
	assert.Contains(t, r.ChangedKeys, "config.conf:mode")
	assert.Regexp(t, `(?m)^mode: iptables$`, assertMountsCopy(t, c).Data[configmap.ConfigKey], "the mode the fleet ran, written with the image")
	assert.Empty(t, untouched(pods, c.PodUIDs(t)), "every pod replaced onto the image")
}

// Another writer's image change its DaemonSet has not rolled out (kubectl
// set image on a DaemonSet with the OnDelete strategy, so the controller
// replaces no pod): the pods still run kube-proxy 1.30 in nftables mode,
// and a settings change would restart them onto 1.31, the first that
// refuses nftables below kernel 5.13. Judged from the pods, not the
// template: refused before any write, naming the node, as --image v1.31
// is.
func TestTransitionAnotherWritersImageChecksTheKernels(t *testing.T) {
	c := cluster.Connect(t)
	c.Reset(t)
	t.Cleanup(func() { c.Reset(t) })
	nftablesFleetOn130(t, c)

	ctx := context.Background()
	patch := `{"spec":{"updateStrategy":{"type":"OnDelete","rollingUpdate":null},` +
		`"template":{"spec":{"containers":[{"name":"kube-proxy","image":"registry.k8s.io/kube-proxy:v1.31.2"}]}}}}`
	ds, err := c.Client.AppsV1().DaemonSets(c.Namespace).Patch(ctx, cluster.Name, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		now := c.DaemonSet(t)
		return now.Status.ObservedGeneration >= ds.Generation && now.Status.UpdatedNumberScheduled == 0 && now.Status.DesiredNumberScheduled > 0
	}, time.Minute, 100*time.Millisecond, "the DaemonSet controller saw the new template and replaced no pod")

	node, _ := someNode(t, c)
	setKernel(t, c, node, "5.10.0-32-amd64")
	refused(t, c, []string{node + " (kernel 5.10.0-32-amd64)", "nothing was written"},
		"--set", "conntrack.maxPerCore=65536", "--strategy", "canary")
}
