package kpvalidate

import (
	"fmt"
	"math"
	"net"
	"strconv"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	netutils "k8s.io/utils/net"
)

// Violation is one rule of kube-proxy's validation that a config breaks.
type Violation struct {
	Field string
	Value string
	Rule  string
}

func (v Violation) String() string {
	if v.Value == "" {
		return fmt.Sprintf("%s: %s", v.Field, v.Rule)
	}
	return fmt.Sprintf("%s=%s: %s", v.Field, v.Value, v.Rule)
}

// kube-proxy's defaults (pkg/proxy/apis/config/v1alpha1/defaults.go and the
// Linux platform defaults of cmd/kube-proxy/app), as far as validation can
// see them.
const (
	healthzPort = 10256
	metricsPort = 10249
)

func setDefaults(c *config, minor int) {
	if c.BindAddress == "" {
		c.BindAddress = "0.0.0.0"
	}
	healthzHost, metricsHost := "[::]", "[::1]"
	if ip := netutils.ParseIPSloppy(c.BindAddress); ip.To4() != nil {
		healthzHost, metricsHost = "0.0.0.0", "127.0.0.1"
	}
	if c.HealthzBindAddress == "" {
		c.HealthzBindAddress = fmt.Sprintf("%s:%d", healthzHost, healthzPort)
	} else {
		c.HealthzBindAddress = appendPortIfNeeded(c.HealthzBindAddress, healthzPort)
	}
	if c.MetricsBindAddress == "" {
		c.MetricsBindAddress = fmt.Sprintf("%s:%d", metricsHost, metricsPort)
	} else {
		c.MetricsBindAddress = appendPortIfNeeded(c.MetricsBindAddress, metricsPort)
	}
	defaultDuration(&c.IPTables.SyncPeriod, 30*time.Second)
	defaultDuration(&c.IPTables.MinSyncPeriod, time.Second)
	defaultDuration(&c.IPVS.SyncPeriod, 30*time.Second)
	if minor >= 29 {
		defaultDuration(&c.NFTables.SyncPeriod, 30*time.Second)
		defaultDuration(&c.NFTables.MinSyncPeriod, time.Second)
	}
	defaultDuration(&c.ConfigSyncPeriod, 15*time.Minute)
	if c.Conntrack.TCPEstablishedTimeout == nil {
		c.Conntrack.TCPEstablishedTimeout = &metav1.Duration{Duration: 24 * time.Hour}
	}
	if c.Conntrack.TCPCloseWaitTimeout == nil {
		c.Conntrack.TCPCloseWaitTimeout = &metav1.Duration{Duration: time.Hour}
	}
	if c.Logging.Format == "" {
		c.Logging.Format = "text"
	}
	if c.Logging.FlushFrequency.Duration.Duration == 0 {
		c.Logging.FlushFrequency.Duration.Duration = 5 * time.Second
	}
	// Linux platform defaults
	if c.Mode == "" {
		c.Mode = "iptables"
	}
	if c.DetectLocalMode == "" {
		c.DetectLocalMode = "ClusterCIDR"
	}
	if c.ClientConnection.Burst == 0 {
		c.ClientConnection.Burst = 10
	}
}

func defaultDuration(d *metav1.Duration, def time.Duration) {
	if d.Duration == 0 {
		d.Duration = def
	}
}

// appendPortIfNeeded: an IP alone gets the default port.
func appendPortIfNeeded(addr string, port int) string {
	if _, _, err := net.SplitHostPort(addr); err == nil {
		return addr
	}
	ip := netutils.ParseIPSloppy(addr)
	if ip == nil {
		return addr
	}
	if ip.To4() != nil {
		return fmt.Sprintf("%s:%d", addr, port)
	}
	return fmt.Sprintf("[%s]:%d", addr, port)
}

// validator collects violations for one config at one minor.
type validator struct {
	c     *config
	minor int
	out   []Violation
}

func (v *validator) add(field, value, rule string) {
	v.out = append(v.out, Violation{Field: field, Value: value, Rule: rule})
}

// enabled is a feature gate's value for this config: its own setting, else
// AllAlpha's for an alpha gate and AllBeta's for a beta one, else the
// version's default (component-base's featuregate SetFromMap).
func (v *validator) enabled(gate string) bool {
	if on, ok := v.c.FeatureGates[gate]; ok {
		return on
	}
	stage, _ := StageAt(v.minor, gate)
	if on, ok := v.c.FeatureGates["AllAlpha"]; ok && stage == StageAlpha {
		return on
	}
	if on, ok := v.c.FeatureGates["AllBeta"]; ok && stage == StageBeta {
		return on
	}
	g, _ := GateAt(v.minor, gate)
	return g.Default
}

// validate is kube-proxy's pkg/proxy/apis/config/validation at 1.minor, on
// a defaulted config.
func validate(c *config, minor int) []Violation {
	v := &validator{c: c, minor: minor}
	v.featureGates()
	v.masqueradeBit("iptables.masqueradeBit", c.IPTables.MasqueradeBit)
	switch {
	case minor >= 31:
		// one pair of periods, from the section of the mode in use
		switch c.Mode {
		case "ipvs":
			v.periods("ipvs", c.IPVS.SyncPeriod, c.IPVS.MinSyncPeriod)
		case "nftables":
			v.periods("nftables", c.NFTables.SyncPeriod, c.NFTables.MinSyncPeriod)
		default:
			v.periods("iptables", c.IPTables.SyncPeriod, c.IPTables.MinSyncPeriod)
		}
	default:
		v.periods("iptables", c.IPTables.SyncPeriod, c.IPTables.MinSyncPeriod)
		switch {
		case c.Mode == "ipvs":
			v.periods("ipvs", c.IPVS.SyncPeriod, c.IPVS.MinSyncPeriod)
		case c.Mode == "nftables" && minor >= 29:
			v.periods("nftables", c.NFTables.SyncPeriod, c.NFTables.MinSyncPeriod)
		}
	}
	if c.Mode == "ipvs" {
		v.nonNegative("ipvs.tcpTimeout", c.IPVS.TCPTimeout)
		v.nonNegative("ipvs.tcpFinTimeout", c.IPVS.TCPFinTimeout)
		v.nonNegative("ipvs.udpTimeout", c.IPVS.UDPTimeout)
		for i, cidr := range c.IPVS.ExcludeCIDRs {
			if _, _, err := netutils.ParseCIDRSloppy(cidr); err != nil {
				v.add(fmt.Sprintf("ipvs.excludeCIDRs[%d]", i), cidr, "must be a valid CIDR")
			}
		}
	}
	if c.Mode == "nftables" && minor >= 29 {
		v.masqueradeBit("nftables.masqueradeBit", c.NFTables.MasqueradeBit)
	}
	v.conntrack()
	if c.OOMScoreAdj != nil && (*c.OOMScoreAdj < -1000 || *c.OOMScoreAdj > 1000) {
		v.add("oomScoreAdj", strconv.Itoa(int(*c.OOMScoreAdj)), "must be within the range [-1000, 1000]")
	}
	v.mode()
	if c.ClientConnection.Burst < 0 {
		v.add("clientConnection.burst", strconv.Itoa(int(c.ClientConnection.Burst)), "must be greater than or equal to 0")
	}
	if c.ConfigSyncPeriod.Duration <= 0 {
		v.add("configSyncPeriod", c.ConfigSyncPeriod.Duration.String(), "must be greater than 0")
	}
	if netutils.ParseIPSloppy(c.BindAddress) == nil {
		v.add("bindAddress", c.BindAddress, "must be an IP address")
	}
	v.hostPort("healthzBindAddress", c.HealthzBindAddress)
	v.hostPort("metricsBindAddress", c.MetricsBindAddress)
	if minor <= 30 {
		v.clusterCIDROld()
		if _, err := utilnet.ParsePortRange(c.PortRange); err != nil {
			v.add("portRange", c.PortRange, "must be a valid port range (e.g. 300-2000)")
		}
	}
	v.nodePortAddresses()
	if s := c.ShowHiddenMetricsForVersion; s != "" && s != fmt.Sprintf("1.%d", minor-1) {
		v.add("showHiddenMetricsForVersion", s, fmt.Sprintf("must be omitted or 1.%d (only the previous minor version)", minor-1))
	}
	v.detectLocal()
	if minor >= 28 {
		v.logging()
	}
	return v.out
}

func (v *validator) featureGates() {
	for name, on := range v.c.FeatureGates {
		g, ok := GateAt(v.minor, name)
		switch {
		case !ok:
			v.add("featureGates."+name, strconv.FormatBool(on), fmt.Sprintf("unrecognized feature gate in kube-proxy 1.%d", v.minor))
		case on && !g.True || !on && !g.False:
			v.add("featureGates."+name, strconv.FormatBool(on), fmt.Sprintf("cannot be set to %t in kube-proxy 1.%d (locked to %t or not settable)", on, v.minor, !on))
		}
	}
}

func (v *validator) masqueradeBit(field string, bit *int32) {
	if bit != nil && (*bit < 0 || *bit > 31) {
		v.add(field, strconv.Itoa(int(*bit)), "must be within the range [0, 31]")
	}
}

func (v *validator) periods(section string, sync, min metav1.Duration) {
	if sync.Duration <= 0 {
		v.add(section+".syncPeriod", sync.Duration.String(), "must be greater than 0")
	}
	if min.Duration < 0 {
		v.add(section+".minSyncPeriod", min.Duration.String(), "must be greater than or equal to 0")
	}
	if min.Duration > sync.Duration {
		v.add(section+".minSyncPeriod", min.Duration.String(), fmt.Sprintf("must be less than or equal to %s.syncPeriod (%s)", section, sync.Duration))
	}
}

func (v *validator) nonNegative(field string, d metav1.Duration) {
	if d.Duration < 0 {
		v.add(field, d.Duration.String(), "must be greater than or equal to 0")
	}
}

func (v *validator) conntrack() {
	ct := v.c.Conntrack
	if ct.MaxPerCore != nil && *ct.MaxPerCore < 0 {
		v.add("conntrack.maxPerCore", strconv.Itoa(int(*ct.MaxPerCore)), "must be greater than or equal to 0")
	}
	if ct.Min != nil && *ct.Min < 0 {
		v.add("conntrack.min", strconv.Itoa(int(*ct.Min)), "must be greater than or equal to 0")
	}
	v.nonNegative("conntrack.tcpEstablishedTimeout", *ct.TCPEstablishedTimeout)
	v.nonNegative("conntrack.tcpCloseWaitTimeout", *ct.TCPCloseWaitTimeout)
	if v.minor >= 29 {
		v.nonNegative("conntrack.udpTimeout", ct.UDPTimeout)
		v.nonNegative("conntrack.udpStreamTimeout", ct.UDPStreamTimeout)
	}
}

// modes are the Linux proxy modes of a version.
func (v *validator) modes() []string {
	switch {
	case v.minor <= 28:
		return []string{"iptables", "ipvs"}
	case v.minor <= 32:
		if v.enabled("NFTablesProxyMode") {
			return []string{"iptables", "ipvs", "nftables"}
		}
		return []string{"iptables", "ipvs"}
	case v.minor <= 36:
		return []string{"iptables", "ipvs", "nftables"}
	}
	if v.enabled("KubeProxyIPVS") {
		return []string{"iptables", "ipvs", "nftables"}
	}
	return []string{"iptables", "nftables"}
}

func (v *validator) mode() {
	modes := v.modes()
	for _, m := range modes {
		if v.c.Mode == m {
			return
		}
	}
	rule := fmt.Sprintf("kube-proxy 1.%d on Linux supports %s", v.minor, strings.Join(modes, ", "))
	switch {
	case v.c.Mode == "nftables" && v.minor <= 28:
		rule += " (nftables from 1.29 on)"
	case v.c.Mode == "nftables":
		rule += " (nftables needs featureGates.NFTablesProxyMode=true before 1.33)"
	case v.c.Mode == "ipvs":
		rule += " (ipvs needs featureGates.KubeProxyIPVS=true from 1.37 on)"
	}
	v.add("mode", v.c.Mode, rule)
}

func (v *validator) hostPort(field, addr string) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		v.add(field, addr, "must be IP:port")
		return
	}
	if netutils.ParseIPSloppy(host) == nil {
		v.add(field, addr, fmt.Sprintf("host %q must be an IP address (e.g. 0.0.0.0:%s)", host, port))
	}
	if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 {
		v.add(field, addr, fmt.Sprintf("port %q must be a number from 1 to 65535", port))
	}
}

// clusterCIDROld is clusterCIDR's rule before 1.31.
func (v *validator) clusterCIDROld() {
	s := v.c.ClusterCIDR
	if s == "" {
		return
	}
	cidrs := strings.Split(s, ",")
	switch {
	case len(cidrs) > 2:
		v.add("clusterCIDR", s, "only one CIDR or a dual-stack pair (e.g. 10.100.0.0/16,fde4:8dba:82e1::/48)")
	case len(cidrs) == 2:
		if dual, err := netutils.IsDualStackCIDRStrings(cidrs); err != nil || !dual {
			v.add("clusterCIDR", s, "must be a valid dual-stack pair of CIDRs (e.g. 10.100.0.0/16,fde4:8dba:82e1::/48)")
		}
	default:
		if _, _, err := netutils.ParseCIDRSloppy(s); err != nil {
			v.add("clusterCIDR", s, "must be a valid CIDR block (e.g. 10.100.0.0/16 or fde4:8dba:82e1::/48)")
		}
	}
}

func (v *validator) nodePortAddresses() {
	addrs := v.c.NodePortAddresses
	seen := map[string]bool{}
	for i, a := range addrs {
		field := fmt.Sprintf("nodePortAddresses[%d]", i)
		switch {
		case v.minor >= 37 && (a == "primary" || a == "localhost" || a == "all"):
			if seen[a] {
				v.add(field, a, "duplicate value")
			}
			seen[a] = true
			continue
		case v.minor >= 31 && v.minor <= 36 && a == "primary":
			if i != 0 || len(addrs) != 1 {
				v.add(field, a, "can't use both 'primary' and CIDRs")
			}
			return
		}
		if _, _, err := netutils.ParseCIDRSloppy(a); err != nil {
			rule := "must be a valid CIDR"
			if v.minor >= 37 {
				rule += " or one of the keywords 'primary', 'localhost', 'all'"
			}
			v.add(field, a, rule)
		}
	}
}

func (v *validator) detectLocal() {
	c := v.c
	if v.minor >= 28 {
		switch c.DetectLocalMode {
		case "ClusterCIDR", "NodeCIDR", "BridgeInterface", "InterfaceNamePrefix":
		default:
			v.add("detectLocalMode", c.DetectLocalMode, "must be ClusterCIDR, NodeCIDR, BridgeInterface or InterfaceNamePrefix")
		}
	}
	switch c.DetectLocalMode {
	case "BridgeInterface":
		if c.DetectLocal.BridgeInterface == "" {
			v.add("detectLocal.bridgeInterface", "", "must not be empty with detectLocalMode BridgeInterface")
		}
	case "InterfaceNamePrefix":
		if c.DetectLocal.InterfaceNamePrefix == "" {
			v.add("detectLocal.interfaceNamePrefix", "", "must not be empty with detectLocalMode InterfaceNamePrefix")
		}
	case "ClusterCIDR":
		if v.minor >= 31 && c.ClusterCIDR != "" {
			v.clusterCIDRs(strings.Split(c.ClusterCIDR, ","))
		}
	}
}

// clusterCIDRs is clusterCIDR's rule from 1.31 on (detectLocalMode ClusterCIDR).
func (v *validator) clusterCIDRs(cidrs []string) {
	s := v.c.ClusterCIDR
	if len(cidrs) > 2 {
		v.add("clusterCIDR", s, "must be a single CIDR or a dual-stack pair (e.g. 10.100.0.0/16,fde4:8dba:82e1::/48)")
		return
	}
	for _, c := range cidrs {
		if _, _, err := netutils.ParseCIDRSloppy(c); err != nil {
			v.add("clusterCIDR", s, fmt.Sprintf("%q must be a valid CIDR block (e.g. 10.100.0.0/16 or fde4:8dba:82e1::/48)", c))
		}
	}
	if len(cidrs) == 2 {
		if dual, err := netutils.IsDualStackCIDRStrings(cidrs); err == nil && !dual {
			v.add("clusterCIDR", s, "two CIDRs must be a dual-stack pair, one IPv4 and one IPv6")
		}
	}
}

func (v *validator) logging() {
	l := v.c.Logging
	if v.minor >= 35 && l.FlushFrequency.Duration.Duration <= 0 {
		v.add("logging.flushFrequency", l.FlushFrequency.Duration.Duration.String(), "must be greater than zero")
	}
	switch l.Format {
	case "text":
	case "json":
		if !v.enabled("LoggingBetaOptions") {
			v.add("logging.format", l.Format, "the json format needs featureGates.LoggingBetaOptions")
		}
	default:
		v.add("logging.format", l.Format, "unsupported log format, want text or json")
	}
	if l.Verbosity > math.MaxInt32 {
		v.add("logging.verbosity", strconv.FormatUint(uint64(l.Verbosity), 10), fmt.Sprintf("must be <= %d", math.MaxInt32))
	}
	if len(l.VModule) > 0 && l.Format != "" && l.Format != "text" {
		v.add("logging.vmodule", "", "only supported for the text log format")
	}
	for i, item := range l.VModule {
		field := fmt.Sprintf("logging.vmodule[%d]", i)
		if item.FilePattern == "" {
			v.add(field+".filePattern", "", "must not be empty")
		}
		if strings.ContainsAny(item.FilePattern, "=,") {
			v.add(field+".filePattern", item.FilePattern, "must not contain = or ,")
		}
		if item.Verbosity > math.MaxInt32 {
			v.add(field+".verbosity", strconv.FormatUint(uint64(item.Verbosity), 10), fmt.Sprintf("must be <= %d", math.MaxInt32))
		}
	}
	alpha := v.enabled("LoggingAlphaOptions")
	for name, o := range map[string]outputRouting{"text": l.Options.Text, "json": l.Options.JSON} {
		if o.SplitStream && !alpha {
			v.add("logging.options."+name+".splitStream", "true", "needs featureGates.LoggingAlphaOptions=true")
		}
		if o.InfoBufferSize.Value() != 0 && !alpha {
			v.add("logging.options."+name+".infoBufferSize", o.InfoBufferSize.String(), "needs featureGates.LoggingAlphaOptions=true")
		}
	}
}
