package kpsync

import (
	"fmt"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/version"

	"github.com/kube-proxy-sync/kube-proxy-sync/internal/configmap"
	"github.com/kube-proxy-sync/kube-proxy-sync/internal/kpconfig"
	"github.com/kube-proxy-sync/kube-proxy-sync/internal/probe"
)

func (p probePlan) changes() bool { return p.probe != nil || p.liveness != nil }

// findContainer picks the kube-proxy container of the DaemonSet.
func findContainer(ds *appsv1.DaemonSet, name string) (*corev1.Container, error) {
	cs := ds.Spec.Template.Spec.Containers
	var names []string
	for i := range cs {
		if cs[i].Name == name {
			return &cs[i], nil
		}
		names = append(names, cs[i].Name)
	}
	return nil, fmt.Errorf("daemonset %s/%s has no container %q (it has: %s); pass --container", ds.Namespace, ds.Name, name, strings.Join(names, ", "))
}

// planProbe finds kube-proxy's version and the readiness probe it should
// have, for the config data it is to run.
func planProbe(e *env, ds *appsv1.DaemonSet, data map[string]string) (probePlan, error) {
	port, host := kpconfig.DefaultHealthzPort, ""
	if text, ok := data[configmap.ConfigKey]; ok {
		var err error
		if port, host, err = kpconfig.HealthzEndpoint(text); err != nil {
			return probePlan{}, err
		}
	}
	return probeFor(e, ds, port, host)
}

// probeFor is the probe plan for the DaemonSet as read, with kube-proxy's
// health endpoint on port and host (from its config, see planProbe).
func probeFor(e *env, ds *appsv1.DaemonSet, port int, host string) (probePlan, error) {
	c, err := findContainer(ds, e.o.Container)
	if err != nil {
		return probePlan{}, err
	}
	plan := probePlan{container: c.Name, port: port, host: host}
	v := kubeProxyVersion(e.o, c.Image)
	if v != nil {
		plan.version = "v" + v.String()
	}
	plan.healthPath = probe.Healthz // served by every version
	if v != nil {
		plan.healthPath = probe.PathFor(v)
	}
	switch e.o.ProbePath {
	case probe.None:
		if c.ReadinessProbe != nil && c.ReadinessProbe.HTTPGet != nil {
			plan.path = c.ReadinessProbe.HTTPGet.Path
		}
		return plan, nil
	case probe.Auto:
		if v == nil {
			// the API server's version says nothing: kube-proxy may be
			// three minors older, and 1.27 does not serve /livez
			e.d.Log.Warnf("cannot tell the kube-proxy version from image %q: the readiness and liveness probes are left alone; pass --kube-proxy-version or --probe-path to manage them", c.Image)
			if c.ReadinessProbe != nil && c.ReadinessProbe.HTTPGet != nil {
				plan.path = c.ReadinessProbe.HTTPGet.Path
			}
			return plan, nil
		}
		plan.path = probe.PathFor(v)
	default:
		plan.path = e.o.ProbePath
	}
	plan.healthPath = plan.path
	if !probe.Matches(c.ReadinessProbe, plan.path, plan.port, host) {
		plan.probe = probe.Desired(c.ReadinessProbe, plan.path, plan.port, host)
	}
	if lp := c.LivenessProbe; plan.path == probe.Livez && lp != nil && lp.HTTPGet != nil && lp.HTTPGet.Path == probe.Healthz {
		e.d.Log.Infof("the liveness probe of container %s checks /healthz, which fails on nodes being deleted from 1.28 on: moving it to %s", c.Name, probe.Livez)
		plan.liveness = probe.Desired(lp, probe.Livez, plan.port, host)
	}
	return plan, nil
}

// kubeProxyVersion: --kube-proxy-version, else the image tag, else nil
// (never the API server's version: kube-proxy may be older).
func kubeProxyVersion(o Options, image string) *version.Version {
	if o.KubeProxyVersion != "" {
		return version.MustParseGeneric(o.KubeProxyVersion) // validated before
	}
	v, err := probe.ImageVersion(image)
	if err != nil {
		return nil
	}
	return v
}

// containerProbe is a container's readiness probe, nil if none.
func containerProbe(ds *appsv1.DaemonSet, name string) *corev1.Probe {
	c, err := findContainer(ds, name)
	if err != nil || c.ReadinessProbe == nil {
		return nil
	}
	return c.ReadinessProbe.DeepCopy()
}

// containerLiveness is a container's liveness probe, nil if none.
func containerLiveness(ds *appsv1.DaemonSet, name string) *corev1.Probe {
	c, err := findContainer(ds, name)
	if err != nil || c.LivenessProbe == nil {
		return nil
	}
	return c.LivenessProbe.DeepCopy()
}
