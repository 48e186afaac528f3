package kpsync

import (
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/version"

	"github.com/kube-proxy-sync/kube-proxy-sync/internal/configmap"
	"github.com/kube-proxy-sync/kube-proxy-sync/internal/kpvalidate"
)

// Which changes need a restart. A change with no effect on any running
// kube-proxy is written and not restarted for: the DaemonSet then records
// (rollout.NoEffectAnnotation) that its pods run the new data as well, so
// neither this run nor a later one restarts for it, and the next restart
// for any other reason reads it. The judgement is against what the pods
// run: the data they were restarted for, or one they run as well, which
// has the same proxy mode (a mode change always restarts), and the
// kube-proxy version and OS of the DaemonSet's pods.

// keyEffects says, for each changed key, whether it has an effect on the
// running kube-proxies (kpvalidate.EffectRestart) or none
// (kpvalidate.EffectNoEffect), and whether no key has any. Only
// config.conf's fields can be no-effect; any other key restarts.
func keyEffects(before, desired map[string]string, keys []string, on []kpvalidate.Target) (map[string]string, bool) {
	out := make(map[string]string, len(keys))
	oldText, hadOld := before[configmap.ConfigKey]
	newText, hasNew := desired[configmap.ConfigKey]
	var fields map[string]string
	if hadOld && hasNew {
		fields = kpvalidate.Effect([]byte(oldText), []byte(newText), on...)
	}
	none := len(keys) > 0
	for _, e := range fields {
		if e != kpvalidate.EffectNoEffect {
			none = false // also one no key names
		}
	}
	for _, k := range keys {
		top, field, one := strings.Cut(k, ":")
		effect := kpvalidate.EffectRestart
		_, undecodable := fields[configmap.ConfigKey]
		if top == configmap.ConfigKey && fields != nil && !undecodable {
			effect = kpvalidate.EffectNoEffect // the same value to kube-proxy
			for path, e := range fields {
				if (!one || path == field || strings.HasPrefix(path, field+".")) && e != kpvalidate.EffectNoEffect {
					effect = kpvalidate.EffectRestart
				}
			}
		}
		out[k] = effect
		if effect != kpvalidate.EffectNoEffect {
			none = false
		}
	}
	return out, none
}

// effectTargets are the kube-proxies a change is judged against: the
// DaemonSet's version (--kube-proxy-version, else its image's tag; any
// version while its pods are not all of the current template, or when the
// tag says none) on the OS its template selects (either when it selects
// none).
func effectTargets(o Options, ds *appsv1.DaemonSet) []kpvalidate.Target {
	var t kpvalidate.Target
	settled := ds.Status.ObservedGeneration >= ds.Generation && ds.Status.UpdatedNumberScheduled >= ds.Status.DesiredNumberScheduled
	if v, err := version.ParseGeneric(validationVersion(o, ds)); err == nil && v.Major() == 1 && (settled || o.KubeProxyVersion != "") {
		t.Minor = int(v.Minor())
	}
	t.OS = ds.Spec.Template.Spec.NodeSelector[corev1.LabelOSStable]
	if t.OS == "" && ds.Spec.Template.Spec.OS != nil {
		t.OS = string(ds.Spec.Template.Spec.OS.Name)
	}
	return []kpvalidate.Target{t}
}
