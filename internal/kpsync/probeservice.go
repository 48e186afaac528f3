package kpsync

import (
	"context"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/kube-proxy-sync/kube-proxy-sync/internal/configmap"
	"github.com/kube-proxy-sync/kube-proxy-sync/internal/kpconfig"
	"github.com/kube-proxy-sync/kube-proxy-sync/internal/verify"
)

// A proxy-mode change reprograms every path to every Service, so it is
// checked by traffic even when the operator names no Service
// (--verify-traffic): the run brings a Service of its own, ProbeServiceName
// in the DaemonSet's namespace. It selects kube-proxy's own pods (host
// network, so each endpoint is a node's address) on kube-proxy's healthz
// port, which every node serves while kube-proxy runs: nothing else has to
// be deployed, pulled or trusted, and its endpoints are kept by the
// cluster's own EndpointSlice controller. Both its traffic policies are
// Local: a node's connections reach that node's own kube-proxy, never
// another node's (one restarting in the same batch, a Windows node's or
// another pool's kube-proxy carrying the same labels), so a node's check
// depends on that node alone. It is a NodePort Service, so the nodeport
// path is checked as well as the node path, and the pod path from a pod
// running kube-proxy's own image (on every node already) or the image
// --verify-traffic-pod-image names. It is created under the Lease before
// the first write and deleted when the run ends; one a killed run left
// behind is deleted by the next run that migrates, before it makes its
// own.

// TrafficNone as --verify-traffic is the operator turning the traffic
// check off, that of a proxy-mode change included.
const TrafficNone = "none"

// ProbeServiceName is the name of the run's own Service.
const ProbeServiceName = "kube-proxy-sync-probe"

// probeServiceWait bounds each step of removing the run's own Service
// once the run's context is over: its probe pods (their kubelets get up
// to verify.ProbePodsGone past the grace period before a pod is forced),
// then the Service.
const probeServiceWait = verify.ProbePodsGone + 30*time.Second

// ownTraffic turns the traffic check on for a proxy-mode change that names
// no Service: on the run's own Service, along the node, pod and nodeport
// paths. The pod path connects from kube-proxy's own image unless
// --verify-traffic-pod-image names one; when kube-proxy's image cannot
// connect (no shell, as in upstream's distroless image) the path is left
// out with a warning, tried once before any restart (see baseline), while
// an image named that cannot stops the run there. It refuses, before any
// write, a config whose kube-proxy serves its healthz port on loopback
// only.
func ownTraffic(e *env, p plan, roll rollSettings) (rollSettings, error) {
	conn := roll.conn
	o := e.o
	port, host, err := kpconfig.HealthzEndpoint(p.desired[configmap.ConfigKey])
	if err != nil {
		return roll, err
	}
	if host != "" {
		return roll, fmt.Errorf("proxy-mode change: the run checks traffic through a Service of its own on kube-proxy's healthz port, which config.conf binds to %s only (healthzBindAddress): name a Service with ready endpoints to check through (--verify-traffic NAMESPACE/NAME), or turn the traffic check off (--verify-traffic none); nothing was written", host)
	}
	if sel := p.ds.Spec.Selector; sel == nil || len(sel.MatchExpressions) > 0 || len(sel.MatchLabels) == 0 {
		return roll, fmt.Errorf("proxy-mode change: the run checks traffic through a Service of its own selecting the pods of daemonset %s/%s, whose selector is not labels alone: name a Service with ready endpoints to check through (--verify-traffic NAMESPACE/NAME); nothing was written", o.Namespace, o.DaemonSet)
	}
	if conn.TrafficImage == "" {
		return roll, fmt.Errorf("proxy-mode change: the traffic check through the run's own Service needs a probe image (--verify-traffic-image), or --verify-traffic none; nothing was written")
	}
	if slices.Contains(conn.TrafficPaths, verify.PathPod) && conn.TrafficPodImage == "" {
		return roll, fmt.Errorf("proxy-mode change: --verify-traffic-paths pod needs --verify-traffic-pod-image (an image on every node with sh and bash or nc); nothing was written")
	}
	conn.Traffic = o.Namespace + "/" + ProbeServiceName
	roll.ownPort = int32(port)
	if len(conn.TrafficPaths) == 0 {
		conn.TrafficPaths = verify.AllPaths
		if conn.TrafficPodImage == "" && p.imageBefore != "" {
			// the image the fleet runs now: every node has it
			conn.TrafficPodImage, conn.podImageOptional = p.imageBefore, true
		}
	}
	if slices.Contains(conn.TrafficPaths, verify.PathPod) && conn.TrafficPodImage == "" {
		return roll, fmt.Errorf("proxy-mode change: the pod path of the traffic check needs an image to connect from, and daemonset %s/%s has no container %q to take it from: pass --verify-traffic-pod-image; nothing was written", o.Namespace, o.DaemonSet, o.Container)
	}
	if conn.TrafficTimeout <= 0 {
		conn.TrafficTimeout = 30 * time.Second
	}
	roll.conn = conn
	return roll, nil
}

// probeService is the run's own Service while the run lasts.
type probeService struct{ e *env }

// create deletes a Service of that name an earlier run left, makes the
// run's own, and returns what deletes it and when it was made (the tool's
// clock, once the API server answered).
func (ps probeService) create(ctx context.Context, p plan) (func(), time.Time, error) {
	e, o := ps.e, ps.e.o
	api := e.d.Kube.Services(o.Namespace)
	// one a killed run left is deleted
	old, err := ps.leftover(ctx)
	if err != nil {
		return nil, time.Time{}, err
	}
	if old != nil {
		// the killed run's probe pods first: a probe after the Service
		// went would leave the node unrouted
		if err := ps.removeProbePods(ctx); err != nil {
			return nil, time.Time{}, fmt.Errorf("%w; nothing was written", err)
		}
		if err := ps.delete(ctx, old.UID); err != nil {
			return nil, time.Time{}, err
		}
	}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: ProbeServiceName, Namespace: o.Namespace, Labels: map[string]string{
			"app.kubernetes.io/name": ProbeServiceName, configmap.ManagedByLabel: "kube-proxy-sync"}},
		Spec: corev1.ServiceSpec{
			Type:     corev1.ServiceTypeNodePort,
			Selector: p.ds.Spec.Selector.MatchLabels,
			// each node's own kube-proxy only (see above)
			InternalTrafficPolicy: ptr.To(corev1.ServiceInternalTrafficPolicyLocal),
			ExternalTrafficPolicy: corev1.ServiceExternalTrafficPolicyLocal,
			Ports: []corev1.ServicePort{{Name: "healthz", Protocol: corev1.ProtocolTCP,
				Port: p.roll.ownPort, TargetPort: intstr.FromInt32(p.roll.ownPort)}},
		},
	}
	made, err := api.Create(ctx, svc, metav1.CreateOptions{})
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("create service %s/%s, the run's own for the proxy-mode change's traffic check, before any write: %w (the kubeconfig user needs create and delete on services, see roles/kpsync/files/rbac.yaml; or name a Service with --verify-traffic)", o.Namespace, ProbeServiceName, err)
	}
	at := e.d.Clock.Now()
	e.d.Log.Infof("service %s/%s created for the traffic check (kube-proxy's pods on port %d); deleted when the run ends", o.Namespace, ProbeServiceName, p.roll.ownPort)
	return func() {
		ctx = context.WithoutCancel(ctx)
		// its probe pods first, stopped by their kubelets, so that no
		// probe goes to the Service's ClusterIP once its rules are gone
		pctx, cancel := context.WithTimeout(ctx, probeServiceWait)
		defer cancel()
		if err := ps.removeProbePods(pctx); err != nil {
			e.warn(err.Error())
		}
		// its own only (the UID): after a lost Lease another run may
		// have made the next one
		sctx, cancel := context.WithTimeout(ctx, probeServiceWait)
		defer cancel()
		if err := ps.delete(sctx, made.UID); err != nil {
			e.warn(err.Error() + ": delete it by hand, or the next run that migrates does")
		}
	}, at, nil
}

// leftover is the Service of the run's own name that a killed run left
// (nil: none), which create deletes; a Service of that name that is not
// the tool's is never touched, and refused before any write (check mode
// too, which creates nothing).
func (ps probeService) leftover(ctx context.Context) (*corev1.Service, error) {
	o := ps.e.o
	old, err := ps.e.d.Kube.Services(o.Namespace).Get(ctx, ProbeServiceName, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("get service %s/%s, the traffic check's own, before any write: %w; nothing was written", o.Namespace, ProbeServiceName, err)
	case old.Labels[configmap.ManagedByLabel] != "kube-proxy-sync":
		return nil, fmt.Errorf("service %s/%s exists and is not kube-proxy-sync's (no label %s=kube-proxy-sync): the proxy-mode change's traffic check would use that name; name a Service to check through (--verify-traffic NAMESPACE/NAME), or rename that one; nothing was written",
			o.Namespace, ProbeServiceName, configmap.ManagedByLabel)
	}
	return old, nil
}

// removeProbePods deletes the traffic check's probe pods and waits until
// they are gone, and warns about those it had to force
// (verify.RemoveProbePods).
func (ps probeService) removeProbePods(ctx context.Context) error {
	r, err := verify.RemoveProbePods(ctx, ps.e.d.Clock, ps.e.d.Kube.Pods(ps.e.o.Namespace), ps.e.o.Namespace)
	if w := r.Warning(ps.e.o.Namespace); w != "" {
		ps.e.warn(w)
	}
	return err
}

// delete deletes the Service of that name and UID, if it is still there.
func (ps probeService) delete(ctx context.Context, uid types.UID) error {
	o := ps.e.o
	err := ps.e.d.Kube.Services(o.Namespace).Delete(ctx, ProbeServiceName, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return fmt.Errorf("delete service %s/%s, the traffic check's own: %w", o.Namespace, ProbeServiceName, err)
	}
	return nil
}
