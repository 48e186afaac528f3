package kpvalidate

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The findings of issue 12: values kube-proxy refuses at start-up. Each
// error names the field, the value and the rule. The differential test
// (hack/difftest) proves the same against the real code of every minor.
func TestValidateRejects(t *testing.T) {
	cases := []struct {
		name, body string
		minor      int
		want       string
	}{
		{"negative conntrack", "conntrack:\n  maxPerCore: -1\n", 34, "conntrack.maxPerCore=-1: must be greater than or equal to 0"},
		{"masquerade bit", "iptables:\n  masqueradeBit: 99\n", 34, "iptables.masqueradeBit=99: must be within the range [0, 31]"},
		{"cluster CIDR", "clusterCIDR: foo\n", 34, `clusterCIDR=foo: "foo" must be a valid CIDR block`},
		{"cluster CIDR before 1.31", "clusterCIDR: foo\n", 30, "clusterCIDR=foo: must be a valid CIDR block"},
		{"healthz without host", "healthzBindAddress: \":10256\"\n", 34, `healthzBindAddress=:10256: host "" must be an IP address`},
		{"unknown gate", "featureGates:\n  NoSuchGate: true\n", 34, "featureGates.NoSuchGate=true: unrecognized feature gate in kube-proxy 1.34"},
		{"ipvs periods", "mode: ipvs\nipvs:\n  syncPeriod: 30s\n  minSyncPeriod: 1m\n", 34, "ipvs.minSyncPeriod=1m0s: must be less than or equal to ipvs.syncPeriod (30s)"},
		{"nftables too old", "mode: nftables\n", 28, "mode=nftables: kube-proxy 1.28 on Linux supports iptables, ipvs (nftables from 1.29 on)"},
		{"windows mode on linux", "mode: kernelspace\n", 34, "mode=kernelspace: kube-proxy 1.34 on Linux supports iptables, ipvs, nftables"},
		{"wrong type", "ipvs:\n  strictARP: maybe\n", 34, "wrong type"},
		{"hidden metrics", "showHiddenMetricsForVersion: \"1.30\"\n", 34, "must be omitted or 1.33"},
		{"bridge without interface", "detectLocalMode: BridgeInterface\n", 34, "detectLocal.bridgeInterface: must not be empty"},
		{"primary with CIDRs", "nodePortAddresses: [primary, 10.0.0.0/8]\n", 34, "nodePortAddresses[0]=primary: can't use both 'primary' and CIDRs"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Validate(testHeader+tc.body, tc.minor)
			require.Error(t, err)
			var verr *Error
			require.True(t, errors.As(err, &verr))
			assert.Equal(t, tc.minor, verr.Minor)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}

func TestValidateAccepts(t *testing.T) {
	for name, tc := range map[string]struct {
		body  string
		minor int
	}{
		"empty":                   {"", 27},
		"conntrack 32768":         {"conntrack:\n  maxPerCore: 32768\n", 34},
		"healthz ip only":         {"healthzBindAddress: 0.0.0.0\n", 34},
		"nftables from 1.31":      {"mode: nftables\n", 31},
		"nftables gate at 1.29":   {"mode: nftables\nfeatureGates:\n  NFTablesProxyMode: true\n", 29},
		"ipvs periods other mode": {"mode: iptables\nipvs:\n  syncPeriod: 30s\n  minSyncPeriod: 1m\n", 34},
		"cluster CIDR not used":   {"detectLocalMode: NodeCIDR\nclusterCIDR: foo\n", 34},
		"previous minor metrics":  {"showHiddenMetricsForVersion: \"1.33\"\n", 34},
		"dual stack":              {"clusterCIDR: 10.244.0.0/16,fd00:10:244::/56\n", 34},
		"json":                    {`{"apiVersion":"kubeproxy.config.k8s.io/v1alpha1","kind":"KubeProxyConfiguration","mode":"ipvs"}`, 34},
	} {
		t.Run(name, func(t *testing.T) {
			text := testHeader + tc.body
			if tc.body != "" && tc.body[0] == '{' {
				text = tc.body
			}
			warns, err := Validate(text, tc.minor)
			assert.NoError(t, err)
			assert.Empty(t, warns)
		})
	}
}

// What kube-proxy loads past with a warning (its lenient fallback) is a
// warning here too, never an error: an unknown field is dropped whatever
// its value, a key given twice keeps its last value.
func TestValidateWarns(t *testing.T) {
	cases := []struct {
		name, body string
		minor      int
		want       []string
		err        string
	}{
		{"field newer than the version", "nftables:\n  masqueradeBit: 99\n", 28,
			[]string{`config.conf: field "nftables" is ignored by kube-proxy 1.28 (kube-proxy has it from 1.29 on)`}, ""},
		{"newer field of the wrong type", "conntrack:\n  udpTimeout: soon\n", 27,
			[]string{`config.conf: field "conntrack.udpTimeout" is ignored by kube-proxy 1.27 (kube-proxy has it from 1.29 on)`}, ""},
		{"unknown field", "ipvs:\n  strictArp: true\n", 34,
			[]string{`config.conf: unknown field "ipvs.strictArp" is ignored by kube-proxy 1.34 (no kube-proxy from 1.27 to 1.37 has it; field names are case-sensitive: did you mean "ipvs.strictARP"?)`}, ""},
		{"unknown object", "bogus:\n  a: [1, 2]\n", 34,
			[]string{`config.conf: unknown field "bogus" is ignored by kube-proxy 1.34 (no kube-proxy from 1.27 to 1.37 has it)`}, ""},
		{"unknown field in a vmodule item", "logging:\n  vmodule:\n  - filePattern: a\n    bogus: 1\n", 34,
			[]string{`config.conf: unknown field "logging.vmodule[0].bogus" is ignored by kube-proxy 1.34 (no kube-proxy from 1.27 to 1.37 has it)`}, ""},
		{"duplicate key, last counts", "mode: foo\nmode: ipvs\n", 34,
			[]string{`config.conf: key "mode" is given twice (line 4): kube-proxy 1.34 uses the last value`}, ""},
		{"duplicate key, last invalid", "mode: ipvs\nmode: foo\n", 34,
			[]string{`config.conf: key "mode" is given twice (line 4): kube-proxy 1.34 uses the last value`}, "mode=foo"},
		{"unknown field and a validation error", "bogus: 1\nclusterCIDR: foo\n", 34,
			[]string{`config.conf: unknown field "bogus" is ignored by kube-proxy 1.34 (no kube-proxy from 1.27 to 1.37 has it)`}, "clusterCIDR=foo"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			warns, err := Validate(testHeader+tc.body, tc.minor)
			assert.Equal(t, tc.want, warns.Strings())
			if tc.err == "" {
				assert.NoError(t, err)
			} else {
				require.Error(t, err)
				assert.Contains(t, err.Error(), tc.err)
			}
		})
	}
	// a wrong type in a field kube-proxy has is fatal, with or without
	// unknown fields: no lenient fallback then
	warns, err := Validate(testHeader+"bogus: 1\nipvs:\n  strictARP: maybe\n", 34)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "wrong type")
	assert.Empty(t, warns)
}

func TestRules(t *testing.T) {
	for v, want := range map[string]int{"": Newest, "v1.34.4": 34, "1.27.16": 27, "v1.26.0": Oldest, "v1.99.0": Newest, "garbage": Newest, "1.29.0-eksbuild.1": 29} {
		m, note := Rules(v)
		assert.Equal(t, want, m, v)
		if v == "" || v == "garbage" || v == "v1.26.0" || v == "v1.99.0" {
			assert.NotEmpty(t, note, v)
		} else {
			assert.Empty(t, note, v)
		}
	}
}
