package configmap

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"

	"github.com/kube-proxy-sync/kube-proxy-sync/internal/kpconfig"
)

const cfg = "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\nmode: iptables"
const kubeconfig = `apiVersion: v1
kind: Config
clusters:
- cluster:
    server: https://127.0.0.1:6443
  name: a
- cluster:
    server: https://127.0.0.2:6443
  name: b
`

func TestDesired(t *testing.T) {
	current := map[string]string{ConfigKey: cfg, KubeconfigKey: kubeconfig, "other": "x"}
	t.Run("no change", func(t *testing.T) {
		data, keys, err := Desired(current, Spec{Settings: []kpconfig.Setting{{Path: "mode", Value: "iptables"}}})
		require.NoError(t, err)
		assert.NotNil(t, keys, "an empty list, never nil")
		assert.Empty(t, keys)
		assert.Equal(t, current, data)
	})
	t.Run("every cluster's server, like sed", func(t *testing.T) {
		data, keys, err := Desired(current, Spec{Server: "https://10.0.0.1:6443"})
		require.NoError(t, err)
		assert.Equal(t, []string{"kubeconfig.conf:clusters[0].cluster.server", "kubeconfig.conf:clusters[1].cluster.server"}, keys)
		assert.Equal(t, 2, strings.Count(data[KubeconfigKey], "server: https://10.0.0.1:6443"))
		assert.Equal(t, "x", data["other"])
		assert.Equal(t, "x", current["other"], "input not modified")
	})
	t.Run("a value without a final newline keeps it that way", func(t *testing.T) {
		data, keys, err := Desired(current, Spec{Settings: []kpconfig.Setting{{Path: "mode", Value: "ipvs"}}})
		require.NoError(t, err)
		assert.Equal(t, []string{"config.conf:mode"}, keys)
		assert.False(t, strings.HasSuffix(data[ConfigKey], "\n"))
		assert.Contains(t, data[ConfigKey], "mode: ipvs")
	})
	t.Run("manifest data", func(t *testing.T) {
		m := &corev1.ConfigMap{Data: map[string]string{"other": "y", ConfigKey: cfg}}
		data, keys, err := Desired(current, Spec{Manifest: m})
		require.NoError(t, err)
		assert.Equal(t, []string{"other"}, keys)
		assert.Equal(t, "y", data["other"])
	})
	// content we author is checked for typos, what we carry through is not
	t.Run("manifest fields no kube-proxy has", func(t *testing.T) {
		typo := &corev1.ConfigMap{Data: map[string]string{ConfigKey: cfg + "\nipvs:\n  strictArp: true\n"}}
		_, _, err := Desired(current, Spec{Manifest: typo})
		require.Error(t, err)
		assert.Contains(t, err.Error(), `unknown field "ipvs.strictArp": no kube-proxy from 1.27 to 1.37 has it`)
		assert.Contains(t, err.Error(), `did you mean "ipvs.strictARP"?`)

		// a field only newer kube-proxy minors have, a key given twice:
		// kube-proxy warns and runs, so do we (sync reports the warnings)
		newer := &corev1.ConfigMap{Data: map[string]string{ConfigKey: cfg + "\nmode: ipvs\nnftables:\n  masqueradeAll: true\n"}}
		data, keys, err := Desired(current, Spec{Manifest: newer})
		require.NoError(t, err)
		assert.Equal(t, []string{ConfigKey}, keys)
		assert.Equal(t, newer.Data[ConfigKey], data[ConfigKey])

		// already in the live config.conf: carried through
		live := map[string]string{ConfigKey: cfg + "\nfutureField: 1\n"}
		carried := &corev1.ConfigMap{Data: map[string]string{ConfigKey: cfg + "\nfutureField: 1\nclusterCIDR: 10.0.0.0/8\n"}}
		_, keys, err = Desired(live, Spec{Manifest: carried})
		require.NoError(t, err)
		assert.Equal(t, []string{ConfigKey}, keys)
		_, _, err = Desired(live, Spec{Manifest: &corev1.ConfigMap{Data: map[string]string{ConfigKey: cfg + "\nfutureFeld: 1\n"}}})
		assert.ErrorContains(t, err, `unknown field "futureFeld"`)
	})
	t.Run("settings on a config.conf with fields no kube-proxy has", func(t *testing.T) {
		live := map[string]string{ConfigKey: cfg + "\nfutureField: 1\n"}
		data, keys, err := Desired(live, Spec{Settings: []kpconfig.Setting{{Path: "clusterCIDR", Value: "10.0.0.0/8"}}})
		require.NoError(t, err)
		assert.Equal(t, []string{"config.conf:clusterCIDR"}, keys)
		assert.Contains(t, data[ConfigKey], "futureField: 1", "carried through")
		_, _, err = Desired(live, Spec{Settings: []kpconfig.Setting{{Path: "futureField", Value: "2"}}})
		assert.ErrorContains(t, err, `unknown field "futureField"`, "an unknown --set path stays an error")
	})
	t.Run("errors", func(t *testing.T) {
		_, _, err := Desired(map[string]string{ConfigKey: cfg}, Spec{Server: "https://10.0.0.1:6443"})
		assert.ErrorContains(t, err, `no "kubeconfig.conf" key`)
		_, _, err = Desired(map[string]string{KubeconfigKey: kubeconfig}, Spec{Settings: []kpconfig.Setting{{Path: "mode", Value: "ipvs"}}})
		assert.ErrorContains(t, err, `no "config.conf" key`)
		_, _, err = Desired(map[string]string{KubeconfigKey: "clusters: 5"}, Spec{Server: "https://10.0.0.1:6443"})
		assert.ErrorContains(t, err, "not a valid kubeconfig")
		_, _, err = Desired(map[string]string{ConfigKey: "kind: Pod"}, Spec{})
		assert.ErrorContains(t, err, "want KubeProxyConfiguration")
	})
}

func TestValidateServer(t *testing.T) {
	for _, ok := range []string{"https://10.0.0.1:6443", "https://lb.example.internal:6443", "https://[fd00::1]:6443", "https://10.0.0.1:6443/"} {
		assert.NoError(t, ValidateServer(ok, false), ok)
	}
	assert.NoError(t, ValidateServer("http://127.0.0.1:8080", true), "http when the user opts out")
	const secret = "s3cr3t"
	for _, tc := range []struct {
		server        string
		allowInsecure bool
		want          string
	}{
		{"", false, "want a URL like"},
		{"10.0.0.1:6443", false, "want a URL like"},
		{"ftp://x:1", false, "want a URL like"},
		{"https://", false, "want a URL like"},
		{"https://x:99999", false, "port must be"},
		{"https://x:6443/api", false, "want a URL like"},
		{"not a url", false, "want a URL like"},
		{"http://127.0.0.1:8080", false, "--allow-insecure-server"},
		{"https://admin:" + secret + "@10.0.0.1:6443", false, "user info"},
		{"https://admin:" + secret + "@10.0.0.1:6443", true, "user info"},
		{"https://" + secret + "@10.0.0.1:6443", false, "user info"},
		{"http://admin:" + secret + "@10.0.0.1:6443", false, "user info"},
		{"admin:" + secret + "@10.0.0.1:6443", false, "want a URL like"},
		{"https://admin:" + secret + "@10.0.0.1:6443/api", false, "want a URL like"},
		{"https://admin:" + secret + "@10.0.0.1:99999", false, ""},
		{"https://admin:" + secret + "@[::1:6443", false, "want a URL like"},
		{"https://admin:" + secret + "@10.0.0.1:6443/%zz", false, "want a URL like"},
	} {
		err := ValidateServer(tc.server, tc.allowInsecure)
		require.Error(t, err, tc.server)
		assert.Contains(t, err.Error(), tc.want, tc.server)
		assert.NotContains(t, err.Error(), secret, "never echo credentials")
	}
}

func TestRedactURL(t *testing.T) {
	for in, want := range map[string]string{
		"https://10.0.0.1:6443":                   "https://10.0.0.1:6443",
		"https://admin:pw@10.0.0.1:6443":          "https://REDACTED@10.0.0.1:6443",
		"https://pw@10.0.0.1:6443/x@y":            "https://REDACTED@y", // a path's @ hidden too: never too little
		"https://u:p/ss@10.0.0.1:6443":            "https://REDACTED@10.0.0.1:6443",
		"https://u:p#ss@10.0.0.1:6443":            "https://REDACTED@10.0.0.1:6443",
		"https://u:p?ss@10.0.0.1:6443":            "https://REDACTED@10.0.0.1:6443",
		"admin:pw@10.0.0.1:6443":                  "REDACTED@10.0.0.1:6443",
		"https://a:p@w@[::1]:6443":                "https://REDACTED@[::1]:6443",
		"not a url":                               "not a url",
		"https://10.0.0.1:6443/?next=http://a@b/": "https://REDACTED@b/",
	} {
		assert.Equal(t, want, RedactURL(in), in)
	}
}

func TestLoadManifest(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, []byte(text), 0o600))
		return p
	}
	good := write("good.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: kube-proxy\n  namespace: kube-system\ndata:\n  a: b\n")
	m, err := LoadManifest(good, "kube-system", "kube-proxy")
	require.NoError(t, err)
	assert.Equal(t, "b", m.Data["a"])
	cases := map[string]string{
		"kind":      "apiVersion: v1\nkind: Secret\nmetadata:\n  name: kube-proxy\ndata:\n  a: Yg==\n",
		"name":      "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: other\ndata:\n  a: b\n",
		"namespace": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: kube-proxy\n  namespace: default\ndata:\n  a: b\n",
		"empty":     "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: kube-proxy\n",
		"not yaml":  "{{{",
	}
	for name, text := range cases {
		_, err := LoadManifest(write(name+".yaml", text), "kube-system", "kube-proxy")
		assert.Error(t, err, name)
	}
}

func TestRedactKeepsFileReferences(t *testing.T) {
	in := "users:\n- name: a\n  user:\n    token: abc.def\n    client-key-data: S0VZ\n    client-certificate-data: Q0VSVA==\n    tokenFile: /var/run/token\n"
	out := Redact(in)
	for _, secret := range []string{"abc.def", "S0VZ", "Q0VSVA=="} {
		assert.NotContains(t, out, secret)
	}
	assert.Contains(t, out, "token: REDACTED")
	assert.Contains(t, out, "tokenFile: /var/run/token", "file references are not secrets")
}

// kube-proxy reads no binaryData and the run writes none: a manifest that
// has any is refused, not half applied. A manifest larger than a
// ConfigMap can be is refused before it is read whole (a device or a huge
// file must not exhaust memory).
func TestLoadManifestRefusesWhatItWouldNotWrite(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, []byte(text), 0o600))
		return p
	}
	head := "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: kube-proxy\n  namespace: kube-system\n"
	cases := []struct {
		name, text, want string
	}{
		{"binaryData only", head + "binaryData:\n  config.conf: YQ==\n",
			"has binaryData (config.conf): kube-proxy reads no binaryData and kube-proxy-sync writes none; put the keys under data"},
		{"data and binaryData", head + "data:\n  a: b\nbinaryData:\n  x: YQ==\n  config.conf: YQ==\n",
			"has binaryData (config.conf, x)"},
		{"larger than a ConfigMap", head + "data:\n  a: b\n# " + strings.Repeat("x", 1<<20) + "\n",
			"is larger than 1 MiB, the most a ConfigMap holds"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := LoadManifest(write(strings.ReplaceAll(tc.name, " ", "-")+".yaml", tc.text), "kube-system", "kube-proxy")
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
	_, err := LoadManifest("/dev/zero", "kube-system", "kube-proxy")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "is larger than 1 MiB")
}

// A password holding a /, ? or # is still hidden in data (diffs, the
// audit log), and in a comment.
func TestRedactUserInfoWithSeparators(t *testing.T) {
	for _, pw := range []string{"p/ss", "p?ss", "p#ss"} {
		text := "clusters:\n- cluster:\n    server: https://u:" + pw + "@10.0.0.1:6443\n  name: x\n# old: https://u:" + pw + "@10.0.0.2:6443\n"
		out := Redact(text)
		assert.NotContains(t, out, pw, out)
		assert.Contains(t, out, "@10.0.0.1:6443", out)
	}
}

// A manifest (kubeadm's rendering) that changes kubeconfig.conf's server,
// and --server that sets it back: no change, so no copy and no restart.
func TestDesiredKeySetBackIsNoChange(t *testing.T) {
	kubeconfig := func(server string) string {
		return "apiVersion: v1\nkind: Config\nclusters:\n- cluster:\n    server: " + server + "\n  name: default\n"
	}
	// what an earlier run left: kubeadm's text with the server set
	current, _, err := Desired(map[string]string{"kubeconfig.conf": kubeconfig("https://10.0.0.10:6443")}, Spec{Server: "https://127.0.0.1:6443"})
	require.NoError(t, err)
	spec := Spec{
		Manifest: &corev1.ConfigMap{Data: map[string]string{"kubeconfig.conf": kubeconfig("https://10.0.0.10:6443")}},
		Server:   "https://127.0.0.1:6443",
	}
	data, keys, err := Desired(current, spec)
	require.NoError(t, err)
	assert.Equal(t, current, data)
	assert.Empty(t, keys, "no change: no copy, no restart")
	assert.NotNil(t, keys)
}

// kubeadm's own kubeconfig.conf, written with the server --server sets
// (kubespray's upgrade patch renders it so), against kubeadm's rendering of
// another server and --server: no change, and kubeadm's text stays as it is.
// Any other difference is still one.
func TestDesiredKubeadmsOwnServerIsNoChange(t *testing.T) {
	kubeconfig := func(server string) string {
		return "apiVersion: v1\nkind: Config\nclusters:\n- cluster:\n    certificate-authority: /ca.crt\n    server: " + server + "\n  name: default\n" +
			"users:\n- name: default\n  user:\n    tokenFile: /token"
	}
	current := map[string]string{"kubeconfig.conf": kubeconfig("https://127.0.0.1:6443")}
	spec := Spec{
		Manifest: &corev1.ConfigMap{Data: map[string]string{"kubeconfig.conf": kubeconfig("https://10.0.0.10:6443")}},
		Server:   "https://127.0.0.1:6443",
	}
	data, keys, err := Desired(current, spec)
	require.NoError(t, err)
	assert.Equal(t, current, data, "kubeadm's text kept")
	assert.Empty(t, keys, "no change: no copy, no restart")

	spec.Manifest.Data["kubeconfig.conf"] = strings.Replace(kubeconfig("https://10.0.0.10:6443"), "/token", "/other-token", 1)
	data, keys, err = Desired(current, spec)
	require.NoError(t, err)
	assert.Contains(t, keys, "kubeconfig.conf")
	assert.Contains(t, data["kubeconfig.conf"], "/other-token")
	assert.Contains(t, data["kubeconfig.conf"], "server: https://127.0.0.1:6443")
}
