package app

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sirupsen/logrus"
	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/util/validation"
	utilversion "k8s.io/apimachinery/pkg/util/version"

	"github.com/kube-proxy-sync/kube-proxy-sync/internal/configmap"
	"github.com/kube-proxy-sync/kube-proxy-sync/internal/kpconfig"
	"github.com/kube-proxy-sync/kube-proxy-sync/internal/kubeadm"
	"github.com/kube-proxy-sync/kube-proxy-sync/internal/nodes"
	"github.com/kube-proxy-sync/kube-proxy-sync/internal/probe"
	"github.com/kube-proxy-sync/kube-proxy-sync/internal/rollout"
	"github.com/kube-proxy-sync/kube-proxy-sync/internal/sync"
	"github.com/kube-proxy-sync/kube-proxy-sync/internal/verify"
)

// DefaultTrafficImage is kubeadm 1.34's pause image, which the kubelet
// keeps on every node.
const DefaultTrafficImage = "registry.k8s.io/pause:3.10.1"

// Options are everything a run can be told, from flags or an Ansible args file.
type Options struct {
	Kubeconfig string
	Context    string
	Namespace  string
	ConfigMap  string
	DaemonSet  string
	Container  string
	Server     string
	// AllowInsecureServer: an http --server is accepted
	AllowInsecureServer bool
	Set                 []string
	Manifest            string
	KubeadmConfig       string
	Kubeadm             string
	ProbePath           string
	KubeProxyVersion    string
	Restart             string
	Timeout             time.Duration
	RequestTimeout      time.Duration
	Retries             int
	Check               bool
	Diff                bool
	AuditLog            string
	Output              string
	DetailedExitCode    bool
	LogLevel            string
	LogFormat           string
	ShowVersion         bool
	LockTimeout         time.Duration
	Strategy            string
	CanaryNodes         int
	ConfigHistory       int
	Undo                bool
	ZoneLabel           string
	BatchSize           string
	Verify              bool
	VerifyEndpoints     int
	VerifyHealth        string
	VerifyHealthWait    time.Duration
	VerifyTraffic       string
	VerifyTrafficImg    string
	VerifyTrafficWait   time.Duration
	RollbackOnFailure   bool
	NoRollback          bool
	ProgressDeadline    time.Duration
	NotReadyTolerance   time.Duration
	SkipUnschedulable   bool

	// filled by Complete
	settings []kpconfig.Setting
	spec     configmap.Spec
	module   bool
}

// NewOptions returns the defaults.
func NewOptions() *Options {
	return &Options{
		Namespace:         "kube-system",
		ConfigMap:         "kube-proxy",
		DaemonSet:         "kube-proxy",
		Container:         "kube-proxy",
		ProbePath:         probe.Auto,
		Restart:           sync.RestartAuto,
		RequestTimeout:    20 * time.Second,
		Retries:           5,
		Output:            "text",
		LogLevel:          "info",
		LogFormat:         "text",
		LockTimeout:       5 * time.Minute,
		Strategy:          sync.StrategyRolling,
		CanaryNodes:       1,
		ConfigHistory:     sync.DefaultHistory,
		Kubeadm:           "kubeadm",
		ZoneLabel:         rollout.DefaultZoneLabel,
		VerifyHealth:      verify.Off,
		VerifyHealthWait:  time.Minute,
		VerifyTrafficImg:  DefaultTrafficImage,
		VerifyTrafficWait: 30 * time.Second,
		RollbackOnFailure: true,
		NotReadyTolerance: nodes.DefaultPolicy.NotReadyTolerance,
	}
}

// AddFlags binds the options to a flag set.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.Kubeconfig, "kubeconfig", o.Kubeconfig, "path to the kubeconfig (default: $KUBECONFIG, ~/.kube/config, or in-cluster)")
	fs.StringVar(&o.Context, "context", o.Context, "kubeconfig context to use (default: its current context)")
	fs.StringVarP(&o.Namespace, "namespace", "n", o.Namespace, "namespace of the ConfigMap and DaemonSet")
	fs.StringVar(&o.ConfigMap, "configmap", o.ConfigMap, "name of kube-proxy's ConfigMap")
	fs.StringVar(&o.DaemonSet, "daemonset", o.DaemonSet, "name of kube-proxy's DaemonSet")
	fs.StringVar(&o.Container, "container", o.Container, "name of the kube-proxy container in the DaemonSet")
	fs.StringVar(&o.Server, "server", o.Server, "API server URL to set in kubeconfig.conf (what kubespray's sed task does), e.g. https://10.0.0.1:6443")
	fs.BoolVar(&o.AllowInsecureServer, "allow-insecure-server", o.AllowInsecureServer, "accept an http:// --server (kube-proxy would then send its service-account token in clear text)")
	fs.StringArrayVar(&o.Set, "set", o.Set, "KubeProxyConfiguration field to set in config.conf, as dotted.path=value; repeatable (e.g. --set mode=ipvs --set ipvs.strictARP=true)")
	fs.StringVar(&o.Manifest, "manifest", o.Manifest, "ConfigMap manifest whose data keys are written over the live ones (keys it leaves out stay)")
	fs.StringVar(&o.KubeadmConfig, "kubeadm-config", o.KubeadmConfig, "kubeadm configuration file (kubespray's /etc/kubernetes/kubeadm-config.yaml, say): kube-proxy's ConfigMap as `kubeadm init phase addon kube-proxy --print-manifest` renders it from this file is applied like --manifest (--server then sets the server; not with --manifest)")
	fs.StringVar(&o.Kubeadm, "kubeadm", o.Kubeadm, "the kubeadm binary --kubeadm-config runs (a path, or a name looked up in PATH)")
	fs.StringVar(&o.ProbePath, "probe-path", o.ProbePath, "readiness probe path: auto (/livez for kube-proxy >= 1.28, /healthz before), /livez, /healthz, or none (leave the probe alone)")
	fs.StringVar(&o.KubeProxyVersion, "kube-proxy-version", o.KubeProxyVersion, "kube-proxy version to assume (default: from the image tag; when that is not a version, --probe-path auto leaves the probes alone)")
	fs.StringVar(&o.Restart, "restart", o.Restart, "restart policy: auto (only when the config changed or a restart is owed), always, never")
	fs.DurationVar(&o.Timeout, "timeout", o.Timeout, "optional bound on the whole rollout (default: none); reaching it fails the run but rolls nothing back")
	fs.DurationVar(&o.ProgressDeadline, "progress-deadline", o.ProgressDeadline, "fail (and roll back) when no node finished for this long (default: derived from the pod's grace period, minReadySeconds and readiness probe, at least 2m)")
	fs.DurationVar(&o.RequestTimeout, "request-timeout", o.RequestTimeout, "timeout of one API request attempt")
	fs.IntVar(&o.Retries, "retries", o.Retries, "retries of an API request after a connection error, 429 or 5xx")
	fs.BoolVar(&o.Check, "check", o.Check, "dry run: compute and report, write nothing")
	fs.BoolVar(&o.Diff, "diff", o.Diff, "show the ConfigMap data before and after (credentials redacted)")
	fs.StringVar(&o.AuditLog, "audit-log", o.AuditLog, "append a JSON line per run that changed or failed to this file (mode 0600)")
	fs.StringVarP(&o.Output, "output", "o", o.Output, "result format on stdout: text or json")
	fs.BoolVar(&o.DetailedExitCode, "detailed-exitcode", o.DetailedExitCode, "exit 0 when nothing changed, 2 when something changed, 1 on error")
	fs.StringVar(&o.LogLevel, "log-level", o.LogLevel, "log level on stderr: debug, info, warn, error")
	fs.StringVar(&o.LogFormat, "log-format", o.LogFormat, "log format on stderr: text or json")
	fs.StringVar(&o.Strategy, "strategy", o.Strategy, "rollout strategy: rolling (the DaemonSet controller, within its maxUnavailable), canary (--canary-nodes first, then batches of --batch-size) or zonal (canary zone by zone: nodes grouped by --zone-label, one zone at a time, each zone's canary nodes first)")
	fs.BoolVar(&o.Undo, "undo", o.Undo, "restore the config the fleet ran before the last change (kube-proxy-sync.io/previous-config on the DaemonSet) through the same rollout as a change: strategy, crash-loop detection and rollback, --verify-health; with --check --diff, show what it would restore. Not with --set, --server or --manifest")
	fs.IntVar(&o.ConfigHistory, "config-history", o.ConfigHistory, "how many copies of the config (kube-proxy-<hash>, the ConfigMaps the pod template mounts) to keep besides those in use, for rollbacks and `kubectl rollout undo` (1 to 100)")
	fs.IntVar(&o.CanaryNodes, "canary-nodes", o.CanaryNodes, "with --strategy canary: how many live nodes restart first; with zonal: how many of each zone (at most the batch size)")
	fs.StringVar(&o.ZoneLabel, "zone-label", o.ZoneLabel, "with --strategy zonal: the node label whose value is the node's zone; nodes without it form a last group")
	fs.StringVar(&o.BatchSize, "batch-size", o.BatchSize, "with --strategy canary: nodes restarted at once after the canary, N or P% of the live nodes (default: the DaemonSet's maxUnavailable)")
	fs.BoolVar(&o.Verify, "verify", o.Verify, "after the rollout, check afresh that every live node whose kube-proxy was Ready before is Ready on the new template")
	fs.IntVar(&o.VerifyEndpoints, "verify-endpoints", o.VerifyEndpoints, "with --verify: also ask kube-proxy's health endpoint on this many live nodes through the API server's node proxy (needs get on nodes/proxy)")
	fs.StringVar(&o.VerifyHealth, "verify-health", o.VerifyHealth, "connectivity check before and after each node's restart: off; auto (kube-proxy's /healthz on each node through the API server's node proxy, asked before the restart, must show a sync since the restart once its new pod is Ready; nodes unreachable before are reported, not checked); required (every live node must answer before the restart). Needs get on nodes/proxy. A node that fails stops its canary or zone and fails the rollout")
	fs.DurationVar(&o.VerifyHealthWait, "verify-health-timeout", o.VerifyHealthWait, "with --verify-health: how long a restarted kube-proxy has to show a sync")
	fs.StringVar(&o.VerifyTraffic, "verify-traffic", o.VerifyTraffic, "with --verify-health: NAMESPACE/NAME of a Service with ready endpoints; after each node's restart a short-lived probe pod on that node opens a TCP connection to its ClusterIP (needs create and delete on pods, get on that Service)")
	fs.StringVar(&o.VerifyTrafficImg, "verify-traffic-image", o.VerifyTrafficImg, "with --verify-traffic: image of the probe pod (it only sleeps: the kubelet's own TCP probe makes the connection); use one every node has, like the kubelet's pause image")
	fs.DurationVar(&o.VerifyTrafficWait, "verify-traffic-timeout", o.VerifyTrafficWait, "with --verify-traffic: how long the connection may take to succeed on one node")
	fs.BoolVar(&o.RollbackOnFailure, "rollback-on-failure", o.RollbackOnFailure, "when the new template fails (a pod that cannot run, the progress deadline, --verify), restore the ConfigMap data and the pod template; the run still exits 1 (default on; an interrupt or --timeout never rolls back)")
	fs.BoolVar(&o.NoRollback, "no-rollback", o.NoRollback, "leave a failed rollout as it is (same as --rollback-on-failure=false)")
	fs.DurationVar(&o.NotReadyTolerance, "not-ready-tolerance", o.NotReadyTolerance, "a node NotReady for longer than this counts as going away: its pod neither blocks nor fails the rollout")
	fs.BoolVar(&o.SkipUnschedulable, "skip-unschedulable", o.SkipUnschedulable, "treat cordoned nodes as going away too")
	fs.DurationVar(&o.LockTimeout, "lock-timeout", o.LockTimeout, "how long to wait for another run's lease (kube-system/kube-proxy-sync) before failing with \"locked\"")
	fs.BoolVar(&o.ShowVersion, "version", o.ShowVersion, "print the version and exit")
}

// Complete parses what the flags carry as text.
func (o *Options) Complete() error {
	o.settings = o.settings[:0]
	for _, s := range o.Set {
		st, err := kpconfig.ParseSetting(s)
		if err != nil {
			return err
		}
		o.settings = append(o.settings, st)
	}
	o.spec = configmap.Spec{Server: o.Server, Settings: o.settings}
	return nil
}

// Validate rejects bad input before anything touches the cluster.
func (o *Options) Validate() error {
	for flag, name := range map[string]string{"namespace": o.Namespace, "configmap": o.ConfigMap, "daemonset": o.DaemonSet} {
		if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
			return fmt.Errorf("--%s %q: %s", flag, name, strings.Join(errs, "; "))
		}
	}
	if o.Container == "" {
		return fmt.Errorf("--container must not be empty")
	}
	if o.Server != "" {
		if err := configmap.ValidateServer(o.Server, o.AllowInsecureServer); err != nil {
			return err
		}
	}
	for _, s := range o.settings {
		if _, err := s.Validate(); err != nil {
			return err
		}
	}
	if o.KubeadmConfig != "" {
		if o.Manifest != "" {
			return fmt.Errorf("--kubeadm-config and --manifest both give the ConfigMap's data: pass one")
		}
		m, err := kubeadm.Render(context.Background(), o.Kubeadm, o.KubeadmConfig, o.Namespace, o.ConfigMap)
		if err != nil {
			return err
		}
		o.spec.Manifest = m
	}
	if o.Manifest != "" {
		m, err := configmap.LoadManifest(o.Manifest, o.Namespace, o.ConfigMap)
		if err != nil {
			return err
		}
		o.spec.Manifest = m
	}
	if o.Undo && (o.Server != "" || len(o.settings) > 0 || o.Manifest != "" || o.KubeadmConfig != "") {
		return fmt.Errorf("--undo restores the previous config as it was: it takes no --set, --server, --manifest or --kubeadm-config (run those after it)")
	}
	if o.Undo && o.Restart == sync.RestartNever {
		return fmt.Errorf("--undo with --restart never: an undo is a rollout of the previous config; run it with --restart auto")
	}
	if !slices.Contains(probe.Modes, o.ProbePath) {
		return fmt.Errorf("--probe-path %q: want one of %s", o.ProbePath, strings.Join(probe.Modes, ", "))
	}
	if o.KubeProxyVersion != "" {
		if _, err := utilversion.ParseGeneric(o.KubeProxyVersion); err != nil {
			return fmt.Errorf("--kube-proxy-version %q: want a version like v1.33.1", o.KubeProxyVersion)
		}
	}
	if !slices.Contains([]string{sync.RestartAuto, sync.RestartAlways, sync.RestartNever}, o.Restart) {
		return fmt.Errorf("--restart %q: want auto, always or never", o.Restart)
	}
	if o.Timeout < 0 || o.Timeout > 24*time.Hour {
		return fmt.Errorf("--timeout %s: want 0 (none) to 24h", o.Timeout)
	}
	if o.ProgressDeadline < 0 || o.ProgressDeadline > 24*time.Hour {
		return fmt.Errorf("--progress-deadline %s: want 0 (derived) to 24h", o.ProgressDeadline)
	}
	if o.RequestTimeout <= 0 || o.RequestTimeout > 10*time.Minute {
		return fmt.Errorf("--request-timeout %s: want more than 0 and at most 10m", o.RequestTimeout)
	}
	if o.Retries < 0 || o.Retries > 20 {
		return fmt.Errorf("--retries %d: want 0 to 20", o.Retries)
	}
	if o.Strategy != sync.StrategyRolling && o.Strategy != sync.StrategyCanary && o.Strategy != sync.StrategyZonal {
		return fmt.Errorf("--strategy %q: want rolling, canary or zonal", o.Strategy)
	}
	if errs := validation.IsQualifiedName(o.ZoneLabel); len(errs) > 0 {
		return fmt.Errorf("--zone-label %q: want a node label key like %s: %s", o.ZoneLabel, rollout.DefaultZoneLabel, strings.Join(errs, "; "))
	}
	if o.ConfigHistory < 1 || o.ConfigHistory > 100 {
		return fmt.Errorf("--config-history %d: want 1 to 100", o.ConfigHistory)
	}
	if o.CanaryNodes < 0 || o.CanaryNodes > 10000 {
		return fmt.Errorf("--canary-nodes %d: want 0 to 10000", o.CanaryNodes)
	}
	if o.VerifyEndpoints < 0 || o.VerifyEndpoints > 1000 {
		return fmt.Errorf("--verify-endpoints %d: want 0 to 1000", o.VerifyEndpoints)
	}
	if o.VerifyEndpoints > 0 && !o.Verify {
		return fmt.Errorf("--verify-endpoints needs --verify")
	}
	if err := o.validateConnectivity(); err != nil {
		return err
	}
	if o.BatchSize != "" {
		if err := validateBatchSize(o.BatchSize); err != nil {
			return err
		}
	}
	if o.NotReadyTolerance < 0 || o.NotReadyTolerance > 7*24*time.Hour {
		return fmt.Errorf("--not-ready-tolerance %s: want 0 to 168h", o.NotReadyTolerance)
	}
	if o.LockTimeout < 0 || o.LockTimeout > 24*time.Hour {
		return fmt.Errorf("--lock-timeout %s: want 0 to 24h", o.LockTimeout)
	}
	if o.Output != "text" && o.Output != "json" {
		return fmt.Errorf("--output %q: want text or json", o.Output)
	}
	if _, err := logrus.ParseLevel(o.LogLevel); err != nil {
		return fmt.Errorf("--log-level %q: want debug, info, warn or error", o.LogLevel)
	}
	if o.LogFormat != "text" && o.LogFormat != "json" {
		return fmt.Errorf("--log-format %q: want text or json", o.LogFormat)
	}
	return nil
}

func (o *Options) syncOptions() sync.Options {
	// zonal is the canary with zone-shaped batches: one mechanism, so a
	// rerun, a resume or a rollback treats both alike
	strategy, zoneLabel := o.Strategy, ""
	if o.Strategy == sync.StrategyZonal {
		strategy, zoneLabel = sync.StrategyCanary, o.ZoneLabel
	}
	return sync.Options{ZoneLabel: zoneLabel,
		Namespace: o.Namespace, ConfigMap: o.ConfigMap, DaemonSet: o.DaemonSet, Container: o.Container,
		Spec: o.spec, ProbePath: o.ProbePath, KubeProxyVersion: o.KubeProxyVersion,
		Restart: o.Restart, Timeout: o.Timeout, ProgressDeadline: o.ProgressDeadline, Check: o.Check, Diff: o.Diff,
		LockTimeout: o.LockTimeout, Strategy: strategy, CanaryNodes: o.CanaryNodes, BatchSize: o.BatchSize, History: o.ConfigHistory, Undo: o.Undo,
		Verify: o.Verify, VerifyEndpoints: o.VerifyEndpoints, RollbackOnFailure: o.RollbackOnFailure && !o.NoRollback,
		Connectivity: sync.ConnectivityOptions{Health: o.VerifyHealth, HealthTimeout: o.VerifyHealthWait,
			Traffic: o.VerifyTraffic, TrafficImage: o.VerifyTrafficImg, TrafficTimeout: o.VerifyTrafficWait},
		Nodes: nodes.Policy{NotReadyTolerance: o.NotReadyTolerance, SkipUnschedulable: o.SkipUnschedulable},
	}
}

// validateBatchSize accepts a positive whole number or a percentage 1-100%.
func validateBatchSize(v string) error {
	num, pct := strings.CutSuffix(v, "%")
	n, err := strconv.Atoi(num)
	if err != nil || n < 1 || (pct && n > 100) {
		return fmt.Errorf("--batch-size %q: want a positive number of nodes like 5, or a percentage like 10%%", v)
	}
	return nil
}

// validateConnectivity checks the --verify-health and --verify-traffic flags.
func (o *Options) validateConnectivity() error {
	if !slices.Contains(verify.Modes, o.VerifyHealth) {
		return fmt.Errorf("--verify-health %q: want off, auto or required", o.VerifyHealth)
	}
	if o.VerifyHealthWait <= 0 || o.VerifyHealthWait > time.Hour {
		return fmt.Errorf("--verify-health-timeout %s: want more than 0 and at most 1h", o.VerifyHealthWait)
	}
	if o.VerifyTrafficWait <= 0 || o.VerifyTrafficWait > time.Hour {
		return fmt.Errorf("--verify-traffic-timeout %s: want more than 0 and at most 1h", o.VerifyTrafficWait)
	}
	if o.VerifyTraffic == "" {
		return nil
	}
	if o.VerifyHealth == verify.Off {
		return fmt.Errorf("--verify-traffic needs --verify-health auto or required")
	}
	ns, name, ok := strings.Cut(o.VerifyTraffic, "/")
	if !ok || len(validation.IsDNS1123Label(ns)) > 0 || len(validation.IsDNS1035Label(name)) > 0 {
		return fmt.Errorf("--verify-traffic %q: want NAMESPACE/NAME of a Service, e.g. default/kubernetes", o.VerifyTraffic)
	}
	if strings.TrimSpace(o.VerifyTrafficImg) == "" {
		return fmt.Errorf("--verify-traffic-image must not be empty")
	}
	return nil
}
