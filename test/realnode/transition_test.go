//go:build e2e

package realnode

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"

	"github.com/kube-proxy-sync/kube-proxy-sync/test/e2e/cluster"
)

// The documented kubeadm way to change kube-proxy's mode, on real
// kube-proxies: edit the record (kubeadm's layout: the template mounts it)
// to mode: nftables, then run with that mode, as kubespray's
// kube_proxy_mode does. The pods still run iptables, which the record no
// longer says: the run judges the move, not the flag, and goes through the
// migration (canary first, every node's health and traffic checked), as
// --set mode=nftables before the edit does; afterwards every node runs
// nftables (its own /configz).
func TestTransitionEditedRecordOnKubeadmLayoutIsMigrated(t *testing.T) {
	e := connect(t)
	d := e.dockerOrSkip(t)
	cp, workers := e.nodeNames(t)
	all := append([]string{cp}, workers...)
	ds, err := e.client.AppsV1().DaemonSets(namespace).Get(ctxFor(t, 30*time.Second), name, metav1.GetOptions{})
	require.NoError(t, err)
	require.Equal(t, name, cluster.MountedConfigMapName(ds), "this test starts on kubeadm's layout: the template mounts the record")
	// the pods run the record's iptables config (kube-proxy's /configz is
	// not reachable until the run opens its metrics address)
	for _, n := range all {
		r := d.proxyRules(t, n)
		require.Contains(t, r.kubeProxyChains(), "KUBE-SERVICES", "node %s: this test starts from kube-proxy in iptables mode", n)
	}

	// the operator's edit, behind the binary's back
	ctx := ctxFor(t, time.Minute)
	require.NoError(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cm, err := e.client.CoreV1().ConfigMaps(namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		conf := cm.Data["config.conf"]
		if !strings.Contains(conf, "\nmode: iptables\n") {
			t.Fatalf("the record's mode is not iptables: %s", conf)
		}
		cm.Data["config.conf"] = strings.Replace(conf, "\nmode: iptables\n", "\nmode: nftables\n", 1)
		_, err = e.client.CoreV1().ConfigMaps(namespace).Update(ctx, cm, metav1.UpdateOptions{})
		return err
	}))

	before := e.podUIDs(t)
	r := e.sync(t, "--set", "mode=nftables", "--set", "metricsBindAddress=0.0.0.0:10249", "--timeout", "8m")
	require.Equal(t, 0, r.code, "%s", r)
	assert.Equal(t, "unknown", r.field("migration.from"), "what the pods run is not what the record says: %s", r)
	assert.Equal(t, "nftables", r.field("migration.to"), "%s", r)
	assert.Equal(t, "canary", r.field("rollout.strategy"), "the migration goes canary first: %s", r)
	assert.Equal(t, "required", r.field("migration.verify_health"), "%s", r)
	assert.EqualValues(t, len(all), r.field("connectivity.checked"), "every migrated node checked: %s", r)
	assert.EqualValues(t, len(all), r.field("connectivity.passed"), "%s", r)
	after := e.podUIDs(t)
	for n, uid := range before {
		assert.NotEqual(t, uid, after[n], "node %s: its kube-proxy restarted", n)
	}
	for _, n := range all {
		mode, _ := runningValue(e.configz(t, n), "mode")
		assert.Equal(t, "nftables", mode, "node %s: kube-proxy's own /configz", n)
	}
}
