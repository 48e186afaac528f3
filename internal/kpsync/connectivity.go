package kpsync

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kube-proxy-sync/kube-proxy-sync/internal/verify"
)

// healthPollInterval is how often a restarted node's /healthz is asked.
const healthPollInterval = time.Second

// connectivity state of a run
type connectivity struct {
	checker   *verify.Checker
	unchecked map[string]bool
	// pending: the fleet's pending count at the last look; first: no look yet
	pending int
	first   bool
}

// baseline asks each live node's kube-proxy (live: the fleet's live
// nodes) before the restart (and
// resolves the traffic check's Service), so that the checks after it
// compare with how each node was.
func baseline(ctx context.Context, e *env, o ConnectivityOptions, live []string, port int) (*connectivity, error) {
	if o.Health == "" || o.Health == verify.Off {
		return nil, nil
	}
	if e.d.NodeProxy == nil {
		return nil, fmt.Errorf("--verify-health needs the node proxy client")
	}
	prober, err := e.d.NodeProxy(port)
	if err != nil {
		return nil, err
	}
	c := &verify.Checker{Prober: prober, Clock: e.d.Clock, Log: e.d.Log, Mode: o.Health,
		Interval: healthPollInterval, Timeout: o.HealthTimeout, Parallel: 8}
	if o.Traffic != "" && o.Traffic != TrafficNone {
		if c.Traffic, err = trafficTarget(ctx, e, o); err != nil {
			return nil, err
		}
		warning, err := c.Traffic.Cleanup(ctx, e.d.Clock)
		if warning != "" {
			e.warn(warning)
		}
		if err != nil {
			return nil, err
		}
	}
	if err := c.Baseline(ctx, live); err != nil {
		return nil, err
	}
	// the pod path is tried once before any restart, on the first live
	// node whose kube-proxy answered healthy
	tried := ""
	for _, n := range live {
		if c.HealthyBefore(n) {
			tried = n
			break
		}
	}
	if c.Traffic != nil && tried != "" && slices.Contains(c.Traffic.PathsChecked(), verify.PathPod) && !c.Traffic.Made.IsZero() {
		// the run's own Service is seconds old: a connection before that
		// node's kube-proxy has it in its rules would go out unrouted
		if err := c.WaitSync(ctx, tried, c.Traffic.Made); err != nil {
			return nil, fmt.Errorf("--verify-traffic-paths pod, before its try on node %s: the run's own Service is in no rules of its kube-proxy yet: %w; nothing was restarted (the restart is owed to the next run)", tried, err)
		}
	}
	if c.Traffic != nil && tried != "" {
		warning, err := c.Traffic.Preflight(ctx, tried)
		if err != nil && o.podImageOptional && errors.Is(err, verify.ErrCannotRun) && ctx.Err() == nil {
			// kube-proxy's own image, taken rather than asked, cannot
			// connect: the other paths are checked without it
			c.Traffic.Paths = slices.DeleteFunc(slices.Clone(c.Traffic.Paths), func(p string) bool { return p == verify.PathPod })
			e.warn(fmt.Sprintf("the traffic check leaves out the pod path (PREROUTING): it connects from a pod running kube-proxy's own image (%s) by default, which cannot, tried once before any restart: %v; pass --verify-traffic-pod-image with an image on every node that has sh and bash or nc", o.TrafficPodImage, err))
			err = nil
		}
		if err != nil {
			return nil, fmt.Errorf("--verify-traffic-paths pod, tried once before any restart: %w; nothing was restarted (the restart is owed to the next run)", err)
		}
		if warning != "" {
			e.warn("--verify-traffic-paths pod, tried once before any restart: " + warning + ": the path fails already, so each node's check after its restart will fail too unless the restart mends it")
		}
	}
	conn := &connectivity{checker: c, unchecked: map[string]bool{}, first: true}
	for _, n := range live {
		if c.Wants(n) {
			conn.unchecked[n] = true
		}
	}
	e.d.Log.Infof("connectivity baseline: %d of %d live node(s) answered; each is checked after its restart", len(conn.unchecked), len(live))
	return conn, nil
}

// trafficTarget resolves --verify-traffic NAMESPACE/NAME to its ClusterIP
// and first TCP port.
func trafficTarget(ctx context.Context, e *env, o ConnectivityOptions) (*verify.Traffic, error) {
	ns, name, _ := strings.Cut(o.Traffic, "/")
	svc, err := e.d.Kube.Services(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("--verify-traffic: get service %s: %w (the kubeconfig user needs get on services there, see roles/kpsync/files/rbac.yaml)", o.Traffic, err)
	}
	ip := svc.Spec.ClusterIP
	if ip == "" || ip == corev1.ClusterIPNone {
		return nil, fmt.Errorf("--verify-traffic: service %s has no ClusterIP (headless?): pick a Service with a ClusterIP and ready endpoints", o.Traffic)
	}
	for _, p := range svc.Spec.Ports {
		if p.Protocol == "" || p.Protocol == corev1.ProtocolTCP {
			if p.NodePort == 0 && slices.Contains(o.TrafficPaths, verify.PathNodePort) {
				return nil, fmt.Errorf("--verify-traffic-paths nodeport: service %s (type %s) has no node port on its TCP port %d: pick a NodePort or LoadBalancer Service, or leave nodeport out", o.Traffic, svc.Spec.Type, p.Port)
			}
			return &verify.Traffic{Pods: e.d.Kube.Pods(e.o.Namespace), Namespace: e.o.Namespace, Image: o.TrafficImage,
				PodImage: o.TrafficPodImage, Paths: o.TrafficPaths, NodePort: p.NodePort, NodeIP: nodeIP(e, ip),
				Service: o.Traffic, Target: net.JoinHostPort(ip, strconv.Itoa(int(p.Port))), Timeout: o.TrafficTimeout,
				Made: o.serviceMade}, nil
		}
	}
	return nil, fmt.Errorf("--verify-traffic: service %s has no TCP port", o.Traffic)
}

// nodeIP returns a node's InternalIP of the ClusterIP's family (what
// kube-proxy takes as the node's primary IP, the NodePort address every
// mode serves by default).
func nodeIP(e *env, clusterIP string) func(ctx context.Context, node string) (string, error) {
	v6 := strings.Contains(clusterIP, ":")
	return func(ctx context.Context, node string) (string, error) {
		n, err := e.d.Kube.Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return "", fmt.Errorf("get node %s for its address: %w (the kubeconfig user needs get on nodes, see roles/kpsync/files/rbac.yaml)", node, err)
		}
		for _, a := range n.Status.Addresses {
			if a.Type == corev1.NodeInternalIP && strings.Contains(a.Address, ":") == v6 {
				return a.Address, nil
			}
		}
		return "", fmt.Errorf("node %s has no InternalIP of the Service's IP family to connect to its NodePort on: leave nodeport out of --verify-traffic-paths", node)
	}
}

// markRestart records when the restart was sent: each node's kube-proxy
// must show a sync after it.
func (c *connectivity) markRestart(at time.Time) {
	if c != nil {
		c.checker.Since = at
	}
}

// markNode records when the run deleted node's old pod: its kube-proxy
// must show a sync after that, also in a canary this run resumed (which
// sent no PATCH to count from).
func (c *connectivity) markNode(node string, at time.Time) {
	if c != nil {
		c.checker.Restarted(node, at)
	}
}

// checkDone checks every node that finished (Ready on the new template)
// since the last call, before the rollout goes on: a node that fails stops
// its canary or zone.
func (rl *rolling) checkDone(ctx context.Context) error {
	c, fleet := rl.conn, rl.fleet
	if c == nil {
		return nil
	}
	// a node finishing or going away lowers the pending count: look only then
	pending := fleet.PendingCount()
	if pending == c.pending && !c.first {
		return nil
	}
	c.pending, c.first = pending, false
	defer func() {
		r := c.checker.Report()
		rl.out.connectivity = &r
	}()
	var finished []string
	for n := range c.unchecked {
		if _, skipped := fleet.Skipped[n]; skipped {
			delete(c.unchecked, n)
		} else if fleet.Done(n) {
			finished = append(finished, n)
		}
	}
	sort.Strings(finished)
	for _, n := range finished {
		delete(c.unchecked, n)
		if err := c.checker.After(ctx, n); err != nil {
			return err
		}
	}
	return nil
}
