package sync

import (
	"fmt"
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
// run says so.
func (s *Syncer) validateConfig(ds *appsv1.DaemonSet, p plan) error {
	text, ok := p.desired[configmap.ConfigKey]
	if !ok {
		return nil
	}
	changed := false
	for _, k := range p.keys {
		if k == configmap.ConfigKey || strings.HasPrefix(k, configmap.ConfigKey+":") {
			changed = true
		}
	}
	if !changed && p.reason == "" && !p.probe.changes() {
		return nil // nothing written, nothing restarted
	}
	minor, note := kpvalidate.Rules(s.validationVersion(ds))
	if note != "" && !s.noted {
		s.d.Log.Warn(note)
		s.noted = true
	}
	if err := kpvalidate.Validate(text, minor); err != nil {
		return fmt.Errorf("configmap %s/%s: %w; nothing was written: fix the value (or pass --kube-proxy-version if 1.%d is not the kube-proxy in use)", s.o.Namespace, s.o.ConfigMap, err, minor)
	}
	return nil
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
