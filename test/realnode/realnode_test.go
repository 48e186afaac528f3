//go:build e2e

package realnode

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/kube-proxy-sync/kube-proxy-sync/test/e2e/cluster"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
)

// A real change: kube-proxy-sync writes a setting, every kube-proxy pod is
// replaced exactly once by the kubelet and becomes Ready through the probe
// the binary set, and the running kube-proxy reports the setting written
// (its own /configz). An unchanged rerun replaces nothing.
func TestRealChangeRestartsOnceAndKubeProxyRunsIt(t *testing.T) {
	e := connect(t)
	before := e.podUIDs(t)
	require.NotEmpty(t, before)

	pw := e.watchPods(t)
	// Expose kube-proxy's metrics port (and /configz) on the node address,
	// so the API server's node proxy can read the running configuration.
	r := e.sync(t, "--set", "metricsBindAddress=0.0.0.0:10249", "--server", e.controlPlaneServer(t))
	require.Equal(t, 0, r.code, "run: %s", r)
	assert.Equal(t, true, r.field("restarted"), "restarted: %s", r)
	seen := pw.stop()

	after := e.podUIDs(t)
	require.Len(t, after, len(before), "one kube-proxy per node")
	for node, uid := range before {
		assert.NotEqual(t, uid, after[node], "node %s: kube-proxy pod was not replaced", node)
		assert.Equal(t, 2, seen[node], "node %s: want the old pod and exactly one new one", node)
	}
	assert.Equal(t, "/livez", e.readinessPath(t), "v1.34 kube-proxy gets the /livez readiness probe")
	for node, p := range e.pods(t, ctxFor(t, 30*time.Second)) {
		assert.True(t, cluster.PodReady(&p), "node %s: pod %s is not Ready per the kubelet", node, p.Name)
		body := e.waitHTTP(t, node, 10249, "/configz", 200, 30*time.Second)
		var configz struct {
			KubeProxyConfig struct {
				MetricsBindAddress string `json:"metricsBindAddress"`
			} `json:"kubeproxy.config.k8s.io"`
		}
		require.NoError(t, json.Unmarshal(body, &configz), "node %s /configz: %s", node, body)
		assert.Equal(t, "0.0.0.0:10249", configz.KubeProxyConfig.MetricsBindAddress, "node %s runs the config written", node)
		e.waitHTTP(t, node, healthzPort, "/livez", 200, 30*time.Second)
	}

	again := e.sync(t, "--set", "metricsBindAddress=0.0.0.0:10249", "--server", e.controlPlaneServer(t))
	require.Equal(t, 0, again.code, "rerun: %s", again)
	assert.Equal(t, false, again.field("restarted"), "rerun: %s", again)
	assert.Equal(t, after, e.podUIDs(t), "an unchanged rerun must replace no pod")
}

// The probe follows kube-proxy's version on a real kube-proxy: v1.27 serves
// only /healthz (its /livez is 404), v1.34 gets /livez; both become Ready.
// Forcing /livez on v1.27 is the negative control: the rollout fails with
// an error instead of hanging.
func TestProbeFollowsKubeProxyVersion(t *testing.T) {
	e := connect(t)
	_, workers := e.nodeNames(t)
	require.NotEmpty(t, workers)

	// kubeadm 1.34's config as it is: it carries fields 1.27 does not have
	// (nftables, logging, conntrack's UDP timeouts). The real kube-proxy
	// 1.27 loads past them with a warning (its lenient fallback), and so
	// does the run: it restarts 1.27 on that config and reports them.
	conf := e.configConf(t)
	require.Contains(t, conf, "\nnftables:", "the kind cluster's config.conf is kubeadm 1.34's")
	e.setImage(t, e.imageWithTag(t, "v1.27.16"))
	r := e.sync(t, "--restart", "always")
	require.Equal(t, 0, r.code, "run on v1.27: %s", r)
	assert.Equal(t, "/healthz", r.field("probe_path"), "%s", r)
	assert.Equal(t, "/healthz", e.readinessPath(t))
	warnings, _ := r.field("warnings").([]any)
	assert.Contains(t, warnings, `configmap kube-system/kube-proxy: config.conf: field "nftables" is ignored by kube-proxy 1.27 (kube-proxy has it from 1.29 on)`, "%s", r)
	e.waitRolledOut(t, ctxFor(t, rolloutTimeout))
	assert.Equal(t, conf, e.configConf(t), "config.conf is run as it is")
	code, _, err := e.proxyGet(ctxFor(t, 30*time.Second), workers[0], healthzPort, "/livez")
	require.NoError(t, err)
	assert.Equal(t, 404, code, "kube-proxy v1.27 does not serve /livez")
	e.waitHTTP(t, workers[0], healthzPort, "/healthz", 200, 30*time.Second)

	// Negative control: /livez on v1.27 never gets Ready; the run must fail
	// (bounded by --timeout: exit 1, not a hang).
	bad := e.sync(t, "--restart", "always", "--probe-path", "/livez", "--timeout", "90s")
	assert.Equal(t, 1, bad.code, "forcing /livez on v1.27 must fail: %s", bad)
	unready := 0
	for _, p := range e.pods(t, ctxFor(t, 30*time.Second)) {
		if !cluster.PodReady(&p) {
			unready++
		}
	}
	assert.Positive(t, unready, "a v1.27 pod probed on /livez is not Ready: %s", e.describePods(t))

	e.restore(t)
	e.setImage(t, e.imageWithTag(t, "v1.34.4"))
	ok := e.sync(t, "--restart", "always")
	require.Equal(t, 0, ok.code, "run on v1.34: %s", ok)
	assert.Equal(t, "/livez", ok.field("probe_path"), "%s", ok)
	e.waitRolledOut(t, ctxFor(t, rolloutTimeout))
}

// KEP-3836 on a real kube-proxy: on a node tainted ToBeDeletedByClusterAutoscaler,
// /healthz answers 503 and /livez 200. With the binary's /livez probe the
// pod stays Ready, and a restart during the taint completes and reports the
// node as skipped. The control: a /healthz probe makes the same pod unready.
func TestLeavingNodeHealthzVersusLivez(t *testing.T) {
	e := connect(t)
	_, workers := e.nodeNames(t)
	require.NotEmpty(t, workers)
	leaving := workers[0]

	r := e.sync(t, "--restart", "always")
	require.Equal(t, 0, r.code, "set the /livez probe: %s", r)
	require.Equal(t, "/livez", e.readinessPath(t))

	e.taint(t, leaving, corev1.Taint{Key: toBeDeletedTaint, Value: strconv.FormatInt(time.Now().Unix(), 10), Effect: corev1.TaintEffectNoSchedule})
	body := e.waitHTTP(t, leaving, healthzPort, "/healthz", 503, 30*time.Second)
	assert.Contains(t, string(body), `"nodeEligible":false`)
	e.waitHTTP(t, leaving, healthzPort, "/livez", 200, 10*time.Second)
	for _, other := range workers[1:] {
		e.waitHTTP(t, other, healthzPort, "/healthz", 200, 10*time.Second)
	}

	// The pod on the leaving node stays Ready through three probe periods.
	p := e.pods(t, ctxFor(t, 30*time.Second))[leaving]
	window := probeWindow(&p)
	assert.True(t, stayedReady(t, e, leaving, window), "with the /livez probe the pod on the leaving node must stay Ready for %s: %s", window, e.describePods(t))

	restart := e.sync(t, "--restart", "always")
	require.Equal(t, 0, restart.code, "restart during the taint: %s", restart)
	skipped, _ := restart.field("rollout.skipped_nodes").([]any)
	var names []string
	for _, s := range skipped {
		if m, ok := s.(map[string]any); ok {
			names = append(names, fmt.Sprint(m["name"]))
		}
	}
	assert.Contains(t, names, leaving, "the leaving node is reported skipped: %s", restart)

	// Control: with the probe on /healthz, the same node's pod turns unready.
	e.setProbePath(t, "/healthz")
	if p, ok := e.pods(t, ctxFor(t, 30*time.Second))[leaving]; ok {
		require.NoError(t, e.client.CoreV1().Pods(namespace).Delete(ctxFor(t, 30*time.Second), p.Name, metav1.DeleteOptions{}))
	}
	err := wait.PollUntilContextTimeout(context.Background(), 500*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		p, ok := e.pods(t, ctx)[leaving]
		return ok && !cluster.PodReady(&p) && p.Status.Phase == corev1.PodRunning && probePathOf(&p) == "/healthz", nil
	})
	assert.NoError(t, err, "with a /healthz probe the pod on the leaving node must turn unready: %s", e.describePods(t))
}

// A config kube-proxy refuses, written behind the binary's back, crash-loops
// the real pod (the control: the refusal below is not theoretical); the
// binary refuses to write the same config and leaves the cluster as it was.
func TestRefusedConfigCrashLoopsAndTheBinaryRefusesIt(t *testing.T) {
	e := connect(t)
	_, workers := e.nodeNames(t)
	require.NotEmpty(t, workers)
	victim := workers[len(workers)-1]

	// Behind the binary's back: iptables.masqueradeBit=99, then a fresh pod
	// on one node.
	cm, err := e.client.CoreV1().ConfigMaps(namespace).Get(ctxFor(t, 30*time.Second), name, metav1.GetOptions{})
	require.NoError(t, err)
	bad, err := setYAMLField(e.origCM.Data["config.conf"], []string{"iptables", "masqueradeBit"}, 99)
	require.NoError(t, err)
	cm.Data["config.conf"] = bad
	_, err = e.client.CoreV1().ConfigMaps(namespace).Update(ctxFor(t, 30*time.Second), cm, metav1.UpdateOptions{})
	require.NoError(t, err)
	old := e.pods(t, ctxFor(t, 30*time.Second))[victim]
	require.NoError(t, e.client.CoreV1().Pods(namespace).Delete(ctxFor(t, 30*time.Second), old.Name, metav1.DeleteOptions{}))
	var last corev1.Pod
	err = wait.PollUntilContextTimeout(context.Background(), 500*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		p, ok := e.pods(t, ctx)[victim]
		if !ok || p.UID == old.UID {
			return false, nil
		}
		last = p
		for _, cs := range p.Status.ContainerStatuses {
			if term := cs.LastTerminationState.Terminated; term != nil && term.ExitCode != 0 {
				return true, nil
			}
		}
		return false, nil
	})
	require.NoError(t, err, "kube-proxy with iptables.masqueradeBit=99 must exit and restart: %s", e.describePods(t))
	assert.False(t, cluster.PodReady(&last), "the crash-looping pod is not Ready")
	e.restore(t)

	// The binary refuses the same value: exit 1, nothing written, no pod
	// replaced. (--timeout bounds the run should it ever roll it out.)
	before := e.podUIDs(t)
	refused := e.sync(t, "--set", "iptables.masqueradeBit=99", "--timeout", "60s")
	assert.Equal(t, 1, refused.code, "the binary must refuse iptables.masqueradeBit=99: %s", refused)
	cm, err = e.client.CoreV1().ConfigMaps(namespace).Get(ctxFor(t, 30*time.Second), name, metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, e.origCM.Data, cm.Data, "a refused run leaves the ConfigMap as it was")
	assert.Equal(t, before, e.podUIDs(t), "a refused run replaces no pod")
	assert.Contains(t, fmt.Sprint(refused.field("msg")), "masqueradeBit", "the error names the field: %s", refused)
}

// probeWindow is three full failure windows of the pod's readiness probe.
func probeWindow(p *corev1.Pod) time.Duration {
	for _, c := range p.Spec.Containers {
		if c.ReadinessProbe != nil {
			period, failures := c.ReadinessProbe.PeriodSeconds, c.ReadinessProbe.FailureThreshold
			if period == 0 {
				period = 10
			}
			if failures == 0 {
				failures = 3
			}
			return 3 * time.Duration(period*failures) * time.Second
		}
	}
	return time.Minute
}

// stayedReady watches the pod on node for window and reports whether it was
// Ready all along (a bounded observation, not a wait for state).
func stayedReady(t *testing.T, e *env, node string, window time.Duration) bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), window)
	defer cancel()
	err := wait.PollUntilContextCancel(ctx, time.Second, true, func(ctx context.Context) (bool, error) {
		p, ok := e.pods(t, context.Background())[node]
		return !ok || !cluster.PodReady(&p), nil
	})
	return err != nil // the window ran out without the pod turning unready
}

func probePathOf(p *corev1.Pod) string {
	for _, c := range p.Spec.Containers {
		if c.Name == name && c.ReadinessProbe != nil && c.ReadinessProbe.HTTPGet != nil {
			return c.ReadinessProbe.HTTPGet.Path
		}
	}
	return ""
}
