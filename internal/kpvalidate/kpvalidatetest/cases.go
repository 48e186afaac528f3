package kpvalidatetest

import (
	"fmt"
	"strings"

	"github.com/kube-proxy-sync/kube-proxy-sync/internal/kpvalidate"
)

// values are YAML flow values tried for each field, by kind; string fields
// get the pool their name suggests.
var values = map[kpvalidate.Kind][]string{
	kpvalidate.Bool:           {"true", "false", `"true"`, "1", "null", "yes"},
	kpvalidate.Int32:          {"0", "1", "-1", "14", "31", "32", "99", "-1000", "1000", "1001", "-1001", "2147483647", "2147483648", "1.5", `"5"`, "null"},
	kpvalidate.Uint32:         {"0", "5", "2147483647", "2147483648", "4294967295", "4294967296", "-1", `"1"`},
	kpvalidate.Float32:        {"0", "5", "-1", "0.5", "1e40", `"x"`, "null"},
	kpvalidate.Duration:       {"0s", "1s", "30s", "-1s", "1h", "soon", "5", `""`, "null", "1m30s", "-0s"},
	kpvalidate.Strings:        {"[]", "[10.0.0.0/8]", "[primary]", "[primary, 10.0.0.0/8]", "[10.0.0.0/8, primary]", "[localhost, all]", "[all, all]", "[foo]", "[10.0.0.0/8, fd00::/8]", "[010.0.0.0/8]", "notalist", "null", `[""]`},
	kpvalidate.BoolMap:        {"{}", "{NoSuchGate: true}", "{NFTablesProxyMode: true}", "{NFTablesProxyMode: false}", "{KubeProxyIPVS: false}", "{KubeProxyIPVS: true}", "{LoggingAlphaOptions: true}", "{LoggingBetaOptions: false}", `{"": true}`, "null", "{AllAlpha: true}", "{AllBeta: false}"},
	kpvalidate.Quantity:       {`"0"`, `"1Mi"`, "0", "1024", `"-1"`, `"x"`, "null"},
	kpvalidate.TimeOrDuration: {"0", "5000000000", `"5s"`, `"-1s"`, `"x"`, "-5", "null", "1.5"},
	kpvalidate.Objects:        {"[]", "[{filePattern: a, verbosity: 2}]", `[{filePattern: ""}]`, "[{filePattern: a=b}]", "[{filePattern: x, verbosity: 4294967295}]", "[{filePattern: x, verbosity: 2147483648}]", "x", "null"},
}

var stringValues = map[string][]string{
	"address": {`""`, "0.0.0.0", "0.0.0.0:10256", ":10256", "127.0.0.1:0", "127.0.0.1:65536", "[::]:10256", `"::"`, "::1", "localhost:10256", "0.0.0.0:http", "010.0.0.1", "foo", `"[::1]"`},
	"cidr":    {`""`, "10.244.0.0/16", "foo", "10.244.0.0/16,fd00:10:244::/56", "10.0.0.0/8,10.1.0.0/16", "10.0.0.0/8,fd00::/8,10.1.0.0/16", "10.0.0.0/8,", "010.0.0.0/8", "10.0.0.1"},
	"mode":    {`""`, "iptables", "ipvs", "nftables", "kernelspace", "userspace", "IPTables"},
	"local":   {`""`, "ClusterCIDR", "NodeCIDR", "BridgeInterface", "InterfaceNamePrefix", "clustercidr", "Foo"},
	"format":  {`""`, "text", "json", "JSON", "xml"},
	"version": {`""`, "1.26", "1.27", "1.28", "1.29", "1.30", "1.31", "1.32", "1.33", "1.34", "1.35", "1.36", "1.37", "v1.33", "foo"},
	"port":    {`""`, "300-2000", "1000", "2000-300", "foo", "0-65535"},
	"other":   {`""`, "x", "eth0", "/var/lib/kube-proxy/kubeconfig.conf", "application/json"},
}

func stringPool(path string) []string {
	switch {
	case strings.HasSuffix(path, "Address"):
		return stringValues["address"]
	case path == "clusterCIDR":
		return stringValues["cidr"]
	case path == "mode":
		return stringValues["mode"]
	case path == "detectLocalMode":
		return stringValues["local"]
	case path == "logging.format":
		return stringValues["format"]
	case path == "showHiddenMetricsForVersion":
		return stringValues["version"]
	case path == "portRange":
		return stringValues["port"]
	}
	return stringValues["other"]
}

// pool is the values tried for one field.
func pool(f kpvalidate.Field) []string {
	if f.Kind == kpvalidate.String {
		return stringPool(f.Path)
	}
	return values[f.Kind]
}

// Cases is the differential table at 1.minor: every field of the newest
// minor with its value pool (a field newer than minor is ignored, whatever
// its value, with kube-proxy's lenient-decoding warning), the findings of
// issue 12, combinations the rules tie together, and decoding: unknown,
// newer and duplicate fields.
func Cases(minor int) []Case {
	var cases []Case
	add := func(name string, reject *bool, settings ...[2]string) {
		cases = append(cases, Case{Name: name, Text: doc(settings...), Reject: reject})
	}
	yes, no := rejectWant(true), rejectWant(false)
	add("minimal", no)
	for _, f := range kpvalidate.Fields(kpvalidate.Newest) {
		for _, v := range pool(f) {
			c := Case{Name: fmt.Sprintf("%s=%s", f.Path, v), Text: doc(kv(f.Path, v)), Lenient: no}
			if f.Since > minor {
				// not a field of this minor: dropped unread
				c.Reject, c.Lenient = no, yes
			}
			cases = append(cases, c)
		}
	}

	// the examples of issue 12
	add("issue12 conntrack.maxPerCore=-1", yes, kv("conntrack.maxPerCore", "-1"))
	add("issue12 iptables.masqueradeBit=99", yes, kv("iptables.masqueradeBit", "99"))
	add("issue12 clusterCIDR=foo", yes, kv("clusterCIDR", "foo"))
	add("issue12 healthzBindAddress=:10256", yes, kv("healthzBindAddress", `":10256"`))
	add("issue12 featureGates.NoSuchGate=true", yes, kv("featureGates", "{NoSuchGate: true}"))
	add("issue12 ipvs.minSyncPeriod > ipvs.syncPeriod", yes, kv("mode", "ipvs"), kv("ipvs.syncPeriod", "30s"), kv("ipvs.minSyncPeriod", "1m"))
	add("issue12 mode=nftables", rejectWant(minor < 31), kv("mode", "nftables"))
	add("issue12 conntrack.maxPerCore=32768 passes validation", no, kv("conntrack.maxPerCore", "32768"))

	// sync periods against each other, per mode
	for _, mode := range []string{`""`, "iptables", "ipvs", "nftables"} {
		for _, sec := range []string{"iptables", "ipvs", "nftables"} {
			for _, p := range [][2]string{{"30s", "1m"}, {"1m", "30s"}, {"-1s", "0s"}, {"1s", "-1s"}, {"0s", "0s"}, {"0s", "1m"}, {"1s", "1s"}} {
				add(fmt.Sprintf("mode %s %s.syncPeriod=%s minSyncPeriod=%s", mode, sec, p[0], p[1]), nil,
					kv("mode", mode), kv("featureGates", "{}"), kv(sec+".syncPeriod", p[0]), kv(sec+".minSyncPeriod", p[1]))
			}
		}
		for _, fld := range []string{"tcpTimeout", "tcpFinTimeout", "udpTimeout"} {
			add(fmt.Sprintf("mode %s ipvs.%s=-1s", mode, fld), nil, kv("mode", mode), kv("ipvs."+fld, "-1s"))
		}
		add(fmt.Sprintf("mode %s ipvs.excludeCIDRs=[foo]", mode), nil, kv("mode", mode), kv("ipvs.excludeCIDRs", "[foo]"))
		add(fmt.Sprintf("mode %s nftables.masqueradeBit=32", mode), nil, kv("mode", mode), kv("nftables.masqueradeBit", "32"))
		add(fmt.Sprintf("mode %s iptables.masqueradeBit=32", mode), yes, kv("mode", mode), kv("iptables.masqueradeBit", "32"))
		for _, gates := range []string{"{NFTablesProxyMode: true}", "{NFTablesProxyMode: false}", "{KubeProxyIPVS: true}", "{KubeProxyIPVS: false}"} {
			add(fmt.Sprintf("mode %s featureGates %s", mode, gates), nil, kv("mode", mode), kv("featureGates", gates))
		}
	}
	// detectLocal
	for _, m := range []string{`""`, "ClusterCIDR", "NodeCIDR", "BridgeInterface", "InterfaceNamePrefix"} {
		for _, extra := range [][2]string{kv("clusterCIDR", "foo"), kv("clusterCIDR", "10.0.0.0/8,10.1.0.0/16"), kv("detectLocal.bridgeInterface", "cbr0"), kv("detectLocal.interfaceNamePrefix", "veth"), kv("detectLocal", "{}")} {
			add(fmt.Sprintf("detectLocalMode %s %s=%s", m, extra[0], extra[1]), nil, kv("detectLocalMode", m), extra)
		}
	}
	// addresses follow bindAddress's family when unset
	for _, bind := range []string{`""`, "0.0.0.0", `"::"`, "::1", "10.0.0.1", "foo"} {
		for _, h := range []string{`""`, "0.0.0.0", `"::"`, ":10256"} {
			add(fmt.Sprintf("bindAddress %s healthzBindAddress %s", bind, h), nil, kv("bindAddress", bind), kv("healthzBindAddress", h))
		}
	}
	// logging formats and options against the gates
	for _, gates := range []string{"{}", "{LoggingAlphaOptions: true}", "{LoggingBetaOptions: false}", "{LoggingAlphaOptions: false, LoggingBetaOptions: true}",
		"{AllBeta: false}", "{AllBeta: false, LoggingBetaOptions: true}", "{AllAlpha: true}", "{AllAlpha: true, LoggingAlphaOptions: false}", "{AllBeta: true, AllAlpha: false}"} {
		for _, l := range [][][2]string{
			{kv("logging.format", "json")},
			{kv("logging.format", "json"), kv("logging.vmodule", "[{filePattern: a, verbosity: 2}]")},
			{kv("logging.options.json.splitStream", "true")},
			{kv("logging.options.text.infoBufferSize", `"1Mi"`)},
			{kv("logging.options.json.infoBufferSize", `"1Mi"`)},
		} {
			add(fmt.Sprintf("logging %s %v", gates, l), nil, append([][2]string{kv("featureGates", gates)}, l...)...)
		}
	}
	// decoding
	raw := func(name, text string, reject, lenient *bool) {
		cases = append(cases, Case{Name: name, Text: text, Reject: reject, Lenient: lenient})
	}
	raw("no apiVersion", "kind: KubeProxyConfiguration\n", yes, no)
	raw("no kind", "apiVersion: kubeproxy.config.k8s.io/v1alpha1\n", yes, no)
	raw("wrong apiVersion", "apiVersion: kubeproxy.config.k8s.io/v1beta1\nkind: KubeProxyConfiguration\n", yes, no)
	raw("wrong kind", "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeletConfiguration\n", yes, no)
	raw("not a mapping", "- a\n- b\n", yes, no)
	raw("empty", "", yes, no)
	raw("not yaml", "{{{", yes, no)
	raw("object is a scalar", header+"ipvs: 5\n", yes, no)
	raw("object is null", header+"ipvs: null\n", nil, no)
	raw("json", `{"apiVersion":"kubeproxy.config.k8s.io/v1alpha1","kind":"KubeProxyConfiguration","mode":"ipvs"}`, no, no)
	raw("comments", header+"# kubeadm writes comments\nmode: iptables # here too\n", no, no)
	raw("anchors", header+"iptables:\n  syncPeriod: &p 30s\nipvs:\n  syncPeriod: *p\n", no, no)
	raw("two documents", header+"mode: ipvs\n---\nmode: foo\n", nil, nil)
	// unknown fields: strict decoding fails, the lenient one drops them
	raw("unknown field", header+"bogus: 1\n", no, yes)
	raw("unknown field, object value", header+"bogus:\n  a: [1, {b: c}]\n  d: null\n", no, yes)
	raw("unknown field, null", header+"bogus: null\n", no, yes)
	raw("unknown field nested", header+"ipvs:\n  nested:\n    x: 1\n", no, yes)
	raw("unknown field and a valid one", header+"bogus: 1\nmode: ipvs\n", no, yes)
	raw("unknown field and an invalid value", header+"bogus: 1\nclusterCIDR: foo\n", yes, yes)
	raw("unknown field and a wrong type", header+"bogus: 1\nipvs:\n  strictARP: maybe\n", yes, no)
	raw("wrong case", header+"Mode: ipvs\n", no, yes)
	raw("wrong case, invalid value ignored", header+"ClusterCIDR: foo\n", no, yes)
	raw("all capitals", header+"MODE: foo\n", no, yes)
	raw("ipvs.strictArp", header+"ipvs:\n  strictArp: true\n", no, yes)
	raw("conntrack.maxPerCPU", header+"conntrack:\n  maxPerCPU: -1\n", no, yes)
	raw("unknown field in a vmodule item", header+"logging:\n  vmodule:\n  - filePattern: a\n    verbosity: 2\n    bogus: 1\n", nil, yes)
	raw("unknown logging option", header+"logging:\n  options:\n    yaml:\n      splitStream: true\n", nil, yes)
	raw("unknown field in featureGates is a gate", header+"featureGates:\n  bogus: true\n", yes, no)
	raw("unknown field, json", `{"apiVersion":"kubeproxy.config.k8s.io/v1alpha1","kind":"KubeProxyConfiguration","bogus":1}`, no, yes)
	// newer fields at an older minor: dropped unread, whatever their type
	newer := minor < 29
	raw("newer object, wrong type", header+"nftables: 5\n", rejectWant(!newer), rejectWant(newer))
	raw("newer field, wrong type", header+"conntrack:\n  udpTimeout: soon\n", rejectWant(!newer), rejectWant(newer))
	raw("newer field, invalid value", header+"conntrack:\n  udpTimeout: -1s\n", nil, rejectWant(newer))
	raw("newer mode section, invalid", header+"mode: iptables\nnftables:\n  masqueradeBit: 99\n", nil, rejectWant(newer))
	raw("logging before 1.28", header+"logging:\n  format: xml\n", rejectWant(minor >= 28), rejectWant(minor < 28))
	raw("text logging options before 1.30", header+"logging:\n  options:\n    text:\n      infoBufferSize: x\n", rejectWant(minor >= 30), rejectWant(minor < 30))
	raw("windowsRunAsService before 1.31", header+"windowsRunAsService: maybe\n", rejectWant(minor >= 31), rejectWant(minor < 31))
	raw("kubeadm 1.34 config", kubeadmDefault, no, rejectWant(minor < 30))
	// duplicate keys: strict decoding fails, the lenient one keeps the last
	raw("duplicate key", header+"mode: ipvs\nmode: iptables\n", no, yes)
	raw("duplicate key, last invalid", header+"mode: iptables\nmode: foo\n", yes, yes)
	raw("duplicate key, first invalid", header+"mode: foo\nmode: iptables\n", no, yes)
	raw("duplicate key, first wrong type", header+"ipvs:\n  strictARP: maybe\n  strictARP: true\n", no, yes)
	raw("duplicate key, last wrong type", header+"ipvs:\n  strictARP: true\n  strictARP: maybe\n", yes, no)
	raw("duplicate nested key", header+"ipvs:\n  strictARP: true\n  strictARP: false\n", no, yes)
	raw("duplicate object", header+"ipvs:\n  strictARP: true\nipvs:\n  scheduler: rr\n", no, yes)
	raw("duplicate apiVersion", "apiVersion: v1\n"+header+"mode: ipvs\n", no, yes)
	raw("duplicate key, json", `{"apiVersion":"kubeproxy.config.k8s.io/v1alpha1","kind":"KubeProxyConfiguration","mode":"foo","mode":"ipvs"}`, no, yes)
	raw("duplicate gate", header+"featureGates:\n  NoSuchGate: true\n  NoSuchGate: true\n", yes, yes)
	raw("duplicate and unknown", header+"bogus: 1\nmode: ipvs\nmode: iptables\n", no, yes)
	return cases
}

// kubeadmDefault is config.conf as kubeadm 1.34 writes it. Every supported
// kube-proxy starts with it: the older ones drop the fields they do not
// have (nftables, logging, conntrack's UDP timeouts, ...) with a warning.
const kubeadmDefault = `apiVersion: kubeproxy.config.k8s.io/v1alpha1
bindAddress: 0.0.0.0
bindAddressHardFail: false
clientConnection:
  acceptContentTypes: ""
  burst: 0
  contentType: ""
  kubeconfig: /var/lib/kube-proxy/kubeconfig.conf
  qps: 0
clusterCIDR: 10.244.0.0/16
configSyncPeriod: 0s
conntrack:
  maxPerCore: null
  min: null
  tcpBeLiberal: false
  tcpCloseWaitTimeout: null
  tcpEstablishedTimeout: null
  udpStreamTimeout: 0s
  udpTimeout: 0s
detectLocal:
  bridgeInterface: ""
  interfaceNamePrefix: ""
detectLocalMode: ""
enableProfiling: false
healthzBindAddress: ""
hostnameOverride: ""
iptables:
  localhostNodePorts: null
  masqueradeAll: false
  masqueradeBit: null
  minSyncPeriod: 0s
  syncPeriod: 0s
ipvs:
  excludeCIDRs: null
  minSyncPeriod: 0s
  scheduler: ""
  strictARP: false
  syncPeriod: 0s
  tcpFinTimeout: 0s
  tcpTimeout: 0s
  udpTimeout: 0s
kind: KubeProxyConfiguration
logging:
  flushFrequency: 0
  options:
    json:
      infoBufferSize: "0"
    text:
      infoBufferSize: "0"
  verbosity: 0
metricsBindAddress: ""
mode: ""
nftables:
  masqueradeAll: false
  masqueradeBit: null
  minSyncPeriod: 0s
  syncPeriod: 0s
nodePortAddresses: null
oomScoreAdj: null
portRange: ""
showHiddenMetricsForVersion: ""
winkernel:
  enableDSR: false
  forwardHealthCheckVip: false
  networkName: ""
  rootHnsEndpointName: ""
  sourceVip: ""
`
