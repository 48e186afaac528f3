package kpvalidate

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// effectByMode is every field's effect when it changes and the mode stays
// as named. A new field of the table must be added here, so it cannot stay
// unclassified.
var effectByMode = map[string]map[string]string{
	// the fields that matter only in some modes
	"iptables.masqueradeBit":          {"iptables": "restart", "ipvs": "restart", "nftables": "no-effect"},
	"iptables.masqueradeAll":          {"iptables": "restart", "ipvs": "restart", "nftables": "no-effect"},
	"iptables.localhostNodePorts":     {"iptables": "restart", "ipvs": "no-effect", "nftables": "no-effect"},
	"iptables.syncPeriod":             {"iptables": "restart", "ipvs": "restart", "nftables": "no-effect"},
	"iptables.minSyncPeriod":          {"iptables": "restart", "ipvs": "restart", "nftables": "no-effect"},
	"ipvs.syncPeriod":                 {"iptables": "no-effect", "ipvs": "restart", "nftables": "no-effect"},
	"ipvs.minSyncPeriod":              {"iptables": "no-effect", "ipvs": "restart", "nftables": "no-effect"},
	"ipvs.scheduler":                  {"iptables": "no-effect", "ipvs": "restart", "nftables": "no-effect"},
	"ipvs.excludeCIDRs":               {"iptables": "no-effect", "ipvs": "restart", "nftables": "no-effect"},
	"ipvs.strictARP":                  {"iptables": "no-effect", "ipvs": "restart", "nftables": "no-effect"},
	"ipvs.tcpTimeout":                 {"iptables": "no-effect", "ipvs": "restart", "nftables": "no-effect"},
	"ipvs.tcpFinTimeout":              {"iptables": "no-effect", "ipvs": "restart", "nftables": "no-effect"},
	"ipvs.udpTimeout":                 {"iptables": "no-effect", "ipvs": "restart", "nftables": "no-effect"},
	"nftables.masqueradeBit":          {"iptables": "no-effect", "ipvs": "no-effect", "nftables": "restart"},
	"nftables.masqueradeAll":          {"iptables": "no-effect", "ipvs": "no-effect", "nftables": "restart"},
	"nftables.syncPeriod":             {"iptables": "no-effect", "ipvs": "no-effect", "nftables": "restart"},
	"nftables.minSyncPeriod":          {"iptables": "no-effect", "ipvs": "no-effect", "nftables": "restart"},
	"winkernel.networkName":           {"iptables": "no-effect", "ipvs": "no-effect", "nftables": "no-effect"},
	"winkernel.sourceVip":             {"iptables": "no-effect", "ipvs": "no-effect", "nftables": "no-effect"},
	"winkernel.enableDSR":             {"iptables": "no-effect", "ipvs": "no-effect", "nftables": "no-effect"},
	"winkernel.rootHnsEndpointName":   {"iptables": "no-effect", "ipvs": "no-effect", "nftables": "no-effect"},
	"winkernel.forwardHealthCheckVip": {"iptables": "no-effect", "ipvs": "no-effect", "nftables": "no-effect"},
	"windowsRunAsService":             {"iptables": "no-effect", "ipvs": "no-effect", "nftables": "no-effect"},
	"portRange":                       {"iptables": "no-effect", "ipvs": "no-effect", "nftables": "no-effect"},
}

// everywhere are the fields every kube-proxy reads.
var everywhere = []string{
	"featureGates", "clientConnection.kubeconfig", "clientConnection.acceptContentTypes", "clientConnection.contentType",
	"clientConnection.qps", "clientConnection.burst", "logging.format", "logging.flushFrequency", "logging.verbosity",
	"logging.vmodule", "logging.options.json.splitStream", "logging.options.json.infoBufferSize",
	"logging.options.text.splitStream", "logging.options.text.infoBufferSize", "hostnameOverride", "bindAddress",
	"healthzBindAddress", "metricsBindAddress", "bindAddressHardFail", "enableProfiling", "showHiddenMetricsForVersion",
	"mode", "detectLocalMode", "detectLocal.bridgeInterface", "detectLocal.interfaceNamePrefix", "clusterCIDR",
	"nodePortAddresses", "oomScoreAdj", "conntrack.maxPerCore", "conntrack.min", "conntrack.tcpEstablishedTimeout",
	"conntrack.tcpCloseWaitTimeout", "conntrack.tcpBeLiberal", "conntrack.udpTimeout", "conntrack.udpStreamTimeout",
	"configSyncPeriod",
}

// changed is a value of each kind different from the zero value.
var changed = map[Kind]string{
	Bool: "true", Int32: "7", Uint32: "3", Float32: "7.5", String: "x", Duration: "7s", Strings: "[10.0.0.0/8]",
	BoolMap: "{LoggingAlphaOptions: true}", Quantity: `"1Mi"`, TimeOrDuration: `"7s"`, Objects: "[{filePattern: a, verbosity: 1}]",
}

func TestEffectEveryField(t *testing.T) {
	for _, p := range everywhere {
		effectByMode[p] = map[string]string{"iptables": "restart", "ipvs": "restart", "nftables": "restart"}
	}
	for _, f := range Fields(Newest) {
		want, ok := effectByMode[f.Path]
		require.True(t, ok, "field %s has no expected effect in this test: classify it", f.Path)
		if f.Path == "mode" {
			continue // changing the mode is tested below
		}
		for _, mode := range []string{"iptables", "ipvs", "nftables"} {
			t.Run(f.Path+"/"+mode, func(t *testing.T) {
				base := fmt.Sprintf("%smode: %s\n", testHeader, mode)
				next := base + nested(f.Path, changed[f.Kind])
				got := Effect([]byte(base), []byte(next))
				key := f.Path
				if f.Kind == BoolMap {
					key = "featureGates.LoggingAlphaOptions"
				}
				assert.Equal(t, map[string]string{key: want[mode]}, got)
			})
		}
	}
	assert.Len(t, effectByMode, len(Fields(Newest)), "every classified field is in the table")
}

func TestEffect(t *testing.T) {
	cases := []struct {
		name     string
		old, new string
		want     map[string]string
	}{
		{"nothing changed", "mode: ipvs\n", "mode: ipvs\n", map[string]string{}},
		{"unset mode is iptables", "", "ipvs:\n  strictARP: true\n", map[string]string{"ipvs.strictARP": "no-effect"}},
		{"mode change makes the new mode's fields count", "mode: iptables\n", "mode: ipvs\nipvs:\n  strictARP: true\n",
			map[string]string{"mode": "restart", "ipvs.strictARP": "restart"}},
		{"leaving a mode makes its fields count too", "mode: ipvs\nipvs:\n  strictARP: true\n", "mode: iptables\n",
			map[string]string{"mode": "restart", "ipvs.strictARP": "restart"}},
		{"feature gates one by one", "featureGates:\n  A: true\n", "featureGates:\n  A: false\n  B: true\n",
			map[string]string{"featureGates.A": "restart", "featureGates.B": "restart"}},
		{"removed field", "conntrack:\n  maxPerCore: 0\n", "", map[string]string{"conntrack.maxPerCore": "restart"}},
		{"unknown field restarts", "", "bogus: 1\n", map[string]string{"bogus": "restart"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, Effect([]byte(testHeader+tc.old), []byte(testHeader+tc.new)))
		})
	}
	assert.Equal(t, map[string]string{"config.conf": "restart"}, Effect([]byte("{{{"), []byte(testHeader)))
}

const testHeader = "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\n"

// nested renders path=value as block YAML.
func nested(path, value string) string {
	out, indent := "", ""
	parts := splitPath(path)
	for i, p := range parts {
		if i == len(parts)-1 {
			out += indent + p + ": " + value + "\n"
		} else {
			out += indent + p + ":\n"
		}
		indent += "  "
	}
	return out
}

func splitPath(p string) []string {
	var out []string
	start := 0
	for i := 0; i < len(p); i++ {
		if p[i] == '.' {
			out = append(out, p[start:i])
			start = i + 1
		}
	}
	return append(out, p[start:])
}
