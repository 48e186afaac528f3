package kpsync

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/watch"
	k8stesting "k8s.io/client-go/testing"

	"github.com/kube-proxy-sync/kube-proxy-sync/internal/kpconfig"
	"github.com/kube-proxy-sync/kube-proxy-sync/internal/verify"
)

// setKernel writes a node's kernel version, as its kubelet reports it.
func (f *rollingFixture) setKernel(t *testing.T, node, kernel string) {
	t.Helper()
	n, err := f.client.CoreV1().Nodes().Get(context.Background(), node, metav1.GetOptions{})
	require.NoError(t, err)
	n.Status.NodeInfo.KernelVersion = kernel
	_, err = f.client.CoreV1().Nodes().UpdateStatus(context.Background(), n, metav1.UpdateOptions{})
	require.NoError(t, err)
}

// A move to nftables while a node the DaemonSet runs on has a kernel older
// than 5.13 is refused before any write, naming the node and its kernel;
// a kernel that does not parse is reported, not judged; the container's
// own skip of kube-proxy's check skips it here too.
func TestModeChangeOntoNFTablesChecksEveryNodesKernel(t *testing.T) {
	f := newRollingFixture(t, 3)
	f.setKernel(t, "node-0", "6.8.0-49-generic")
	f.setKernel(t, "node-1", "4.18.0-553.el8_10.x86_64")
	f.setKernel(t, "node-2", "kwok-0.8.0")
	_, err := f.run(t, Options{Spec: setMode("nftables")})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "node-1 (kernel 4.18.0-553.el8_10.x86_64)")
	assert.NotContains(t, err.Error(), "node-0")
	assert.Contains(t, err.Error(), "nothing was written")
	assert.Empty(t, f.writes())

	f.setKernel(t, "node-1", "5.14.0-427.el9.x86_64")
	res, err := f.run(t, Options{Spec: setMode("nftables"), Check: true})
	require.NoError(t, err)
	require.NotNil(t, res.Facts.Migration)
	assert.True(t, hasWarning(res, `node-2 ("kwok-0.8.0")`), "warnings: %v", res.Warnings)
}

func TestModeChangeKernelCheckSkippedAsKubeProxySkipsIt(t *testing.T) {
	f := newRollingFixture(t, 2)
	f.setKernel(t, "node-0", "5.4.0-200-generic")
	ds := f.daemonSet(t)
	ds.Spec.Template.Spec.Containers[0].Env = []corev1.EnvVar{{Name: skipKernelCheckEnvVar, Value: "1"}}
	_, err := f.client.AppsV1().DaemonSets("kube-system").Update(context.Background(), ds, metav1.UpdateOptions{})
	require.NoError(t, err)
	res, err := f.run(t, Options{Spec: setMode("nftables"), Check: true})
	require.NoError(t, err)
	assert.True(t, hasWarning(res, skipKernelCheckEnvVar), "warnings: %v", res.Warnings)
}

// fleetWithAnUnreachableNode is 3 nodes whose kube-proxies answer but
// node-2's, which the node proxy cannot reach.
func fleetWithAnUnreachableNode(t *testing.T) *rollingFixture {
	f := newRollingFixture(t, 3)
	f.prober = proberFunc(func(node string) (verify.Health, error) {
		if node == "node-2" {
			return verify.Health{}, errors.New("dial tcp 10.0.0.2:10256: connect: no route to host")
		}
		return verify.Health{Code: 200}, nil
	})
	f.podController(t, func(node, gen string) *corev1.Pod { return kubeProxyPod(node, gen, true) })
	return f
}

// By default a migration checks every node: one whose kube-proxy cannot
// be asked stops it before any pod is replaced. --verify-health auto is
// the operator accepting such a node: it is reported and the migration
// goes on.
func TestModeChangeStopsOnANodeThatCannotBeChecked(t *testing.T) {
	f := fleetWithAnUnreachableNode(t)
	res, err := f.run(t, Options{Spec: setMode("nftables"), RollbackOnFailure: true, Timeout: 10 * time.Second})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "node-2")
	require.NotNil(t, res.Facts.Migration)
	assert.Equal(t, verify.Required, res.Facts.Migration.VerifyHealth)
	for _, n := range []string{"node-0", "node-1", "node-2"} {
		assert.Equal(t, types.UID(n+"-1"), f.podUID(t, "kube-proxy-"+n+"-1"), "node %s kept its pod", n)
	}
	// the traffic check's own Service: made before the first write,
	// deleted when the run ended, though it failed
	w := f.writes()
	require.NotEmpty(t, w)
	assert.Equal(t, "create services", w[0], "the Service made before any other write: %v", w)
	w = slices.DeleteFunc(w, func(v string) bool { return v == "create events" }) // the run's report
	assert.Equal(t, "delete services", w[len(w)-1], "deleted when the run ends: %v", w)
	_, err = f.client.CoreV1().Services("kube-system").Get(context.Background(), ProbeServiceName, metav1.GetOptions{})
	assert.True(t, apierrors.IsNotFound(err), "no Service left behind: %v", err)
}

func TestModeChangeAcceptsAnUncheckedNodeWhenAsked(t *testing.T) {
	f := fleetWithAnUnreachableNode(t)
	res, err := f.run(t, Options{Spec: setMode("nftables"), Connectivity: ConnectivityOptions{Health: verify.Auto, Traffic: TrafficNone}, RollbackOnFailure: true, Timeout: 10 * time.Second})
	require.NoError(t, err)
	require.NotNil(t, res.Facts.Connectivity)
	assert.Equal(t, 2, res.Facts.Connectivity.Passed)
	assert.Equal(t, verify.Auto, res.Facts.Migration.VerifyHealth)
}

// The run's own Service selects kube-proxy's pods on the healthz port the
// new config gives them, and is a NodePort Service; a config whose
// kube-proxy serves healthz on loopback only is refused before any write.
func TestModeChangeOwnServiceTargetsKubeProxysHealthzPort(t *testing.T) {
	f := newRollingFixture(t, 2)
	var made *corev1.Service
	f.client.PrependReactor("create", "services", func(a k8stesting.Action) (bool, runtime.Object, error) {
		made = a.(k8stesting.CreateAction).GetObject().(*corev1.Service).DeepCopy()
		return false, nil, nil
	})
	f.prober = proberFunc(func(string) (verify.Health, error) { return verify.Health{}, errors.New("unreachable") })
	_, err := f.run(t, Options{Spec: setMode("nftables", kpconfig.Setting{Path: "healthzBindAddress", Value: "0.0.0.0:10266"})})
	require.Error(t, err, "the baseline fails: every node unreachable")
	require.NotNil(t, made)
	assert.Equal(t, corev1.ServiceTypeNodePort, made.Spec.Type)
	assert.Equal(t, f.daemonSet(t).Spec.Selector.MatchLabels, made.Spec.Selector)
	require.Len(t, made.Spec.Ports, 1)
	assert.EqualValues(t, 10266, made.Spec.Ports[0].Port)
	assert.Equal(t, intstr.FromInt32(10266), made.Spec.Ports[0].TargetPort)
	// a node's connections reach its own kube-proxy only
	require.NotNil(t, made.Spec.InternalTrafficPolicy)
	assert.Equal(t, corev1.ServiceInternalTrafficPolicyLocal, *made.Spec.InternalTrafficPolicy)
	assert.Equal(t, corev1.ServiceExternalTrafficPolicyLocal, made.Spec.ExternalTrafficPolicy)

	loopback := newRollingFixture(t, 2)
	_, err = loopback.run(t, Options{Spec: setMode("nftables", kpconfig.Setting{Path: "healthzBindAddress", Value: "127.0.0.1:10256"})})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "--verify-traffic NAMESPACE/NAME")
	assert.Empty(t, loopback.writes())
}

// A move to nftables on a cluster with thousands of Services warns that
// each node's first full sync takes minutes, from one LIST of one item.
func TestModeChangeOntoNFTablesCountsTheServices(t *testing.T) {
	for _, tc := range []struct {
		remaining int64
		warned    bool
	}{{4998, false}, {44124, true}} {
		f := newRollingFixture(t, 2)
		f.client.PrependReactor("list", "services", func(a k8stesting.Action) (bool, runtime.Object, error) {
			l := a.(k8stesting.ListAction)
			require.Equal(t, "", l.GetNamespace(), "every namespace")
			r := tc.remaining
			return true, &corev1.ServiceList{ListMeta: metav1.ListMeta{RemainingItemCount: &r}, Items: []corev1.Service{{}}}, nil
		})
		res, err := f.run(t, Options{Spec: setMode("nftables"), Check: true})
		require.NoError(t, err)
		assert.Equal(t, tc.warned, hasWarning(res, fmt.Sprintf("the cluster holds %d Services", tc.remaining+1)), "%d: %v", tc.remaining+1, res.Warnings)
	}
}

// A Service of that name that is not the tool's is never deleted: the run
// refuses before any write.
func TestModeChangeLeavesAServiceOfThatNameThatIsNotItsOwn(t *testing.T) {
	f := fleetWithAnUnreachableNode(t)
	theirs := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: ProbeServiceName, Namespace: "kube-system", UID: "theirs"}}
	_, err := f.client.CoreV1().Services("kube-system").Create(context.Background(), theirs, metav1.CreateOptions{})
	require.NoError(t, err)
	f.client.ClearActions()
	_, err = f.run(t, Options{Spec: setMode("nftables")})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "is not kube-proxy-sync's")
	assert.Empty(t, f.writes())
	svc, err := f.client.CoreV1().Services("kube-system").Get(context.Background(), ProbeServiceName, metav1.GetOptions{})
	require.NoError(t, err)
	assert.EqualValues(t, "theirs", svc.UID)
}

// probeStatuses are what the kubelet reports of a probe pod: ready (a node
// or nodeport path's TCP probe passes), connected (the pod path's pod
// connected and exited 0), noShell (the pod path's image has no shell).
func probeStatuses() (ready, connected, noShell corev1.PodStatus) {
	ready = corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}},
		ContainerStatuses: []corev1.ContainerStatus{{Name: "connect", Ready: true, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}}}
	connected = corev1.PodStatus{Phase: corev1.PodSucceeded}
	noShell = corev1.PodStatus{Phase: corev1.PodFailed, ContainerStatuses: []corev1.ContainerStatus{{Name: "connect",
		State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 128, Reason: "StartError",
			Message: `exec: "/bin/sh": stat /bin/sh: no such file or directory`}}}}}
	return ready, connected, noShell
}

// probeKubelet plays the kubelet for the traffic check's probe pods: each
// gets the status status(path) once its watch is open; images records the
// image of each, by path.
func (f *rollingFixture) probeKubelet(t *testing.T, status func(path string) corev1.PodStatus) (images func() map[string][]string) {
	t.Helper()
	var mu sync.Mutex
	seen := map[string][]string{}
	n := 0
	f.client.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		p := a.(k8stesting.CreateAction).GetObject().(*corev1.Pod)
		if p.Labels[verify.ProbeLabel] == verify.ProbeLabelValue {
			mu.Lock()
			n++
			p.Name = fmt.Sprintf("%s%d", p.GenerateName, n)
			// the fake's pod watches are not filtered by label: the
			// DaemonSet's pod watch sees the probe pods too, and needs a
			// resourceVersion on each
			p.ResourceVersion = fmt.Sprint(1000 + n)
			seen[p.Labels[verify.PathLabel]] = append(seen[p.Labels[verify.PathLabel]], p.Spec.Containers[0].Image)
			mu.Unlock()
		}
		return false, nil, nil
	})
	f.client.PrependWatchReactor("pods", func(a k8stesting.Action) (bool, watch.Interface, error) {
		name, ok := a.(k8stesting.WatchAction).GetWatchRestrictions().Fields.RequiresExactMatch("metadata.name")
		if !ok || !strings.HasPrefix(name, "kube-proxy-sync-verify-") {
			return false, nil, nil
		}
		obj, err := f.client.Tracker().Get(podsGVR, "kube-system", name)
		if err != nil {
			return true, nil, err
		}
		p := obj.(*corev1.Pod).DeepCopy()
		p.Status = status(p.Labels[verify.PathLabel])
		w := watch.NewFake()
		go w.Modify(p)
		return true, w, nil
	})
	for i := range f.n {
		node := fmt.Sprintf("node-%d", i)
		n, err := f.client.CoreV1().Nodes().Get(context.Background(), node, metav1.GetOptions{})
		require.NoError(t, err)
		n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: fmt.Sprintf("10.0.0.%d", i+1)}}
		_, err = f.client.CoreV1().Nodes().UpdateStatus(context.Background(), n, metav1.UpdateOptions{})
		require.NoError(t, err)
	}
	return func() map[string][]string {
		mu.Lock()
		defer mu.Unlock()
		return maps.Clone(seen)
	}
}

// A migration with default flags checks all three paths on every node,
// the pod path from a pod running the image kube-proxy runs before the
// change (every node has it). An image that cannot connect from the pod
// network (no shell, as upstream's distroless kube-proxy) is found once,
// before any restart: the pod path is left out with a warning that says
// what to pass, the result says the two paths checked, and the migration
// goes on.
func TestModeChangeChecksThePodPathFromKubeProxysImage(t *testing.T) {
	ready, connected, noShell := probeStatuses()
	for _, c := range []struct {
		name     string
		pod      corev1.PodStatus
		paths    []string
		podPods  int
		warnLeft bool
	}{
		{"an image with a shell", connected, verify.AllPaths, 4, false}, // once before, then each of 3 nodes
		{"an image without", noShell, []string{verify.PathNode, verify.PathNodePort}, 1, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := newRollingFixture(t, 3)
			f.prober = proberFunc(func(string) (verify.Health, error) { return verify.Health{Code: 200}, nil })
			f.podController(t, func(node, gen string) *corev1.Pod { return kubeProxyPod(node, gen, true) })
			images := f.probeKubelet(t, func(path string) corev1.PodStatus {
				if path == verify.PathPod {
					return c.pod
				}
				return ready
			})
			res, err := f.run(t, Options{Spec: setMode("nftables"), RollbackOnFailure: true, Timeout: time.Minute})
			require.NoError(t, err)
			require.NotNil(t, res.Facts.Connectivity)
			assert.Equal(t, 3, res.Facts.Connectivity.Passed)
			assert.Equal(t, c.paths, res.Facts.Connectivity.TrafficPaths)
			assert.Equal(t, c.paths, res.Facts.Migration.VerifyTrafficPaths, "the migration's plan says what was checked")
			pods := images()[verify.PathPod]
			assert.Len(t, pods, c.podPods)
			for _, image := range pods {
				assert.Equal(t, "registry.k8s.io/kube-proxy:v1.33.6", image, "the image the fleet ran before")
			}
			assert.Len(t, images()[verify.PathNodePort], 3, "every node's NodePort")
			assert.Equal(t, c.warnLeft, hasWarning(res, "leaves out the pod path (PREROUTING)"), "warnings: %v", res.Warnings)
			if c.warnLeft {
				assert.True(t, hasWarning(res, "--verify-traffic-pod-image"), "says what to pass: %v", res.Warnings)
			}
			for i := range 3 {
				n := fmt.Sprintf("node-%d", i)
				assert.Empty(t, f.podUID(t, "kube-proxy-"+n+"-1"), "node %s: its old pod replaced", n)
			}
		})
	}
}

// A migration with a pod image to connect from checks all three paths
// through the run's own Service on every node: the pod path is tried once
// before any restart, once the Service is in that node's kube-proxy's
// rules (its /healthz shows a sync since), then on each node after its
// restart. An image that cannot connect stops the run before any restart.
func TestModeChangeChecksThePodPathWithTheImageGiven(t *testing.T) {
	ready, connected, noShell := probeStatuses()
	for _, c := range []struct {
		name    string
		pod     corev1.PodStatus
		podPods int
		fails   bool
	}{
		{"an image with a shell", connected, 4, false}, // once before, then each of 3 nodes
		{"an image without", noShell, 1, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := newRollingFixture(t, 3)
			f.prober = proberFunc(func(string) (verify.Health, error) { return verify.Health{Code: 200}, nil })
			f.podController(t, func(node, gen string) *corev1.Pod { return kubeProxyPod(node, gen, true) })
			images := f.probeKubelet(t, func(path string) corev1.PodStatus {
				if path == verify.PathPod {
					return c.pod
				}
				return ready
			})
			res, err := f.run(t, Options{Spec: setMode("nftables"), RollbackOnFailure: true, Timeout: time.Minute,
				Connectivity: ConnectivityOptions{TrafficPodImage: "example.test/agent:1"}})
			pods := images()[verify.PathPod]
			assert.Len(t, pods, c.podPods)
			for _, image := range pods {
				assert.Equal(t, "example.test/agent:1", image)
			}
			if c.fails {
				require.Error(t, err)
				assert.Contains(t, err.Error(), "nothing was restarted")
				for i := range 3 {
					n := fmt.Sprintf("node-%d", i)
					assert.Equal(t, types.UID(n+"-1"), f.podUID(t, "kube-proxy-"+n+"-1"), "node %s: no pod replaced", n)
				}
				return
			}
			require.NoError(t, err)
			require.NotNil(t, res.Facts.Connectivity)
			assert.Equal(t, 3, res.Facts.Connectivity.Passed)
			assert.Equal(t, verify.AllPaths, res.Facts.Connectivity.TrafficPaths)
			assert.Equal(t, verify.AllPaths, res.Facts.Migration.VerifyTrafficPaths)
			assert.Len(t, images()[verify.PathNodePort], 3, "every node's NodePort")
		})
	}
}

// The pod path's try before any restart connects to the run's own Service
// only once the node's kube-proxy shows a sync since the Service was made:
// a connection before its rules have the Service would leave the node
// unrouted (the kind tier counts such packets). Here node-0's kube-proxy
// reports an old sync twice more after the baseline, then a new one.
func TestModeChangePodPathWaitsForTheServiceInTheRules(t *testing.T) {
	f := newRollingFixture(t, 3)
	var mu sync.Mutex
	calls, podAt := 0, -1
	f.prober = proberFunc(func(node string) (verify.Health, error) {
		mu.Lock()
		defer mu.Unlock()
		now := f.clock.Now()
		h := verify.Health{Code: 200, PerFamily: true, LastSync: now.Add(-time.Hour), NewestSync: now.Add(-time.Hour), CurrentTime: now}
		if node != "node-0" {
			h.LastSync, h.NewestSync = now, now
			return h, nil
		}
		calls++
		if calls <= 3 { // the baseline's, then two polls
			f.clock.Step(time.Second)
			return h, nil
		}
		h.NewestSync = now
		return h, nil
	})
	f.podController(t, func(node, gen string) *corev1.Pod { return kubeProxyPod(node, gen, true) })
	f.client.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		p := a.(k8stesting.CreateAction).GetObject().(*corev1.Pod)
		mu.Lock()
		defer mu.Unlock()
		if p.Labels[verify.PathLabel] == verify.PathPod && podAt < 0 {
			podAt = calls
		}
		return false, nil, nil
	})
	f.probeKubelet(t, func(path string) corev1.PodStatus {
		if path == verify.PathPod {
			return corev1.PodStatus{Phase: corev1.PodFailed, ContainerStatuses: []corev1.ContainerStatus{{Name: "connect",
				State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 3, Reason: "Error", Message: "neither bash nor nc"}}}}}
		}
		return corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}
	})
	_, err := f.run(t, Options{Spec: setMode("nftables"), Timeout: time.Minute, Connectivity: ConnectivityOptions{TrafficPodImage: "example.test/agent:1"}})
	require.Error(t, err, "the image cannot connect: refused before any restart")
	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, 4, podAt, "the pod path's probe pod made after node-0's kube-proxy showed the sync, not before")
}
