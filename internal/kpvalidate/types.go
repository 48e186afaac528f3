package kpvalidate

import (
	"encoding/json"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// config mirrors k8s.io/kube-proxy's v1alpha1 KubeProxyConfiguration at the
// newest supported minor, with the same JSON names and Go types, so that
// decoding it behaves like kube-proxy's decoder (which fields exist at an
// older minor is the field table's business). It is checked against the real
// types by the differential test (hack/difftest).
type config struct {
	APIVersion                  string            `json:"apiVersion,omitempty"`
	Kind                        string            `json:"kind,omitempty"`
	FeatureGates                map[string]bool   `json:"featureGates,omitempty"`
	ClientConnection            clientConnection  `json:"clientConnection"`
	Logging                     logging           `json:"logging,omitempty"`
	HostnameOverride            string            `json:"hostnameOverride"`
	BindAddress                 string            `json:"bindAddress"`
	HealthzBindAddress          string            `json:"healthzBindAddress"`
	MetricsBindAddress          string            `json:"metricsBindAddress"`
	BindAddressHardFail         bool              `json:"bindAddressHardFail"`
	EnableProfiling             bool              `json:"enableProfiling"`
	ShowHiddenMetricsForVersion string            `json:"showHiddenMetricsForVersion"`
	Mode                        string            `json:"mode"`
	IPTables                    iptablesConfig    `json:"iptables"`
	IPVS                        ipvsConfig        `json:"ipvs"`
	NFTables                    nftablesConfig    `json:"nftables"`
	Winkernel                   winkernelConfig   `json:"winkernel"`
	DetectLocalMode             string            `json:"detectLocalMode"`
	DetectLocal                 detectLocalConfig `json:"detectLocal"`
	ClusterCIDR                 string            `json:"clusterCIDR"`
	NodePortAddresses           []string          `json:"nodePortAddresses"`
	OOMScoreAdj                 *int32            `json:"oomScoreAdj"`
	Conntrack                   conntrackConfig   `json:"conntrack"`
	ConfigSyncPeriod            metav1.Duration   `json:"configSyncPeriod"`
	PortRange                   string            `json:"portRange"`
	WindowsRunAsService         bool              `json:"windowsRunAsService,omitempty"`
}

type clientConnection struct {
	Kubeconfig         string  `json:"kubeconfig"`
	AcceptContentTypes string  `json:"acceptContentTypes"`
	ContentType        string  `json:"contentType"`
	QPS                float32 `json:"qps"`
	Burst              int32   `json:"burst"`
}

type iptablesConfig struct {
	MasqueradeBit      *int32          `json:"masqueradeBit"`
	MasqueradeAll      bool            `json:"masqueradeAll"`
	LocalhostNodePorts *bool           `json:"localhostNodePorts"`
	SyncPeriod         metav1.Duration `json:"syncPeriod"`
	MinSyncPeriod      metav1.Duration `json:"minSyncPeriod"`
}

type ipvsConfig struct {
	SyncPeriod    metav1.Duration `json:"syncPeriod"`
	MinSyncPeriod metav1.Duration `json:"minSyncPeriod"`
	Scheduler     string          `json:"scheduler"`
	ExcludeCIDRs  []string        `json:"excludeCIDRs"`
	StrictARP     bool            `json:"strictARP"`
	TCPTimeout    metav1.Duration `json:"tcpTimeout"`
	TCPFinTimeout metav1.Duration `json:"tcpFinTimeout"`
	UDPTimeout    metav1.Duration `json:"udpTimeout"`
}

type nftablesConfig struct {
	MasqueradeBit *int32          `json:"masqueradeBit"`
	MasqueradeAll bool            `json:"masqueradeAll"`
	SyncPeriod    metav1.Duration `json:"syncPeriod"`
	MinSyncPeriod metav1.Duration `json:"minSyncPeriod"`
}

type conntrackConfig struct {
	MaxPerCore            *int32           `json:"maxPerCore"`
	Min                   *int32           `json:"min"`
	TCPEstablishedTimeout *metav1.Duration `json:"tcpEstablishedTimeout"`
	TCPCloseWaitTimeout   *metav1.Duration `json:"tcpCloseWaitTimeout"`
	TCPBeLiberal          bool             `json:"tcpBeLiberal"`
	UDPTimeout            metav1.Duration  `json:"udpTimeout"`
	UDPStreamTimeout      metav1.Duration  `json:"udpStreamTimeout"`
}

type winkernelConfig struct {
	NetworkName           string `json:"networkName"`
	SourceVip             string `json:"sourceVip"`
	EnableDSR             bool   `json:"enableDSR"`
	RootHnsEndpointName   string `json:"rootHnsEndpointName"`
	ForwardHealthCheckVip bool   `json:"forwardHealthCheckVip"`
}

type detectLocalConfig struct {
	BridgeInterface     string `json:"bridgeInterface"`
	InterfaceNamePrefix string `json:"interfaceNamePrefix"`
}

// logging mirrors component-base's logs/api/v1 LoggingConfiguration.
type logging struct {
	Format         string         `json:"format,omitempty"`
	FlushFrequency timeOrDuration `json:"flushFrequency"`
	Verbosity      uint32         `json:"verbosity"`
	VModule        []vmoduleItem  `json:"vmodule,omitempty"`
	Options        formatOptions  `json:"options,omitempty"`
}

type vmoduleItem struct {
	FilePattern string `json:"filePattern"`
	Verbosity   uint32 `json:"verbosity"`
}

type formatOptions struct {
	Text outputRouting `json:"text,omitempty"`
	JSON outputRouting `json:"json,omitempty"`
}

type outputRouting struct {
	SplitStream    bool                   `json:"splitStream,omitempty"`
	InfoBufferSize resource.QuantityValue `json:"infoBufferSize,omitempty"`
}

// timeOrDuration decodes like component-base's TimeOrMetaDuration: a number
// of nanoseconds or a duration string.
type timeOrDuration struct {
	metav1.Duration
	set bool
}

func (t *timeOrDuration) UnmarshalJSON(b []byte) error {
	if len(b) > 0 && b[0] == '"' {
		t.set = true
		return t.Duration.UnmarshalJSON(b)
	}
	var n int64
	if err := json.Unmarshal(b, &n); err != nil {
		return fmt.Errorf("flushFrequency: want a number of nanoseconds or a duration: %w", err)
	}
	t.set = true
	t.Duration.Duration = time.Duration(n)
	return nil
}
