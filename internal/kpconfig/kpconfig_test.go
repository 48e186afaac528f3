package kpconfig

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/kube-proxy-sync/kube-proxy-sync/internal/kpvalidate"
)

const base = `apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
# kubeadm writes comments too
healthzBindAddress: 0.0.0.0:10256
mode: iptables
ipvs:
  strictARP: false
conntrack:
  maxPerCore: 32768
`

func TestSet(t *testing.T) {
	cases := []struct {
		name     string
		settings []string
		changed  []string
		contains []string
		err      string
	}{
		{name: "same values change nothing", settings: []string{"mode=iptables", "ipvs.strictARP=false", "conntrack.maxPerCore=32768"}},
		{name: "bool", settings: []string{"ipvs.strictARP=true"}, changed: []string{"ipvs.strictARP"}, contains: []string{"strictARP: true", "# kubeadm writes comments too"}},
		{name: "mode", settings: []string{"mode=ipvs"}, changed: []string{"mode"}, contains: []string{"mode: ipvs"}},
		{name: "pointer int", settings: []string{"conntrack.maxPerCore=0"}, changed: []string{"conntrack.maxPerCore"}, contains: []string{"maxPerCore: 0"}},
		{name: "new nested field", settings: []string{"ipvs.scheduler=rr"}, changed: []string{"ipvs.scheduler"}, contains: []string{"scheduler: rr"}},
		{name: "new object", settings: []string{"nftables.masqueradeAll=true"}, changed: []string{"nftables.masqueradeAll"}, contains: []string{"nftables:\n  masqueradeAll: true"}},
		{name: "duration", settings: []string{"ipvs.syncPeriod=30s"}, changed: []string{"ipvs.syncPeriod"}, contains: []string{"syncPeriod: 30s"}},
		{name: "string list", settings: []string{"nodePortAddresses=10.0.0.0/8,192.168.0.0/16"}, changed: []string{"nodePortAddresses"}, contains: []string{"- 10.0.0.0/8"}},
		{name: "feature gate map", settings: []string{"featureGates.LoggingAlphaOptions=true"}, changed: []string{"featureGates.LoggingAlphaOptions"}, contains: []string{"LoggingAlphaOptions: true"}},
		{name: "feature gate value type", settings: []string{"featureGates.LoggingAlphaOptions=yes please"}, err: "want true or false"},
		{name: "feature gates as a whole", settings: []string{"featureGates=x"}, err: "set one entry"},
		{name: "unknown field", settings: []string{"ipvs.strictArp=true"}, err: `unknown field "strictArp"`},
		{name: "unknown top field", settings: []string{"nope=1"}, err: `unknown field "nope"`},
		{name: "bool type", settings: []string{"ipvs.strictARP=maybe"}, err: "want true or false"},
		{name: "int type", settings: []string{"conntrack.maxPerCore=many"}, err: "want a whole number"},
		{name: "int overflow", settings: []string{"conntrack.maxPerCore=99999999999"}, err: "want a whole number"},
		{name: "duration type", settings: []string{"ipvs.syncPeriod=soon"}, err: "want a duration"},
		{name: "object is not a value", settings: []string{"ipvs=true"}, err: "is an object"},
		{name: "descend into scalar", settings: []string{"mode.x=1"}, err: "is not an object"},
		{name: "bad mode", settings: []string{"mode=userspace"}, err: "unknown proxy mode"},
		{name: "same path there and back is no change", settings: []string{"mode=ipvs", "mode=iptables"}},
		{name: "same path twice, last wins", settings: []string{"mode=nftables", "mode=ipvs"}, changed: []string{"mode"}, contains: []string{"mode: ipvs"}},
		{name: "kind is not a setting", settings: []string{"kind=Other"}, err: `unknown field "kind"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var settings []Setting
			for _, s := range tc.settings {
				st, err := ParseSetting(s)
				require.NoError(t, err)
				settings = append(settings, st)
			}
			out, changed, err := Set(base, settings)
			if tc.err != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), tc.err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.changed, changed)
			if len(tc.changed) == 0 {
				assert.Equal(t, base, out, "unchanged input comes back byte for byte")
			}
			for _, c := range tc.contains {
				assert.Contains(t, out, c)
			}
			err = Decode(out)
			assert.NoError(t, err)
		})
	}
}

// Set checks names and types; whether kube-proxy accepts the values (an
// unknown feature gate, a bit out of range) is the whole-file validation's
// job, for the kube-proxy version in use (kpvalidate, called by sync).
func TestSetThenValidate(t *testing.T) {
	for _, s := range []string{"featureGates.NoSuchGate=true", "iptables.masqueradeBit=99", "conntrack.maxPerCore=-1", "clusterCIDR=foo"} {
		st, err := ParseSetting(s)
		require.NoError(t, err)
		out, _, err := Set(base, []Setting{st})
		require.NoError(t, err, s)
		_, err = kpvalidate.Validate(out, 34)
		assert.Error(t, err, s)
	}
}

func TestParseSetting(t *testing.T) {
	for _, bad := range []string{"", "mode", "=ipvs", " =x", "featureGates.=true", "ipvs..strictARP=true", ".mode=ipvs"} {
		_, err := ParseSetting(bad)
		assert.Error(t, err, bad)
	}
	s, err := ParseSetting("clusterCIDR=10.0.0.0/8=x")
	require.NoError(t, err)
	assert.Equal(t, Setting{Path: "clusterCIDR", Value: "10.0.0.0/8=x"}, s)
}

func TestDecodeRejects(t *testing.T) {
	for name, text := range map[string]string{
		"not yaml":   "{{{",
		"wrong kind": "apiVersion: v1\nkind: ConfigMap\n",
		"wrong type": "kind: KubeProxyConfiguration\nipvs:\n  strictARP: maybe\n",
	} {
		err := Decode(text)
		assert.Error(t, err, name)
	}
}

func TestHealthzEndpoint(t *testing.T) {
	cases := map[string]struct {
		addr string
		port int
		host string
		err  bool
	}{
		"default":        {"", 10256, "", false},
		"all interfaces": {"0.0.0.0:10256", 10256, "", false},
		"custom port":    {"0.0.0.0:12345", 12345, "", false},
		"loopback":       {"127.0.0.1:10256", 10256, "127.0.0.1", false},
		"ipv6":           {"[::]:10256", 10256, "", false},
		"ip only":        {"0.0.0.0", 10256, "", false},
		"bad port":       {"0.0.0.0:http", 0, "", true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			text := "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\n"
			if tc.addr != "" {
				text += "healthzBindAddress: \"" + tc.addr + "\"\n"
			}
			port, host, err := HealthzEndpoint(text)
			if tc.err {
				assert.Error(t, err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.port, port)
			assert.Equal(t, tc.host, host)
		})
	}
}

// clientConnection.qps is a float32 that kubeadm writes as `qps: 5`: the
// same value set again is no change (a change there restarted kube-proxy
// after every kubeadm rewrite), and a whole number is written the same way.
func TestSetFloatAsKubeadmWritesIt(t *testing.T) {
	cases := []struct {
		name, text, set string
		changed         []string
		contains        string
	}{
		{name: "kubeadm's whole number", text: base + "clientConnection:\n  qps: 5\n", set: "clientConnection.qps=5"},
		{name: "written as a float", text: base + "clientConnection:\n  qps: 5.0\n", set: "clientConnection.qps=5"},
		{name: "a fraction equal", text: base + "clientConnection:\n  qps: 0.5\n", set: "clientConnection.qps=0.50"},
		{name: "a whole number", text: base, set: "clientConnection.qps=7", changed: []string{"clientConnection.qps"}, contains: "  qps: 7\n"},
		{name: "a fraction", text: base, set: "clientConnection.qps=0.5", changed: []string{"clientConnection.qps"}, contains: "  qps: 0.5\n"},
		{name: "another value", text: base + "clientConnection:\n  qps: 5\n", set: "clientConnection.qps=50", changed: []string{"clientConnection.qps"}, contains: "  qps: 50\n"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			st, err := ParseSetting(tc.set)
			require.NoError(t, err)
			out, changed, err := Set(tc.text, []Setting{st})
			require.NoError(t, err)
			assert.Equal(t, tc.changed, changed)
			if len(tc.changed) == 0 {
				assert.Equal(t, tc.text, out, "unchanged input comes back byte for byte")
			}
			assert.Contains(t, out, tc.contains)
			assert.NotContains(t, out, "!!float")
		})
	}
}

// kube-proxy decodes config.conf through YAML to JSON, where an alias key
// (*k), a !!binary key or a << merge key is the same key given again and the
// last one wins. --set edits the key kube-proxy reads, or refuses, naming
// it; it never edits an entry kube-proxy does not read and reports it done
// (or "unchanged").
func TestSetEditsTheKeyKubeProxyReads(t *testing.T) {
	const head = "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\n"
	cases := []struct {
		name    string
		body    string
		setting string
		changed []string // with err empty: the paths reported
		reads   string   // with err empty: kube-proxy's value at the path after
		err     string
	}{
		{name: "alias key after it", body: "&k mode: iptables\n*k : ipvs\n", setting: "mode=nftables",
			err: `setting mode: config.conf gives key "mode" again (line 4) as an alias (*k), a !!binary or a << merge key, and kube-proxy reads that one`},
		{name: "alias key, the value kube-proxy does not read", body: "&k mode: iptables\n*k : ipvs\n", setting: "mode=iptables",
			err: `key "mode" again (line 4)`},
		{name: "alias key, the value kube-proxy reads already", body: "&k mode: iptables\n*k : ipvs\n", setting: "mode=ipvs",
			err: `key "mode" again (line 4)`},
		{name: "binary key after it", body: "mode: iptables\n!!binary bW9kZQ==: ipvs\n", setting: "mode=nftables",
			err: `key "mode" again (line 4)`},
		{name: "binary key, the value kube-proxy does not read", body: "mode: ipvs\n!!binary bW9kZQ==: iptables\n", setting: "mode=ipvs",
			err: `key "mode" again (line 4)`},
		{name: "merge key after it", body: "mode: iptables\n<<: {mode: ipvs}\n", setting: "mode=nftables",
			err: `key "mode" again (line 4)`},
		{name: "nested binary key", body: "ipvs:\n  strictARP: false\n  !!binary c3RyaWN0QVJQ: true\n", setting: "ipvs.strictARP=false",
			err: `setting ipvs.strictARP: config.conf gives key "strictARP" again (line 5)`},
		{name: "the parent given again by an alias", body: "&k ipvs:\n  strictARP: false\n*k :\n  scheduler: rr\n", setting: "ipvs.strictARP=true",
			err: `setting ipvs.strictARP: config.conf gives key "ipvs" again (line 6)`},
		{name: "a value shared through an anchor", body: "iptables: &sync\n  syncPeriod: 30s\nipvs: *sync\n", setting: "iptables.syncPeriod=1m",
			err: `setting iptables.syncPeriod: would also change ipvs.syncPeriod, which shares its value through a YAML anchor (&) and alias (*)`},
		// kube-proxy reads the plain key given last: that is the one edited
		{name: "binary key before it", body: "!!binary bW9kZQ==: ipvs\nmode: iptables\n", setting: "mode=nftables",
			changed: []string{"mode"}, reads: "nftables"},
		{name: "merge key before it", body: "<<: {mode: ipvs}\nmode: iptables\n", setting: "mode=nftables",
			changed: []string{"mode"}, reads: "nftables"},
		{name: "plain key given twice", body: "mode: ipvs\nmode: iptables\n", setting: "mode=nftables",
			changed: []string{"mode"}, reads: "nftables"},
		// YAML 1.1 as kube-proxy reads it: yes is true
		{name: "a value kube-proxy reads the same is no change", body: "ipvs:\n  strictARP: yes\n", setting: "ipvs.strictARP=true"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			st, err := ParseSetting(tc.setting)
			require.NoError(t, err)
			text := head + tc.body
			out, changed, err := Set(text, []Setting{st})
			if tc.err != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), tc.err)
				assert.Contains(t, err.Error(), "nothing was written")
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.changed, changed)
			if len(tc.changed) == 0 {
				assert.Equal(t, text, out)
				return
			}
			var got map[string]any
			js, err := sigsyaml.YAMLToJSON([]byte(out))
			require.NoError(t, err)
			require.NoError(t, json.Unmarshal(js, &got))
			assert.Equal(t, tc.reads, got["mode"], "what kube-proxy reads")
		})
	}
}

// Differences compares as kube-proxy reads: order, quoting and an empty
// mode (iptables on Linux) aside, every leaf that differs, by path.
func TestDifferences(t *testing.T) {
	from := "kind: KubeProxyConfiguration\nmode: \"\"\niptables:\n  minSyncPeriod: 7s\n  syncPeriod: 30s\nclusterCIDR: 10.0.0.0/8\n"
	to := "clusterCIDR: \"10.0.0.0/8\"\niptables:\n  syncPeriod: 30s\nkind: KubeProxyConfiguration\nmode: iptables\nconntrack:\n  maxPerCore: 0\n"
	got, err := Differences(from, to)
	require.NoError(t, err)
	assert.Equal(t, []Difference{
		{Path: "conntrack.maxPerCore", From: "", To: "0"},
		{Path: "iptables.minSyncPeriod", From: `"7s"`, To: ""},
	}, got)
	got, err = Differences("mode: nftables\n", "kind: KubeProxyConfiguration\n")
	require.NoError(t, err)
	assert.Equal(t, []Difference{{Path: "kind", To: `"KubeProxyConfiguration"`}, {Path: "mode", From: `"nftables"`, To: `"iptables"`}}, got)
	got, err = Differences("mode: null\n", "mode: iptables\n")
	require.NoError(t, err)
	assert.Empty(t, got, "a null mode is iptables too")
	_, err = Differences("mode: [", "")
	assert.Error(t, err)
}
