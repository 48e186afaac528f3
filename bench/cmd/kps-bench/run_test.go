package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kube-proxy-sync/kube-proxy-sync/internal/rollout"
)

func parseRun(t *testing.T, args ...string) *runOptions {
	t.Helper()
	o := newRunOptions()
	require.NoError(t, o.parse(args, io.Discard))
	return o
}

func phases(s stage) []string {
	var out []string
	for _, p := range s.Phases {
		out = append(out, p.Phase)
	}
	return out
}

func TestRunFlagDefaults(t *testing.T) {
	full := parseRun(t)
	assert.Equal(t, nodeList{10, 1000}, full.Nodes)
	assert.Equal(t, nodeList{1000, 5000}, full.RestartNodes)
	assert.Equal(t, nodeList{1000}, full.KubesprayNodes)
	assert.Equal(t, nodeList{5000}, full.PoolsNodes)
	assert.Equal(t, 5, full.Pools)
	assert.Equal(t, 5, full.Rounds)
	assert.Equal(t, 3, full.LargeRounds)
	assert.Equal(t, 5, full.Reps)
	assert.Equal(t, 10, full.Reruns)
	assert.Equal(t, "10%", full.MaxUnavailable)
	assert.True(t, full.Ansible)
	assert.Equal(t, "3d17aa1", full.OldCommit)
	assert.True(t, full.DisableQPSLimits)
	assert.Equal(t, 20, full.HeartbeatFactor)
	assert.Equal(t, "bin/kube-proxy-sync", full.Binary)
	assert.Empty(t, full.Kubeconfig)
	assert.Equal(t, 30*time.Minute, full.Timeout)
	assert.Regexp(t, `^bench/results/\d{4}-\d\d-\d\d\.json$`, full.Results)

	small := parseRun(t, "--small", "--cache-dir", "/c")
	assert.Equal(t, nodeList{20}, small.Nodes)
	assert.Equal(t, nodeList{20}, small.RestartNodes)
	assert.Equal(t, nodeList{20}, small.KubesprayNodes)
	assert.Equal(t, nodeList{20}, small.PoolsNodes)
	assert.Equal(t, 5, small.Pools)
	assert.Equal(t, 1, small.Rounds)
	assert.Equal(t, 1, small.LargeRounds)
	assert.Equal(t, 3, small.Reps)
	assert.Equal(t, 10, small.Reruns)
	assert.False(t, small.Ansible)
	assert.False(t, small.DisableQPSLimits)
	assert.Equal(t, 0, small.HeartbeatFactor)
	assert.Equal(t, "/c/bench/small-results.json", small.Results)
}

func TestRunFlagsGivenOverrideSmall(t *testing.T) {
	o := parseRun(t, "--small=1", "--nodes", "30 40", "--rounds=2", "--ansible=1", "--disable-qps-limits=1", "--heartbeat-factor=7", "--results=r.json")
	assert.Equal(t, nodeList{30, 40}, o.Nodes)
	// the phase lists follow --nodes when not given
	assert.Equal(t, nodeList{30, 40}, o.RestartNodes)
	assert.Equal(t, nodeList{30, 40}, o.KubesprayNodes)
	assert.Equal(t, nodeList{30, 40}, o.PoolsNodes)
	assert.Equal(t, 2, o.Rounds)
	assert.True(t, o.Ansible)
	assert.True(t, o.DisableQPSLimits)
	assert.Equal(t, 7, o.HeartbeatFactor)
	assert.Equal(t, "r.json", o.Results)
	// --small=0 is the full run
	assert.Equal(t, 5, parseRun(t, "--small=0").Rounds)
}

func TestRunFlagsRejected(t *testing.T) {
	for name, args := range map[string][]string{
		"zero rounds":        {"--rounds=0"},
		"zero reps":          {"--small", "--reps", "0"},
		"zero pools":         {"--pools=0"},
		"node count not int": {"--nodes", "10 x"},
		"node count zero":    {"--nodes", "0"},
		"no node count":      {"--nodes", " "},
		"negative heartbeat": {"--heartbeat-factor=-1"},
		"argument":           {"extra"},
	} {
		t.Run(name, func(t *testing.T) {
			assert.Error(t, newRunOptions().parse(args, io.Discard))
		})
	}
}

func TestNodeList(t *testing.T) {
	for in, want := range map[string]nodeList{
		"10 1000":     {10, 1000},
		"10,1000":     {10, 1000},
		" 10  1000 ":  {10, 1000},
		"10, 1000,20": {10, 1000, 20},
		"5000":        {5000},
	} {
		var l nodeList
		require.NoError(t, l.Set(in), in)
		assert.Equal(t, want, l, in)
	}
	l := nodeList{10, 1000}
	assert.Equal(t, "10 1000", l.String())
}

func TestPlan(t *testing.T) {
	restart := func(rounds int) step { return step{Phase: "restart", Rounds: rounds, MaxUnavailable: "10%"} }
	// the pools phase leaves one DaemonSet to a restart phase at the same count
	pools := func(rounds int, oneDaemonSet bool) step {
		return step{Phase: "pools", Rounds: rounds, MaxUnavailable: "10%", Pools: 5, OneDaemonSet: oneDaemonSet}
	}
	cases := []struct {
		name          string
		args          []string
		external      bool
		externalNodes int
		want          []stage
	}{
		{
			name: "small: every phase at 20 nodes but Ansible, one round; pools after the restart, reusing its rounds",
			args: []string{"--small"},
			want: []stage{{Nodes: 20, Scale: true, Phases: []step{
				{Phase: "nochange", Reps: 3}, {Phase: "needless", Reruns: 10}, {Phase: "kubespray"}, restart(1), pools(1, false),
			}}},
		},
		{
			name: "full: 10 nodes without kubespray and restart, 1000 with both",
			want: []stage{
				{Nodes: 10, Scale: true, Phases: []step{{Phase: "nochange", Reps: 5}, {Phase: "needless", Reruns: 10}, {Phase: "ansible", Reps: 5}}},
				{Nodes: 1000, Scale: true, Phases: []step{
					{Phase: "nochange", Reps: 5}, {Phase: "needless", Reruns: 10}, {Phase: "kubespray"}, {Phase: "ansible", Reps: 5}, restart(5),
				}},
			},
		},
		{
			name: "full at 5000: the large rounds, no kubespray, the pools reusing the restart's rounds",
			args: []string{"--nodes", "5000", "--ansible=0"},
			want: []stage{{Nodes: 5000, Scale: true, Phases: []step{{Phase: "nochange", Reps: 5}, {Phase: "needless", Reruns: 10}, restart(3), pools(3, false)}}},
		},
		{
			name: "pools without the restart phase: its own one-DaemonSet rounds",
			args: []string{"--nodes", "5000", "--ansible=0", "--restart-nodes", "1000"},
			want: []stage{{Nodes: 5000, Scale: true, Phases: []step{{Phase: "nochange", Reps: 5}, {Phase: "needless", Reruns: 10}, pools(3, true)}}},
		},
		{
			name: "pools at a count of its own, with other pools",
			args: []string{"--nodes", "200", "--ansible=0", "--pools-nodes", "200", "--pools", "4"},
			want: []stage{{Nodes: 200, Scale: true, Phases: []step{{Phase: "nochange", Reps: 5}, {Phase: "needless", Reruns: 10},
				{Phase: "pools", Rounds: 5, MaxUnavailable: "10%", Pools: 4, OneDaemonSet: true}}}},
		},
		{
			name:     "external: the cluster's count, every phase, no scaling",
			args:     []string{"--kubeconfig", "kc", "--ansible=false"},
			external: true, externalNodes: 7,
			want: []stage{{Nodes: 7, Scale: false, Phases: []step{
				{Phase: "nochange", Reps: 5}, {Phase: "needless", Reruns: 10}, {Phase: "kubespray"}, restart(5), pools(5, false),
			}}},
		},
		{
			name:     "external above 1000 nodes: the large rounds",
			args:     []string{"--kubeconfig", "kc", "--small"},
			external: true, externalNodes: 1001,
			want: []stage{{Nodes: 1001, Scale: false, Phases: []step{
				{Phase: "nochange", Reps: 3}, {Phase: "needless", Reruns: 10}, {Phase: "kubespray"}, restart(1), pools(1, false),
			}}},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			assert.Equal(t, c.want, parseRun(t, c.args...).plan(c.external, c.externalNodes))
		})
	}
	// the round count follows the node count, not the position
	o := parseRun(t, "--nodes", "1000,1001", "--restart-nodes", "1000,1001", "--pools-nodes", "5000", "--rounds=4", "--large-rounds=2")
	var got []string
	for _, s := range o.plan(false, 0) {
		got = append(got, strings.Join(phases(s), ","))
		assert.Equal(t, map[int]int{1000: 4, 1001: 2}[s.Nodes], s.Phases[len(s.Phases)-1].Rounds, "%d nodes", s.Nodes)
	}
	assert.Equal(t, []string{"nochange,needless,kubespray,ansible,restart", "nochange,needless,ansible,restart"}, got)
}

func TestClusterOptions(t *testing.T) {
	qps, hb, ok := clusterOptions("kubernetes=v1.34.4 etcd=3.6 kwok=v0.8.0 harness=3 disable-qps-limits=1 heartbeat-factor=20 etcd=abc\n")
	assert.True(t, ok)
	assert.True(t, qps)
	assert.Equal(t, 20, hb)

	qps, hb, ok = clusterOptions("harness=3 disable-qps-limits=0 kwok=x")
	assert.True(t, ok)
	assert.False(t, qps)
	assert.Equal(t, 0, hb, "no heartbeat-factor: kwokctl's default")

	_, _, ok = clusterOptions("harness=2")
	assert.False(t, ok)
}

// hack/test/bench.sh documents each variable with the default of the flag it
// becomes: the two must agree, and every flag it passes must exist.
func TestBenchScriptMatchesFlags(t *testing.T) {
	raw, err := os.ReadFile("../../../hack/test/bench.sh")
	require.NoError(t, err)
	script := string(raw)
	o := newRunOptions()
	require.NoError(t, o.parse(nil, io.Discard))

	mapped := map[string]string{}
	for _, m := range regexp.MustCompile(`(?m)^flag (\w+) ([a-z-]+)$`).FindAllStringSubmatch(script, -1) {
		require.NotNil(t, o.fs.Lookup(m[2]), "bench.sh maps %s to --%s, which kps-bench run lacks", m[1], m[2])
		mapped[m[1]] = m[2]
	}
	require.NotEmpty(t, mapped)

	documented := regexp.MustCompile(`(?m)^#   (\w+)=("[^"]*"|\S+)(.*)$`).FindAllStringSubmatch(script, -1)
	require.NotEmpty(t, documented)
	for _, d := range documented {
		name, def, rest := d[1], strings.Trim(d[2], `"`), d[3]
		flagName, ok := mapped[name]
		if !assert.True(t, ok, "bench.sh documents %s but passes it to no flag", name) {
			continue
		}
		f := o.fs.Lookup(flagName)
		want := map[string]string{"1": "true", "0": "false"}[def]
		if want == "" || f.Value.Type() != "bool" {
			want = def
		}
		assert.Equal(t, want, f.DefValue, "%s's documented default", name)

		// a documented whole-number small default
		if m := regexp.MustCompile(`\(small: (\d+)\)`).FindStringSubmatch(rest); m != nil {
			small := parseRun(t, "--small")
			got := map[string]string{
				"nodes": small.Nodes.String(), "rounds": strconv.Itoa(small.Rounds), "large-rounds": strconv.Itoa(small.LargeRounds),
			}[flagName]
			assert.Equal(t, m[1], got, "%s's documented small default", name)
		}
	}
	for _, name := range []string{"KUBECONFIG", "CACHE_DIR"} {
		assert.Contains(t, script, name, "bench.sh passes %s on", name)
	}
}

func TestPad(t *testing.T) {
	dir := t.TempDir()
	small, old, out := filepath.Join(dir, "small"), filepath.Join(dir, "old"), filepath.Join(dir, "padded")
	require.NoError(t, os.WriteFile(small, []byte("0123456789"), 0o755))
	require.NoError(t, os.WriteFile(old, make([]byte, 1000), 0o755))

	require.NoError(t, pad(small, old, out))
	got, err := os.ReadFile(out)
	require.NoError(t, err)
	assert.Len(t, got, 1000, "the old build's size")
	assert.Equal(t, "0123456789", string(got[:10]), "the small build first")
	assert.NotEqual(t, make([]byte, 990), got[10:], "random bytes after it, not zeros")
	assert.True(t, executable(out))

	// an old build no bigger than the small one: the small build as it is
	require.NoError(t, os.WriteFile(old, []byte("01"), 0o755))
	require.NoError(t, pad(small, old, out))
	got, err = os.ReadFile(out)
	require.NoError(t, err)
	assert.Equal(t, "0123456789", string(got))
}

func TestPoolNames(t *testing.T) {
	names := poolNames("kube-proxy", 5)
	assert.Equal(t, []string{"kube-proxy-pool-1", "kube-proxy-pool-2", "kube-proxy-pool-3", "kube-proxy-pool-4", "kube-proxy-pool-5"}, names)
	for _, n := range names {
		assert.True(t, isPoolName("kube-proxy", n), n)
	}
	for _, n := range []string{"kube-proxy", "kube-proxy-pool-", "kube-proxy-pool-0", "kube-proxy-pool-x", "other-pool-1", "kube-proxy-1a2b3c4d5e"} {
		assert.False(t, isPoolName("kube-proxy", n), n)
	}
}

func TestAssignPools(t *testing.T) {
	pools := poolNames("kube-proxy", 5)
	var nodes []string
	for i := range 5000 {
		nodes = append(nodes, fmt.Sprintf("node-%06d", i))
	}
	got := assignPools(nodes, pools)
	require.Len(t, got, 5000)
	assert.Equal(t, []int{1000, 1000, 1000, 1000, 1000}, poolSizes(got, pools))
	// node i in the order of names goes to pool i mod 5, whatever the input order
	assert.Equal(t, "kube-proxy-pool-1", got["node-000000"])
	assert.Equal(t, "kube-proxy-pool-2", got["node-000001"])
	assert.Equal(t, "kube-proxy-pool-5", got["node-004999"])
	slices.Reverse(nodes)
	assert.Equal(t, got, assignPools(nodes, pools))

	// sizes differ by one at most
	small := assignPools([]string{"a", "b", "c", "d", "e", "f", "g"}, []string{"p1", "p2", "p3"})
	assert.Equal(t, map[string]string{"a": "p1", "b": "p2", "c": "p3", "d": "p1", "e": "p2", "f": "p3", "g": "p1"}, small)
	assert.Equal(t, []int{3, 2, 2}, poolSizes(small, []string{"p1", "p2", "p3"}))
	assert.Equal(t, "1000", sizesText([]int{1000, 1000}))
	assert.Equal(t, "3, 2, 2", sizesText([]int{3, 2, 2}))
}

// withoutPoolAffinity undoes rollout.KeepOffPools, whatever affinity the
// template had before.
func TestWithoutPoolAffinity(t *testing.T) {
	zone := corev1.NodeSelectorRequirement{Key: "topology.kubernetes.io/zone", Operator: corev1.NodeSelectorOpIn, Values: []string{"a"}}
	preferred := []corev1.PreferredSchedulingTerm{{Weight: 1, Preference: corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{zone}}}}
	for name, spec := range map[string]corev1.PodSpec{
		"no affinity":             {},
		"a pod anti-affinity":     {Affinity: &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{}}},
		"preferred node affinity": {Affinity: &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{PreferredDuringSchedulingIgnoredDuringExecution: preferred}}},
		"a required term": {Affinity: &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
			NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{zone}}}}}}},
		"two terms, one of fields": {Affinity: &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
			NodeSelectorTerms: []corev1.NodeSelectorTerm{
				{MatchExpressions: []corev1.NodeSelectorRequirement{zone}},
				{MatchFields: []corev1.NodeSelectorRequirement{{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{"n1"}}}},
			}}}}},
	} {
		t.Run(name, func(t *testing.T) {
			got := spec.DeepCopy()
			assert.False(t, hasPoolAffinity(got))
			rollout.KeepOffPools(got)
			require.True(t, rollout.KeepsOffPools(got))
			require.True(t, hasPoolAffinity(got))
			withoutPoolAffinity(got)
			assert.False(t, hasPoolAffinity(got))
			assert.Equal(t, &spec, got)
		})
	}
}

func TestCaughtUp(t *testing.T) {
	ds := func(gen, observed int64, desired int32) *appsv1.DaemonSet {
		return &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Generation: gen}, Status: appsv1.DaemonSetStatus{ObservedGeneration: observed, DesiredNumberScheduled: desired}}
	}
	names := []string{"kube-proxy", "p1", "p2"}
	for name, c := range map[string]struct {
		seen map[string]*appsv1.DaemonSet
		want int32
		ok   bool
	}{
		"all seen, the count":           {map[string]*appsv1.DaemonSet{"kube-proxy": ds(2, 2, 0), "p1": ds(1, 1, 10), "p2": ds(1, 1, 10)}, 20, true},
		"any count":                     {map[string]*appsv1.DaemonSet{"kube-proxy": ds(2, 2, 0), "p1": ds(1, 1, 10), "p2": ds(1, 1, 3)}, 0, true},
		"a pool not counted yet":        {map[string]*appsv1.DaemonSet{"kube-proxy": ds(2, 2, 0), "p1": ds(1, 1, 10), "p2": ds(1, 0, 0)}, 20, false},
		"the base's status is older":    {map[string]*appsv1.DaemonSet{"kube-proxy": ds(3, 2, 20), "p1": ds(1, 1, 10), "p2": ds(1, 1, 10)}, 0, false},
		"a pool not created yet":        {map[string]*appsv1.DaemonSet{"kube-proxy": ds(2, 2, 0), "p1": ds(1, 1, 10)}, 10, false},
		"a node short":                  {map[string]*appsv1.DaemonSet{"kube-proxy": ds(2, 2, 0), "p1": ds(1, 1, 10), "p2": ds(1, 1, 9)}, 20, false},
		"other daemonsets do not count": {map[string]*appsv1.DaemonSet{"kube-proxy": ds(2, 2, 0), "p1": ds(1, 1, 10), "p2": ds(1, 1, 10), "x": ds(1, 1, 5)}, 20, true},
	} {
		assert.Equal(t, c.ok, caughtUp(c.seen, names, c.want), name)
	}
}

func TestKubectlSteps(t *testing.T) {
	assert.Equal(t, [][]string{
		{"rollout", "restart", "daemonset/kube-proxy"},
		{"rollout", "status", "daemonset/kube-proxy", "--timeout", "30m0s"},
	}, kubectlSteps(layout{}.restarted("kube-proxy"), 30*time.Minute))
	pools := layout{Name: "2 pools", Pools: []string{"kube-proxy-pool-1", "kube-proxy-pool-2"}}
	assert.Equal(t, []string{"kube-proxy", "kube-proxy-pool-1", "kube-proxy-pool-2"}, pools.daemonSets("kube-proxy"), "the base's pods are watched too")
	assert.Equal(t, [][]string{
		{"rollout", "restart", "daemonset/kube-proxy-pool-1", "daemonset/kube-proxy-pool-2"},
		{"rollout", "status", "daemonset/kube-proxy-pool-1", "--timeout", "1m0s"},
		{"rollout", "status", "daemonset/kube-proxy-pool-2", "--timeout", "1m0s"},
	}, kubectlSteps(pools.restarted("kube-proxy"), time.Minute), "the base, on no node, is not restarted")
}

func TestServers(t *testing.T) {
	avoid := "https://10.96.0.2:6443"
	s := newServers(65535, avoid)
	seen := map[string]bool{}
	for range 1000 {
		a := s.next()
		assert.NotEqual(t, avoid, a)
		assert.False(t, seen[a], a)
		assert.Regexp(t, `^https://10\.96\.\d{1,3}\.\d{1,3}:6443$`, a)
		seen[a] = true
	}
	assert.True(t, seen["https://10.96.0.0:6443"], "wraps around")
}

func TestRestartedAll(t *testing.T) {
	var one syncResult
	one.Facts.KPS.Restarted = true
	assert.NoError(t, one.restartedAll([]string{"kube-proxy"}, "kube-proxy"))
	one.Facts.KPS.Restarted = false
	assert.ErrorContains(t, one.restartedAll([]string{"kube-proxy"}, "kube-proxy"), "kube-proxy")

	var pools syncResult
	pools.Pools = []syncPool{{DaemonSet: "kube-proxy", Restarted: true}, {DaemonSet: "p1", Restarted: true}, {DaemonSet: "p2", Restarted: false}}
	assert.NoError(t, pools.restartedAll([]string{"p1"}, "kube-proxy"))
	err := pools.restartedAll([]string{"p1", "p2", "p3"}, "kube-proxy")
	assert.ErrorContains(t, err, "p2, p3")
	assert.NotContains(t, err.Error(), "p1,")
}

func TestCompare(t *testing.T) {
	run := func(tool string, round int, wall float64, rssKB int64, peak int) restartRun {
		return restartRun{Tool: tool, Round: round, Wall: wall, WaitMaxRSSKB: rssKB, Pods: podReport{PeakUnavailable: peak}}
	}
	c := compare([]restartRun{
		run("kube-proxy-sync", 1, 10, 25000, 100), run("kubectl", 1, 20, 50000, 500),
		run("kubectl", 2, 10, 52000, 480), run("kube-proxy-sync", 2, 20, 26000, 101),
		run("kube-proxy-sync", 3, 30, 24000, 99), run("kubectl", 3, 15, 51000, 500),
	})
	assert.Len(t, c.Runs, 6)
	assert.Equal(t, stats{N: 3, Median: 20, Min: 10, Max: 30}, c.Binary)
	assert.Equal(t, stats{N: 3, Median: 15, Min: 10, Max: 20}, c.Kubectl)
	assert.InDelta(t, 20.0/15, c.Ratio, 1e-9)
	// per round, each pair run back to back: 0.5, 2, 2
	assert.Equal(t, stats{N: 3, Median: 2, Min: 0.5, Max: 2}, c.RoundRatio)
	assert.InDelta(t, 25000*1024/1e6, c.BinaryRSS.Median, 1e-9)
	assert.InDelta(t, 52000*1024/1e6, c.KubectlRSS.Max, 1e-9)
	assert.Equal(t, 101, c.BinaryPeak)
	assert.Equal(t, 500, c.KubectlPeak)

	// a round cut short by a failure has no ratio
	c = compare([]restartRun{run("kube-proxy-sync", 1, 10, 1, 0), run("kubectl", 1, 10, 1, 0), run("kubectl", 2, 10, 1, 0)})
	assert.Equal(t, 1, c.RoundRatio.N)
	assert.Equal(t, comparison{}, compare(nil))
}

func TestPoolsLayouts(t *testing.T) {
	restart := restartResult{Kind: "restart", Nodes: 5000, MaxUnavailable: "10%", comparison: comparison{Ratio: 1.1}}
	other := restartResult{Kind: "restart", Nodes: 1000, MaxUnavailable: "10%", comparison: comparison{Ratio: 0.9}}
	poolsOnly := layoutResult{Layout: "5 pools", Pools: 5, comparison: comparison{Ratio: 2}}
	p := poolsResult{Kind: "pools", Nodes: 5000, MaxUnavailable: "10%", Pools: 5, Layouts: []layoutResult{poolsOnly}}

	got := poolsLayouts(p, []restartResult{other, restart})
	require.Len(t, got, 2)
	assert.Equal(t, "restart", got[0].From, "the restart phase's rounds at the same count")
	assert.Equal(t, 1.1, got[0].Ratio)
	assert.Equal(t, 0, got[0].Pools)
	assert.Equal(t, poolsOnly, got[1])

	// its own one-DaemonSet rounds win
	own := layoutResult{Layout: "one DaemonSet", comparison: comparison{Ratio: 1.2}}
	p.Layouts = []layoutResult{own, poolsOnly}
	assert.Equal(t, []layoutResult{own, poolsOnly}, poolsLayouts(p, []restartResult{restart}))

	// none at this count or maxUnavailable: the pools alone
	p.Layouts = []layoutResult{poolsOnly}
	assert.Equal(t, []layoutResult{poolsOnly}, poolsLayouts(p, []restartResult{other}))
	restart.MaxUnavailable = "1"
	assert.Equal(t, []layoutResult{poolsOnly}, poolsLayouts(p, []restartResult{restart}))
}

func TestWritePoolsTables(t *testing.T) {
	run := func(tool string, round, order int, wall float64) restartRun {
		return restartRun{Tool: tool, Round: round, Order: order, Wall: wall, WaitMaxRSSKB: 25000, Load1: 1.5, Pods: podReport{Expected: 20, Replaced: 20, PeakUnavailable: 2}}
	}
	var r results
	r.Restart = []restartResult{{Kind: "restart", Nodes: 20, MaxUnavailable: "10%", comparison: compare([]restartRun{run("kube-proxy-sync", 1, 1, 3), run("kubectl", 1, 2, 4)})}}
	r.Pools = []poolsResult{{Kind: "pools", Nodes: 20, MaxUnavailable: "10%", Pools: 5, PoolNodes: []int{4, 4, 4, 4, 4}, Layouts: []layoutResult{
		{Layout: "5 pools", Pools: 5, comparison: compare([]restartRun{run("kube-proxy-sync", 1, 1, 8), run("kubectl", 1, 2, 6)})},
	}}}
	var out strings.Builder
	writePoolsTables(&out, r)
	text := out.String()
	assert.Contains(t, text, "| 20 | one DaemonSet (the restart phase's rounds) | 10% | kube-proxy-sync | 1 | 3.0s (3.0–3.0) | 0.75× (0.75–0.75 per round) | 2 | 25.6 MB (25.6) | 1.5 |\n")
	assert.Contains(t, text, "| 20 | 5 pools | 10% | kube-proxy-sync | 1 | 8.0s (8.0–8.0) | 1.33× (1.33–1.33 per round) | 2 | 25.6 MB (25.6) | 1.5 |\n")
	assert.Contains(t, text, "| 20 | 5 pools | 10% | `kubectl rollout restart` + `status` | 1 | 6.0s (6.0–6.0) | 1.00× |")
	assert.Contains(t, text, "| 20 | 5 pools of 4 nodes | 1 | 2 | kubectl | 6.0s | 25.6 MB | 2 | 20/20 | 1.5 |\n")

	out.Reset()
	writePoolsTables(&out, results{})
	assert.Empty(t, out.String(), "no pools phase, no table")
}
