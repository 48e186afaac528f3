package kpvalidate

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// readers are the modes whose newest kube-proxy reads each field when it
// changes (Linux's modes, and "kernelspace" for Windows). A new field of the
// table must be added here, so it cannot stay unclassified; versions that
// differ are in TestEffect.
var readers = map[string]string{
	"iptables.masqueradeBit":          "iptables ipvs",
	"iptables.masqueradeAll":          "iptables ipvs",
	"iptables.localhostNodePorts":     "iptables",
	"iptables.syncPeriod":             "iptables kernelspace",
	"iptables.minSyncPeriod":          "iptables kernelspace",
	"ipvs.syncPeriod":                 "ipvs",
	"ipvs.minSyncPeriod":              "ipvs",
	"ipvs.scheduler":                  "ipvs",
	"ipvs.excludeCIDRs":               "ipvs",
	"ipvs.strictARP":                  "ipvs",
	"ipvs.tcpTimeout":                 "ipvs",
	"ipvs.tcpFinTimeout":              "ipvs",
	"ipvs.udpTimeout":                 "ipvs",
	"nftables.masqueradeBit":          "nftables",
	"nftables.masqueradeAll":          "nftables",
	"nftables.syncPeriod":             "nftables",
	"nftables.minSyncPeriod":          "nftables",
	"winkernel.networkName":           "kernelspace",
	"winkernel.sourceVip":             "kernelspace",
	"winkernel.enableDSR":             "kernelspace",
	"winkernel.rootHnsEndpointName":   "kernelspace",
	"winkernel.forwardHealthCheckVip": "kernelspace",
	"windowsRunAsService":             "kernelspace",
	"portRange":                       "",
	"oomScoreAdj":                     "iptables ipvs nftables",
	"conntrack.maxPerCore":            "iptables ipvs nftables",
	"conntrack.min":                   "iptables ipvs nftables",
	"conntrack.tcpEstablishedTimeout": "iptables ipvs nftables",
	"conntrack.tcpCloseWaitTimeout":   "iptables ipvs nftables",
	"conntrack.tcpBeLiberal":          "iptables ipvs nftables",
	"conntrack.udpTimeout":            "iptables ipvs nftables",
	"conntrack.udpStreamTimeout":      "iptables ipvs nftables",
}

// everywhere are the fields every kube-proxy reads.
var everywhere = []string{
	"featureGates", "clientConnection.kubeconfig", "clientConnection.acceptContentTypes", "clientConnection.contentType",
	"clientConnection.qps", "clientConnection.burst", "logging.format", "logging.flushFrequency", "logging.verbosity",
	"logging.vmodule", "logging.options.json.splitStream", "logging.options.json.infoBufferSize",
	"logging.options.text.splitStream", "logging.options.text.infoBufferSize", "hostnameOverride", "bindAddress",
	"healthzBindAddress", "metricsBindAddress", "bindAddressHardFail", "enableProfiling", "showHiddenMetricsForVersion",
	"mode", "detectLocalMode", "detectLocal.bridgeInterface", "detectLocal.interfaceNamePrefix", "clusterCIDR",
	"nodePortAddresses", "configSyncPeriod",
}

// changed is a value of each kind different from the zero value.
var changed = map[Kind]string{
	Bool: "true", Int32: "7", Uint32: "3", Float32: "7.5", String: "x", Duration: "7s", Strings: "[10.0.0.0/8]",
	BoolMap: "{LoggingAlphaOptions: true}", Quantity: `"1Mi"`, TimeOrDuration: `"7s"`, Objects: "[{filePattern: a, verbosity: 1}]",
}

func TestEffectEveryField(t *testing.T) {
	for _, p := range everywhere {
		readers[p] = "iptables ipvs nftables kernelspace"
	}
	for _, f := range Fields(Newest) {
		want, ok := readers[f.Path]
		require.True(t, ok, "field %s has no expected effect in this test: classify it", f.Path)
		assert.NotEmpty(t, f.In, "field %s: name the modes that read it (In)", f.Path)
		if f.Path == "mode" {
			continue // changing the mode is tested below
		}
		for _, mode := range []string{"iptables", "ipvs", "nftables", "kernelspace"} {
			t.Run(f.Path+"/"+mode, func(t *testing.T) {
				on := Target{Minor: Newest, OS: "linux"}
				if mode == "kernelspace" {
					on.OS = "windows"
				}
				base := fmt.Sprintf("%smode: %s\n", testHeader, mode)
				next := base + nested(f.Path, changed[f.Kind])
				got := Effect([]byte(base), []byte(next), on)
				key := f.Path
				if f.Kind == BoolMap {
					key = "featureGates.LoggingAlphaOptions"
				}
				effect := EffectNoEffect
				if strings.Contains(" "+want+" ", " "+mode+" ") {
					effect = EffectRestart
				}
				assert.Equal(t, map[string]string{key: effect}, got)
			})
		}
	}
	assert.Len(t, readers, len(Fields(Newest)), "every classified field is in the table")
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
			assert.Equal(t, tc.want, Effect([]byte(testHeader+tc.old), []byte(testHeader+tc.new), Target{Minor: Newest, OS: "linux"}))
		})
	}
	// what the running kube-proxies are: version and OS
	linux30, linux31, linux37 := Target{30, "linux"}, Target{31, "linux"}, Target{37, "linux"}
	onCases := []struct {
		name     string
		old, new string
		on       []Target
		want     string
	}{
		{"iptables.syncPeriod in ipvs mode up to 1.30 (health server)", "mode: ipvs\n", "mode: ipvs\niptables:\n  syncPeriod: 7s\n", []Target{linux30}, EffectRestart},
		{"iptables.syncPeriod in ipvs mode from 1.31", "mode: ipvs\n", "mode: ipvs\niptables:\n  syncPeriod: 7s\n", []Target{linux31}, EffectNoEffect},
		{"iptables.syncPeriod in nftables mode up to 1.30", "mode: nftables\n", "mode: nftables\niptables:\n  syncPeriod: 7s\n", []Target{linux30}, EffectRestart},
		{"one old kube-proxy among new ones", "mode: ipvs\n", "mode: ipvs\niptables:\n  syncPeriod: 7s\n", []Target{linux37, linux30}, EffectRestart},
		{"unknown version: any minor's rules", "mode: ipvs\n", "mode: ipvs\niptables:\n  syncPeriod: 7s\n", []Target{{OS: "linux"}}, EffectRestart},
		{"iptables.masqueradeAll on windows 1.27", "", "iptables:\n  masqueradeAll: true\n", []Target{{27, "windows"}}, EffectRestart},
		{"iptables.masqueradeAll on windows 1.28", "", "iptables:\n  masqueradeAll: true\n", []Target{{28, "windows"}}, EffectNoEffect},
		{"winkernel on linux", "", "winkernel:\n  enableDSR: true\n", []Target{linux37}, EffectNoEffect},
		{"winkernel on windows, default mode", "", "winkernel:\n  enableDSR: true\n", []Target{{37, "windows"}}, EffectRestart},
		{"winkernel, OS unknown, default mode", "", "winkernel:\n  enableDSR: true\n", []Target{{Minor: 37}}, EffectRestart},
		{"ipvs on windows", "", "ipvs:\n  strictARP: true\n", []Target{{37, "windows"}}, EffectNoEffect},
		{"conntrack on windows", "", "conntrack:\n  min: 7\n", []Target{{37, "windows"}}, EffectNoEffect},
		{"a field newer than the kube-proxy: dropped when it loads", "mode: ipvs\n", "mode: ipvs\nnftables:\n  syncPeriod: 7s\n", []Target{{28, "linux"}}, EffectNoEffect},
		{"a field newer than one kube-proxy, read by another", "mode: nftables\n", "mode: nftables\nnftables:\n  syncPeriod: 7s\n", []Target{{28, "linux"}, linux37}, EffectRestart},
	}
	for _, tc := range onCases {
		t.Run(tc.name, func(t *testing.T) {
			got := Effect([]byte(testHeader+tc.old), []byte(testHeader+tc.new), tc.on...)
			require.Len(t, got, 1)
			for _, e := range got {
				assert.Equal(t, tc.want, e)
			}
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
