//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/kube-proxy-sync/kube-proxy-sync/test/e2e/cluster"
)

// badCase is one bad input. It runs in module mode (an args file, as
// Ansible runs the binary) and, unless it is about the args file itself,
// also as flags with --output json.
type badCase struct {
	name string
	// args are module args; the cluster's kubeconfig is added unless set.
	args map[string]any
	// raw, when set, is the whole args file (module mode only).
	raw string
	// flags, when set, is a command line that cannot be said as module args
	// (flags mode only; --kubeconfig and --output json are added).
	flags []string
	// liveData, when set, replaces the live ConfigMap's data first; the run
	// must not write it further. The ConfigMap is reset afterwards.
	liveData func(data map[string]string)
	// msg must appear in the result's msg.
	msg string
	// within bounds the run's wall time (default 30s).
	within time.Duration
}

// TestBadInput runs every kind of bad input against the real cluster. Each
// must exit 1 with a failed JSON result on stdout whose msg names the
// problem, and leave the ConfigMap's resourceVersion and the DaemonSet's
// generation and annotations as they were.
func TestBadInput(t *testing.T) {
	c := cluster.Connect(t)
	c.Reset(t)
	dir := t.TempDir()
	file := func(name, content string) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, []byte(content), 0o600))
		return p
	}
	manifest := func(name, header string) string {
		return file(name, header+"data:\n  config.conf: |\n    kind: KubeProxyConfiguration\n")
	}
	const server = "https://10.96.0.1:6443" // a real change, so that a write would be tried
	closedPort := closedLocalPort(t)

	cases := []badCase{
		// which cluster
		{name: "kubeconfig missing", args: map[string]any{"kubeconfig": filepath.Join(dir, "no-such-kubeconfig")}, msg: "load kubeconfig"},
		{name: "kubeconfig unreadable (a directory)", args: map[string]any{"kubeconfig": dir}, msg: "load kubeconfig"},
		{name: "kubeconfig not YAML", args: map[string]any{"kubeconfig": file("garbage-kubeconfig", "{{{ not: yaml")}, msg: "load kubeconfig"},
		{name: "kubeconfig empty", args: map[string]any{"kubeconfig": file("empty-kubeconfig", "")}, msg: "load kubeconfig"},
		{name: "unknown context", args: map[string]any{"context": "no-such-context", "server": server}, msg: `"no-such-context"`},
		{name: "unreachable server", args: map[string]any{
			"kubeconfig": kubeconfigCopy(t, c, func(cfg *clientcmdapi.Config, cur *clientcmdapi.Context) {
				cfg.Clusters[cur.Cluster].Server = "https://" + closedPort
			}),
			"server": server, "retries": 2, "request_timeout": "2s",
		}, msg: "connection refused", within: 15 * time.Second},
		{name: "invalid server URL in kubeconfig", args: map[string]any{
			"kubeconfig": kubeconfigCopy(t, c, func(cfg *clientcmdapi.Config, cur *clientcmdapi.Context) {
				cfg.Clusters[cur.Cluster].Server = "https://127.0.0.1:6443/%zz"
			}),
		}, msg: "%zz"},
		{name: "credentials the server does not accept", args: map[string]any{
			"kubeconfig": kubeconfigCopy(t, c, func(cfg *clientcmdapi.Config, cur *clientcmdapi.Context) {
				cfg.AuthInfos[cur.AuthInfo] = &clientcmdapi.AuthInfo{Token: "not-a-valid-token"}
			}),
			"server": server,
		}, msg: "Unauthorized"},

		// which objects
		{name: "configmap missing", args: map[string]any{"configmap": "no-such-configmap", "server": server}, msg: `get configmap "kube-system/no-such-configmap": not found`},
		{name: "daemonset missing", args: map[string]any{"daemonset": "no-such-daemonset", "server": server}, msg: `get daemonset "kube-system/no-such-daemonset": not found`},
		{name: "namespace missing", args: map[string]any{"namespace": "no-such-namespace", "server": server}, msg: `"no-such-namespace/kube-proxy": not found`},
		{name: "daemonset without the container", args: map[string]any{"container": "no-such-container", "server": server}, msg: `has no container "no-such-container"`},
		{name: "configmap name invalid", args: map[string]any{"configmap": "Kube_Proxy"}, msg: `--configmap "Kube_Proxy"`},
		{name: "namespace name invalid", args: map[string]any{"namespace": "kube system"}, msg: `--namespace "kube system"`},

		// the live ConfigMap is broken: refuse, do not "repair" it blindly
		{name: "config.conf not YAML", liveData: func(d map[string]string) { d["config.conf"] = "{{{ kind: KubeProxyConfiguration" },
			args: map[string]any{"set": map[string]any{"mode": "ipvs"}}, msg: "config.conf is not a valid KubeProxyConfiguration"},
		{name: "config.conf not YAML, server change only", liveData: func(d map[string]string) { d["config.conf"] = "{{{ kind: KubeProxyConfiguration" },
			args: map[string]any{"server": server}, msg: "config.conf is not a valid KubeProxyConfiguration"},
		{name: "config.conf of another kind", liveData: func(d map[string]string) {
			d["config.conf"] = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"
		}, args: map[string]any{"set": map[string]any{"mode": "ipvs"}}, msg: `kind "KubeletConfiguration", want KubeProxyConfiguration`},
		// (an unknown field is no reason: kube-proxy loads past it with a
		// warning, and the run carries it through, TestCarriesFieldsKubeProxyIgnores)
		{name: "config.conf with a wrongly typed field", liveData: func(d map[string]string) { d["config.conf"] += "\nbindAddressHardFail: maybe\n" },
			args: map[string]any{"set": map[string]any{"mode": "ipvs"}}, msg: "config.conf is not a valid KubeProxyConfiguration: wrong type"},
		{name: "configmap without config.conf", liveData: func(d map[string]string) { delete(d, "config.conf") },
			args: map[string]any{"set": map[string]any{"mode": "ipvs"}}, msg: `configmap has no "config.conf" key`},
		{name: "kubeconfig.conf not a kubeconfig", liveData: func(d map[string]string) { d["kubeconfig.conf"] = "clusters: {{{" },
			args: map[string]any{"server": server}, msg: "kubeconfig.conf is not a valid kubeconfig"},

		// --set
		{name: "set unknown field", args: map[string]any{"set": map[string]any{"ipvs.strictArp": true}}, msg: `unknown field "strictArp"`},
		{name: "set bool maybe", args: map[string]any{"set": map[string]any{"ipvs.strictARP": "maybe"}}, msg: `ipvs.strictARP="maybe": want true or false`},
		{name: "set int not a number", args: map[string]any{"set": map[string]any{"conntrack.maxPerCore": "lots"}}, msg: `conntrack.maxPerCore="lots": want a whole number`},
		{name: "set int overflow", args: map[string]any{"set": map[string]any{"oomScoreAdj": "99999999999"}}, msg: `oomScoreAdj="99999999999": want a whole number`},
		{name: "set duration not a duration", args: map[string]any{"set": map[string]any{"iptables.syncPeriod": "often"}}, msg: `iptables.syncPeriod="often": want a duration`},
		{name: "set unknown proxy mode", args: map[string]any{"set": map[string]any{"mode": "userspace"}}, msg: `unknown proxy mode`},
		{name: "set an object", args: map[string]any{"set": map[string]any{"ipvs": true}}, msg: `setting "ipvs": is an object`},
		{name: "set without =", flags: []string{"--set", "ipvs.strictARP"}, msg: `setting "ipvs.strictARP": want path=value`},

		// values kube-proxy itself refuses at start-up (the seed runs v1.33.6)
		{name: "set conntrack negative", args: map[string]any{"set": map[string]any{"conntrack.maxPerCore": -1}},
			msg: "kube-proxy 1.33's validation: conntrack.maxPerCore=-1: must be greater than or equal to 0"},
		{name: "set masquerade bit out of range", args: map[string]any{"set": map[string]any{"iptables.masqueradeBit": 99}},
			msg: "iptables.masqueradeBit=99: must be within the range [0, 31]"},
		{name: "set cluster CIDR not a CIDR", args: map[string]any{"set": map[string]any{"clusterCIDR": "foo"}}, msg: `clusterCIDR=foo: "foo" must be a valid CIDR block`},
		{name: "set healthz without host", args: map[string]any{"set": map[string]any{"healthzBindAddress": ":10256"}}, msg: `healthzBindAddress=:10256: host "" must be an IP address`},
		{name: "set unknown feature gate", args: map[string]any{"set": map[string]any{"featureGates.NoSuchGate": true}}, msg: "featureGates.NoSuchGate=true: unrecognized feature gate in kube-proxy 1.33"},
		{name: "set ipvs periods crossed", args: map[string]any{"set": map[string]any{"mode": "ipvs", "ipvs.syncPeriod": "30s", "ipvs.minSyncPeriod": "1m"}},
			msg: "ipvs.minSyncPeriod=1m0s: must be less than or equal to ipvs.syncPeriod (30s)"},
		// the seed is shaped like kubeadm 1.33's: the fields a 1.28
		// kube-proxy does not have yet are warnings (it ignores them), the
		// mode it does not have is not
		{name: "set nftables on a 1.28 kube-proxy", args: map[string]any{"set": map[string]any{"mode": "nftables"}, "kube_proxy_version": "v1.28.15"},
			msg: "mode=nftables: kube-proxy 1.28 on Linux supports iptables, ipvs (nftables from 1.29 on)"},
		{name: "set a field newer than kube-proxy", args: map[string]any{"set": map[string]any{"conntrack.udpTimeout": "30s"}, "kube_proxy_version": "v1.28.15"},
			msg: "setting conntrack.udpTimeout: kube-proxy 1.28 does not have this field (kube-proxy has it from 1.29 on) and would ignore it"},

		// --server
		{name: "server not a URL", args: map[string]any{"server": "not a url"}, msg: `server "not a url": want a URL`},
		{name: "server with a path", args: map[string]any{"server": "https://10.0.0.1:6443/api"}, msg: "no path"},
		{name: "server port out of range", args: map[string]any{"server": "https://10.0.0.1:99999"}, msg: "port must be 1-65535"},
		{name: "server scheme ftp", args: map[string]any{"server": "ftp://10.0.0.1:6443"}, msg: `server "ftp://10.0.0.1:6443": want a URL`},

		// --manifest
		{name: "manifest of the wrong kind", args: map[string]any{"manifest": manifest("secret.yaml", "apiVersion: v1\nkind: Secret\nmetadata:\n  name: kube-proxy\n  namespace: kube-system\n")},
			msg: "is v1 Secret, want apiVersion v1, kind ConfigMap"},
		{name: "manifest of the wrong name", args: map[string]any{"manifest": manifest("name.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: kube-proxy-other\n  namespace: kube-system\n")},
			msg: "is ConfigMap kube-system/kube-proxy-other, want kube-system/kube-proxy"},
		{name: "manifest of the wrong namespace", args: map[string]any{"manifest": manifest("ns.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: kube-proxy\n  namespace: default\n")},
			msg: "is ConfigMap default/kube-proxy, want kube-system/kube-proxy"},
		{name: "manifest not YAML", args: map[string]any{"manifest": file("garbage.yaml", "{{{")}, msg: "is not a valid ConfigMap"},
		{name: "manifest without data", args: map[string]any{"manifest": file("nodata.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: kube-proxy\n")}, msg: "has no data"},
		{name: "manifest missing", args: map[string]any{"manifest": filepath.Join(dir, "no-such-manifest.yaml")}, msg: "read manifest"},
		{name: "manifest config.conf with a field no kube-proxy has", args: map[string]any{"manifest": file("typo-config.yaml",
			"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: kube-proxy\n  namespace: kube-system\ndata:\n  config.conf: |\n    apiVersion: kubeproxy.config.k8s.io/v1alpha1\n    kind: KubeProxyConfiguration\n    ipvs:\n      strictArp: true\n")},
			msg: `unknown field "ipvs.strictArp": no kube-proxy from 1.27 to 1.37 has it`},
		{name: "manifest config.conf kube-proxy refuses", args: map[string]any{"manifest": file("bad-config.yaml",
			"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: kube-proxy\n  namespace: kube-system\ndata:\n  config.conf: |\n    apiVersion: kubeproxy.config.k8s.io/v1alpha1\n    kind: KubeProxyConfiguration\n    conntrack:\n      maxPerCore: -1\n")},
			msg: "conntrack.maxPerCore=-1: must be greater than or equal to 0"},

		// the args file itself
		{name: "args not JSON", raw: `server=https://10.96.0.1:6443`, msg: "module args are not a JSON object"},
		{name: "args not an object", raw: `["server", "https://10.96.0.1:6443"]`, msg: "module args are not a JSON object"},
		{name: "args JSON null", raw: `null`, msg: "module args are not a JSON object"},
		{name: "args with trailing data", raw: `{"server":"https://10.96.0.1:6443"} {"restart":"always"}`, msg: "module args are not a JSON object"},
		{name: "args with unknown keys", raw: `{"serverr":"https://10.96.0.1:6443","sett":{}}`, msg: "unsupported module args: serverr, sett"},
		{name: "args wrong type string", raw: `{"server":6443}`, msg: "module arg server: want a string, got a number"},
		{name: "args wrong type set", raw: `{"set":"mode=ipvs"}`, msg: "module arg set: want a dict"},
		{name: "args wrong type retries", raw: `{"retries":true}`, msg: "module arg retries: want a whole number, got a boolean"},
		{name: "args wrong type timeout", raw: `{"timeout":["5m"]}`, msg: "module arg timeout: want a duration"},

		// bounds
		{name: "timeout negative", args: map[string]any{"timeout": "-1s"}, msg: "--timeout -1s: want 0 (none) to 24h"},
		{name: "timeout absurd", args: map[string]any{"timeout": "1000h"}, msg: "--timeout 1000h0m0s: want 0 (none) to 24h"},
		{name: "timeout negative seconds", raw: `{"timeout":-5}`, msg: "--timeout -5s: want 0 (none) to 24h"},
		{name: "request timeout zero", args: map[string]any{"request_timeout": "0s"}, msg: "--request-timeout 0s: want more than 0"},
		{name: "retries negative", args: map[string]any{"retries": -1}, msg: "--retries -1: want 0 to 20"},
		{name: "retries absurd", args: map[string]any{"retries": 1000}, msg: "--retries 1000: want 0 to 20"},
		{name: "probe path invalid", args: map[string]any{"probe_path": "/readyz"}, msg: `--probe-path "/readyz": want one of auto, /livez, /healthz, none`},
		{name: "kube-proxy version invalid", args: map[string]any{"kube_proxy_version": "latest"}, msg: `--kube-proxy-version "latest"`},
		{name: "restart policy invalid", args: map[string]any{"restart": "sometimes"}, msg: `--restart "sometimes"`},
		{name: "log level invalid", args: map[string]any{"log_level": "loud"}, msg: `--log-level "loud"`},
	}
	require.GreaterOrEqual(t, len(cases), 30)

	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if tc.liveData != nil {
				breakLiveConfigMap(t, c, tc.liveData)
			}
			before := stateOf(t, c)
			check := func(t *testing.T, r cliRun) {
				t.Helper()
				assert.Equal(t, 1, r.Code, "exit code; stderr: %s", r.Stderr)
				assert.True(t, r.Failed, "failed")
				assert.False(t, r.Changed, "changed")
				assert.Contains(t, r.Msg, tc.msg)
				within := tc.within
				if within == 0 {
					within = 30 * time.Second
				}
				assert.Less(t, r.Elapsed, within, "a bad input must fail fast")
				assertUntouched(t, c, before)
			}
			if tc.flags == nil {
				t.Run("module", func(t *testing.T) {
					raw := []byte(tc.raw)
					if tc.raw == "" {
						raw = moduleArgsJSON(t, withKubeconfig(c, tc.args))
					}
					check(t, runModule(t, raw))
				})
			}
			if tc.raw == "" {
				t.Run("flags", func(t *testing.T) {
					flags := tc.flags
					if flags == nil {
						flags = moduleArgsToFlags(t, withKubeconfig(c, tc.args))
					} else {
						flags = append([]string{"--kubeconfig", c.KubeconfigPath}, flags...)
					}
					check(t, runCLI(t, append(flags, "--output", "json")...))
				})
			}
		})
	}

	t.Run("args file missing", func(t *testing.T) {
		before := stateOf(t, c)
		r := runCLI(t, filepath.Join(dir, "no-such-args-file"))
		assert.Equal(t, 1, r.Code)
		assert.True(t, r.Failed)
		assert.Contains(t, r.Msg, "read module args file")
		assertUntouched(t, c, before)
	})
}

func withKubeconfig(c *cluster.Cluster, args map[string]any) map[string]any {
	out := map[string]any{"kubeconfig": c.KubeconfigPath}
	for k, v := range args {
		out[k] = v
	}
	return out
}

// breakLiveConfigMap changes the live ConfigMap's data the way a hand edit
// would, and puts the seed back when the test ends.
func breakLiveConfigMap(t *testing.T, c *cluster.Cluster, edit func(map[string]string)) {
	t.Helper()
	cm := c.ConfigMap(t)
	edit(cm.Data)
	_, err := c.Client.CoreV1().ConfigMaps(c.Namespace).Update(context.Background(), cm, metav1.UpdateOptions{})
	require.NoError(t, err)
	t.Cleanup(func() { c.Reset(t) })
}

// closedLocalPort returns 127.0.0.1:port with nothing listening on it.
func closedLocalPort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	return addr
}

// An image tag that is not a version is no reason to fail, nor to guess:
// the API server's version says nothing about kube-proxy's (it may be three
// minors older, and 1.27 does not serve /livez), so with --probe-path auto
// the run leaves the probe alone and says so.
func TestUnknownKubeProxyVersionLeavesProbeAlone(t *testing.T) {
	c := cluster.Connect(t)
	c.Reset(t)
	t.Cleanup(func() { c.Reset(t) })
	patch := fmt.Sprintf(`{"spec":{"template":{"spec":{"containers":[{"name":%q,"image":"example.com/kube-proxy:latest"}]}}}}`, cluster.Name)
	_, err := c.Client.AppsV1().DaemonSets(c.Namespace).Patch(context.Background(), cluster.Name, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{})
	require.NoError(t, err)
	c.WaitRolloutComplete(t, 2*time.Minute)
	before := c.DaemonSet(t)
	pods := c.PodUIDs(t)

	r := runModule(t, moduleArgsJSON(t, map[string]any{"kubeconfig": c.KubeconfigPath, "probe_path": "auto"}))
	require.Equal(t, 0, r.Code, "msg: %s\nstderr: %s", r.Msg, r.Stderr)
	assert.False(t, r.Failed)
	assert.Contains(t, r.Stderr, `example.com/kube-proxy:latest`)
	assert.Contains(t, r.Stderr, "probes are left alone")
	f := r.facts()
	assert.Empty(t, f.KubeProxyVersion)
	assert.False(t, f.ProbeChanged)
	after := c.DaemonSet(t)
	assert.Equal(t, before.Spec.Template, after.Spec.Template, "the pod template (probe included) untouched")
	cluster.AssertNoneReplaced(t, pods, c.PodUIDs(t))
}
