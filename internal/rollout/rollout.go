// Package rollout restarts the kube-proxy DaemonSet the way
// `kubectl rollout restart` does and waits for it like `kubectl rollout status`.
package rollout

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/sirupsen/logrus"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"
	"k8s.io/utils/clock"
)

const (
	// HashAnnotation on the DaemonSet's metadata records the ConfigMap data
	// hash its pods were last restarted for; a mismatch means a restart is owed.
	HashAnnotation = "kube-proxy-sync.io/config-hash"
	// RestartedAtAnnotation is what `kubectl rollout restart` sets on the pod template.
	RestartedAtAnnotation = "kubectl.kubernetes.io/restartedAt"
)

// Change is one PATCH of the DaemonSet: any of the hash stamp, the restart,
// and the readiness probe, together.
type Change struct {
	// ResourceVersion is the version the decision was made on; the PATCH
	// fails with a conflict if the DaemonSet moved since.
	ResourceVersion string
	Hash            string
	RestartAt       *time.Time
	Container       string
	Probe           *corev1.Probe
}

// Restarts reports whether the change makes the DaemonSet roll its pods.
func (c Change) Restarts() bool { return c.RestartAt != nil || c.Probe != nil }

// Patch renders the strategic merge patch.
func (c Change) Patch() ([]byte, error) {
	meta := map[string]interface{}{}
	if c.ResourceVersion != "" {
		meta["resourceVersion"] = c.ResourceVersion
	}
	if c.Hash != "" {
		meta["annotations"] = map[string]string{HashAnnotation: c.Hash}
	}
	patch := map[string]interface{}{"metadata": meta}
	tmpl := map[string]interface{}{}
	if c.RestartAt != nil {
		tmpl["metadata"] = map[string]interface{}{
			"annotations": map[string]string{RestartedAtAnnotation: c.RestartAt.UTC().Format(time.RFC3339)},
		}
	}
	if c.Probe != nil {
		probe, err := runtime.DefaultUnstructuredConverter.ToUnstructured(c.Probe)
		if err != nil {
			return nil, err
		}
		// a probe switched from another handler must not keep it ($patch:
		// replace would do, but drops the probe when there was none)
		for _, handler := range []string{"exec", "tcpSocket", "grpc"} {
			if _, ok := probe[handler]; !ok {
				probe[handler] = nil
			}
		}
		tmpl["spec"] = map[string]interface{}{
			"containers": []interface{}{map[string]interface{}{"name": c.Container, "readinessProbe": probe}},
		}
	}
	if len(tmpl) > 0 {
		patch["spec"] = map[string]interface{}{"template": tmpl}
	}
	return json.Marshal(patch)
}

// Client patches and watches one DaemonSet.
type Client struct {
	Kube      kubernetes.Interface
	Namespace string
	Name      string
	Clock     clock.PassiveClock
	Log       *logrus.Entry
	// ProgressEvery limits progress lines on stderr.
	ProgressEvery time.Duration
	// Midway, when set, is called once while a rollout is part done.
	Midway func()
}

// Get reads the DaemonSet.
func (c Client) Get(ctx context.Context) (*appsv1.DaemonSet, error) {
	ds, err := c.Kube.AppsV1().DaemonSets(c.Namespace).Get(ctx, c.Name, metav1.GetOptions{})
	if err != nil {
		return nil, c.explain("get", err)
	}
	return ds, nil
}

// Apply sends the change as one PATCH.
func (c Client) Apply(ctx context.Context, ch Change) (*appsv1.DaemonSet, error) {
	body, err := ch.Patch()
	if err != nil {
		return nil, fmt.Errorf("render daemonset patch: %w", err)
	}
	ds, err := c.Kube.AppsV1().DaemonSets(c.Namespace).Patch(ctx, c.Name, types.StrategicMergePatchType, body, metav1.PatchOptions{FieldManager: "kube-proxy-sync"})
	if err != nil {
		return nil, c.explain("patch", err)
	}
	return ds, nil
}

func (c Client) explain(verb string, err error) error {
	what := fmt.Sprintf("%s daemonset %q", verb, c.Namespace+"/"+c.Name)
	switch {
	case apierrors.IsNotFound(err):
		return fmt.Errorf("%s: not found: check --namespace/--daemonset: %w", what, err)
	case apierrors.IsForbidden(err):
		return fmt.Errorf("%s: forbidden: the kubeconfig user needs %s on daemonsets (see roles/kube_proxy_sync/files/rbac.yaml): %w", what, verb, err)
	}
	return fmt.Errorf("%s: %w", what, err)
}

// Status is where a rollout stands.
type Status struct {
	Desired   int32   `json:"desired"`
	Updated   int32   `json:"updated"`
	Available int32   `json:"available"`
	Duration  float64 `json:"duration_seconds"`
}

// StatusOf reads a DaemonSet's rollout status.
func StatusOf(ds *appsv1.DaemonSet) Status {
	return Status{
		Desired:   ds.Status.DesiredNumberScheduled,
		Updated:   ds.Status.UpdatedNumberScheduled,
		Available: ds.Status.NumberAvailable,
	}
}

// Complete is `kubectl rollout status` for a DaemonSet: the controller has
// seen the generation, and every scheduled pod is updated and available.
func Complete(ds *appsv1.DaemonSet, generation int64) bool {
	s := ds.Status
	return s.ObservedGeneration >= generation &&
		s.UpdatedNumberScheduled >= s.DesiredNumberScheduled &&
		s.NumberAvailable >= s.DesiredNumberScheduled
}

// Wait watches the DaemonSet until the rollout of generation completes or
// ctx ends, logging progress.
func (c Client) Wait(ctx context.Context, generation int64) (Status, error) {
	start := c.Clock.Now()
	sel := fields.OneTermEqualSelector("metadata.name", c.Name).String()
	dsClient := c.Kube.AppsV1().DaemonSets(c.Namespace)
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.FieldSelector = sel
			return dsClient.List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.FieldSelector = sel
			return dsClient.Watch(ctx, o)
		},
	}
	var last Status
	var lastLog time.Time
	midway := c.Midway
	_, err := watchtools.UntilWithSync(ctx, lw, &appsv1.DaemonSet{}, nil, func(ev watch.Event) (bool, error) {
		if ev.Type == watch.Deleted {
			return false, fmt.Errorf("daemonset %s/%s was deleted during the rollout", c.Namespace, c.Name)
		}
		ds, ok := ev.Object.(*appsv1.DaemonSet)
		if !ok {
			return false, nil
		}
		st := StatusOf(ds)
		if st != last && (c.Clock.Since(lastLog) >= c.ProgressEvery || Complete(ds, generation)) {
			c.Log.Infof("rollout of daemonset %s/%s: updated %d/%d, available %d/%d", c.Namespace, c.Name, st.Updated, st.Desired, st.Available, st.Desired)
			lastLog = c.Clock.Now()
		}
		last = st
		done := Complete(ds, generation)
		if !done && midway != nil && ds.Status.ObservedGeneration >= generation && st.Updated > 0 {
			midway()
			midway = nil
		}
		return done, nil
	})
	last.Duration = c.Clock.Since(start).Seconds()
	if err != nil {
		return last, fmt.Errorf("wait for daemonset %s/%s rollout (updated %d/%d, available %d/%d): %w; check the kube-proxy pods with kubectl -n %s get pods -l k8s-app=kube-proxy, or raise --timeout",
			c.Namespace, c.Name, last.Updated, last.Desired, last.Available, last.Desired, err, c.Namespace)
	}
	return last, nil
}
