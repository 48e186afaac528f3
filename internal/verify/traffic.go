package verify

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/watch"
	watchtools "k8s.io/client-go/tools/watch"
	"k8s.io/utils/clock"
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

// Paths of the traffic check (--verify-traffic-paths): where the
// connection to the Service starts, each a path through kube-proxy's rules
// that a proxy-mode change reprograms on its own. All three modes DNAT in
// two places: in nat OUTPUT for the host's own processes and in nat
// PREROUTING for packets that arrive from an interface (a pod's veth, another
// host). iptables and ipvs jump to KUBE-SERVICES from both chains
// (iptablesJumpChain in pkg/proxy/iptables and pkg/proxy/ipvs); nftables has a
// base chain per hook (nat-output, nat-prerouting, "type nat ... priority
// dstnat", pkg/proxy/nftables/README.md). One can be broken while the other
// works, so each is checked on its own.
const (
	// PathNode connects to the ClusterIP from the node's own network
	// namespace: the OUTPUT hook.
	PathNode = "node"
	// PathPod connects to the ClusterIP from a pod on the node, in the pod
	// network: its packets enter through the PREROUTING hook.
	PathPod = "pod"
	// PathNodePort connects to the Service's NodePort on the node's
	// InternalIP (kube-proxy's primary IP), from the node: the address a
	// mode change gives another meaning (nodePortAddresses unset is every
	// local address in iptables and ipvs mode, the primary IPs in nftables
	// mode; 127.0.0.1 only in iptables mode), and the NodePort rules
	// (KUBE-NODEPORTS, nftables' @nodeport-ips and service-nodeports).
	PathNodePort = "nodeport"
)

// AllPaths lists the paths in the order they are reported.
var AllPaths = []string{PathNode, PathPod, PathNodePort}

// PathLabel on a probe pod names its path.
const PathLabel = "kube-proxy-sync.io/verify-path"

// Traffic connects to a Service from each node, along each of Paths, with
// one short-lived pod per path bound to the node (no scheduler):
//   - node and nodeport: a host-network pod whose container only sleeps
//     (Image: the pause image, already on every node) and whose readiness
//     probe is a TCP connection to the target. The kubelet runs that probe
//     from the node's own network namespace, so the connection goes
//     through the rules kube-proxy programmed on that node; the pod is
//     Ready exactly when the connection succeeded.
//   - pod: a pod in the pod network (PodImage) whose container connects to
//     the ClusterIP itself and exits 0 once it has: the kubelet's probes
//     cannot do this, they always start in the node's network namespace.
type Traffic struct {
	Pods      PodAPI
	Namespace string
	Image     string
	// PodImage runs the pod path's connection: it needs bash or nc.
	PodImage string
	// Service is "namespace/name", for messages; Target its ClusterIP and port.
	Service string
	Target  string
	// NodePort is the Service's node port for the nodeport path; NodeIP
	// returns a node's address to connect to it on.
	NodePort int32
	NodeIP   func(ctx context.Context, node string) (string, error)
	// Paths to check; none is PathNode alone.
	Paths   []string
	Timeout time.Duration
	// Made is when the Service was made (the checker's clock), when this
	// run made it: a kube-proxy that has not synced since does not have
	// it in its rules, and a connection to its ClusterIP would leave the
	// node unrouted (see InRules). Zero for a Service that was there
	// before the run.
	Made time.Time
	// Requests counts the API requests made (create, watch, delete per
	// node and path).
	Requests atomic.Int64
}

// Cleanup deletes probe pods an earlier run left behind (it was killed
// between creating and deleting one) and waits until they are gone, or
// force-deletes them (RemoveProbePods). It returns a warning naming the
// pods it had to force, "" when none.
func (t *Traffic) Cleanup(ctx context.Context, clk clock.Clock) (string, error) {
	r, err := RemoveProbePods(ctx, clk, t.Pods, t.Namespace)
	t.Requests.Add(int64(r.Requests))
	return r.Warning(t.Namespace), err
}

// ProbePodsGone is how long after a probe pod's deletion timestamp (the
// end of its grace period) RemoveProbePods waits for the pod's kubelet to
// confirm it stopped.
const ProbePodsGone = 30 * time.Second

// probePodGrace is the grace period a probe pod is deleted with: not 0,
// so the pod object goes only once the kubelet stopped it, its probes
// included (see RemoveProbePods).
const probePodGrace = 1

// Removal is what RemoveProbePods did.
type Removal struct {
	// Requests counts the API requests made.
	Requests int
	// Forced names the probe pods still there ProbePodsGone after their
	// grace period ended, deleted then with no grace period: their
	// node's kubelet did not confirm they stopped (a NotReady node).
	Forced []string
}

// Warning says which pods were forced, "" when none.
func (r Removal) Warning(namespace string) string {
	if len(r.Forced) == 0 {
		return ""
	}
	return fmt.Sprintf("traffic probe pod(s) %s in %s force-deleted: not gone %s after their grace period ended, their node's kubelet did not confirm they stopped (a NotReady node?); if that node comes back, its kubelet stops them then",
		strings.Join(r.Forced, ", "), namespace, ProbePodsGone)
}

// RemoveProbePods deletes the probe pods in namespace and waits until the
// kubelets have stopped them and they are gone. Before a Service they
// connect to is deleted: a probe the kubelet still makes then goes to a
// ClusterIP no rule translates any more, out of the node unrouted. A pod
// still there ProbePodsGone after its grace period ended (its kubelet
// does not answer) is force-deleted and named in the result, never an
// error: a node gone must not block the runs that come after. Errors are
// the API's, and the context's when it ends first.
//
// The wait is on the tool's clock: for a pod this call deleted, from the
// delete; for one deleted before, from its deletionTimestamp (the API
// server's clock), at most the wait a pod deleted now would get, so that
// a skewed clock neither forces a pod its kubelet is still stopping nor
// waits longer than that.
func RemoveProbePods(ctx context.Context, clk clock.Clock, pods PodAPI, namespace string) (Removal, error) {
	r := Removal{Requests: 1}
	opts := metav1.ListOptions{LabelSelector: ProbeLabel + "=" + ProbeLabelValue}
	list, err := pods.List(ctx, opts)
	if err != nil {
		return r, fmt.Errorf("list the traffic probe pods in %s: %w", namespace, err)
	}
	if len(list.Items) == 0 {
		return r, nil
	}
	const longest = probePodGrace*time.Second + ProbePodsGone
	deleted := map[types.UID]time.Time{}
	for _, p := range list.Items {
		if p.DeletionTimestamp != nil {
			continue
		}
		r.Requests++
		at := clk.Now()
		if ok, err := deleteProbePod(ctx, pods, &p, probePodGrace); err != nil {
			return r, err
		} else if ok {
			deleted[p.UID] = at
		}
	}
	// what is left once deleted: terminating until their kubelets confirm
	r.Requests++
	if list, err = pods.List(ctx, opts); err != nil {
		return r, fmt.Errorf("list the traffic probe pods in %s: %w", namespace, err)
	}
	left := map[types.UID]corev1.Pod{}
	var wait time.Duration
	for _, p := range list.Items {
		if p.DeletionTimestamp == nil || ptr.Deref(p.DeletionGracePeriodSeconds, 1) == 0 {
			// made since the delete (another run's), or forced already
			// and held by a finalizer: its kubelet stops it at once
			continue
		}
		left[p.UID] = p
		d := longest
		if at, ok := deleted[p.UID]; ok {
			d -= clk.Since(at)
		} else {
			d = min(p.DeletionTimestamp.Add(ProbePodsGone).Sub(clk.Now()), longest)
		}
		wait = max(wait, d)
	}
	if len(left) == 0 {
		return r, nil
	}
	if wait > 0 {
		r.Requests++
		opts.ResourceVersion = list.ResourceVersion
		w, err := pods.Watch(ctx, opts)
		if err != nil {
			return r, fmt.Errorf("watch the traffic probe pods in %s until they are gone: %w", namespace, err)
		}
		if err := untilGone(ctx, clk, w, left, wait); err != nil {
			return r, fmt.Errorf("wait for the traffic probe pods in %s to go: %w", namespace, err)
		}
	}
	for _, p := range left {
		r.Requests++
		ok, err := deleteProbePod(ctx, pods, &p, 0)
		if err != nil {
			return r, err
		}
		if ok {
			r.Forced = append(r.Forced, p.Name)
		}
	}
	sort.Strings(r.Forced)
	return r, nil
}

// untilGone follows w until every pod of left is deleted (each one
// deleted is removed from left) or wait has passed. A watch that ends
// early is not an error: the wait runs out, and what is still there then
// is forced (a pod gone meanwhile is not).
func untilGone(ctx context.Context, clk clock.Clock, w watch.Interface, left map[types.UID]corev1.Pod, wait time.Duration) error {
	defer w.Stop()
	timer := clk.NewTimer(wait)
	defer timer.Stop()
	events := w.ResultChan()
	for len(left) > 0 {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-timer.C():
			return nil
		case ev, ok := <-events:
			if !ok || ev.Type == watch.Error {
				events = nil // blocks: the timer ends the wait
				continue
			}
			if p, ok := ev.Object.(*corev1.Pod); ok && ev.Type == watch.Deleted {
				delete(left, p.UID)
			}
		}
	}
	return nil
}

// deleteProbePod deletes p (that pod, by its UID) with the grace period
// given, and says whether it did; one already gone or replaced is not an
// error.
func deleteProbePod(ctx context.Context, pods PodAPI, p *corev1.Pod, grace int64) (bool, error) {
	err := pods.Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To(grace), Preconditions: &metav1.Preconditions{UID: ptr.To(p.UID)}})
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("delete the traffic probe pod %s/%s: %w", p.Namespace, p.Name, err)
	}
	return true, nil
}

// PathsChecked are the paths Check takes.
func (t *Traffic) PathsChecked() []string {
	if len(t.Paths) == 0 {
		return []string{PathNode}
	}
	return t.Paths
}

// Check connects along every path from node, at once, and returns an
// error naming each path that failed ("path pod: ...; path nodeport: ...").
func (t *Traffic) Check(ctx context.Context, node string) error {
	paths := t.PathsChecked()
	errs := make([]error, len(paths))
	var wg sync.WaitGroup
	for i, path := range paths {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := t.check(ctx, node, path); err != nil {
				errs[i] = fmt.Errorf("path %s: %w", path, err)
			}
		}()
	}
	wg.Wait()
	var failed []string
	for _, err := range errs {
		if err != nil {
			failed = append(failed, err.Error())
		}
	}
	if len(failed) == 0 {
		return nil
	}
	// one line: it is a node's detail in the result
	return errors.New(strings.Join(failed, "; "))
}

// pathHint says where to look when a path does not connect.
var pathHint = map[string]string{
	PathNode: "the node's own connections: look at kube-proxy's nat OUTPUT rules on the node and its log",
	PathPod:  "connections from pods: look at kube-proxy's nat PREROUTING rules on the node, its log, and the CNI's rules",
	PathNodePort: "the NodePort on the node's InternalIP: nodePortAddresses must include that address; " +
		"look at kube-proxy's NodePort rules on the node and its log",
}

// ErrCannotRun marks a probe pod that will never run or cannot connect
// with its image: the image's fault, not the path's.
var ErrCannotRun = errors.New("cannot run")

// InRules returns once node's kube-proxy has the run's own Service in its
// rules (Made is set), proven by the nodeport path's connection from the
// node to its own address and the NodePort: that connection never leaves
// the node, translated or not (refused or dropped there until a rule
// takes it), and one sync writes a Service's NodePort and ClusterIP rules
// together (one iptables-restore, one nftables transaction; ipvs binds
// the ClusterIP before the NodePort). A connection to the ClusterIP, from
// the node or a pod on it, before that sync leaves the node unrouted, and
// its retransmissions follow it even once the rule is there (conntrack).
// kube-proxy's /healthz cannot say as much: a sync that began before the
// Service reached it may end after the Service was made (WaitSync).
// Without the nodeport path (left out by the operator, perhaps because
// nodePortAddresses leaves out the node's InternalIP), or for a Service
// that was there before the run, it returns at once.
func (t *Traffic) InRules(ctx context.Context, node string) error {
	if t.Made.IsZero() || !slices.Contains(t.PathsChecked(), PathNodePort) {
		return nil
	}
	if err := t.check(ctx, node, PathNodePort); err != nil {
		return fmt.Errorf("path nodeport, tried first so that no connection to the ClusterIP leaves the node before the Service is in its rules: %w", err)
	}
	return nil
}

// Preflight runs the pod path once from node before any restart, when it
// is asked: an image that is not on the node or has no client to connect
// with is an error then, before the first node's restart rather than
// failing it. A connection that does not succeed is returned as warning:
// the path is broken already, so the check after the restart will fail too.
func (t *Traffic) Preflight(ctx context.Context, node string) (warning string, err error) {
	if !slices.Contains(t.PathsChecked(), PathPod) {
		return "", nil
	}
	err = t.check(ctx, node, PathPod)
	switch {
	case err == nil:
		return "", nil
	case errors.Is(err, ErrCannotRun) || ctx.Err() != nil:
		return "", err
	}
	return err.Error(), nil
}

// check runs the probe pod of one path on node and waits for its verdict.
func (t *Traffic) check(ctx context.Context, node, path string) error {
	target, from := t.Target, "from node "+node
	if path == PathNodePort {
		if t.NodePort == 0 || t.NodeIP == nil {
			return fmt.Errorf("service %s has no node port: pick a NodePort or LoadBalancer Service, or leave nodeport out of --verify-traffic-paths", t.Service)
		}
		t.Requests.Add(1)
		ip, err := t.NodeIP(ctx, node)
		if err != nil {
			return err
		}
		target = net.JoinHostPort(ip, strconv.Itoa(int(t.NodePort)))
	} else if path == PathPod {
		from = "from a pod on node " + node
	}
	host, port, err := net.SplitHostPort(target)
	if err != nil {
		return fmt.Errorf("traffic check target %q: %w", target, err)
	}
	p, err := strconv.Atoi(port)
	if err != nil {
		return fmt.Errorf("traffic check target %q: %w", target, err)
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "kube-proxy-sync-verify-" + path + "-", Namespace: t.Namespace,
			Labels: map[string]string{ProbeLabel: ProbeLabelValue, PathLabel: path}},
		Spec: corev1.PodSpec{
			NodeName:                      node,
			HostNetwork:                   path != PathPod,
			RestartPolicy:                 corev1.RestartPolicyNever,
			TerminationGracePeriodSeconds: ptr.To(int64(0)),
			AutomountServiceAccountToken:  ptr.To(false),
			EnableServiceLinks:            ptr.To(false),
			Tolerations:                   []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
		},
	}
	image := t.Image
	if path == PathPod {
		image = t.PodImage
		pod.Spec.Containers = []corev1.Container{{
			Name: "connect", Image: image, ImagePullPolicy: corev1.PullIfNotPresent,
			Command: []string{"/bin/sh", "-c", connectScript, "connect", host, port},
		}}
	} else {
		pod.Spec.Containers = []corev1.Container{{
			Name: "connect", Image: image, ImagePullPolicy: corev1.PullIfNotPresent,
			ReadinessProbe: &corev1.Probe{
				ProbeHandler:  corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Host: host, Port: intstr.FromInt32(int32(p))}},
				PeriodSeconds: 1, TimeoutSeconds: 2, SuccessThreshold: 1, FailureThreshold: 1,
			},
		}}
	}
	imageFlag := "--verify-traffic-image"
	if path == PathPod {
		imageFlag = "--verify-traffic-pod-image"
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
		_ = t.Pods.Delete(dctx, created.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To(int64(probePodGrace)),
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
		if path == PathPod && p.Status.Phase == corev1.PodSucceeded {
			return true, nil
		}
		if why := cannotRun(p); why != "" {
			return false, fmt.Errorf("probe pod %s on node %s %w (image %s): %s; pass %s with an image present on the nodes", p.Name, node, ErrCannotRun, image, why, imageFlag)
		}
		return path != PathPod && podReady(p), nil
	})
	if err == nil {
		return nil
	}
	if wctx.Err() != nil && ctx.Err() == nil {
		if running(last) {
			return fmt.Errorf("no TCP connection to Service %s (%s) %s within %s (%s)", t.Service, target, from, t.Timeout, pathHint[path])
		}
		return fmt.Errorf("the traffic probe pod %s on node %s did not start within %s", created.Name, node, t.Timeout)
	}
	return err
}

// connectScript connects to $1:$2 until it can, with whichever client the
// image has: bash's /dev/tcp, else nc. Without either it says so in its
// termination message and exits 3, which the check reports as the image's
// fault, not the path's.
const connectScript = `h=$1 p=$2 t=
command -v timeout >/dev/null 2>&1 && t="timeout 3"
if command -v bash >/dev/null 2>&1; then
  until $t bash -c 'exec 3<>"/dev/tcp/$0/$1"' "$h" "$p" 2>/dev/null; do sleep 1; done
elif command -v nc >/dev/null 2>&1; then
  until $t nc -z -w 2 "$h" "$p" 2>/dev/null; do sleep 1; done
else
  echo "the image has neither bash nor nc to connect with" >/dev/termination-log
  exit 3
fi
`

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
	for _, cs := range p.Status.ContainerStatuses {
		if x := cs.State.Terminated; x != nil && x.ExitCode != 0 {
			return strings.TrimSuffix(fmt.Sprintf("its container exited %d (%s): %s", x.ExitCode, x.Reason, strings.TrimSpace(x.Message)), ": ")
		}
	}
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
