package verify

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	logtest "github.com/sirupsen/logrus/hooks/test"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"
	clocktesting "k8s.io/utils/clock/testing"
)

var t0 = time.Date(2026, 11, 23, 5, 0, 0, 0, time.UTC)

func ts(d time.Duration) string { return t0.Add(d).Format(time.RFC3339Nano) }

// Answers of real kube-proxy versions (the formats of
// pkg/proxy/healthcheck at 1.27, 1.28-1.32 and 1.33+).
func TestParseHealthz(t *testing.T) {
	cases := []struct {
		name      string
		code      int
		body      string
		err       string
		perFamily bool
		lastSync  time.Time
		newest    time.Time
		eligible  *bool
	}{
		{name: "1.27 healthy", code: 200, body: fmt.Sprintf(`{"lastUpdated": %q,"currentTime": %q}`, ts(0), ts(0))},
		{name: "1.28 not eligible", code: 503, body: fmt.Sprintf(`{"lastUpdated": %q,"currentTime": %q, "nodeEligible": false}`, ts(-time.Minute), ts(0)), eligible: ptrTo(false)},
		{name: "1.34 synced", code: 200, body: fmt.Sprintf(`{"lastUpdated":%q,"currentTime":%q,"nodeEligible":true,"healthy":true,"status":{"IPv4":{"lastUpdated":%q,"healthy":true},"IPv6":{"lastUpdated":%q,"healthy":true}}}`, ts(0), ts(0), ts(-2*time.Second), ts(-3*time.Second)),
			perFamily: true, lastSync: t0.Add(-3 * time.Second), newest: t0.Add(-2 * time.Second), eligible: ptrTo(true)},
		{name: "1.34 before its first sync", code: 200, body: fmt.Sprintf(`{"lastUpdated":%q,"currentTime":%q,"nodeEligible":true,"healthy":true}`, ts(0), ts(0)),
			perFamily: true, eligible: ptrTo(true)},
		{name: "the API server will not proxy (kwok's loopback address)", code: 400,
			body: `{"kind":"Status","apiVersion":"v1","status":"Failure","message":"address not allowed","reason":"BadRequest","code":400}`,
			err:  "HTTP 400 from the API server, not kube-proxy's answer: address not allowed"},
		{name: "nothing listens", code: 503, body: `{"kind":"Status","message":"error trying to reach service: dial tcp 172.18.0.3:10256: connect: connection refused","code":503}`,
			err: "connection refused"},
		{name: "not JSON", code: 502, body: "Bad Gateway", err: "HTTP 502 from the API server, not kube-proxy's answer: Bad Gateway"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h, err := ParseHealthz(tc.code, []byte(tc.body))
			if tc.err != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), tc.err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.code, h.Code)
			assert.Equal(t, tc.perFamily, h.PerFamily)
			assert.True(t, tc.lastSync.Equal(h.LastSync), "last sync %s", h.LastSync)
			assert.True(t, tc.newest.Equal(h.NewestSync), "newest sync %s", h.NewestSync)
			assert.Equal(t, tc.eligible, h.NodeEligible)
		})
	}
}

func ptrTo[T any](v T) *T { return &v }

func TestSyncedSince(t *testing.T) {
	restart := t0
	synced := Health{Code: 200, PerFamily: true, LastSync: t0.Add(2 * time.Second), CurrentTime: t0.Add(3 * time.Second)}
	assert.True(t, synced.SyncedSince(restart, t0.Add(3*time.Second)))
	stale := Health{Code: 200, PerFamily: true, LastSync: t0.Add(-time.Second), CurrentTime: t0.Add(3 * time.Second)}
	assert.False(t, stale.SyncedSince(restart, t0.Add(3*time.Second)), "a sync before the restart is the old kube-proxy's")
	never := Health{Code: 200, PerFamily: true, CurrentTime: t0.Add(3 * time.Second)}
	assert.False(t, never.SyncedSince(restart, t0.Add(3*time.Second)), "no sync yet")
	assert.False(t, Health{Code: 503, PerFamily: true, LastSync: t0.Add(time.Minute)}.SyncedSince(restart, t0))
	assert.True(t, Health{Code: 200}.SyncedSince(restart, t0), "before 1.33 a 200 is all there is")
	// the node's clock runs 10s behind ours: its sync 2s after the restart reads 8s before it
	behind := Health{Code: 200, PerFamily: true, LastSync: t0.Add(-8 * time.Second), CurrentTime: t0.Add(-7 * time.Second)}
	assert.True(t, behind.SyncedSince(restart, t0.Add(3*time.Second)))
}

// An httptest server stands in for the API server's node proxy: the real
// path, the real status code of kube-proxy's 503 (client-go's REST client
// would drop it), one request per call.
func TestNodeProxy(t *testing.T) {
	var mu sync.Mutex
	var asked []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		asked = append(asked, r.URL.Path)
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case "/api/v1/nodes/a:10256/proxy/healthz":
			_, _ = fmt.Fprintf(w, `{"lastUpdated":%q,"currentTime":%q,"nodeEligible":true,"healthy":true,"status":{"IPv4":{"lastUpdated":%q,"healthy":true}}}`, ts(0), ts(0), ts(0))
		case "/api/v1/nodes/b:10256/proxy/healthz":
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = fmt.Fprintf(w, `{"lastUpdated":%q,"currentTime":%q,"nodeEligible":false,"healthy":true}`, ts(0), ts(0))
		default:
			w.WriteHeader(http.StatusBadRequest)
			_, _ = w.Write([]byte(`{"kind":"Status","message":"address not allowed","code":400}`))
		}
	}))
	defer srv.Close()
	var counted int
	count := func(rt http.RoundTripper) http.RoundTripper {
		return rtFunc(func(r *http.Request) (*http.Response, error) { counted++; return rt.RoundTrip(r) })
	}
	p, err := NewNodeProxy(&rest.Config{Host: srv.URL}, count, 10256, time.Second)
	require.NoError(t, err)
	ctx := context.Background()

	h, err := p.Healthz(ctx, "a")
	require.NoError(t, err)
	assert.Equal(t, 200, h.Code)
	assert.True(t, h.PerFamily)
	h, err = p.Healthz(ctx, "b")
	require.NoError(t, err)
	assert.Equal(t, 503, h.Code, "kube-proxy's own status code")
	assert.Equal(t, ptrTo(false), h.NodeEligible)
	_, err = p.Healthz(ctx, "kwok-0")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "address not allowed")
	assert.Equal(t, []string{"/api/v1/nodes/a:10256/proxy/healthz", "/api/v1/nodes/b:10256/proxy/healthz", "/api/v1/nodes/kwok-0:10256/proxy/healthz"}, asked)
	assert.Equal(t, 3, counted, "one request per check, no retries")
}

type rtFunc func(*http.Request) (*http.Response, error)

func (f rtFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// fakeProber answers from a script per node: each call takes the next
// answer, the last one repeats.
type fakeProber struct {
	mu      sync.Mutex
	answers map[string][]func() (Health, error)
	calls   map[string]int
}

func (f *fakeProber) Healthz(_ context.Context, node string) (Health, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	a := f.answers[node]
	if len(a) == 0 {
		return Health{}, fmt.Errorf("HTTP 400 from the API server, not kube-proxy's answer: address not allowed")
	}
	i := min(f.calls[node], len(a)-1)
	f.calls[node]++
	return a[i]()
}

func healthy(lastSync time.Time) func() (Health, error) {
	return func() (Health, error) {
		return Health{Code: 200, PerFamily: true, LastSync: lastSync, NewestSync: lastSync, CurrentTime: time.Now()}, nil
	}
}

func unhealthy() (Health, error) {
	return Health{Code: 503, PerFamily: true, CurrentTime: time.Now()}, nil
}

func quietLog() *logrus.Entry {
	l := logrus.New()
	l.SetOutput(io.Discard)
	return logrus.NewEntry(l)
}

func newChecker(p Prober, mode string) *Checker {
	return &Checker{Prober: p, Clock: clock.RealClock{}, Log: quietLog(), Mode: mode,
		Interval: time.Millisecond, Timeout: 50 * time.Millisecond, Parallel: 4}
}

func TestCheckerBaselineAndAfter(t *testing.T) {
	old := time.Now().Add(-time.Hour)
	p := &fakeProber{calls: map[string]int{}, answers: map[string][]func() (Health, error){
		// healthy before; after the restart: no sync yet, then a sync
		"a": {healthy(old), unhealthy, func() (Health, error) { return healthy(time.Now())() }},
		// healthy before; after the restart never syncs again: readiness alone would pass it
		"b": {healthy(old), healthy(old)},
		// unhealthy before and after: reported, not the restart's fault
		"c": {unhealthy},
		// "d" is unreachable (kwok): not checked
	}}
	c := newChecker(p, Auto)
	ctx := context.Background()
	require.NoError(t, c.Baseline(ctx, []string{"a", "b", "c", "d"}))
	assert.True(t, c.Wants("a"))
	assert.False(t, c.Wants("d"))
	c.Since = time.Now()

	require.NoError(t, c.After(ctx, "a"))
	err := c.After(ctx, "b")
	require.Error(t, err)
	assert.True(t, IsFailure(err))
	assert.Contains(t, err.Error(), "node b")
	assert.Contains(t, err.Error(), "did not show a sync since the restart")
	require.NoError(t, c.After(ctx, "c"), "unhealthy before: not the restart's doing")

	r := c.Report()
	assert.Equal(t, Auto, r.Mode)
	assert.Equal(t, 3, r.Baseline)
	assert.Equal(t, 3, r.Checked)
	assert.Equal(t, 1, r.Passed)
	assert.Equal(t, []NodeResult{{"d", "HTTP 400 from the API server, not kube-proxy's answer: address not allowed"}}, r.Unreachable)
	require.Len(t, r.UnhealthyBefore, 1)
	assert.Equal(t, "c", r.UnhealthyBefore[0].Node)
	require.Len(t, r.Failed, 1)
	assert.Equal(t, "b", r.Failed[0].Node)
	// a: 1 before + 2 after; b and c: polled until the timeout; d once
	assert.Equal(t, int64(p.calls["a"]+p.calls["b"]+p.calls["c"]+1), r.Requests)
	assert.Equal(t, 3, p.calls["a"], "a healthy node costs its baseline GET and one GET per poll until it shows a sync")
}

func TestCheckerRequiredFailsOnAnUnreachableBaseline(t *testing.T) {
	old := time.Now().Add(-time.Hour)
	p := &fakeProber{calls: map[string]int{}, answers: map[string][]func() (Health, error){"a": {healthy(old)}}}
	err := newChecker(p, Required).Baseline(context.Background(), []string{"a", "kwok-0"})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "1 node(s)")
	assert.Contains(t, err.Error(), "kwok-0")
	assert.Contains(t, err.Error(), "nothing was restarted")
}

// Budget: a healthy node whose kube-proxy has synced by the time its pod
// is Ready costs exactly 2 API requests (one GET before, one after).
func TestCheckerRequestsPerHealthyNode(t *testing.T) {
	old := time.Now().Add(-time.Hour)
	nodes := []string{"a", "b", "c", "d", "e"}
	p := &fakeProber{calls: map[string]int{}, answers: map[string][]func() (Health, error){}}
	for _, n := range nodes {
		p.answers[n] = []func() (Health, error){healthy(old), func() (Health, error) { return healthy(time.Now())() }}
	}
	c := newChecker(p, Required)
	require.NoError(t, c.Baseline(context.Background(), nodes))
	c.Since = time.Now().Add(-time.Millisecond)
	for _, n := range nodes {
		require.NoError(t, c.After(context.Background(), n))
	}
	assert.Equal(t, int64(2*len(nodes)), c.Report().Requests)
}

// A kube-proxy that has just started (kubeadm's pod has no readiness probe,
// so it is Ready at once) refuses connections on its health port for a
// moment: the baseline asks again while the API server cannot reach it,
// up to the timeout; a refusal by the API server itself is final at once.
func TestCheckerBaselineWaitsForAStartingKubeProxy(t *testing.T) {
	old := time.Now().Add(-time.Hour)
	refused := func() (Health, error) {
		return Health{}, &NotKubeProxyError{Code: 503, Msg: "error trying to reach service: dial tcp 172.17.0.4:10256: connect: connection refused"}
	}
	forbidden := func() (Health, error) {
		return Health{}, &NotKubeProxyError{Code: 403, Msg: `nodes "b" is forbidden: cannot get resource "nodes/proxy"`}
	}
	p := &fakeProber{calls: map[string]int{}, answers: map[string][]func() (Health, error){
		"starting": {refused, refused, healthy(old)},
		"down":     {refused},
		"b":        {forbidden},
	}}
	c := newChecker(p, Auto)
	require.NoError(t, c.Baseline(context.Background(), []string{"starting", "down", "b"}))
	assert.True(t, c.Wants("starting"), "answered on the third try")
	assert.Equal(t, 3, p.calls["starting"])
	assert.False(t, c.Wants("down"))
	assert.Greater(t, p.calls["down"], 3, "asked again until the timeout")
	assert.False(t, c.Wants("b"))
	assert.Equal(t, 1, p.calls["b"], "a 403 is not asked again")

	p = &fakeProber{calls: map[string]int{}, answers: map[string][]func() (Health, error){"starting": {refused, healthy(old)}}}
	require.NoError(t, newChecker(p, Required).Baseline(context.Background(), []string{"starting"}),
		"required: a kube-proxy that answers within the timeout is no reason to fail")
}

func TestCheckerBaselineSaysWhatItWaitsFor(t *testing.T) {
	refused := func() (Health, error) {
		return Health{}, &NotKubeProxyError{Code: 503, Msg: "error trying to reach service: dial tcp 172.17.0.4:10256: connect: connection refused"}
	}
	p := &fakeProber{calls: map[string]int{}, answers: map[string][]func() (Health, error){
		"up":   {healthy(time.Now().Add(-time.Hour))},
		"down": {refused},
	}}
	clk := clocktesting.NewFakeClock(time.Now())
	logger, hook := logtest.NewNullLogger()
	c := &Checker{Prober: p, Clock: clk, Log: logrus.NewEntry(logger), Mode: Auto,
		Interval: time.Second, Timeout: time.Minute, Parallel: 4, ProgressEvery: 10 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- c.Baseline(context.Background(), []string{"up", "down"}) }()

	waiting := func() int {
		c.mu.Lock()
		defer c.mu.Unlock()
		return len(c.waiting)
	}
	progress := func() []string {
		var lines []string
		for _, e := range hook.AllEntries() {
			if e.Level == logrus.InfoLevel {
				lines = append(lines, e.Message)
			}
		}
		return lines
	}
	require.Eventually(t, func() bool { return waiting() == 1 }, 10*time.Second, time.Millisecond,
		"the baseline asks node down again")
	assert.Empty(t, progress(), "nothing to say before ProgressEvery has passed")

	clk.Step(10 * time.Second)
	require.Eventually(t, func() bool { return len(progress()) > 0 }, 10*time.Second, time.Millisecond,
		"a progress line after ProgressEvery")
	assert.Equal(t, []string{"connectivity baseline: still waiting for kube-proxy's health port on 1 node(s), e.g. down for 10s; each node is asked every 1s for up to 1m0s (--verify-health-timeout)"}, progress())

	// past the timeout: node down's next try is its last, whether or not
	// it has taken the 10s tick yet (its ticker holds one tick)
	clk.Step(time.Minute)
	select {
	case err := <-errc:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		require.FailNow(t, "the baseline did not end after its timeout")
	}
	assert.Zero(t, waiting(), "a node that gave up is no longer reported")
	assert.False(t, c.Wants("down"))
	assert.True(t, c.Wants("up"))
}

// The first node checked (the canary) says how long its new kube-proxy took
// to sync after the restart, from kube-proxy's own lastSync, and the nodes
// after it get three times that to show theirs when the timeout asked is
// shorter; a sync faster than the timeout keeps the timeout asked.
func TestCheckerFirstSyncPacesTheNodesAfterIt(t *testing.T) {
	now := time.Now()
	since := now.Add(-2 * time.Second)
	p := &fakeProber{calls: map[string]int{}, answers: map[string][]func() (Health, error){
		"canary": {healthy(since.Add(-time.Hour)), healthy(since.Add(1500 * time.Millisecond))},
		"b":      {healthy(since.Add(-time.Hour)), healthy(now)},
	}}
	c := newChecker(p, Required)
	c.Timeout = time.Second
	ctx := context.Background()
	require.NoError(t, c.Baseline(ctx, []string{"canary", "b"}))
	c.Since = since
	require.NoError(t, c.After(ctx, "canary"))
	require.NoError(t, c.After(ctx, "b"))
	f := c.Report().FirstSync
	require.NotNil(t, f)
	assert.Equal(t, "canary", f.Node, "the first node checked, not a later one")
	assert.Equal(t, "kube-proxy's lastSync", f.Source)
	assert.InDelta(t, 1.5, f.Seconds, 0.05, "from the restart to kube-proxy's own sync time, skew corrected")
	assert.InDelta(t, 4.5, f.TimeoutSeconds, 0.05, "three times the canary's sync, longer than the 1s asked")
	assert.InDelta(t, 4.5, c.Timeout.Seconds(), 0.05)

	fast := newChecker(&fakeProber{calls: map[string]int{}, answers: map[string][]func() (Health, error){
		"canary": {healthy(since.Add(-time.Hour)), healthy(since.Add(10 * time.Millisecond))},
	}}, Required)
	fast.Timeout = time.Minute
	require.NoError(t, fast.Baseline(ctx, []string{"canary"}))
	fast.Since = since
	require.NoError(t, fast.After(ctx, "canary"))
	assert.Equal(t, time.Minute, fast.Timeout, "a fast sync keeps the timeout asked")
	assert.Equal(t, 60.0, fast.Report().FirstSync.TimeoutSeconds)
}

// WaitSync waits for a sync that ended after the instant given (a Service
// made then is in the rules), polling, and names the node and what it saw
// last when none comes within Timeout; a kube-proxy with no per-family
// sync time cannot say, and passes at once.
func TestCheckerWaitSync(t *testing.T) {
	made := time.Now()
	p := &fakeProber{calls: map[string]int{}, answers: map[string][]func() (Health, error){
		"a":     {healthy(made.Add(-time.Second)), healthy(made.Add(-time.Second)), healthy(made.Add(300 * time.Millisecond))},
		"stale": {healthy(made.Add(-time.Minute))},
		"old":   {func() (Health, error) { return Health{Code: 200}, nil }},
		// IPv4 synced after, IPv6 (no Service of it changed) long before
		"dual": {func() (Health, error) {
			return Health{Code: 200, PerFamily: true, LastSync: made.Add(-time.Hour), NewestSync: made.Add(time.Second), CurrentTime: time.Now()}, nil
		}},
	}}
	c := newChecker(p, Required)
	ctx := context.Background()
	require.NoError(t, c.WaitSync(ctx, "a", made))
	assert.Equal(t, 3, p.calls["a"], "polled until the sync after the instant")
	err := c.WaitSync(ctx, "stale", made)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "node stale")
	assert.Contains(t, err.Error(), "did not show a sync since "+made.UTC().Format(time.RFC3339))
	require.NoError(t, c.WaitSync(ctx, "old", made))
	assert.Equal(t, 1, p.calls["old"])
	require.NoError(t, c.WaitSync(ctx, "dual", made), "one family's sync is enough")
}

// A node whose kube-proxy restarted before the run made its own Service
// (a canary an earlier, killed run restarted): its health shows a sync
// since the restart at once, yet the Service is in no rule of it until a
// sync after the Service was made. The traffic check waits for that sync
// before any connection, which would otherwise leave the node unrouted;
// one that never comes fails the node, and nothing connected.
func TestCheckerTrafficWaitsForTheServiceInTheRules(t *testing.T) {
	// restarted shortly before (a first sync that does not stretch the
	// timeout, see TestCheckerFirstSyncPacesTheNodesAfterIt)
	made := time.Now()
	restarted := made.Add(-20 * time.Millisecond)
	for _, tc := range []struct {
		name     string
		answers  []func() (Health, error)
		polls    int
		connects bool
	}{
		{"synced since", []func() (Health, error){healthy(made.Add(-10 * time.Millisecond)), healthy(made.Add(-10 * time.Millisecond)), healthy(made.Add(time.Millisecond))}, 3, true},
		{"never synced since", []func() (Health, error){healthy(made.Add(-10 * time.Millisecond))}, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := &fakeProber{calls: map[string]int{}, answers: map[string][]func() (Health, error){"a": tc.answers}}
			cs, tr := kubelet(corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: []corev1.ContainerStatus{runningStatus()},
				Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}})
			tr.Made = made
			c := newChecker(p, Required)
			c.Traffic = tr
			ctx := context.Background()
			require.NoError(t, c.Baseline(ctx, []string{"a"}))
			c.Since = restarted
			err := c.After(ctx, "a")
			created := 0
			for _, a := range cs.Actions() {
				if a.GetVerb() == "create" {
					created++
				}
			}
			if tc.connects {
				require.NoError(t, err)
				assert.Equal(t, tc.polls, p.calls["a"], "the baseline, the health check, then polled until the sync since the Service was made")
				assert.Equal(t, 1, created, "then the connection")
				return
			}
			require.Error(t, err)
			assert.Contains(t, err.Error(), "the run's own Service default/web is in no rules of its kube-proxy yet")
			assert.Zero(t, created, "no connection before the Service is in the rules")
		})
	}
}

// The same node, checked on every path through the run's own Service: a
// sync since the Service was made is not enough (it may have begun before
// the Service reached kube-proxy), so the NodePort, which never leaves the
// node, connects first; the ClusterIP paths follow only once it did.
func TestCheckerTrafficConnectsToTheClusterIPOnlyOnceTheNodePortDid(t *testing.T) {
	made := time.Now()
	for _, tc := range []struct {
		name     string
		connects map[string]bool
		order    []string
	}{
		{"in the rules", map[string]bool{PathNode: true, PathPod: true, PathNodePort: true}, []string{PathNodePort, PathNode, PathPod, PathNodePort}},
		{"not yet", map[string]bool{PathNode: true, PathPod: true}, []string{PathNodePort}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := &fakeProber{calls: map[string]int{}, answers: map[string][]func() (Health, error){"a": {healthy(made.Add(time.Millisecond))}}}
			tr, order := perPath(tc.connects)
			tr.Made = made
			c := newChecker(p, Required)
			c.Traffic = tr
			ctx := context.Background()
			require.NoError(t, c.Baseline(ctx, []string{"a"}))
			c.Since = made.Add(-20 * time.Millisecond)
			err := c.After(ctx, "a")
			got := order()
			require.NotEmpty(t, got)
			assert.Equal(t, PathNodePort, got[0], "the NodePort first")
			assert.ElementsMatch(t, tc.order, got)
			if len(tc.order) > 1 {
				require.NoError(t, err)
				return
			}
			require.Error(t, err)
			assert.Contains(t, err.Error(), "the run's own Service kube-system/kube-proxy-sync-probe is in no rules of its kube-proxy yet: path nodeport, tried first")
		})
	}
}
