//go:build e2e

package realnode

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/util/retry"

	"github.com/kube-proxy-sync/kube-proxy-sync/internal/rollout"
	"github.com/kube-proxy-sync/kube-proxy-sync/test/e2e/cluster"
)

// These tests put the cluster into states the tool must model but does not
// cause: a liveness probe an operator pointed at /healthz, zones, a node
// whose kubelet stops in the middle of a rollout, a run killed while it had
// the DaemonSet's maxUnavailable raised.

// A liveness probe on /healthz kills kube-proxy on a node being deleted (a
// real kubelet acting on kube-proxy's real 503): the control. The binary
// moves it to /livez, and the pod on that node then keeps running.
func TestLivenessProbeOnHealthzMovesToLivezOnARealKubelet(t *testing.T) {
	e := connect(t)
	_, workers := e.nodeNames(t)
	require.NotEmpty(t, workers)
	leaving := workers[0]

	liveness := &corev1.Probe{
		ProbeHandler:  corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/healthz", Port: intstr.FromInt32(healthzPort), Scheme: corev1.URISchemeHTTP}},
		PeriodSeconds: 2, FailureThreshold: 2, TimeoutSeconds: 1, SuccessThreshold: 1,
	}
	e.updateTemplate(t, func(c *corev1.Container) {
		c.LivenessProbe = liveness
		c.ReadinessProbe = &corev1.Probe{
			ProbeHandler:  corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/livez", Port: intstr.FromInt32(healthzPort), Scheme: corev1.URISchemeHTTP}},
			PeriodSeconds: 2, FailureThreshold: 3, TimeoutSeconds: 1, SuccessThreshold: 1,
		}
	})

	e.taint(t, leaving, corev1.Taint{Key: toBeDeletedTaint, Value: strconv.FormatInt(time.Now().Unix(), 10), Effect: corev1.TaintEffectNoSchedule})
	e.waitHTTP(t, leaving, healthzPort, "/healthz", 503, 30*time.Second)
	// the control: the kubelet kills kube-proxy for its 503
	err := wait.PollUntilContextTimeout(context.Background(), 500*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		p, ok := e.pods(t, ctx)[leaving]
		return ok && restarts(&p) > 0, nil
	})
	require.NoError(t, err, "a liveness probe on /healthz must make the kubelet restart kube-proxy on a node being deleted: %s", e.describePods(t))

	before := e.pods(t, ctxFor(t, 30*time.Second))[leaving]
	r := e.sync(t)
	require.Equal(t, 0, r.code, "%s", r)
	assert.Equal(t, true, r.field("probe_changed"), "%s", r)
	assert.Equal(t, "/livez", e.livenessPath(t), "the liveness probe moved to /livez")

	// the leaving node's pod is replaced (by the controller: it was
	// unavailable) with one on /livez, which the kubelet leaves running
	var p corev1.Pod
	err = wait.PollUntilContextTimeout(context.Background(), 500*time.Millisecond, rolloutTimeout, true, func(ctx context.Context) (bool, error) {
		var ok bool
		p, ok = e.pods(t, ctx)[leaving]
		return ok && p.UID != before.UID && livenessPathOf(&p) == "/livez" && p.Status.Phase == corev1.PodRunning, nil
	})
	require.NoError(t, err, "the leaving node gets a pod with the /livez liveness probe: %s", e.describePods(t))
	window := 3 * time.Duration(liveness.PeriodSeconds*liveness.FailureThreshold) * time.Second
	assert.True(t, noRestartsFor(t, e, leaving, p.UID, window), "kube-proxy on the leaving node must not be restarted by a /livez liveness probe within %s: %s", window, e.describePods(t))
}

// --strategy zonal on real kubelets: one zone at a time, the next zone's
// first old pod goes only once every node of the zone before runs a Ready
// kube-proxy of the new template.
func TestZonalRolloutOnRealNodes(t *testing.T) {
	e := connect(t)
	cp, workers := e.nodeNames(t)
	require.Len(t, workers, 2)
	const label = "topology.kubernetes.io/zone"
	zoneOf := map[string]string{cp: "zone-a", workers[0]: "zone-b", workers[1]: "zone-b"}
	for n, z := range zoneOf {
		e.labelNode(t, n, label, z)
	}
	t.Cleanup(func() {
		for n := range zoneOf {
			e.labelNode(t, n, label, "")
		}
	})
	before := e.podUIDs(t)
	tl := e.watchTimeline(t, before)
	r := e.sync(t, "--strategy", "zonal", "--zone-label", label, "--restart", "always", "--timeout", "4m")
	require.Equal(t, 0, r.code, "%s", r)
	events := tl.stop()

	zones, _ := r.field("rollout.zones").([]any)
	require.Len(t, zones, 2, "%s", r)
	var order []string
	for _, z := range zones {
		order = append(order, fmt.Sprint(z.(map[string]any)["name"]))
	}
	assert.ElementsMatch(t, []string{"zone-a", "zone-b"}, order)
	after := e.podUIDs(t)
	for n, uid := range before {
		assert.NotEqual(t, uid, after[n], "node %s: its pod was replaced", n)
	}
	// in the watch's order: no old pod of zone i+1 goes before every node
	// of zone i is Ready on a new pod
	for i := 1; i < len(order); i++ {
		lastReady := -1
		for n, z := range zoneOf {
			if z == order[i-1] {
				at, ok := events.readyAt[n]
				require.True(t, ok, "node %s of zone %s never ran a Ready new pod", n, z)
				lastReady = max(lastReady, at)
			}
		}
		for n, z := range zoneOf {
			if z == order[i] {
				at, ok := events.goneAt[n]
				require.True(t, ok, "node %s of zone %s: its old pod never went", n, z)
				assert.Greater(t, at, lastReady, "node %s of %s lost its pod before zone %s was done", n, z, order[i-1])
			}
		}
	}
	assert.LessOrEqual(t, events.maxDown, 1, "at most the batch size (maxUnavailable 1) without a Ready kube-proxy at once")
}

// A node whose kubelet stops in the middle of a rollout, before the
// rollout reaches it, goes Unknown: the run stops waiting for it, reports
// it skipped and finishes the other nodes, instead of running into the
// progress deadline and rolling everything back. Under a rolling update
// the DaemonSet controller counts that node's unready pod against
// maxUnavailable (kubeadm's 1), so the run raises it for the node.
func TestNodeGoingAwayDuringTheWaitIsSkipped(t *testing.T) {
	for _, strategy := range []string{"canary", "rolling"} {
		t.Run(strategy, func(t *testing.T) {
			e := connect(t)
			d := e.dockerOrSkip(t)
			_, workers := e.nodeNames(t)
			require.Len(t, workers, 2)
			// each node takes 10s to count as available, so the rollout is
			// still on its first node when the kubelet stops
			e.setMinReadySeconds(t, 10)
			before := e.podUIDs(t)

			args := []string{"--strategy", strategy, "--restart", "always", "--timeout", "5m"}
			if strategy == "canary" {
				args = append(args, "--canary-nodes", "1", "--batch-size", "1")
			}
			cmd, out := e.start(t, args...)
			// once a first node has a new pod, stop the kubelet of a worker
			// the rollout has not reached
			victim := ""
			err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
				pods := e.pods(t, ctx)
				started := false
				for n, p := range pods {
					started = started || p.UID != before[n]
				}
				if !started {
					return false, nil
				}
				for _, w := range workers {
					if p, ok := pods[w]; ok && p.UID == before[w] {
						victim = w
					}
				}
				return true, nil
			})
			require.NoError(t, err, "the rollout never started: %s", e.describePods(t))
			require.NotEmpty(t, victim, "a worker not reached yet: %s", e.describePods(t))
			d.stopKubelet(t, victim)
			code := wait4(t, cmd)
			r := out.result(t, code)
			require.Equal(t, 0, r.code, "%s", r)
			skipped, _ := r.field("rollout.skipped_nodes").([]any)
			var names []string
			for _, s := range skipped {
				names = append(names, fmt.Sprint(s.(map[string]any)["name"]))
			}
			assert.Equal(t, []string{victim}, names, "the node whose kubelet stopped is skipped: %s", r)
			after := e.podUIDs(t)
			for n, uid := range before {
				if n != victim {
					assert.NotEqual(t, uid, after[n], "node %s: replaced", n)
				}
			}
			assert.NotEqual(t, true, r.field("rolled_back"), "nothing rolled back: %s", r)
			assert.Empty(t, e.daemonSet(t).Annotations[rollout.StrategyAnnotation], "the DaemonSet's own strategy is back")
		})
	}
}

// A run killed while it had maxUnavailable raised (a node going away held
// a pod that was not Ready) leaves the raise and its saved original in the
// DaemonSet; the next run puts the original back.
func TestNextRunRestoresARaisedMaxUnavailableAfterAKill(t *testing.T) {
	e := connect(t)
	d := e.dockerOrSkip(t)
	_, workers := e.nodeNames(t)
	require.Len(t, workers, 2)
	down := workers[len(workers)-1]
	orig := e.daemonSet(t).Spec.UpdateStrategy
	require.Equal(t, appsv1.RollingUpdateDaemonSetStrategyType, orig.Type)
	e.setMinReadySeconds(t, 10)

	// a node going away whose kube-proxy is not Ready: its kubelet stopped,
	// the node controller marks the node NotReady and the pod unready
	d.stopKubelet(t, down)
	err := wait.PollUntilContextTimeout(context.Background(), time.Second, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		p, ok := e.pods(t, ctx)[down]
		return ok && !cluster.PodReady(&p), nil
	})
	require.NoError(t, err, "the pod on %s turns unready once its node is NotReady: %s", down, e.describePods(t))

	cmd, _ := e.start(t, "--restart", "always", "--timeout", "5m")
	// kill it once the raise is in the DaemonSet
	var raised *appsv1.DaemonSet
	err = wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		ds, err := e.client.AppsV1().DaemonSets(namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		if ds.Annotations[rollout.StrategyAnnotation] != "" {
			raised = ds
			return true, nil
		}
		return false, nil
	})
	require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
	wait4(t, cmd)
	require.NoError(t, err, "the run raised maxUnavailable: %s", e.describePods(t))
	require.NotNil(t, raised.Spec.UpdateStrategy.RollingUpdate)
	assert.Equal(t, "2", raised.Spec.UpdateStrategy.RollingUpdate.MaxUnavailable.String(), "raised by the one stuck pod")
	ds := e.daemonSet(t)
	require.NotEmpty(t, ds.Annotations[rollout.StrategyAnnotation], "the killed run left the raise")

	// the next run (its Lease is taken over once it expires)
	r := e.sync(t, "--lock-timeout", "2m", "--timeout", "4m")
	require.Equal(t, 0, r.code, "%s", r)
	ds = e.daemonSet(t)
	assert.Empty(t, ds.Annotations[rollout.StrategyAnnotation], "the saved strategy is cleared")
	assert.Equal(t, orig, ds.Spec.UpdateStrategy, "the original updateStrategy is back")
}

func restarts(p *corev1.Pod) int32 {
	var n int32
	for _, cs := range p.Status.ContainerStatuses {
		n += cs.RestartCount
	}
	return n
}

func livenessPathOf(p *corev1.Pod) string {
	for _, c := range p.Spec.Containers {
		if c.Name == name && c.LivenessProbe != nil && c.LivenessProbe.HTTPGet != nil {
			return c.LivenessProbe.HTTPGet.Path
		}
	}
	return ""
}

// noRestartsFor watches one pod for window and reports whether its
// containers stayed without a restart (and the pod stayed).
func noRestartsFor(t *testing.T, e *env, node string, uid types.UID, window time.Duration) bool {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), time.Second, window, true, func(context.Context) (bool, error) {
		// a list of its own: the poll's context ends with the window
		p, ok := e.pods(t, ctxFor(t, 10*time.Second))[node]
		if !ok || p.UID != uid || restarts(&p) > 0 {
			return false, fmt.Errorf("pod on %s: restarted or replaced", node)
		}
		return false, nil
	})
	return wait.Interrupted(err)
}

func (e *env) daemonSet(t *testing.T) *appsv1.DaemonSet {
	t.Helper()
	ds, err := e.client.AppsV1().DaemonSets(namespace).Get(ctxFor(t, 30*time.Second), name, metav1.GetOptions{})
	require.NoError(t, err)
	return ds
}

func (e *env) livenessPath(t *testing.T) string {
	t.Helper()
	for _, c := range e.daemonSet(t).Spec.Template.Spec.Containers {
		if c.Name == name && c.LivenessProbe != nil && c.LivenessProbe.HTTPGet != nil {
			return c.LivenessProbe.HTTPGet.Path
		}
	}
	return ""
}

// setMinReadySeconds slows each node of a rollout down, and puts the
// DaemonSet's own value back at the end. Running pods count as unavailable
// until they have been Ready that long, so it waits for that first.
func (e *env) setMinReadySeconds(t *testing.T, seconds int32) {
	t.Helper()
	prev := e.daemonSet(t).Spec.MinReadySeconds
	set := func(v int32) {
		ctx := ctxFor(t, rolloutTimeout)
		require.NoError(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
			ds, err := e.client.AppsV1().DaemonSets(namespace).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			ds.Spec.MinReadySeconds = v
			_, err = e.client.AppsV1().DaemonSets(namespace).Update(ctx, ds, metav1.UpdateOptions{})
			return err
		}))
		e.waitRolledOut(t, ctx)
	}
	set(seconds)
	t.Cleanup(func() { set(prev) })
}

// labelNode sets (or, with value "", removes) a node label.
func (e *env) labelNode(t *testing.T, node, key, value string) {
	t.Helper()
	v := "null"
	if value != "" {
		v = strconv.Quote(value)
	}
	patch := fmt.Sprintf(`{"metadata":{"labels":{%q:%s}}}`, key, v)
	_, err := e.client.CoreV1().Nodes().Patch(ctxFor(t, 30*time.Second), node, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
	require.NoError(t, err)
}

// timeline is what one pod watch saw, in its order: for each node, the
// event number at which its first pre-run pod began to go, and at which a
// new pod was first Ready; and the most nodes without a Ready pod at once.
type timeline struct {
	goneAt, readyAt map[string]int
	maxDown         int
}

type timelineWatch struct {
	mu   sync.Mutex
	tl   timeline
	stop func() timeline
}

func (e *env) watchTimeline(t *testing.T, before map[string]types.UID) *timelineWatch {
	t.Helper()
	pods := e.client.CoreV1().Pods(namespace)
	tw := &timelineWatch{tl: timeline{goneAt: map[string]int{}, readyAt: map[string]int{}}}
	old := map[types.UID]string{}
	for n, uid := range before {
		old[uid] = n
	}
	ready := map[string]map[types.UID]bool{}
	seq := 0
	stop := cluster.Follow(t, func(ctx context.Context) (watch.Interface, error) {
		list, err := pods.List(ctxFor(t, 30*time.Second), metav1.ListOptions{LabelSelector: podSelector})
		if err != nil {
			return nil, err
		}
		for _, p := range list.Items {
			if cluster.PodReady(&p) && p.DeletionTimestamp == nil {
				ready[p.Spec.NodeName] = map[types.UID]bool{p.UID: true}
			}
		}
		return pods.Watch(ctx, metav1.ListOptions{LabelSelector: podSelector, ResourceVersion: list.ResourceVersion})
	}, func(_ context.Context, ev watch.EventType, p *corev1.Pod) {
		if p.Spec.NodeName == "" {
			return
		}
		seq++
		n := p.Spec.NodeName
		tw.mu.Lock()
		defer tw.mu.Unlock()
		gone := ev == watch.Deleted || p.DeletionTimestamp != nil
		if _, isOld := old[p.UID]; isOld && gone {
			if _, seen := tw.tl.goneAt[n]; !seen {
				tw.tl.goneAt[n] = seq
			}
		}
		if ready[n] == nil {
			ready[n] = map[types.UID]bool{}
		}
		if !gone && cluster.PodReady(p) {
			ready[n][p.UID] = true
			if _, isOld := old[p.UID]; !isOld {
				if _, seen := tw.tl.readyAt[n]; !seen {
					tw.tl.readyAt[n] = seq
				}
			}
		} else {
			delete(ready[n], p.UID)
		}
		downNow := 0
		for node := range before {
			if len(ready[node]) == 0 {
				downNow++
			}
		}
		tw.tl.maxDown = max(tw.tl.maxDown, downNow)
	})
	tw.stop = func() timeline {
		stop()
		tw.mu.Lock()
		defer tw.mu.Unlock()
		return tw.tl
	}
	return tw
}

// runOut collects a started run's output.
type runOut struct {
	stdout, stderr strings.Builder
}

func (o *runOut) result(t *testing.T, code int) run {
	t.Helper()
	r := run{code: code, stderr: o.stderr.String()}
	require.NoError(t, json.Unmarshal([]byte(o.stdout.String()), &r.out), "stdout must be one JSON result\nstdout: %s\nstderr: %s", o.stdout.String(), o.stderr.String())
	return r
}

// start runs the binary in the background (JSON output).
func (e *env) start(t *testing.T, args ...string) (*exec.Cmd, *runOut) {
	t.Helper()
	args = append([]string{"--kubeconfig", e.kubeconfig, "--output", "json"}, args...)
	cmd := exec.Command(e.bin, args...)
	out := &runOut{}
	cmd.Stdout, cmd.Stderr = &out.stdout, &out.stderr
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_, _ = cmd.Process.Wait()
		}
	})
	return cmd, out
}

// wait4 waits for a started run and returns its exit code.
func wait4(t *testing.T, cmd *exec.Cmd) int {
	t.Helper()
	err := cmd.Wait()
	if _, ok := err.(*exec.ExitError); err != nil && !ok {
		t.Fatalf("run kube-proxy-sync: %v", err)
	}
	return cmd.ProcessState.ExitCode()
}

// docker runs commands in the kind node containers (the node name is the
// container name), on the engine DOCKER_HOST names (hack/test/e2e-real.sh sets it).
type docker struct{ e *env }

// dockerOrSkip returns the node-container access, skipping the test when
// the cluster's nodes are not containers this machine's docker runs
// (failing where the tier is required: unavailable).
func (e *env) dockerOrSkip(t *testing.T) docker {
	t.Helper()
	cp, _ := e.nodeNames(t)
	out, err := exec.Command("docker", "inspect", "-f", "{{.State.Running}}", cp).CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "true" {
		unavailable(t, fmt.Sprintf("the nodes are not docker containers here (docker inspect %s: %v %s); the kind cluster of make kind-up has them (hack/test/e2e-real.sh points docker at its engine)",
			cp, err, strings.TrimSpace(string(out))))
	}
	return docker{e}
}

// stopKubelet stops the node's kubelet and, at the end of the test,
// starts it again and waits until the node is Ready.
func (d docker) stopKubelet(t *testing.T, node string) {
	t.Helper()
	out, err := exec.Command("docker", "exec", node, "systemctl", "stop", "kubelet").CombinedOutput()
	require.NoError(t, err, "stop the kubelet of %s: %s", node, out)
	t.Cleanup(func() {
		out, err := exec.Command("docker", "exec", node, "systemctl", "start", "kubelet").CombinedOutput()
		require.NoError(t, err, "start the kubelet of %s again: %s", node, out)
		err = wait.PollUntilContextTimeout(context.Background(), time.Second, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
			n, err := d.e.client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
			if err != nil {
				return false, nil
			}
			for _, c := range n.Status.Conditions {
				if c.Type == corev1.NodeReady {
					return c.Status == corev1.ConditionTrue, nil
				}
			}
			return false, nil
		})
		require.NoError(t, err, "node %s Ready again", node)
	})
}
