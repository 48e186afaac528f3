package kpsync

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kube-proxy-sync/kube-proxy-sync/internal/configmap"
)

// A kubeconfig.conf that turns off TLS verification, in the live ConfigMap
// or in a manifest, is warned about (kube-proxy would send its token to
// whoever answers); the run goes on.
func TestInsecureSkipTLSVerifyWarns(t *testing.T) {
	insecure := strings.Replace(seedKubeconfig, "    server: https://127.0.0.1:6443\n", "    server: https://127.0.0.1:6443\n    insecure-skip-tls-verify: true\n", 1)
	require.NotEqual(t, seedKubeconfig, insecure)
	manifest := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "kube-proxy", Namespace: "kube-system"},
		Data: map[string]string{"kubeconfig.conf": insecure}}
	for _, tc := range []struct {
		name string
		live string
		spec configmap.Spec
		warn bool
	}{
		{"live", insecure, configmap.Spec{}, true},
		{"live, with a --server change", insecure, configmap.Spec{Server: "https://10.0.0.1:6443"}, true},
		{"manifest", seedKubeconfig, configmap.Spec{Manifest: manifest}, true},
		{"verified", seedKubeconfig, configmap.Spec{Server: "https://10.0.0.1:6443"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cm := seedConfigMap()
			cm.Data["kubeconfig.conf"] = tc.live
			f := newFixture(t, cm, seedDaemonSet("registry.k8s.io/kube-proxy:v1.33.6"))
			res, err := f.run(t, Options{Spec: tc.spec})
			require.NoError(t, err)
			var found []string
			for _, w := range res.Warnings {
				if strings.Contains(w, "insecure-skip-tls-verify") {
					found = append(found, w)
				}
			}
			if !tc.warn {
				assert.Empty(t, found)
				return
			}
			require.Len(t, found, 1, "one warning: %v", res.Warnings)
			assert.Contains(t, found[0], `cluster "default"`)
			assert.Contains(t, found[0], "kube-system/kube-proxy")
		})
	}
}
