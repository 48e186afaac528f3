//go:build e2e

package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"

	"github.com/kube-proxy-sync/kube-proxy-sync/test/e2e/cluster"
)

// --kubeadm-config: kube-proxy's settings come from kubeadm's own rendering
// of a kubeadm configuration (the real kubeadm, --print-manifest), so every
// KubeProxyConfiguration value of kubespray's kubeadm config reaches the
// ConfigMap with no variable mapping; an override removed from the
// configuration converges back to kubeadm's default; a rerun changes
// nothing; --server keeps kubespray's server decision.
func TestKubeadmConfigSettingsConverge(t *testing.T) {
	c := cluster.Connect(t)
	kubeadm := kubeadmBinary(t, c)
	c.Reset(t)
	t.Cleanup(func() { c.Reset(t) })
	dir := t.TempDir()
	write := func(proxy string) string {
		path := filepath.Join(dir, fmt.Sprintf("kubeadm-%d.yaml", len(proxy)))
		config := `apiVersion: kubeadm.k8s.io/v1beta4
kind: InitConfiguration
localAPIEndpoint:
  advertiseAddress: 10.0.0.1
  bindPort: 7443
nodeRegistration:
  name: kps-control-plane
---
apiVersion: kubeadm.k8s.io/v1beta4
kind: ClusterConfiguration
kubernetesVersion: v1.34.4
controlPlaneEndpoint: "10.0.0.1:7443"
networking:
  serviceSubnet: 10.233.0.0/18
  podSubnet: 10.233.64.0/18
---
` + proxy
		require.NoError(t, os.WriteFile(path, []byte(config), 0o600))
		return path
	}
	configConf := func() map[string]any {
		var cfg map[string]any
		require.NoError(t, yaml.Unmarshal([]byte(c.ConfigMap(t).Data["config.conf"]), &cfg))
		return cfg
	}
	server := "https://127.0.0.1:7443"

	// kubespray's rendering of its variables
	r := runSync(t, c, "--kubeadm", kubeadm, "--kubeadm-config", write(kubesprayProxyConfig), "--server", server, "--probe-path", "none")
	require.Equal(t, 0, r.Code, r.Msg+"\n"+r.Stderr)
	assert.True(t, r.Restarted, "%s", r.Msg)
	assertKubespraySettings(t, c, c.ConfigMap(t).Data["config.conf"])
	assert.Equal(t, []string{server}, kubeconfigServers(t, c.ConfigMap(t).Data["kubeconfig.conf"]))

	// a rerun: nothing
	uids := c.PodUIDs(t)
	r = runSync(t, c, "--kubeadm", kubeadm, "--kubeadm-config", write(kubesprayProxyConfig), "--server", server, "--probe-path", "none")
	require.Equal(t, 0, r.Code, r.Msg+"\n"+r.Stderr)
	assert.False(t, r.Changed, "%s", r.Msg)
	cluster.AssertNoneReplaced(t, uids, c.PodUIDs(t))

	// an override removed: kubeadm's default comes back (ipvs.scheduler lc
	// -> kube-proxy's default, empty; metricsBindAddress -> kubeadm's)
	without := strings.Replace(kubesprayProxyConfig, "  scheduler: lc\n", "", 1)
	require.NotEqual(t, kubesprayProxyConfig, without)
	r = runSync(t, c, "--kubeadm", kubeadm, "--kubeadm-config", write(without), "--server", server, "--probe-path", "none")
	require.Equal(t, 0, r.Code, r.Msg+"\n"+r.Stderr)
	assert.True(t, r.Changed, "%s", r.Msg)
	ipvs, _ := configConf()["ipvs"].(map[string]any)
	assert.Empty(t, ipvs["scheduler"], "the removed override is back to kubeadm's default")
	assert.Equal(t, []string{server}, kubeconfigServers(t, c.ConfigMap(t).Data["kubeconfig.conf"]))
}
