// Package probe decides kube-proxy's readiness probe: /livez from 1.28 on,
// /healthz before (since 1.28 /healthz fails by design on nodes being
// deleted, such as those tainted ToBeDeletedByClusterAutoscaler).
package probe

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/version"
)

// Modes of --probe-path.
const (
	Auto    = "auto"
	Livez   = "/livez"
	Healthz = "/healthz"
	None    = "none"
)

// Modes lists the accepted --probe-path values.
var Modes = []string{Auto, Livez, Healthz, None}

var livezSince = version.MajorMinor(1, 28)

// ImageVersion extracts a version from an image reference's tag:
// "registry.k8s.io/kube-proxy:v1.33.1", "...:v1.27.16-eksbuild.1" and
// "...:v1.30.0@sha256:..." all work; a digest-only reference or a tag that is
// not a version returns an error, and the caller falls back.
func ImageVersion(image string) (*version.Version, error) {
	ref := image
	if i := strings.Index(ref, "@"); i >= 0 {
		ref = ref[:i]
	}
	slash := strings.LastIndex(ref, "/")
	colon := strings.LastIndex(ref, ":")
	if colon <= slash {
		return nil, fmt.Errorf("image %q has no tag", image)
	}
	v, err := version.ParseGeneric(ref[colon+1:])
	if err != nil {
		return nil, fmt.Errorf("image %q: tag is not a version: %w", image, err)
	}
	return v, nil
}

// PathFor returns the probe path a kube-proxy version should use.
func PathFor(v *version.Version) string {
	if v.AtLeast(livezSince) {
		return Livez
	}
	return Healthz
}

// Desired builds the readiness probe for path and port, keeping the timing
// of the current probe when there is one.
func Desired(current *corev1.Probe, path string, port int, host string) *corev1.Probe {
	p := &corev1.Probe{PeriodSeconds: 10, TimeoutSeconds: 5, FailureThreshold: 3, SuccessThreshold: 1}
	if current != nil {
		p = current.DeepCopy()
	}
	p.ProbeHandler = corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
		Path:   path,
		Port:   intstr.FromInt32(int32(port)),
		Host:   host,
		Scheme: corev1.URISchemeHTTP,
	}}
	return p
}

// Matches reports whether the current probe already is exactly the one
// Desired builds: an HTTP GET of path on port and host, plain HTTP, no
// headers, and no other handler. Anything else is replaced whole, so a
// rerun on a probe that was once changed by hand converges in one step.
func Matches(current *corev1.Probe, path string, port int, host string) bool {
	if current == nil || current.HTTPGet == nil || current.Exec != nil || current.TCPSocket != nil || current.GRPC != nil {
		return false
	}
	g := current.HTTPGet
	scheme := g.Scheme
	if scheme == "" {
		scheme = corev1.URISchemeHTTP
	}
	return g.Path == path && g.Port.String() == fmt.Sprint(port) && g.Host == host && scheme == corev1.URISchemeHTTP && len(g.HTTPHeaders) == 0
}
