package app

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"unicode"

	"github.com/sirupsen/logrus"
	"k8s.io/apimachinery/pkg/util/validation"
	utilversion "k8s.io/apimachinery/pkg/util/version"

	"github.com/kube-proxy-sync/kube-proxy-sync/internal/configmap"
	"github.com/kube-proxy-sync/kube-proxy-sync/internal/kpconfig"
	"github.com/kube-proxy-sync/kube-proxy-sync/internal/kpsync"
	"github.com/kube-proxy-sync/kube-proxy-sync/internal/kubeadm"
	"github.com/kube-proxy-sync/kube-proxy-sync/internal/nodes"
	"github.com/kube-proxy-sync/kube-proxy-sync/internal/probe"
	"github.com/kube-proxy-sync/kube-proxy-sync/internal/rollout"
	"github.com/kube-proxy-sync/kube-proxy-sync/internal/verify"
)

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
	return o.completePools()
}

// Validate rejects bad input before anything touches the cluster. ctx is
// the run's: rendering --kubeadm-config runs kubeadm, and an interrupt
// stops it.
func (o *Options) Validate(ctx context.Context) error {
	for flag, name := range map[string]string{"namespace": o.Namespace, "configmap": o.ConfigMap, "daemonset": o.DaemonSet} {
		if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
			return fmt.Errorf("--%s %q: %s", flag, name, strings.Join(errs, "; "))
		}
	}
	if o.Container == "" {
		return fmt.Errorf("--container must not be empty")
	}
	if err := o.validatePools(); err != nil {
		return err
	}
	if err := o.validateSplit(); err != nil {
		return err
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
	switch {
	case o.Image == ImageFromKubeadm && o.KubeadmConfig == "":
		return fmt.Errorf("--image %s takes the image --kubeadm-config renders: pass --kubeadm-config, or the image itself", ImageFromKubeadm)
	case o.Image != ImageFromKubeadm && o.Image != "":
		if strings.ContainsFunc(o.Image, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }) || len(o.Image) > 512 {
			return fmt.Errorf("--image %q: want an image reference like registry.k8s.io/kube-proxy:v1.34.4", o.Image)
		}
		o.image = o.Image
	}
	switch {
	case o.Template != "" && o.Template != TemplateFromKubeadm:
		return fmt.Errorf("--template %q: want %s (the pod template --kubeadm-config renders) or empty", o.Template, TemplateFromKubeadm)
	case o.Template == TemplateFromKubeadm && o.KubeadmConfig == "":
		return fmt.Errorf("--template %s takes the pod template --kubeadm-config renders: pass --kubeadm-config", TemplateFromKubeadm)
	case o.Template != "" && o.Restart == kpsync.RestartNever:
		return fmt.Errorf("--template %s with --restart never: a template change restarts every pod; run it with --restart auto", TemplateFromKubeadm)
	}
	if o.KubeadmConfig != "" {
		if o.Manifest != "" {
			return fmt.Errorf("--kubeadm-config and --manifest both give the ConfigMap's data: pass one")
		}
		var data []byte
		if o.KubeadmConfig == kubeadm.Stdin {
			var err error
			if data, err = o.readStdin(); err != nil {
				return err
			}
		}
		r, err := kubeadm.Render(ctx, o.Kubeadm, o.KubeadmConfig, data)
		if err != nil {
			return err
		}
		o.spec.Manifest = r.ConfigMap
		if o.Image == ImageFromKubeadm {
			if r.ImageErr != nil {
				return fmt.Errorf("--image %s: %s on --kubeadm-config %s: %w; nothing was changed: pass the image itself", ImageFromKubeadm, o.Kubeadm, o.KubeadmConfig, r.ImageErr)
			}
			o.image = r.Image
		}
		if o.Template == TemplateFromKubeadm {
			if err := errors.Join(r.TemplateErr, r.AccessErr); err != nil {
				return fmt.Errorf("--template %s: %s on --kubeadm-config %s: %w; nothing was changed", TemplateFromKubeadm, o.Kubeadm, o.KubeadmConfig, err)
			}
			o.template, o.access = r.Template, r.Access
			if o.Image == "" {
				// the template's image is kubeadm's
				if r.ImageErr != nil {
					return fmt.Errorf("--template %s: %s on --kubeadm-config %s: %w; nothing was changed: pass --image", TemplateFromKubeadm, o.Kubeadm, o.KubeadmConfig, r.ImageErr)
				}
				o.image = r.Image
			}
		}
	}
	if o.Manifest != "" {
		m, err := configmap.LoadManifest(o.Manifest, o.Namespace, o.ConfigMap)
		if err != nil {
			return err
		}
		o.spec.Manifest = m
	}
	if o.Undo && (o.Server != "" || len(o.settings) > 0 || o.Manifest != "" || o.KubeadmConfig != "" || o.Image != "" || o.Template != "") {
		return fmt.Errorf("--undo restores the previous config as it was: it takes no --set, --server, --manifest, --kubeadm-config, --image or --template (run those after it)")
	}
	if o.Undo && o.Restart == kpsync.RestartNever {
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
	if !slices.Contains([]string{kpsync.RestartAuto, kpsync.RestartAlways, kpsync.RestartNever}, o.Restart) {
		return fmt.Errorf("--restart %q: want auto, always or never", o.Restart)
	}
	// the ranges of ints and durations, from the option table
	for _, opt := range OptionTable() {
		if err := opt.checkRange(o); err != nil {
			return err
		}
	}
	if o.Strategy != kpsync.StrategyRolling && o.Strategy != kpsync.StrategyCanary && o.Strategy != kpsync.StrategyZonal {
		return fmt.Errorf("--strategy %q: want rolling, canary or zonal", o.Strategy)
	}
	if errs := validation.IsQualifiedName(o.ZoneLabel); len(errs) > 0 {
		return fmt.Errorf("--zone-label %q: want a node label key like %s: %s", o.ZoneLabel, rollout.DefaultZoneLabel, strings.Join(errs, "; "))
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

func (o *Options) syncOptions() kpsync.Options {
	// zonal is the canary with zone-shaped batches: one mechanism, so a
	// rerun, a resume or a rollback treats both alike
	strategy, zoneLabel := o.Strategy, ""
	if o.Strategy == kpsync.StrategyZonal {
		strategy, zoneLabel = kpsync.StrategyCanary, o.ZoneLabel
	}
	return kpsync.Options{ZoneLabel: zoneLabel,
		Namespace: o.Namespace, ConfigMap: o.ConfigMap, DaemonSet: o.DaemonSet, Container: o.Container,
		Spec: o.spec, ProbePath: o.ProbePath, KubeProxyVersion: o.KubeProxyVersion, Image: o.image, Template: o.template, Access: o.access,
		Restart: o.Restart, Timeout: o.Timeout, ProgressDeadline: o.ProgressDeadline, Check: o.Check, Diff: o.Diff,
		LockTimeout: o.LockTimeout, Strategy: strategy, CanaryNodes: o.CanaryNodes, BatchSize: o.BatchSize, History: o.ConfigHistory, Undo: o.Undo,
		Verify: o.Verify, VerifyEndpoints: o.VerifyEndpoints, RollbackOnFailure: o.RollbackOnFailure && !o.NoRollback,
		Connectivity: kpsync.ConnectivityOptions{Health: o.VerifyHealth, HealthTimeout: o.VerifyHealthWait,
			Traffic: o.VerifyTraffic, TrafficImage: o.VerifyTrafficImg, TrafficTimeout: o.VerifyTrafficWait,
			TrafficPaths: trafficPaths(o.VerifyTrafficPaths), TrafficPodImage: o.VerifyTrafficPodImg},
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
	if o.VerifyTraffic == kpsync.TrafficNone {
		return nil
	}
	// with no Service named, the rest still matters: a proxy-mode change
	// checks traffic through a Service of the run's own
	if o.VerifyTraffic != "" {
		if o.VerifyHealth == verify.Off {
			return fmt.Errorf("--verify-traffic needs --verify-health auto or required")
		}
		ns, name, ok := strings.Cut(o.VerifyTraffic, "/")
		if !ok || len(validation.IsDNS1123Label(ns)) > 0 || len(validation.IsDNS1035Label(name)) > 0 {
			return fmt.Errorf("--verify-traffic %q: want NAMESPACE/NAME of a Service, e.g. default/kubernetes, or none", o.VerifyTraffic)
		}
	}
	if strings.TrimSpace(o.VerifyTrafficImg) == "" {
		return fmt.Errorf("--verify-traffic-image must not be empty")
	}
	paths := trafficPaths(o.VerifyTrafficPaths)
	if len(paths) == 0 && o.VerifyTrafficPaths != "" {
		return fmt.Errorf("--verify-traffic-paths %q: want one or more of %s, comma-separated", o.VerifyTrafficPaths, strings.Join(verify.AllPaths, ","))
	}
	for i, p := range paths {
		if !slices.Contains(verify.AllPaths, p) || slices.Contains(paths[:i], p) {
			return fmt.Errorf("--verify-traffic-paths %q: %q is not one of %s, or is named twice", o.VerifyTrafficPaths, p, strings.Join(verify.AllPaths, ","))
		}
	}
	if slices.Contains(paths, verify.PathPod) && strings.TrimSpace(o.VerifyTrafficPodImg) == "" {
		return fmt.Errorf("--verify-traffic-paths pod needs --verify-traffic-pod-image: an image on every node with sh and bash or nc (the pause image has no shell)")
	}
	return nil
}

// trafficPaths splits --verify-traffic-paths (the empty string: none).
func trafficPaths(v string) []string {
	var out []string
	for _, p := range strings.Split(v, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// readStdin reads the kubeadm configuration --kubeadm-config - names, at
// most configmap.MaxSize bytes, from the command's standard input.
func (o *Options) readStdin() ([]byte, error) {
	if o.stdin == nil {
		return nil, fmt.Errorf("--kubeadm-config -: the configuration comes from standard input, which only the command reads; pass a file's path")
	}
	data, err := io.ReadAll(io.LimitReader(o.stdin, configmap.MaxSize+1))
	switch {
	case err != nil:
		return nil, fmt.Errorf("--kubeadm-config -: read standard input: %w", err)
	case len(data) > configmap.MaxSize:
		return nil, fmt.Errorf("--kubeadm-config -: standard input holds more than %d bytes: not a kubeadm configuration", configmap.MaxSize)
	case len(bytes.TrimSpace(data)) == 0:
		return nil, fmt.Errorf("--kubeadm-config -: standard input is empty: pipe the kubeadm configuration in (ansible.builtin.command's stdin)")
	}
	return data, nil
}
