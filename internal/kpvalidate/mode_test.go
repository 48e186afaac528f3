package kpvalidate

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// kubeadm writes every field, most of them zero: zero values are no settings.
const kubeadmConf = `apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
iptables:
  localhostNodePorts: null
  masqueradeAll: false
  masqueradeBit: null
  minSyncPeriod: 1s
  syncPeriod: 0s
ipvs:
  excludeCIDRs: null
  minSyncPeriod: 0s
  scheduler: ""
  strictARP: false
  syncPeriod: 0s
mode: %s
nodePortAddresses: null
`

func TestModeOf(t *testing.T) {
	for text, want := range map[string]string{
		"kind: KubeProxyConfiguration\napiVersion: kubeproxy.config.k8s.io/v1alpha1\n":                 ModeIPTables,
		"kind: KubeProxyConfiguration\napiVersion: kubeproxy.config.k8s.io/v1alpha1\nmode: \"\"\n":     ModeIPTables,
		"kind: KubeProxyConfiguration\napiVersion: kubeproxy.config.k8s.io/v1alpha1\nmode: nftables\n": ModeNFTables,
	} {
		got, err := ModeOf(text)
		require.NoError(t, err)
		assert.Equal(t, want, got, text)
	}
	_, err := ModeOf("mode: [")
	assert.Error(t, err)
}

func TestGateEnabled(t *testing.T) {
	conf := func(gates string) string {
		return "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\n" + gates
	}
	cases := []struct {
		name  string
		text  string
		minor int
		want  bool
	}{
		{"alpha in 1.30: off by default", conf(""), 30, false},
		{"alpha in 1.30: set", conf("featureGates:\n  NFTablesProxyMode: true\n"), 30, true},
		{"alpha in 1.29: AllAlpha", conf("featureGates:\n  AllAlpha: true\n"), 29, true},
		{"beta in 1.31: on by default", conf(""), 31, true},
		{"beta in 1.32: turned off", conf("featureGates:\n  NFTablesProxyMode: false\n"), 32, false},
		{"beta in 1.31: AllBeta off", conf("featureGates:\n  AllBeta: false\n"), 31, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := GateEnabled(tc.text, tc.minor, "NFTablesProxyMode")
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
}

func TestModeChangeNotes(t *testing.T) {
	conf := func(mode, extra string) string {
		return "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\nmode: " + mode + "\n" + extra
	}
	cases := []struct {
		name     string
		text     string
		minor    int
		from, to string
		want     []string // each a substring of one note, in order
	}{
		{"iptables to nftables, kubeadm's defaults", strings.Replace(kubeadmConf, "%s", "nftables", 1), 34, "iptables", "nftables", []string{
			"nodePortAddresses is not set: in nftables mode kube-proxy 1.34 then accepts NodePort connections on the node's primary IPs only",
			"iptables.localhostNodePorts is not set (true by default): NodePorts answer on 127.0.0.1 in iptables mode, never in nftables mode",
		}},
		{"iptables to nftables before 1.31: nodePortAddresses means the same", conf("nftables", "featureGates:\n  NFTablesProxyMode: true\n"), 30, "iptables", "nftables", []string{
			"iptables.localhostNodePorts is not set",
		}},
		{"localhost NodePorts off, nodePortAddresses set", conf("nftables", "nodePortAddresses: [primary]\niptables:\n  localhostNodePorts: false\n"), 34, "iptables", "nftables", nil},
		{"ipvs settings stop applying", conf("nftables", "ipvs:\n  strictARP: true\n  scheduler: rr\niptables:\n  masqueradeAll: true\n"), 34, "ipvs", "nftables", []string{
			`config.conf sets iptables.masqueradeAll: true (nftables mode reads nftables.masqueradeAll instead, not set); ipvs.scheduler: "rr"; ipvs.strictARP: true, which kube-proxy 1.34 reads in ipvs mode only: it stops applying in nftables mode (strictARP was needed for MetalLB`,
			"nodePortAddresses is not set",
		}},
		{"iptables sync period from 1.31", conf("nftables", "iptables:\n  syncPeriod: 1m\n  localhostNodePorts: false\nnftables:\n  syncPeriod: 2m\nnodePortAddresses: [primary]\n"), 34, "iptables", "nftables", []string{
			`iptables.syncPeriod: "1m" (nftables mode reads nftables.syncPeriod instead, set to "2m")`,
		}},
		{"nftables back to iptables widens NodePorts", conf("iptables", ""), 34, "nftables", "iptables", []string{
			"nodePortAddresses is not set: in iptables mode kube-proxy 1.34 then accepts NodePort connections on every local address",
		}},
		{"iptables to ipvs: localhost NodePorts go", conf("ipvs", "nodePortAddresses: [10.0.0.0/8]\n"), 34, "iptables", "ipvs", []string{
			"never in ipvs mode",
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			notes, err := ModeChangeNotes(tc.text, tc.minor, tc.from, tc.to)
			require.NoError(t, err)
			require.Len(t, notes, len(tc.want), "%q", notes)
			for i, want := range tc.want {
				assert.Contains(t, notes[i], want)
			}
		})
	}
}

// ModeSettings decodes as kube-proxy does: a key in the wrong case is not
// kube-proxy's mode, and an unset mode is "" whatever the default.
func TestModeSettingsDecodesAsKubeProxy(t *testing.T) {
	head := "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\n"
	for _, tc := range []struct {
		name, text, mode string
		gates            map[string]bool
	}{
		{"set", head + "mode: nftables\n", "nftables", nil},
		{"unset", head, "", nil},
		{"wrong case is dropped", head + "Mode: nftables\n", "", nil},
		{"gates", head + "mode: ipvs\nfeatureGates:\n  KubeProxyIPVS: true\n", "ipvs", map[string]bool{"KubeProxyIPVS": true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mode, gates, err := ModeSettings(tc.text, 45)
			if err != nil {
				t.Fatal(err)
			}
			if mode != tc.mode || len(gates) != len(tc.gates) || (tc.gates != nil && gates["KubeProxyIPVS"] != tc.gates["KubeProxyIPVS"]) {
				t.Fatalf("ModeSettings = %q %v, want %q %v", mode, gates, tc.mode, tc.gates)
			}
		})
	}
	if _, _, err := ModeSettings("kind: Pod\n", 30); err == nil {
		t.Fatal("a file that is not a KubeProxyConfiguration decoded")
	}
}
