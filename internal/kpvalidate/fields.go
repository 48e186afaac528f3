package kpvalidate

import (
	"sort"
	"strings"
)

// Kind is the Go type of a KubeProxyConfiguration field, as --set parses it.
type Kind string

// Field kinds.
const (
	Bool     Kind = "bool"
	Int32    Kind = "int32"
	Uint32   Kind = "uint32"
	Float32  Kind = "float32"
	String   Kind = "string"
	Duration Kind = "duration" // metav1.Duration: "30s", "15m"
	Strings  Kind = "[]string"
	BoolMap  Kind = "map[string]bool" // featureGates: set as featureGates.Name=true
	Quantity Kind = "quantity"        // resource.QuantityValue
	// TimeOrDuration is logging.flushFrequency: nanoseconds or a duration.
	TimeOrDuration Kind = "timeOrDuration"
	// Objects is a list of objects (logging.vmodule): --manifest only.
	Objects Kind = "[]object"
)

// Where a field takes effect, for Effect: the proxy modes whose kube-proxy
// reads it. Every field names its modes explicitly, so a field added to the
// table cannot stay unclassified (TestEffectEveryField, and
// kpvalidatetest.CheckFields against the real types, refuse an empty In).
const (
	// every mode: any change needs a restart
	inAll = "*"
	// Linux proxy modes; "kernelspace" is Windows' only mode
	inIPTables       = "iptables"
	inIPVS           = "ipvs"
	inNFTables       = "nftables"
	inIPTablesOrIPVS = "iptables,ipvs"
	inLinux          = "iptables,ipvs,nftables"
	inWindows        = "kernelspace"
	inNothing        = "-" // read by no kube-proxy of a supported version
)

// Field is one leaf of KubeProxyConfiguration.
type Field struct {
	// Path is the dotted JSON path, e.g. "ipvs.strictARP".
	Path string
	Kind Kind
	// Pointer: the Go field is a pointer, so an explicit null means unset
	// (and kube-proxy's default then applies).
	Pointer bool
	// Since is the first kube-proxy minor (1.Since) that has the field.
	Since int
	// In lists the proxy modes in which the field has any effect on a running
	// kube-proxy (inAll: every mode), see Effect.
	In string
	// Before, when set, is the first minor In holds for; kube-proxy 1.27 up
	// to 1.(Before-1) read the field in the modes InBefore.
	Before   int
	InBefore string
}

// Modes lists the proxy modes whose kube-proxy 1.minor reads the field
// ("*": every mode; minor 0, unknown: those of any minor).
func (f Field) Modes(minor int) string {
	switch {
	case f.Before == 0 || minor >= f.Before:
		return f.In
	case minor > 0:
		return f.InBefore
	case f.In == inAll || f.InBefore == inAll:
		return inAll
	}
	return f.In + "," + f.InBefore
}

// fields is every leaf of k8s.io/kube-proxy's config/v1alpha1
// KubeProxyConfiguration from 1.27 on. hack/difftest checks it against the
// real type of every supported minor, so a new field cannot be missed.
var fields = []Field{
	{Path: "featureGates", Kind: BoolMap, Since: 27, In: inAll},
	{Path: "clientConnection.kubeconfig", Kind: String, Since: 27, In: inAll},
	{Path: "clientConnection.acceptContentTypes", Kind: String, Since: 27, In: inAll},
	{Path: "clientConnection.contentType", Kind: String, Since: 27, In: inAll},
	{Path: "clientConnection.qps", Kind: Float32, Since: 27, In: inAll},
	{Path: "clientConnection.burst", Kind: Int32, Since: 27, In: inAll},
	{Path: "logging.format", Kind: String, Since: 28, In: inAll},
	{Path: "logging.flushFrequency", Kind: TimeOrDuration, Since: 28, In: inAll},
	{Path: "logging.verbosity", Kind: Uint32, Since: 28, In: inAll},
	{Path: "logging.vmodule", Kind: Objects, Since: 28, In: inAll},
	{Path: "logging.options.json.splitStream", Kind: Bool, Since: 28, In: inAll},
	{Path: "logging.options.json.infoBufferSize", Kind: Quantity, Since: 28, In: inAll},
	{Path: "logging.options.text.splitStream", Kind: Bool, Since: 30, In: inAll},
	{Path: "logging.options.text.infoBufferSize", Kind: Quantity, Since: 30, In: inAll},
	{Path: "hostnameOverride", Kind: String, Since: 27, In: inAll},
	{Path: "bindAddress", Kind: String, Since: 27, In: inAll},
	{Path: "healthzBindAddress", Kind: String, Since: 27, In: inAll},
	{Path: "metricsBindAddress", Kind: String, Since: 27, In: inAll},
	{Path: "bindAddressHardFail", Kind: Bool, Since: 27, In: inAll},
	{Path: "enableProfiling", Kind: Bool, Since: 27, In: inAll},
	{Path: "showHiddenMetricsForVersion", Kind: String, Since: 27, In: inAll},
	{Path: "mode", Kind: String, Since: 27, In: inAll},
	// 1.27's winkernel proxier read the iptables masquerade settings too
	{Path: "iptables.masqueradeBit", Kind: Int32, Pointer: true, Since: 27, In: inIPTablesOrIPVS, Before: 28, InBefore: inIPTablesOrIPVS + "," + inWindows},
	{Path: "iptables.masqueradeAll", Kind: Bool, Since: 27, In: inIPTablesOrIPVS, Before: 28, InBefore: inIPTablesOrIPVS + "," + inWindows},
	{Path: "iptables.localhostNodePorts", Kind: Bool, Pointer: true, Since: 27, In: inIPTables},
	// each mode reads its own block's sync periods, winkernel the iptables
	// block's (from 1.31 through one converted pair); up to 1.30 the health
	// server's staleness limit was 2 x iptables.syncPeriod in every mode
	{Path: "iptables.syncPeriod", Kind: Duration, Since: 27, In: inIPTables + "," + inWindows, Before: 31, InBefore: inAll},
	{Path: "iptables.minSyncPeriod", Kind: Duration, Since: 27, In: inIPTables + "," + inWindows},
	// ipvs.excludeCIDRs (like winkernel.sourceVip) is also read in every
	// mode by the startup check of IP families, which only logs a warning:
	// no effect on the rules
	{Path: "ipvs.syncPeriod", Kind: Duration, Since: 27, In: inIPVS},
	{Path: "ipvs.minSyncPeriod", Kind: Duration, Since: 27, In: inIPVS},
	{Path: "ipvs.scheduler", Kind: String, Since: 27, In: inIPVS},
	{Path: "ipvs.excludeCIDRs", Kind: Strings, Since: 27, In: inIPVS},
	{Path: "ipvs.strictARP", Kind: Bool, Since: 27, In: inIPVS},
	{Path: "ipvs.tcpTimeout", Kind: Duration, Since: 27, In: inIPVS},
	{Path: "ipvs.tcpFinTimeout", Kind: Duration, Since: 27, In: inIPVS},
	{Path: "ipvs.udpTimeout", Kind: Duration, Since: 27, In: inIPVS},
	{Path: "nftables.masqueradeBit", Kind: Int32, Pointer: true, Since: 29, In: inNFTables},
	{Path: "nftables.masqueradeAll", Kind: Bool, Since: 29, In: inNFTables},
	{Path: "nftables.syncPeriod", Kind: Duration, Since: 29, In: inNFTables},
	{Path: "nftables.minSyncPeriod", Kind: Duration, Since: 29, In: inNFTables},
	{Path: "winkernel.networkName", Kind: String, Since: 27, In: inWindows},
	{Path: "winkernel.sourceVip", Kind: String, Since: 27, In: inWindows},
	{Path: "winkernel.enableDSR", Kind: Bool, Since: 27, In: inWindows},
	{Path: "winkernel.rootHnsEndpointName", Kind: String, Since: 27, In: inWindows},
	{Path: "winkernel.forwardHealthCheckVip", Kind: Bool, Since: 27, In: inWindows},
	{Path: "detectLocalMode", Kind: String, Since: 27, In: inAll},
	{Path: "detectLocal.bridgeInterface", Kind: String, Since: 27, In: inAll},
	{Path: "detectLocal.interfaceNamePrefix", Kind: String, Since: 27, In: inAll},
	{Path: "clusterCIDR", Kind: String, Since: 27, In: inAll},
	{Path: "nodePortAddresses", Kind: Strings, Since: 27, In: inAll},
	{Path: "oomScoreAdj", Kind: Int32, Pointer: true, Since: 27, In: inLinux},
	{Path: "conntrack.maxPerCore", Kind: Int32, Pointer: true, Since: 27, In: inLinux},
	{Path: "conntrack.min", Kind: Int32, Pointer: true, Since: 27, In: inLinux},
	{Path: "conntrack.tcpEstablishedTimeout", Kind: Duration, Pointer: true, Since: 27, In: inLinux},
	{Path: "conntrack.tcpCloseWaitTimeout", Kind: Duration, Pointer: true, Since: 27, In: inLinux},
	{Path: "conntrack.tcpBeLiberal", Kind: Bool, Since: 29, In: inLinux},
	{Path: "conntrack.udpTimeout", Kind: Duration, Since: 29, In: inLinux},
	{Path: "conntrack.udpStreamTimeout", Kind: Duration, Since: 29, In: inLinux},
	{Path: "configSyncPeriod", Kind: Duration, Since: 27, In: inAll},
	// read only by the userspace proxy, removed in 1.26
	{Path: "portRange", Kind: String, Since: 27, In: inNothing},
	{Path: "windowsRunAsService", Kind: Bool, Since: 31, In: inWindows},
}

// Fields returns the leaves of KubeProxyConfiguration at kube-proxy 1.minor,
// sorted by path.
func Fields(minor int) []Field {
	var out []Field
	for _, f := range fields {
		if f.Since <= minor {
			out = append(out, f)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out
}

// Lookup finds the field a dotted path names at the newest supported minor.
// For featureGates.Name it returns the featureGates field.
func Lookup(path string) (Field, bool) {
	for _, f := range fields {
		if f.Path == path || (f.Kind == BoolMap && strings.HasPrefix(path, f.Path+".") && !strings.Contains(path[len(f.Path)+1:], ".")) {
			return f, true
		}
	}
	return Field{}, false
}

// isObject reports whether path names an object (a prefix of some field).
func isObject(path string) bool {
	for _, f := range fields {
		if strings.HasPrefix(f.Path, path+".") {
			return true
		}
	}
	return false
}

// objectFields lists the direct children of the object at prefix ("" for the
// top level) at 1.minor.
func objectFields(prefix string, minor int) map[string]bool {
	out := map[string]bool{}
	for _, f := range fields {
		if f.Since > minor {
			continue
		}
		rest := f.Path
		if prefix != "" {
			if !strings.HasPrefix(f.Path, prefix+".") {
				continue
			}
			rest = f.Path[len(prefix)+1:]
		}
		name, _, _ := strings.Cut(rest, ".")
		out[name] = true
	}
	return out
}
