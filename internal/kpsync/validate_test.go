package kpsync

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kube-proxy-sync/kube-proxy-sync/internal/configmap"
	"github.com/kube-proxy-sync/kube-proxy-sync/internal/kpconfig"
	"github.com/kube-proxy-sync/kube-proxy-sync/internal/rollout"
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
	_, err := f.run(t, Options{Spec: configmap.Spec{Settings: []kpconfig.Setting{{Path: "conntrack.maxPerCore", Value: "0"}, {Path: "mode", Value: "nftables"}}}, Connectivity: noTraffic})
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

// Every key the restarted pods will read passes before any restart or
// write, whoever wrote it and whatever the policy: config.conf must be there
// and pass kube-proxy's validation, and the kubeconfig it names, when this
// ConfigMap provides it, must be one kube-proxy can start with.
func TestRestartOntoUnvalidatedDataIsRefused(t *testing.T) {
	const image = "registry.k8s.io/kube-proxy:v1.33.6"
	noServer := strings.Replace(seedKubeconfig, "    server: https://127.0.0.1:6443\n", "", 1)
	// kubeadm's mount: the whole ConfigMap at /var/lib/kube-proxy
	kubeadmMount := func(ds *appsv1.DaemonSet, items ...corev1.KeyToPath) {
		spec := &ds.Spec.Template.Spec
		spec.Volumes = []corev1.Volume{{Name: "kube-proxy", VolumeSource: corev1.VolumeSource{
			ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "kube-proxy"}, Items: items}}}}
		spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "kube-proxy", MountPath: "/var/lib/kube-proxy"}}
	}
	cases := []struct {
		name    string
		data    map[string]string // the live data ("" drops the key)
		pending bool              // the DaemonSet is stamped for older data
		mount   func(ds *appsv1.DaemonSet)
		o       Options
		want    string
	}{
		{name: "no config.conf, --restart always", data: map[string]string{"config.conf": ""}, o: Options{Restart: RestartAlways},
			want: `configmap kube-system/kube-proxy has no "config.conf" key`},
		{name: "no config.conf, pending restart", data: map[string]string{"config.conf": ""}, pending: true,
			want: `configmap kube-system/kube-proxy has no "config.conf" key`},
		{name: "kubeconfig.conf not a kubeconfig, --set", data: map[string]string{"kubeconfig.conf": "just some text\n"},
			o:    Options{Spec: configmap.Spec{Settings: []kpconfig.Setting{{Path: "mode", Value: "ipvs"}}}},
			want: `configmap kube-system/kube-proxy: kubeconfig.conf (clientConnection.kubeconfig /var/lib/kube-proxy/kubeconfig.conf) is not a kubeconfig kube-proxy can start with`},
		{name: "kubeconfig.conf without a server, pending restart", data: map[string]string{"kubeconfig.conf": noServer}, pending: true,
			want: `cluster "default" of the current context "default" has no server`},
		{name: "kubeconfig.conf without a server, --restart always, kubeadm's mount", data: map[string]string{"kubeconfig.conf": noServer},
			mount: func(ds *appsv1.DaemonSet) { kubeadmMount(ds) }, o: Options{Restart: RestartAlways},
			want: `cluster "default" of the current context "default" has no server`},
		{name: "kubeconfig.conf missing, kubeadm's mount", data: map[string]string{"kubeconfig.conf": ""},
			mount: func(ds *appsv1.DaemonSet) { kubeadmMount(ds) }, o: Options{Restart: RestartAlways},
			want: `configmap kube-system/kube-proxy has no "kubeconfig.conf" key, which daemonset kube-system/kube-proxy mounts at /var/lib/kube-proxy/kubeconfig.conf`},
		{name: "kubeconfig.conf not a kubeconfig, a canary left half-way", data: map[string]string{"kubeconfig.conf": "just some text\n"},
			mount: func(ds *appsv1.DaemonSet) {
				ds.Annotations[rollout.StrategyAnnotation] = `{"type":"RollingUpdate"}`
				ds.Spec.UpdateStrategy = appsv1.DaemonSetUpdateStrategy{Type: appsv1.OnDeleteDaemonSetStrategyType}
			},
			o: Options{Strategy: StrategyCanary}, want: `kubeconfig.conf (clientConnection.kubeconfig /var/lib/kube-proxy/kubeconfig.conf) is not a kubeconfig`},
		{name: "the key the mount's items put at the path", data: map[string]string{"kc": "just some text\n"},
			mount: func(ds *appsv1.DaemonSet) {
				kubeadmMount(ds, corev1.KeyToPath{Key: "config.conf", Path: "config.conf"}, corev1.KeyToPath{Key: "kc", Path: "kubeconfig.conf"})
			},
			o:    Options{Restart: RestartAlways},
			want: `configmap kube-system/kube-proxy: kc (clientConnection.kubeconfig /var/lib/kube-proxy/kubeconfig.conf) is not a kubeconfig`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cm := seedConfigMap()
			for k, v := range tc.data {
				if v == "" {
					delete(cm.Data, k)
				} else {
					cm.Data[k] = v
				}
			}
			ds := seedDaemonSet(image)
			ds.Annotations[rollout.HashAnnotation] = configmap.Hash(cm.Data, nil)
			if tc.pending {
				ds.Annotations[rollout.HashAnnotation] = configmap.Hash(seedConfigMap().Data, nil)
			}
			if tc.mount != nil {
				tc.mount(ds)
			}
			f := newFixture(t, cm, ds)
			res, err := f.run(t, tc.o)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
			assert.Contains(t, err.Error(), "nothing was written")
			assert.Empty(t, f.writes(), "nothing is written")
			assert.False(t, res.Facts.Restarted)
			got, err := f.client.CoreV1().ConfigMaps("kube-system").Get(context.Background(), "kube-proxy", metav1.GetOptions{})
			require.NoError(t, err)
			assert.Equal(t, cm.Data, got.Data, "the ConfigMap is untouched")
			after := f.daemonSet(t)
			assert.Equal(t, ds.Spec.Template, after.Spec.Template, "the pod template is untouched")
			assert.Equal(t, ds.Annotations, after.Annotations)
		})
	}
}

// The kubeconfig is checked only where kube-proxy reads it from this
// ConfigMap: a path the DaemonSet mounts from elsewhere, or no
// clientConnection.kubeconfig (in-cluster config), is not this
// ConfigMap's business.
func TestKubeconfigNotFromThisConfigMapIsNotChecked(t *testing.T) {
	cm := seedConfigMap()
	cm.Data["kubeconfig.conf"] = "just some text\n"
	cases := []struct {
		name   string
		config string
		mount  string
	}{
		{"in-cluster config", strings.Replace(seedConfig, "  kubeconfig: /var/lib/kube-proxy/kubeconfig.conf\n", "  kubeconfig: \"\"\n", 1), "/var/lib/kube-proxy"},
		{"a path the ConfigMap is not mounted at", seedConfig, "/etc/kube-proxy"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cm := cm.DeepCopy()
			cm.Data["config.conf"] = tc.config
			ds := seedDaemonSet("registry.k8s.io/kube-proxy:v1.33.6")
			ds.Spec.Template.Spec.Volumes = []corev1.Volume{{Name: "kube-proxy", VolumeSource: corev1.VolumeSource{
				ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "kube-proxy"}}}}}
			ds.Spec.Template.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "kube-proxy", MountPath: tc.mount}}
			f := newFixture(t, cm, ds)
			res, err := f.run(t, Options{Restart: RestartAlways})
			require.NoError(t, err)
			assert.True(t, res.Facts.Restarted)
		})
	}
}

// A key given again as an alias or !!binary key is, to kube-proxy, the
// same key, and it reads the last one: --set refuses rather than edit the
// first and report it done (or unchanged).
func TestSetOnAKeyKubeProxyReadsElsewhereIsRefused(t *testing.T) {
	for name, again := range map[string]string{
		"alias key":    strings.Replace(seedConfig, "mode: iptables\n", "&m mode: iptables\n*m : ipvs\n", 1),
		"!!binary key": seedConfig + "!!binary bW9kZQ==: ipvs\n",
	} {
		for _, mode := range []string{"nftables", "iptables"} {
			t.Run(name+" mode="+mode, func(t *testing.T) {
				cm := seedConfigMap()
				cm.Data["config.conf"] = again
				ds := seedDaemonSet("registry.k8s.io/kube-proxy:v1.33.6")
				ds.Annotations[rollout.HashAnnotation] = configmap.Hash(cm.Data, nil)
				f := newFixture(t, cm, ds)
				res, err := f.run(t, Options{Spec: configmap.Spec{Settings: []kpconfig.Setting{{Path: "mode", Value: mode}}}})
				require.Error(t, err)
				assert.Contains(t, err.Error(), `setting mode: config.conf gives key "mode" again`)
				assert.Empty(t, f.writes())
				assert.False(t, res.Facts.Restarted)
				got, err := f.client.CoreV1().ConfigMaps("kube-system").Get(context.Background(), "kube-proxy", metav1.GetOptions{})
				require.NoError(t, err)
				assert.Equal(t, again, got.Data["config.conf"])
			})
		}
	}
}

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
