//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/kube-proxy-sync/kube-proxy-sync/internal/configmap"
	"github.com/kube-proxy-sync/kube-proxy-sync/test/e2e/cluster"
)

// Keys a manifest leaves out survive, on the real API server. With
// server-side apply and our field manager, the API server removed a key an
// earlier manifest run had applied and the next one left out: a manifest
// with config.conf, then one with kubeconfig.conf alone, left no
// config.conf. It starts from what a release that applied would have left:
// config.conf owned by our field manager's apply. Each manifest's config
// goes into a copy the template mounts, and the record follows it: the
// keys survive in both.
func TestManifestKeepsTheKeysItLeavesOut(t *testing.T) {
	c := cluster.Connect(t)
	c.Reset(t)
	seed := c.ConfigMap(t)
	earlier, err := json.Marshal(map[string]any{
		"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]string{"name": cluster.Name, "namespace": c.Namespace},
		"data":     map[string]string{"config.conf": seed.Data["config.conf"]},
	})
	require.NoError(t, err)
	_, err = c.Client.CoreV1().ConfigMaps(c.Namespace).Patch(context.Background(), cluster.Name, types.ApplyPatchType, earlier,
		metav1.PatchOptions{FieldManager: configmap.FieldManager, Force: ptr.To(true)})
	require.NoError(t, err)

	manifest := func(name string, data map[string]string) string {
		b, err := yaml.Marshal(map[string]any{
			"apiVersion": "v1", "kind": "ConfigMap",
			"metadata": map[string]string{"name": cluster.Name, "namespace": c.Namespace},
			"data":     data,
		})
		require.NoError(t, err)
		path := filepath.Join(t.TempDir(), name)
		require.NoError(t, os.WriteFile(path, b, 0o600))
		return path
	}
	ipvs := strings.Replace(seed.Data["config.conf"], "mode: iptables", "mode: ipvs", 1)
	server := strings.Replace(seed.Data["kubeconfig.conf"], "server: https://127.0.0.1:6443", "server: https://10.96.0.1:6443", 1)
	require.NotEqual(t, seed.Data["config.conf"], ipvs)
	require.NotEqual(t, seed.Data["kubeconfig.conf"], server)

	r := runSync(t, c, "--probe-path", "none", "--manifest", manifest("config.yaml", map[string]string{"config.conf": ipvs}))
	require.Equal(t, 0, r.Code, r.Msg+"\n"+r.Stderr)
	assert.Equal(t, []string{"config.conf"}, r.facts().ChangedKeys)
	r = runSync(t, c, "--probe-path", "none", "--manifest", manifest("kubeconfig.yaml", map[string]string{"kubeconfig.conf": server}))
	require.Equal(t, 0, r.Code, r.Msg+"\n"+r.Stderr)
	assert.Equal(t, []string{"kubeconfig.conf"}, r.facts().ChangedKeys)

	want := map[string]string{}
	for k, v := range seed.Data {
		want[k] = v
	}
	want["config.conf"], want["kubeconfig.conf"] = ipvs, server
	assert.Equal(t, want, assertMountsCopy(t, c).Data, "every key the manifests left out is still there")
	assert.Equal(t, want, c.ConfigMap(t).Data, "and in the record")
	assert.True(t, hashConsistent(t, c), "the restart is stamped with the data as it is")
}
