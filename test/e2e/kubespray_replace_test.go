//go:build e2e

package e2e

import (
	"bytes"
	"os/exec"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"

	"github.com/kube-proxy-sync/kube-proxy-sync/test/e2e/cluster"
)

// kubespray decides to restart every kube-proxy pod when the ConfigMap's
// resourceVersion differs after `kubectl get | sed | kubectl replace`. Once
// the ConfigMap carries kubectl's last-applied-configuration annotation, that
// replace bumps the resourceVersion even when sed changed nothing, so every
// run restarts everything. kube-proxy-sync compares the data instead.
func TestKubesprayReplaceBumpsResourceVersionWithIdenticalData(t *testing.T) {
	c := cluster.Connect(t)
	c.Reset(t)
	k := kubectl(t, c)
	run := func(stdin []byte, args ...string) []byte {
		t.Helper()
		cmd := exec.Command(k, append([]string{"--kubeconfig", c.KubeconfigPath, "-n", c.Namespace}, args...)...)
		cmd.Stdin = bytes.NewReader(stdin)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		require.NoError(t, err, "kubectl %v: %s", args, stderr.String())
		return out
	}
	// someone once ran kubectl apply on it
	manifest := run(nil, "get", "configmap", "kube-proxy", "-o", "yaml")
	run(manifest, "apply", "-f", "-")
	require.Contains(t, c.ConfigMap(t).Annotations, "kubectl.kubernetes.io/last-applied-configuration")

	// kubespray's task on two playbook runs, with the server already right:
	// its sed changes nothing, and still every replace is a new resourceVersion
	var after *corev1.ConfigMap
	for i := 0; i < 2; i++ {
		before := c.ConfigMap(t)
		current := run(nil, "get", "configmap", "kube-proxy", "-o", "yaml")
		sedded := bytes.ReplaceAll(current, []byte("server: https://127.0.0.1:6443"), []byte("server: https://127.0.0.1:6443"))
		run(sedded, "replace", "-f", "-")
		after = c.ConfigMap(t)
		assert.Equal(t, before.Data, after.Data, "run %d: identical data", i+1)
		assert.NotEqual(t, before.ResourceVersion, after.ResourceVersion, "run %d: yet a new resourceVersion, so kubespray restarts every pod", i+1)
	}

	// kube-proxy-sync with the same desired server: nothing changes, nothing restarts
	uids := c.PodUIDs(t)
	r := runSync(t, c, "--server", "https://127.0.0.1:6443", "--probe-path", "none")
	require.Equal(t, 0, r.Code, r.Msg+"\n"+r.Stderr)
	assert.False(t, r.facts().ConfigMapChanged)
	assert.False(t, r.facts().Restarted)
	assert.Equal(t, after.ResourceVersion, c.ConfigMap(t).ResourceVersion)
	cluster.AssertNoneReplaced(t, uids, c.PodUIDs(t))
}
