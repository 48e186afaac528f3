package main

import (
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
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
	cases := []struct {
		name          string
		args          []string
		external      bool
		externalNodes int
		want          []stage
	}{
		{
			name: "small: every phase at 20 nodes but Ansible, one round",
			args: []string{"--small"},
			want: []stage{{Nodes: 20, Scale: true, Phases: []step{
				{Phase: "nochange", Reps: 3}, {Phase: "needless", Reruns: 10}, {Phase: "kubespray"}, restart(1),
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
			name: "full at 5000: the large rounds, no kubespray",
			args: []string{"--nodes", "5000", "--ansible=0"},
			want: []stage{{Nodes: 5000, Scale: true, Phases: []step{{Phase: "nochange", Reps: 5}, {Phase: "needless", Reruns: 10}, restart(3)}}},
		},
		{
			name:     "external: the cluster's count, every phase, no scaling",
			args:     []string{"--kubeconfig", "kc", "--ansible=false"},
			external: true, externalNodes: 7,
			want: []stage{{Nodes: 7, Scale: false, Phases: []step{
				{Phase: "nochange", Reps: 5}, {Phase: "needless", Reruns: 10}, {Phase: "kubespray"}, restart(5),
			}}},
		},
		{
			name:     "external above 1000 nodes: the large rounds",
			args:     []string{"--kubeconfig", "kc", "--small"},
			external: true, externalNodes: 1001,
			want: []stage{{Nodes: 1001, Scale: false, Phases: []step{
				{Phase: "nochange", Reps: 3}, {Phase: "needless", Reruns: 10}, {Phase: "kubespray"}, restart(1),
			}}},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			assert.Equal(t, c.want, parseRun(t, c.args...).plan(c.external, c.externalNodes))
		})
	}
	// the round count follows the node count, not the position
	o := parseRun(t, "--nodes", "1000,1001", "--restart-nodes", "1000,1001", "--rounds=4", "--large-rounds=2")
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
