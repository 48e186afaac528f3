package sync

import (
	"fmt"
	"slices"
	"strings"

	appsv1 "k8s.io/api/apps/v1"

	"github.com/kube-proxy-sync/kube-proxy-sync/internal/configmap"
	"github.com/kube-proxy-sync/kube-proxy-sync/internal/kpvalidate"
	"github.com/kube-proxy-sync/kube-proxy-sync/internal/probe"
)

// validateConfig refuses a config.conf that kube-proxy itself would refuse
// to start with, before anything is written: the whole text the run would
// write, or the current one when the run restarts kube-proxy on it. The
// rules are those of the kube-proxy version in use (--kube-proxy-version,
// else the image tag); an unknown version gets the newest rules, and the
// run says so. What kube-proxy would load past with a warning (fields it
// does not have, keys given twice) becomes the run's warnings; a --set of a
// field that this kube-proxy does not have is refused, as it would do
// nothing.
func (s *Syncer) validateConfig(ds *appsv1.DaemonSet, p plan) error {
	text, ok := p.desired[configmap.ConfigKey]
	if !ok {
		return nil
	}
	changed := false
	var set []string
	for _, k := range p.keys {
		if k == configmap.ConfigKey {
			changed = true
		}
		if path, ok := strings.CutPrefix(k, configmap.ConfigKey+":"); ok {
			changed = true
			set = append(set, path)
		}
	}
	if !changed && p.reason == "" && !p.probe.changes() {
		return nil // nothing written, nothing restarted
	}
	minor, note := kpvalidate.Rules(s.validationVersion(ds))
	if note != "" {
		s.warn(note)
	}
	for _, path := range set {
		if f, ok := kpvalidate.Lookup(path); ok && f.Since > minor {
			return fmt.Errorf("configmap %s/%s: setting %s: kube-proxy 1.%d does not have this field (kube-proxy has it from 1.%d on) and would ignore it; nothing was written (pass --kube-proxy-version if 1.%d is not the kube-proxy in use)",
				s.o.Namespace, s.o.ConfigMap, path, minor, f.Since, minor)
		}
	}
	warns, err := kpvalidate.Validate(text, minor)
	if err != nil {
		return fmt.Errorf("configmap %s/%s: %w; nothing was written: fix the value (or pass --kube-proxy-version if 1.%d is not the kube-proxy in use)", s.o.Namespace, s.o.ConfigMap, err, minor)
	}
	for _, w := range warns {
		s.warn(fmt.Sprintf("configmap %s/%s: %s", s.o.Namespace, s.o.ConfigMap, w))
	}
	return nil
}

// warn logs msg and adds it to the result's warnings, once per run (the
// plan may be made twice).
func (s *Syncer) warn(msg string) {
	if slices.Contains(s.res.Warnings, msg) {
		return
	}
	s.d.Log.Warn(msg)
	s.res.Warnings = append(s.res.Warnings, msg)
}

// validationVersion is the kube-proxy version whose rules apply: never the
// API server's, which may be newer than kube-proxy.
func (s *Syncer) validationVersion(ds *appsv1.DaemonSet) string {
	if s.o.KubeProxyVersion != "" {
		return s.o.KubeProxyVersion
	}
	c, err := findContainer(ds, s.o.Container)
	if err != nil {
		return ""
	}
	v, err := probe.ImageVersion(c.Image)
	if err != nil {
		return ""
	}
	return v.String()
}
