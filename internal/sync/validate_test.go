package sync

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kube-proxy-sync/kube-proxy-sync/internal/configmap"
	"github.com/kube-proxy-sync/kube-proxy-sync/internal/kpconfig"
)

// A config.conf kube-proxy would refuse is refused before any write, with
// the rules of the kube-proxy version in use, for --set and --manifest.
func TestConfigKubeProxyRejectsIsNotWritten(t *testing.T) {
	manifest := func(body string) *corev1.ConfigMap {
		return &corev1.ConfigMap{Data: map[string]string{"config.conf": "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\n" + body}}
	}
	cases := []struct {
		name  string
		image string
		spec  configmap.Spec
		want  string
	}{
		{"set conntrack", "registry.k8s.io/kube-proxy:v1.33.6", configmap.Spec{Settings: []kpconfig.Setting{{Path: "conntrack.maxPerCore", Value: "-1"}}},
			"kube-proxy 1.33's validation: conntrack.maxPerCore=-1: must be greater than or equal to 0"},
		{"set unknown gate", "registry.k8s.io/kube-proxy:v1.33.6", configmap.Spec{Settings: []kpconfig.Setting{{Path: "featureGates.NoSuchGate", Value: "true"}}},
			"featureGates.NoSuchGate=true: unrecognized feature gate"},
		{"set nftables on 1.28", "registry.k8s.io/kube-proxy:v1.28.15", configmap.Spec{Settings: []kpconfig.Setting{{Path: "mode", Value: "nftables"}}},
			"mode=nftables: kube-proxy 1.28 on Linux supports iptables, ipvs"},
		{"manifest masquerade bit", "registry.k8s.io/kube-proxy:v1.33.6", configmap.Spec{Manifest: manifest("iptables:\n  masqueradeBit: 99\n")},
			"iptables.masqueradeBit=99: must be within the range [0, 31]"},
		{"manifest healthz", "registry.k8s.io/kube-proxy:v1.33.6", configmap.Spec{Manifest: manifest("healthzBindAddress: \":10256\"\n")},
			"healthzBindAddress=:10256"},
		{"set a field newer than kube-proxy", "registry.k8s.io/kube-proxy:v1.27.16", configmap.Spec{Settings: []kpconfig.Setting{{Path: "nftables.masqueradeAll", Value: "true"}}},
			"setting nftables.masqueradeAll: kube-proxy 1.27 does not have this field (kube-proxy has it from 1.29 on) and would ignore it"},
		{"set an unknown field", "registry.k8s.io/kube-proxy:v1.33.6", configmap.Spec{Settings: []kpconfig.Setting{{Path: "ipvs.strictArp", Value: "true"}}},
			`unknown field "strictArp" in ipvs`},
		{"manifest field no kube-proxy has", "registry.k8s.io/kube-proxy:v1.33.6", configmap.Spec{Manifest: manifest("ipvs:\n  strictArp: true\n")},
			`unknown field "ipvs.strictArp": no kube-proxy from 1.27 to 1.37 has it`},
		{"unknown version gets the newest rules", "registry.k8s.io/kube-proxy@sha256:0000000000000000000000000000000000000000000000000000000000000000",
			configmap.Spec{Settings: []kpconfig.Setting{{Path: "clusterCIDR", Value: "foo"}}}, "kube-proxy 1.37's validation: clusterCIDR=foo"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, seedConfigMap(), seedDaemonSet(tc.image))
			_, err := f.run(t, Options{Spec: tc.spec, ProbePath: "none"})
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
			assert.Empty(t, f.writes(), "nothing is written")
			cm, err := f.client.CoreV1().ConfigMaps("kube-system").Get(context.Background(), "kube-proxy", metav1.GetOptions{})
			require.NoError(t, err)
			assert.Equal(t, seedConfig, cm.Data["config.conf"])
		})
	}
}

func TestConfigKubeProxyAcceptsIsWritten(t *testing.T) {
	f := newFixture(t, seedConfigMap(), seedDaemonSet("registry.k8s.io/kube-proxy:v1.33.6"))
	_, err := f.run(t, Options{Spec: configmap.Spec{Settings: []kpconfig.Setting{{Path: "conntrack.maxPerCore", Value: "0"}, {Path: "mode", Value: "nftables"}}}})
	require.NoError(t, err)
	cm, err := f.client.CoreV1().ConfigMaps("kube-system").Get(context.Background(), "kube-proxy", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Contains(t, cm.Data["config.conf"], "mode: nftables")
}

// kube-proxy loads past the fields it does not have (newer ones, unknown
// ones carried in the live ConfigMap) and keys given twice, with a warning:
// so does the run. It writes, restarts, and reports kube-proxy's warnings.
func TestConfigKubeProxyIgnoresIsAWarning(t *testing.T) {
	cm := seedConfigMap()
	cm.Data["config.conf"] = seedConfig + "nftables:\n  masqueradeAll: false\nlogging:\n  format: text\nfutureField: 1\n"
	f := newFixture(t, cm, seedDaemonSet("registry.k8s.io/kube-proxy:v1.27.16"))
	res, err := f.run(t, Options{Spec: configmap.Spec{Settings: []kpconfig.Setting{{Path: "clusterCIDR", Value: "10.244.0.0/16"}}}})
	require.NoError(t, err)
	assert.True(t, res.Facts.ConfigMapChanged)
	assert.True(t, res.Facts.Restarted)
	assert.Equal(t, []string{
		`configmap kube-system/kube-proxy: config.conf: unknown field "futureField" is ignored by kube-proxy 1.27 (no kube-proxy from 1.27 to 1.37 has it)`,
		`configmap kube-system/kube-proxy: config.conf: field "logging" is ignored by kube-proxy 1.27 (kube-proxy has it from 1.28 on)`,
		`configmap kube-system/kube-proxy: config.conf: field "nftables" is ignored by kube-proxy 1.27 (kube-proxy has it from 1.29 on)`,
	}, res.Warnings)
	got, err := f.client.CoreV1().ConfigMaps("kube-system").Get(context.Background(), "kube-proxy", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Contains(t, got.Data["config.conf"], "clusterCIDR: 10.244.0.0/16")
	assert.Contains(t, got.Data["config.conf"], "futureField: 1", "carried through")
	assert.Contains(t, got.Data["config.conf"], "nftables:", "carried through")

	// at 1.34 only the field no kube-proxy has is left to warn about
	f = newFixture(t, cm, seedDaemonSet("registry.k8s.io/kube-proxy:v1.34.4"))
	res, err = f.run(t, Options{Restart: RestartAlways})
	require.NoError(t, err)
	assert.Equal(t, []string{
		`configmap kube-system/kube-proxy: config.conf: unknown field "futureField" is ignored by kube-proxy 1.34 (no kube-proxy from 1.27 to 1.37 has it)`,
	}, res.Warnings)
}
