package verify

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/watch"
	watchtools "k8s.io/client-go/tools/watch"
	"k8s.io/utils/ptr"
)

// PodAPI is what the traffic check does with pods.
type PodAPI interface {
	List(ctx context.Context, opts metav1.ListOptions) (*corev1.PodList, error)
	Create(ctx context.Context, pod *corev1.Pod, opts metav1.CreateOptions) (*corev1.Pod, error)
	Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error)
	Delete(ctx context.Context, name string, opts metav1.DeleteOptions) error
}

// ProbeLabel marks the short-lived probe pods.
const ProbeLabel = "app.kubernetes.io/name"

// ProbeLabelValue is ProbeLabel's value on the probe pods.
const ProbeLabelValue = "kube-proxy-sync-verify"

// Traffic connects to a Service's ClusterIP from a node: a short-lived pod
// bound to the node (no scheduler), whose container only sleeps (the pause
// image, already on every node) and whose readiness probe is a TCP
// connection to ClusterIP:port. The kubelet runs that probe from the
// node's own network namespace, so the connection goes through the Service
// rules kube-proxy programmed on that node (the host's OUTPUT path). The
// pod is Ready exactly when the connection succeeded.
type Traffic struct {
	Pods      PodAPI
	Namespace string
	Image     string
	// Service is "namespace/name", for messages; Target its ClusterIP and port.
	Service string
	Target  string
	Timeout time.Duration
	// Requests counts the API requests made (create, watch, delete per node).
	Requests atomic.Int64
}

// Cleanup deletes probe pods an earlier run left behind (it was killed
// between creating and deleting one).
func (t *Traffic) Cleanup(ctx context.Context) error {
	t.Requests.Add(1)
	list, err := t.Pods.List(ctx, metav1.ListOptions{LabelSelector: ProbeLabel + "=" + ProbeLabelValue})
	if err != nil {
		return fmt.Errorf("list leftover traffic probe pods in %s: %w", t.Namespace, err)
	}
	for _, p := range list.Items {
		t.Requests.Add(1)
		err := t.Pods.Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To(int64(0)), Preconditions: &metav1.Preconditions{UID: ptr.To(p.UID)}})
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("delete leftover traffic probe pod %s/%s: %w", t.Namespace, p.Name, err)
		}
	}
	return nil
}

// Check runs the probe pod on node and waits for its verdict.
func (t *Traffic) Check(ctx context.Context, node string) error {
	host, port, err := net.SplitHostPort(t.Target)
	if err != nil {
		return fmt.Errorf("traffic check target %q: %w", t.Target, err)
	}
	p, err := strconv.Atoi(port)
	if err != nil {
		return fmt.Errorf("traffic check target %q: %w", t.Target, err)
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "kube-proxy-sync-verify-", Namespace: t.Namespace,
			Labels: map[string]string{ProbeLabel: ProbeLabelValue}},
		Spec: corev1.PodSpec{
			NodeName:                      node,
			HostNetwork:                   true,
			RestartPolicy:                 corev1.RestartPolicyNever,
			TerminationGracePeriodSeconds: ptr.To(int64(0)),
			AutomountServiceAccountToken:  ptr.To(false),
			Tolerations:                   []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
			Containers: []corev1.Container{{
				Name: "connect", Image: t.Image, ImagePullPolicy: corev1.PullIfNotPresent,
				ReadinessProbe: &corev1.Probe{
					ProbeHandler:  corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Host: host, Port: intstr.FromInt32(int32(p))}},
					PeriodSeconds: 1, TimeoutSeconds: 2, SuccessThreshold: 1, FailureThreshold: 1,
				},
			}},
		},
	}
	t.Requests.Add(1)
	created, err := t.Pods.Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("create the traffic probe pod on node %s: %w (the kubeconfig user needs create on pods in %s)", node, err, t.Namespace)
	}
	defer func() {
		// a context of its own: the run's may be the one that just ended
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		t.Requests.Add(1)
		_ = t.Pods.Delete(dctx, created.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To(int64(0)),
			Preconditions: &metav1.Preconditions{UID: ptr.To(created.UID)}})
	}()
	wctx, cancel := context.WithTimeout(ctx, t.Timeout)
	defer cancel()
	t.Requests.Add(1)
	w, err := t.Pods.Watch(wctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", created.Name).String(), ResourceVersion: created.ResourceVersion})
	if err != nil {
		return fmt.Errorf("watch the traffic probe pod %s: %w", created.Name, err)
	}
	last := created
	_, err = watchtools.UntilWithoutRetry(wctx, w, func(ev watch.Event) (bool, error) {
		p, ok := ev.Object.(*corev1.Pod)
		if !ok {
			return false, nil
		}
		last = p
		if ev.Type == watch.Deleted {
			return false, fmt.Errorf("probe pod %s was deleted", p.Name)
		}
		if why := cannotRun(p); why != "" {
			return false, fmt.Errorf("probe pod %s cannot run (image %s): %s; pass --verify-traffic-image with an image present on the nodes", p.Name, t.Image, why)
		}
		return podReady(p), nil
	})
	if err == nil {
		return nil
	}
	if wctx.Err() != nil && ctx.Err() == nil {
		if running(last) {
			return fmt.Errorf("no TCP connection to Service %s (%s) from node %s within %s (the kubelet's probe from the node never connected)", t.Service, t.Target, node, t.Timeout)
		}
		return fmt.Errorf("the traffic probe pod %s on node %s did not start within %s", created.Name, node, t.Timeout)
	}
	return err
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func running(p *corev1.Pod) bool {
	for _, cs := range p.Status.ContainerStatuses {
		if cs.State.Running != nil {
			return true
		}
	}
	return false
}

// cannotRun says why the probe pod will never run, or "".
func cannotRun(p *corev1.Pod) string {
	if p.Status.Phase == corev1.PodFailed {
		return "phase Failed: " + p.Status.Message
	}
	for _, cs := range p.Status.ContainerStatuses {
		if w := cs.State.Waiting; w != nil {
			switch w.Reason {
			case "ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull", "CreateContainerError", "CreateContainerConfigError", "RunContainerError":
				return w.Reason + ": " + w.Message
			}
		}
	}
	return ""
}
