//go:build e2e

package realnode

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/kube-proxy-sync/kube-proxy-sync/internal/kpsync"
	"github.com/kube-proxy-sync/kube-proxy-sync/test/e2e/cluster"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
)

// The config travels with the template (issue 21). A node the rollout
// has not reached keeps the config its pod mounts, whatever restarts its
// kube-proxy: here its process is killed and the kubelet restarts the
// container in the same pod. Shown while a canary run is paused after the
// canary node's new pod came up, and again after that run was stopped
// half-way (SIGTERM: the DaemonSet stays on OnDelete, the old pods stay).
// A rerun finishes the rollout, and every node runs the new value.
func TestUnreachedNodeKeepsItsConfigWhateverRestartsIt(t *testing.T) {
	e := connect(t)
	e.dockerOrSkip(t) // the kube-proxy processes are killed inside the node containers
	r := e.sync(t, "--set", "metricsBindAddress=0.0.0.0:10249")
	require.Equal(t, 0, r.code, "setup (/configz on the node address): %s", r)
	old := map[string]any{}
	for node := range e.podUIDs(t) {
		old[node], _ = runningValue(e.configz(t, node), "configSyncPeriod")
		require.NotEqual(t, "17m0s", old[node], "node %s", node)
	}
	before := e.podUIDs(t)

	cmd, paused, out := e.startPaused(t, kpsync.StepCanaryDone, "--set", "configSyncPeriod=17m", "--strategy", "canary", "--canary-nodes", "1", "--timeout", "10m")
	select {
	case <-paused:
	case <-time.After(5 * time.Minute):
		t.Fatalf("the run did not reach the wait: %s", out())
	}
	reached := e.waitCanaryReplaced(t, before)
	var unreached []string
	for node := range before {
		if node != reached {
			unreached = append(unreached, node)
		}
	}
	require.NotEmpty(t, unreached)
	sort.Strings(unreached)
	node := unreached[0]
	e.killKubeProxy(t, node, before[node])
	got, _ := runningValue(e.configz(t, node), "configSyncPeriod")
	assert.Equal(t, old[node], got, "node %s, not reached, restarted during the rollout: runs its old config", node)

	// stopped half-way: its old pods stay, and keep their config
	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	code := wait4(t, cmd)
	assert.Equal(t, 1, code, "a stopped run fails: %s", out())
	ds, err := e.client.AppsV1().DaemonSets(namespace).Get(ctxFor(t, 30*time.Second), name, metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, appsv1.OnDeleteDaemonSetStrategyType, ds.Spec.UpdateStrategy.Type, "half-way: still on OnDelete")
	node = unreached[len(unreached)-1]
	uid := e.podUIDs(t)[node]
	require.Equal(t, before[node], uid, "node %s: its old pod is still there", node)
	e.killKubeProxy(t, node, uid)
	got, _ = runningValue(e.configz(t, node), "configSyncPeriod")
	assert.Equal(t, old[node], got, "node %s, after the run stopped half-way: runs its old config", node)

	// the rerun resumes the canary rollout: every node on the new value
	r = e.sync(t, "--set", "configSyncPeriod=17m", "--strategy", "canary", "--canary-nodes", "1")
	require.Equal(t, 0, r.code, "rerun: %s", r)
	for node := range before {
		got, _ := runningValue(e.configz(t, node), "configSyncPeriod")
		assert.Equal(t, "17m0s", got, "node %s after the rerun", node)
	}
	assert.Equal(t, r.field("configmap_name"), mountedConfigMap(t, e), "the template mounts the copy the result names")
	assert.Contains(t, e.configConf(t), "configSyncPeriod: 17m", "the record follows once no pod mounts it")
}

// `kubectl rollout undo` brings the previous config back on every node: the
// ControllerRevision it restores names the ConfigMap that config is in.
func TestKubectlRolloutUndoRestoresTheConfig(t *testing.T) {
	e := connect(t)
	kubectl := e.kubectlOrSkip(t)
	r := e.sync(t, "--set", "metricsBindAddress=0.0.0.0:10249", "--set", "configSyncPeriod=18m")
	require.Equal(t, 0, r.code, "first config: %s", r)
	first := mountedConfigMap(t, e)
	r = e.sync(t, "--set", "metricsBindAddress=0.0.0.0:10249", "--set", "configSyncPeriod=19m")
	require.Equal(t, 0, r.code, "second config: %s", r)
	require.Equal(t, first, r.field("previous_configmap"), "%s", r)
	for node := range e.podUIDs(t) {
		got, _ := runningValue(e.configz(t, node), "configSyncPeriod")
		require.Equal(t, "19m0s", got, "node %s", node)
	}

	cmd := exec.Command(kubectl, "--kubeconfig", e.kubeconfig, "-n", namespace, "rollout", "undo", "daemonset/"+name)
	outb, err := cmd.CombinedOutput()
	require.NoError(t, err, "kubectl rollout undo: %s", outb)
	e.waitRolledOut(t, ctxFor(t, rolloutTimeout))
	assert.Equal(t, first, mountedConfigMap(t, e))
	for node := range e.podUIDs(t) {
		got, _ := runningValue(e.configz(t, node), "configSyncPeriod")
		assert.Equal(t, "18m0s", got, "node %s after kubectl rollout undo", node)
	}
	// the next run takes that as what the fleet runs: no restart, and the
	// record follows
	r = e.sync(t)
	require.Equal(t, 0, r.code, "after the undo: %s", r)
	assert.Equal(t, false, r.field("restarted"), "%s", r)
	assert.Contains(t, e.configConf(t), "configSyncPeriod: 18m")
}

// `kubectl rollout undo --to-revision` to a revision older than the
// history of copies still finds its config: the history never deletes a
// copy that a ControllerRevision of the DaemonSet mounts. Were it deleted,
// the undo's first new pod could not mount its ConfigMap, and its node
// would be left without a kube-proxy.
func TestKubectlRolloutUndoToAnOldRevisionFindsItsConfig(t *testing.T) {
	e := connect(t)
	kubectl := e.kubectlOrSkip(t)
	var first string
	for i, period := range []string{"23m", "24m", "25m", "26m"} {
		r := e.sync(t, "--set", "metricsBindAddress=0.0.0.0:10249", "--set", "configSyncPeriod="+period, "--config-history", "1")
		require.Equal(t, 0, r.code, "config %s: %s", period, r)
		if i == 0 {
			first = mountedConfigMap(t, e)
		}
	}
	_, err := e.client.CoreV1().ConfigMaps(namespace).Get(ctxFor(t, 30*time.Second), first, metav1.GetOptions{})
	require.NoError(t, err, "the first config's copy, beyond a history of 1, is kept: a revision mounts it")
	revision := revisionMounting(t, e, first)

	cmd := exec.Command(kubectl, "--kubeconfig", e.kubeconfig, "-n", namespace, "rollout", "undo", "daemonset/"+name, fmt.Sprintf("--to-revision=%d", revision))
	outb, err := cmd.CombinedOutput()
	require.NoError(t, err, "kubectl rollout undo --to-revision=%d: %s", revision, outb)
	e.waitRolledOut(t, ctxFor(t, rolloutTimeout))
	assert.Equal(t, first, mountedConfigMap(t, e))
	for node := range e.podUIDs(t) {
		got, _ := runningValue(e.configz(t, node), "configSyncPeriod")
		assert.Equal(t, "23m0s", got, "node %s after kubectl rollout undo --to-revision=%d", node, revision)
	}
	r := e.sync(t)
	require.Equal(t, 0, r.code, "after the undo: %s", r)
	assert.Equal(t, false, r.field("restarted"), "%s", r)
}

// kubectlOrSkip is the kubectl a user runs (KUBECTL, else the kind tier's
// build in .cache/bin), or skips the test without one; where the tier is
// required (cluster.Required: CI, make test) a missing kubectl fails it.
func (e *env) kubectlOrSkip(t *testing.T) string {
	t.Helper()
	kubectl := os.Getenv("KUBECTL")
	if kubectl == "" {
		kubectl = filepath.Join(e.root, ".cache", "bin", "kubectl")
	}
	if _, err := os.Stat(kubectl); err != nil {
		unavailable(t, fmt.Sprintf("no kubectl (KUBECTL, or .cache/bin/kubectl): %v; hack/build/tools.sh builds .cache/bin/kubectl (make cluster-up runs it), or set KUBECTL to one", err))
	}
	return kubectl
}

// revisionMounting is the number of the DaemonSet's ControllerRevision
// whose template mounts the ConfigMap cm.
func revisionMounting(t *testing.T, e *env, cm string) int64 {
	t.Helper()
	ds, err := e.client.AppsV1().DaemonSets(namespace).Get(ctxFor(t, 30*time.Second), name, metav1.GetOptions{})
	require.NoError(t, err)
	revision, ok := cluster.RevisionConfigMaps(t, e.client, ds)[cm]
	require.True(t, ok, "no revision of daemonset %s/%s mounts configmap %s", namespace, name, cm)
	return revision
}

// --undo restores the previous config on every node through the rollout
// (kube-proxy's own /configz), and a second --undo goes forward again.
func TestUndoRestoresTheConfigOnEveryNode(t *testing.T) {
	e := connect(t)
	r := e.sync(t, "--set", "metricsBindAddress=0.0.0.0:10249", "--set", "configSyncPeriod=21m")
	require.Equal(t, 0, r.code, "first config: %s", r)
	r = e.sync(t, "--set", "metricsBindAddress=0.0.0.0:10249", "--set", "configSyncPeriod=22m")
	require.Equal(t, 0, r.code, "second config: %s", r)
	for _, step := range []struct{ want string }{{"21m0s"}, {"22m0s"}} {
		r = e.sync(t, "--undo")
		require.Equal(t, 0, r.code, "--undo: %s", r)
		assert.Equal(t, true, r.field("restarted"), "%s", r)
		for node := range e.podUIDs(t) {
			got, _ := runningValue(e.configz(t, node), "configSyncPeriod")
			assert.Equal(t, step.want, got, "node %s after --undo", node)
		}
	}
}

func mountedConfigMap(t *testing.T, e *env) string {
	t.Helper()
	ds, err := e.client.AppsV1().DaemonSets(namespace).Get(ctxFor(t, 30*time.Second), name, metav1.GetOptions{})
	require.NoError(t, err)
	for _, v := range ds.Spec.Template.Spec.Volumes {
		if v.ConfigMap != nil && (v.ConfigMap.Name == name || strings.HasPrefix(v.ConfigMap.Name, name+"-")) {
			return v.ConfigMap.Name
		}
	}
	t.Fatalf("daemonset %s/%s mounts no config ConfigMap", namespace, name)
	return ""
}

var (
	hooksBinOnce sync.Once
	hooksBin     string
	hooksBinErr  error
)

// startPaused starts a testhooks build of the binary that pauses at step;
// paused is closed once it says so; out is everything it wrote so far.
func (e *env) startPaused(t *testing.T, step string, args ...string) (cmd *exec.Cmd, paused <-chan struct{}, out func() string) {
	t.Helper()
	hooksBinOnce.Do(func() {
		hooksBin = e.bin + "-testhooks"
		build := exec.Command("go", "build", "-tags", "testhooks", "-o", hooksBin, modulePath+"/cmd/kube-proxy-sync")
		build.Dir, build.Env = e.root, append(os.Environ(), "CGO_ENABLED=0")
		if b, err := build.CombinedOutput(); err != nil {
			hooksBinErr = fmt.Errorf("go build -tags testhooks: %w\n%s", err, b)
		}
	})
	require.NoError(t, hooksBinErr)
	args = append([]string{"--kubeconfig", e.kubeconfig, "--output", "json"}, args...)
	cmd = exec.Command(hooksBin, args...)
	cmd.Env = append(os.Environ(), "KUBE_PROXY_SYNC_TEST_PAUSE_AT="+step)
	var mu sync.Mutex
	var buf bytes.Buffer
	cmd.Stdout = &lockedWriter{mu: &mu, w: &buf}
	stderr, err := cmd.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_, _ = cmd.Process.Wait()
		}
	})
	ch := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stderr)
		once := sync.Once{}
		for sc.Scan() {
			line := sc.Text()
			mu.Lock()
			buf.WriteString(line + "\n")
			mu.Unlock()
			if strings.Contains(line, "test hook: paused at "+step) {
				once.Do(func() { close(ch) })
			}
		}
	}()
	return cmd, ch, func() string {
		mu.Lock()
		defer mu.Unlock()
		return buf.String()
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	w  *bytes.Buffer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// waitCanaryReplaced waits until exactly one node's pod is a new one, Ready
// per the kubelet, and returns that node.
func (e *env) waitCanaryReplaced(t *testing.T, before map[string]types.UID) string {
	t.Helper()
	var reached string
	err := wait.PollUntilContextTimeout(context.Background(), time.Second, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		reached = ""
		for node, p := range e.pods(t, ctx) {
			if p.UID == before[node] {
				continue
			}
			if reached != "" {
				return false, fmt.Errorf("more than one node replaced while the run is paused: %s and %s", reached, node)
			}
			ready := false
			for _, c := range p.Status.Conditions {
				ready = ready || c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue
			}
			if !ready {
				return false, nil
			}
			reached = node
		}
		return reached != "", nil
	})
	require.NoError(t, err, "the canary node's pod: %s", e.describePods(t))
	return reached
}

// killKubeProxy kills the kube-proxy process on node (the kubelet restarts
// the container in the same pod) and waits until that pod runs it again,
// Ready per the kubelet.
func (e *env) killKubeProxy(t *testing.T, node string, pod types.UID) {
	t.Helper()
	var last string
	restarts := func(_ context.Context) (int32, bool) {
		p, ok := e.pods(t, ctxFor(t, 30*time.Second))[node]
		if !ok || p.UID != pod {
			last = fmt.Sprintf("node %s: pod %s is gone (now %s)", node, pod, p.UID)
			return 0, false
		}
		last = fmt.Sprintf("node %s: pod %s phase %s, container statuses %+v", node, p.Name, p.Status.Phase, p.Status.ContainerStatuses)
		var n int32
		ready := false
		for _, c := range p.Status.ContainerStatuses {
			n += c.RestartCount
		}
		for _, c := range p.Status.Conditions {
			ready = ready || c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue
		}
		return n, ready
	}
	n0, _ := restarts(ctxFor(t, 30*time.Second))
	script := `for p in /proc/[0-9]*; do [ "$(cat "$p/comm" 2>/dev/null)" = kube-proxy ] && kill -9 "${p#/proc/}" && echo killed; done; true`
	b, err := exec.Command("docker", "exec", node, "sh", "-c", script).CombinedOutput()
	require.NoError(t, err, "kill kube-proxy on %s: %s", node, b)
	require.Contains(t, string(b), "killed", "no kube-proxy process on %s", node)
	err = wait.PollUntilContextTimeout(context.Background(), 2*time.Second, 4*time.Minute, true, func(ctx context.Context) (bool, error) {
		n, ready := restarts(ctx)
		return n > n0 && ready, nil
	})
	require.NoError(t, err, "node %s: the kubelet restarted kube-proxy in pod %s (last seen: %s): %s", node, pod, last, e.describePods(t))
}

// `kubectl rollout undo`, then a run with the values before the undo:
// every node runs those values again (kube-proxy's own /configz). The
// stamp the undo left names them; the tool checks it against what the
// template mounts instead of believing it.
func TestKubectlRolloutUndoThenTheValuesAgainOnEveryNode(t *testing.T) {
	e := connect(t)
	kubectl := e.kubectlOrSkip(t)
	values := []string{"--set", "metricsBindAddress=0.0.0.0:10249", "--set", "configSyncPeriod=28m"}
	r := e.sync(t, "--set", "metricsBindAddress=0.0.0.0:10249", "--set", "configSyncPeriod=27m")
	require.Equal(t, 0, r.code, "first config: %s", r)
	r = e.sync(t, values...)
	require.Equal(t, 0, r.code, "second config: %s", r)
	second := mountedConfigMap(t, e)

	cmd := exec.Command(kubectl, "--kubeconfig", e.kubeconfig, "-n", namespace, "rollout", "undo", "daemonset/"+name)
	outb, err := cmd.CombinedOutput()
	require.NoError(t, err, "kubectl rollout undo: %s", outb)
	e.waitRolledOut(t, ctxFor(t, rolloutTimeout))
	for node := range e.podUIDs(t) {
		got, _ := runningValue(e.configz(t, node), "configSyncPeriod")
		require.Equal(t, "27m0s", got, "node %s after kubectl rollout undo", node)
	}

	r = e.sync(t, values...)
	require.Equal(t, 0, r.code, "the values again: %s", r)
	assert.Equal(t, true, r.field("restarted"), "%s", r)
	e.waitRolledOut(t, ctxFor(t, rolloutTimeout))
	assert.Equal(t, second, mountedConfigMap(t, e))
	for node := range e.podUIDs(t) {
		got, _ := runningValue(e.configz(t, node), "configSyncPeriod")
		assert.Equal(t, "28m0s", got, "node %s runs the values again", node)
	}
	assert.Contains(t, e.configConf(t), "configSyncPeriod: 28m", "the record keeps them")
}

// The copy the template mounts, deleted by another hand (a prune, a
// label-based cleanup): a run that restarts every pod makes it again
// first, and no pod is left in ContainerCreating without its ConfigMap.
func TestDeletedMountedCopyLeavesNoPodWithoutItsConfig(t *testing.T) {
	e := connect(t)
	values := []string{"--set", "metricsBindAddress=0.0.0.0:10249", "--set", "configSyncPeriod=29m"}
	r := e.sync(t, values...)
	require.Equal(t, 0, r.code, "a config on a copy: %s", r)
	mounted := mountedConfigMap(t, e)
	require.NoError(t, e.client.CoreV1().ConfigMaps(namespace).Delete(ctxFor(t, 30*time.Second), mounted, metav1.DeleteOptions{}))
	before := e.podUIDs(t)

	r = e.sync(t, append(values, "--restart", "always")...)
	require.Equal(t, 0, r.code, "restart onto the deleted copy: %s", r)
	e.waitRolledOut(t, ctxFor(t, rolloutTimeout))
	_, err := e.client.CoreV1().ConfigMaps(namespace).Get(ctxFor(t, 30*time.Second), mounted, metav1.GetOptions{})
	require.NoError(t, err, "made again before the restart")
	for node, p := range e.pods(t, ctxFor(t, 30*time.Second)) {
		assert.NotEqual(t, before[node], p.UID, "node %s: restarted", node)
		for _, cs := range p.Status.ContainerStatuses {
			assert.True(t, cs.Ready && cs.State.Running != nil, "node %s: container %s is not running: %+v", node, cs.Name, cs.State)
		}
		got, _ := runningValue(e.configz(t, node), "configSyncPeriod")
		assert.Equal(t, "29m0s", got, "node %s", node)
	}
}
