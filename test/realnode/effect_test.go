//go:build e2e

package realnode

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/kube-proxy-sync/kube-proxy-sync/test/e2e/cluster"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// A change with no effect on the running kube-proxy (ipvs.scheduler in
// iptables mode) is written without replacing any pod; a later real change
// (configSyncPeriod) replaces each pod exactly once, and then every running
// kube-proxy's own /configz shows the whole ConfigMap text: both changes
// and every other value written. A rerun replaces nothing.
func TestNoEffectChangeThenRealChangeKubeProxyRunsBoth(t *testing.T) {
	e := connect(t)
	// Setup: /configz on the node address (a real change, so the
	// DaemonSet is stamped: what its pods run is known).
	r := e.sync(t, "--set", "metricsBindAddress=0.0.0.0:10249")
	require.Equal(t, 0, r.code, "setup: %s", r)
	// the pods replaced may still be terminating when the last new one is
	// Ready: the run waits for them, and writes the record before it ends
	require.Equal(t, true, r.field("record_changed"), "setup: the record holds what the fleet runs once the run ends: %s", r)
	for node := range e.podUIDs(t) {
		c := e.configz(t, node)
		mode, _ := runningValue(c, "mode")
		require.Contains(t, []any{"", "iptables", nil}, mode, "node %s: this test needs kube-proxy in iptables mode", node)
		scheduler, found := runningValue(c, "ipvs.scheduler")
		require.True(t, found, "node %s: /configz has no ipvs scheduler: %v", node, c)
		require.NotEqual(t, "lc", scheduler, "node %s", node)
	}
	stamp := e.daemonSetAnnotations(t)["kube-proxy-sync.io/config-hash"]
	require.NotEmpty(t, stamp)
	before := e.podUIDs(t)

	// 1. the no-effect change: written, no pod replaced
	r = e.sync(t, "--set", "ipvs.scheduler=lc")
	require.Equal(t, 0, r.code, "no-effect change: %s", r)
	assert.Equal(t, true, r.field("changed"), "%s", r)
	assert.Equal(t, false, r.field("restarted"), "%s", r)
	assert.Equal(t, "no-effect", r.field("restart_reason"), "%s", r)
	assert.Equal(t, map[string]any{"config.conf:ipvs.scheduler": "no-effect"}, r.field("changed_keys_effect"), "%s", r)
	assert.Equal(t, before, e.podUIDs(t), "a no-effect change must replace no pod")
	ann := e.daemonSetAnnotations(t)
	assert.Equal(t, stamp, ann["kube-proxy-sync.io/config-hash"])
	assert.NotEmpty(t, ann["kube-proxy-sync.io/no-effect-hash"])
	again := e.sync(t, "--set", "ipvs.scheduler=lc")
	require.Equal(t, 0, again.code, "rerun: %s", again)
	assert.Equal(t, false, again.field("changed"), "rerun: %s", again)
	assert.Equal(t, before, e.podUIDs(t), "a rerun must replace no pod")

	// 2. the real change: each pod replaced once, running both changes
	pw := e.watchPods(t)
	r = e.sync(t, "--set", "configSyncPeriod=16m")
	require.Equal(t, 0, r.code, "real change: %s", r)
	assert.Equal(t, true, r.field("restarted"), "%s", r)
	assert.Equal(t, map[string]any{"config.conf:configSyncPeriod": "restart"}, r.field("changed_keys_effect"), "%s", r)
	seen := pw.stop()
	after := e.podUIDs(t)
	require.Len(t, after, len(before), "one kube-proxy per node")
	for node, uid := range before {
		assert.NotEqual(t, uid, after[node], "node %s: kube-proxy pod was not replaced", node)
		assert.Equal(t, 2, seen[node], "node %s: want the old pod and exactly one new one", node)
	}
	written := e.writtenConfig(t)
	require.Equal(t, "lc", dig(written, "ipvs.scheduler"))
	for node, p := range e.pods(t, ctxFor(t, 30*time.Second)) {
		assert.True(t, cluster.PodReady(&p), "node %s: pod %s is not Ready per the kubelet", node, p.Name)
		running := e.configz(t, node)
		scheduler, _ := runningValue(running, "ipvs.scheduler")
		assert.Equal(t, "lc", scheduler, "node %s runs the no-effect change", node)
		period, _ := runningValue(running, "configSyncPeriod")
		assert.Equal(t, "16m0s", period, "node %s runs the real change", node)
		for _, diff := range configDiff(written, running) {
			t.Errorf("node %s: the running kube-proxy differs from the ConfigMap: %s", node, diff)
		}
	}
	assert.NotContains(t, e.daemonSetAnnotations(t), "kube-proxy-sync.io/no-effect-hash", "the restart drops the record")

	// 3. a rerun replaces nothing
	again = e.sync(t, "--set", "ipvs.scheduler=lc", "--set", "configSyncPeriod=16m")
	require.Equal(t, 0, again.code, "rerun: %s", again)
	assert.Equal(t, false, again.field("changed"), "rerun: %s", again)
	assert.Equal(t, after, e.podUIDs(t), "a rerun must replace no pod")
}

// configz reads the running kube-proxy's configuration on node (its own
// /configz, on the metrics port). Up to 1.35 kube-proxy serves its internal
// configuration there, under the Go field names; from 1.36 (kubernetes#136044)
// the versioned v1alpha1 one (see runningValue). These tests run 1.27 to 1.34.
func (e *env) configz(t *testing.T, node string) map[string]any {
	t.Helper()
	body := e.waitHTTP(t, node, 10249, "/configz", 200, 30*time.Second)
	var out struct {
		Config map[string]any `json:"kubeproxy.config.k8s.io"`
	}
	require.NoError(t, json.Unmarshal(body, &out), "node %s /configz: %s", node, body)
	require.NotNil(t, out.Config, "node %s /configz: %s", node, body)
	return out.Config
}

func (e *env) writtenConfig(t *testing.T) map[string]any {
	t.Helper()
	cm, err := e.client.CoreV1().ConfigMaps(namespace).Get(ctxFor(t, 30*time.Second), name, metav1.GetOptions{})
	require.NoError(t, err)
	var out map[string]any
	require.NoError(t, yaml.Unmarshal([]byte(cm.Data["config.conf"]), &out))
	return out
}

func (e *env) daemonSetAnnotations(t *testing.T) map[string]string {
	t.Helper()
	ds, err := e.client.AppsV1().DaemonSets(namespace).Get(ctxFor(t, 30*time.Second), name, metav1.GetOptions{})
	require.NoError(t, err)
	return ds.Annotations
}

// configDiff lists the leaves of the written config that the running one
// does not hold. Zero values are left out: kube-proxy's defaulting fills
// them (an unset duration becomes its default), and the command line
// (hostnameOverride) may set them. Durations compare by value.
func configDiff(written, running map[string]any) []string {
	var out []string
	for path, w := range leavesOf(written, "") {
		if path == "apiVersion" || path == "kind" || isZero(w) {
			continue
		}
		r, found := runningValue(running, path)
		if !found {
			out = append(out, fmt.Sprintf("%s: written %v, not in /configz", path, w))
			continue
		}
		if path == "clusterCIDR" {
			if list, ok := r.([]any); ok { // 1.31 on: detectLocal.clusterCIDRs
				var parts []string
				for _, c := range list {
					parts = append(parts, fmt.Sprint(c))
				}
				r = strings.Join(parts, ",")
			}
		}
		if !same(w, r) {
			out = append(out, fmt.Sprintf("%s: written %v, running %v", path, w, r))
		}
	}
	sort.Strings(out)
	return out
}

// runningValue finds a written (v1alpha1) field in /configz, which up to
// 1.35 serves kube-proxy's internal configuration: Go field names
// (IPVS.Scheduler for ipvs.scheduler), and from 1.31 on (a top-level
// SyncPeriod) the mode's sync periods at the top, and the Linux settings
// under Linux. The versioned form 1.36 serves is not tried here.
func runningValue(running map[string]any, path string) (any, bool) {
	if _, unified := lookupFold(running, "syncPeriod"); unified {
		moved := map[string]string{
			"iptables.syncPeriod": "syncPeriod", "iptables.minSyncPeriod": "minSyncPeriod",
			"iptables.masqueradeAll": "linux.masqueradeAll", "oomScoreAdj": "linux.oomScoreAdj",
			"windowsRunAsService": "windows.runAsService", "clusterCIDR": "detectLocal.clusterCIDRs",
		}
		switch {
		case moved[path] != "":
			path = moved[path]
		case strings.HasPrefix(path, "conntrack."):
			path = "linux." + path
		}
	}
	return lookupFold(running, path)
}

// lookupFold follows a dotted path, matching keys without regard to case.
func lookupFold(v any, path string) (any, bool) {
	for _, k := range strings.Split(path, ".") {
		m, ok := v.(map[string]any)
		if !ok {
			return nil, false
		}
		found := false
		for key, child := range m {
			if strings.EqualFold(key, k) {
				v, found = child, true
				break
			}
		}
		if !found {
			return nil, false
		}
	}
	return v, true
}
func leavesOf(obj map[string]any, prefix string) map[string]any {
	out := map[string]any{}
	for k, v := range obj {
		path := k
		if prefix != "" {
			path = prefix + "." + k
		}
		if child, ok := v.(map[string]any); ok && len(child) > 0 {
			for p, cv := range leavesOf(child, path) {
				out[p] = cv
			}
			continue
		}
		out[path] = v
	}
	return out
}

func isZero(v any) bool {
	switch x := v.(type) {
	case nil:
		return true
	case string:
		if d, err := time.ParseDuration(x); err == nil && d == 0 {
			return true
		}
		return x == ""
	case float64:
		return x == 0
	case bool:
		return !x
	case []any:
		return len(x) == 0
	case map[string]any:
		return len(x) == 0
	}
	return false
}

func same(w, r any) bool {
	if ws, ok := w.(string); ok {
		if rs, ok := r.(string); ok {
			wd, err1 := time.ParseDuration(ws)
			rd, err2 := time.ParseDuration(rs)
			if err1 == nil && err2 == nil {
				return wd == rd
			}
		}
	}
	a, _ := json.Marshal(w)
	b, _ := json.Marshal(r)
	return string(a) == string(b)
}
