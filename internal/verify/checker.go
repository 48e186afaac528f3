package verify

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"path"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sirupsen/logrus"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"
)

// Modes of --verify-health.
const (
	// Off: no connectivity checks.
	Off = "off"
	// Auto checks every node whose kube-proxy answered before the restart;
	// nodes it could not reach then (e.g. kwok's loopback addresses, which
	// the API server refuses to proxy to) are reported and not checked.
	Auto = "auto"
	// Required: every live node must answer before the restart, else the
	// run fails before it restarts anything.
	Required = "required"
)

// Modes lists the accepted --verify-health values.
var Modes = []string{Off, Auto, Required}

// NodeResult is one node's outcome, as reported in the facts.
type NodeResult struct {
	Node   string `json:"node"`
	Detail string `json:"detail"`
}

// Report is what the checks saw, as reported in the facts (connectivity).
type Report struct {
	Mode string `json:"mode"`
	// Baseline nodes answered before the restart; Checked were checked
	// after theirs, Passed of them passed.
	Baseline int `json:"baseline"`
	Checked  int `json:"checked"`
	Passed   int `json:"passed"`
	// Unreachable before the restart: not checked after (mode auto).
	Unreachable []NodeResult `json:"unreachable"`
	// UnhealthyBefore answered before the restart but not healthy: a
	// failure after is reported, never the restart's fault.
	UnhealthyBefore []NodeResult `json:"unhealthy_before"`
	// NotEligible are nodes whose kube-proxy said nodeEligible false.
	NotEligible []string `json:"not_eligible"`
	// Failed nodes passed readiness but not the checks.
	Failed []NodeResult `json:"failed"`
	// Traffic is the Service whose ClusterIP was connected to from each node, if any.
	Traffic string `json:"traffic,omitempty"`
	// TrafficPaths are the paths its connections took (node, pod, nodeport).
	TrafficPaths []string `json:"traffic_paths,omitempty"`
	// Requests are the API requests the checks made (node proxy GETs,
	// probe pods' create, watch and delete).
	Requests int64 `json:"api_requests"`
	// Seconds is the time spent checking after the restarts, all nodes together.
	Seconds float64 `json:"seconds"`
	// FirstSync is the first node checked (the canary): how long after the
	// restart its new kube-proxy's first sync came, as its /healthz
	// reports it. Nil until a node passed.
	FirstSync *FirstSync `json:"first_sync,omitempty"`
}

// FirstSync is when a restarted kube-proxy first synced its rules.
type FirstSync struct {
	Node string `json:"node"`
	// Seconds from the restart to the sync: kube-proxy's own time of it
	// (/healthz's per-family lastSync, >= 1.33, on the node's clock
	// corrected by its skew), else to the first healthy answer (an upper
	// bound, by the poll interval).
	Seconds float64 `json:"seconds"`
	// Source says which of the two.
	Source string `json:"source"`
	// TimeoutSeconds is the per-node health timeout the nodes after it
	// got: the one asked, or three times this sync when that is longer.
	TimeoutSeconds float64 `json:"timeout_seconds"`
}

// firstSyncFactor: the nodes after the canary get this many times its
// first sync to show theirs, when that is longer than the timeout asked.
const firstSyncFactor = 3

// Failure is a node whose kube-proxy passed readiness but not the checks.
type Failure struct {
	Node   string
	Detail string
}

func (f *Failure) Error() string {
	return fmt.Sprintf("connectivity check on node %s failed although its kube-proxy pod is Ready: %s", f.Node, f.Detail)
}

// Checker takes the baseline before the restart and checks each node after
// its new kube-proxy is Ready.
type Checker struct {
	Prober Prober
	// Traffic, when set, also connects to a Service from each node.
	Traffic *Traffic
	Clock   clock.WithTicker
	Log     *logrus.Entry
	Mode    string
	// Interval between two /healthz polls of one node; Timeout for a node
	// to show a sync after its restart.
	Interval, Timeout time.Duration
	// Since is when the restart was sent (local clock): the template's
	// PATCH. A node whose old pod the run deleted itself (a canary) has
	// the time of that delete instead (Restarted).
	Since time.Time
	// Parallel bounds the baseline's concurrent GETs.
	Parallel int
	// ProgressEvery: while the baseline waits for kube-proxies that are not
	// listening yet, a line says so this often (default 10s).
	ProgressEvery time.Duration

	mu     sync.Mutex
	before map[string]Health
	// waiting: nodes whose kube-proxy the baseline asks again, and since when.
	waiting map[string]time.Time
	// restarted: when the run deleted a node's old pod (see Restarted)
	restarted map[string]time.Time
	report    Report
	gets      atomic.Int64
}

func (c *Checker) healthz(ctx context.Context, node string) (Health, error) {
	c.gets.Add(1)
	return c.Prober.Healthz(ctx, node)
}

// Baseline asks every node's kube-proxy before the restart.
func (c *Checker) Baseline(ctx context.Context, nodes []string) error {
	c.before = map[string]Health{}
	c.report = Report{Mode: c.Mode, Unreachable: []NodeResult{}, UnhealthyBefore: []NodeResult{}, NotEligible: []string{}, Failed: []NodeResult{}}
	c.mu.Lock()
	c.waiting = map[string]time.Time{}
	c.mu.Unlock()
	every := c.ProgressEvery
	if every <= 0 {
		every = 10 * time.Second
	}
	ticker := c.Clock.NewTicker(every)
	done := make(chan struct{})
	reported := make(chan struct{})
	go func() {
		defer close(reported)
		c.reportWaiting(ticker, done)
	}()
	defer func() {
		close(done)
		<-reported
		ticker.Stop()
	}()
	par := max(c.Parallel, 1)
	sem := make(chan struct{}, par)
	var wg sync.WaitGroup
	for _, n := range nodes {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			h, err := c.baselineOf(ctx, n)
			c.mu.Lock()
			defer c.mu.Unlock()
			switch {
			case err != nil:
				c.report.Unreachable = append(c.report.Unreachable, NodeResult{n, err.Error()})
			default:
				c.before[n] = h
				c.report.Baseline++
				if h.Code != 200 {
					c.report.UnhealthyBefore = append(c.report.UnhealthyBefore, NodeResult{n, h.String()})
				}
			}
		}()
	}
	wg.Wait()
	sortResults(c.report.Unreachable)
	sortResults(c.report.UnhealthyBefore)
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if len(c.report.Unreachable) > 0 {
		first := c.report.Unreachable[0]
		if c.Mode == Required {
			return fmt.Errorf("connectivity baseline: kube-proxy's /healthz on %d node(s) cannot be reached through the API server's node proxy, e.g. node %s: %s; nothing was restarted (the restart is owed to the next run): fix the access (get on nodes/proxy, see roles/kpsync/files/rbac.yaml) or use --verify-health auto",
				len(c.report.Unreachable), first.Node, first.Detail)
		}
		c.Log.Warnf("connectivity baseline: %d node(s) not reachable through the API server's node proxy are not checked after their restart, e.g. %s: %s", len(c.report.Unreachable), first.Node, first.Detail)
	}
	return nil
}

// baselineOf asks node's kube-proxy once, and again every Interval for up
// to Timeout while the API server cannot reach it: a kube-proxy pod that
// has just started (kubeadm's has no readiness probe, so it is Ready at
// once) opens its health port a moment later.
func (c *Checker) baselineOf(ctx context.Context, node string) (Health, error) {
	start := c.Clock.Now()
	deadline := start.Add(c.Timeout)
	ticker := c.Clock.NewTicker(c.Interval)
	defer ticker.Stop()
	defer func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		delete(c.waiting, node)
	}()
	for {
		h, err := c.healthz(ctx, node)
		if err == nil || !notListeningYet(err) || !c.Clock.Now().Before(deadline) {
			return h, err
		}
		c.mu.Lock()
		c.waiting[node] = start
		c.mu.Unlock()
		select {
		case <-ctx.Done():
			return h, err
		case <-ticker.C():
		}
	}
}

// reportWaiting says, at each tick until done is closed, how many nodes
// the baseline is still asking again, so that a wait of up to Timeout is
// not silent.
func (c *Checker) reportWaiting(ticker clock.Ticker, done <-chan struct{}) {
	for {
		select {
		case <-done:
			return
		case <-ticker.C():
		}
		c.mu.Lock()
		n, longest, since := len(c.waiting), "", time.Time{}
		for node, t := range c.waiting {
			if longest == "" || t.Before(since) || (t.Equal(since) && node < longest) {
				longest, since = node, t
			}
		}
		c.mu.Unlock()
		if n > 0 {
			c.Log.Infof("connectivity baseline: still waiting for kube-proxy's health port on %d node(s), e.g. %s for %s; each node is asked every %s for up to %s (--verify-health-timeout)",
				n, longest, c.Clock.Since(since).Round(time.Second), c.Interval, c.Timeout)
		}
	}
}

// Restarted records that the run deleted node's old kube-proxy pod at at:
// its new kube-proxy must show a sync after that. A canary the run
// resumes has no PATCH of its own to start from (Since is zero), and a
// node's own delete is its restart anyway.
func (c *Checker) Restarted(node string, at time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.restarted == nil {
		c.restarted = map[string]time.Time{}
	}
	c.restarted[node] = at
}

// since is when node was restarted: its pod's delete, else the PATCH.
func (c *Checker) since(node string) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	if at, ok := c.restarted[node]; ok {
		return at
	}
	return c.Since
}

// Wants reports whether node is to be checked after its restart.
func (c *Checker) Wants(node string) bool {
	_, ok := c.before[node]
	return ok
}

// HealthyBefore reports whether node's kube-proxy answered 200 to the
// baseline.
func (c *Checker) HealthyBefore(node string) bool {
	h, ok := c.before[node]
	return ok && h.Code == http.StatusOK
}

// After checks node once its new kube-proxy pod is Ready: /healthz must
// answer 200 and show a sync since the restart, within Timeout; then the
// traffic check, if any. A *Failure is the node's; a node already
// unhealthy before is only reported.
func (c *Checker) After(ctx context.Context, node string) error {
	start := c.Clock.Now()
	defer func() {
		c.report.Seconds += c.Clock.Since(start).Seconds()
	}()
	c.report.Checked++
	since := c.since(node)
	detail := c.health(ctx, node, since)
	if detail == "" && c.Traffic != nil && since.Before(c.Traffic.Made) {
		// the sync the health check proved came before the Service was
		// made (a pod restarted by an earlier run, a canary resumed)
		if err := c.WaitInRules(ctx, node); err != nil {
			detail = fmt.Sprintf("the run's own Service %s is in no rules of its kube-proxy yet: %v", c.Traffic.Service, err)
		}
	}
	if detail == "" && c.Traffic != nil {
		if err := c.Traffic.Check(ctx, node); err != nil {
			detail = err.Error()
		}
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if detail == "" {
		c.report.Passed++
		return nil
	}
	if before := c.before[node]; before.Code != 200 {
		c.Log.Warnf("connectivity check on node %s failed (%s), as before the restart (%s): not the restart's doing", node, detail, before)
		return nil
	}
	c.report.Failed = append(c.report.Failed, NodeResult{node, detail})
	return &Failure{Node: node, Detail: detail}
}

// health polls /healthz until it proves a sync since the restart; it
// returns "" on success, else what it saw last.
func (c *Checker) health(ctx context.Context, node string, since time.Time) string {
	h, local, last := c.pollSync(ctx, node, "since the restart", func(h Health, local time.Time) bool { return h.SyncedSince(since, local) })
	if last != "" {
		return last
	}
	if h.NodeEligible != nil && !*h.NodeEligible {
		c.report.NotEligible = append(c.report.NotEligible, node)
	}
	c.firstSync(node, since, h, local)
	return ""
}

// WaitInRules waits until node's kube-proxy has the run's own Service
// (Traffic.Made) in its rules: its /healthz shows a sync since the Service
// was made (WaitSync), then the NodePort connects (Traffic.InRules).
func (c *Checker) WaitInRules(ctx context.Context, node string) error {
	if err := c.WaitSync(ctx, node, c.Traffic.Made); err != nil {
		return err
	}
	return c.Traffic.InRules(ctx, node)
}

// WaitSync polls node's /healthz until its kube-proxy shows a sync of one
// of its IP families that ended after since (the tool's clock), within
// Timeout. It is needed, not enough, for a Service the API server made by
// since to be in its rules: a sync that began before the Service reached
// kube-proxy may end after since, and the next waits out minSyncPeriod.
// Traffic.InRules proves it. A kube-proxy that reports no per-family sync
// time (before 1.33) cannot say, and passes at once.
func (c *Checker) WaitSync(ctx context.Context, node string, since time.Time) error {
	synced := func(h Health, local time.Time) bool { return h.SyncedAnyFamilySince(since, local) }
	if _, _, last := c.pollSync(ctx, node, "since "+since.UTC().Format(time.RFC3339), synced); last != "" {
		return fmt.Errorf("node %s: %s", node, last)
	}
	return nil
}

// pollSync polls node's /healthz until synced says it shows the sync
// wanted (described as what); last is "" on success, else what it saw last.
func (c *Checker) pollSync(ctx context.Context, node, what string, synced func(Health, time.Time) bool) (h Health, local time.Time, last string) {
	deadline := c.Clock.Now().Add(c.Timeout)
	ticker := c.Clock.NewTicker(c.Interval)
	defer ticker.Stop()
	last = "no answer"
	for {
		var err error
		h, err = c.healthz(ctx, node)
		local = c.Clock.Now()
		switch {
		case err != nil:
			last = err.Error()
		case synced(h, local):
			return h, local, ""
		default:
			last = h.String()
		}
		if !local.Before(deadline) {
			return h, local, fmt.Sprintf("kube-proxy's /healthz did not show a sync %s within %s: last answer: %s", what, c.Timeout, last)
		}
		select {
		case <-ctx.Done():
			return h, local, ctx.Err().Error()
		case <-ticker.C():
		}
	}
}

// Report is what the checks saw so far.
func (c *Checker) Report() Report {
	r := c.report
	r.Requests = c.gets.Load()
	if c.Traffic != nil {
		r.Traffic = c.Traffic.Service
		r.TrafficPaths = c.Traffic.PathsChecked()
		r.Requests += c.Traffic.Requests.Load()
	}
	return r
}

// IsFailure reports whether err is a node failing the checks.
func IsFailure(err error) bool {
	var f *Failure
	return errors.As(err, &f)
}

func sortResults(r []NodeResult) {
	sort.Slice(r, func(i, j int) bool { return r[i].Node < r[j].Node })
}

// firstSync records the first node's sync after the restart and paces
// the nodes after it: a kube-proxy whose first full sync takes minutes
// (nftables at tens of thousands of Services) must not fail a timeout
// guessed for a small cluster.
//
// It writes c.Timeout and c.report without the lock: After runs for one
// node at a time (the rollout's checkDone), never concurrently.
func (c *Checker) firstSync(node string, since time.Time, h Health, local time.Time) {
	if c.report.FirstSync != nil || since.IsZero() {
		return
	}
	f := &FirstSync{Node: node, Source: "first healthy answer"}
	took := local.Sub(since)
	if h.PerFamily && !h.LastSync.IsZero() {
		took, f.Source = h.LastSync.Sub(since.Add(h.CurrentTime.Sub(local))), "kube-proxy's lastSync"
	}
	took = max(took, 0)
	f.Seconds = took.Round(10 * time.Millisecond).Seconds()
	if paced := firstSyncFactor * took; paced > c.Timeout {
		c.Log.Infof("the first node checked, %s, synced %s after the restart: every node after it gets %s (%d times that) to show its sync, instead of %s", node, took.Round(time.Second), paced.Round(time.Second), firstSyncFactor, c.Timeout)
		c.Timeout = paced
	}
	f.TimeoutSeconds = c.Timeout.Seconds()
	c.report.FirstSync = f
}

// NodeProxy asks /healthz through the API server's node proxy:
// GET /api/v1/nodes/NODE:PORT/proxy/healthz. It needs get on nodes/proxy.
// It uses an HTTP client of its own over the rest config, because client-go's
// REST client drops the status code of an answer that is not a Status
// object, and kube-proxy answers 503 with its own JSON.
type NodeProxy struct {
	Client *http.Client
	Base   *url.URL
	Port   int
	// Requests counts the GETs sent.
	Requests int64
}

// NewNodeProxy builds the prober over cfg. wrap (the run's request
// counter) wraps the transport; the run's retrying transport is left out:
// the checks poll on their own, and a 503 from kube-proxy is an answer.
func NewNodeProxy(cfg *rest.Config, wrap func(http.RoundTripper) http.RoundTripper, port int, timeout time.Duration) (*NodeProxy, error) {
	c := rest.CopyConfig(cfg)
	c.WrapTransport = nil
	if wrap != nil {
		c.Wrap(wrap)
	}
	hc, err := rest.HTTPClientFor(c)
	if err != nil {
		return nil, fmt.Errorf("build the node proxy client: %w", err)
	}
	hc.Timeout = timeout
	base, _, err := rest.DefaultServerUrlFor(c)
	if err != nil {
		return nil, fmt.Errorf("build the node proxy client: %w", err)
	}
	return &NodeProxy{Client: hc, Base: base, Port: port}, nil
}

type healthz struct {
	LastUpdated  time.Time `json:"lastUpdated"`
	CurrentTime  time.Time `json:"currentTime"`
	NodeEligible *bool     `json:"nodeEligible"`
	// Healthy is only in the answers of kube-proxy >= 1.33, which report
	// per-family sync times in Status (none before the first sync)
	Healthy *bool `json:"healthy"`
	Status  map[string]struct {
		LastUpdated time.Time `json:"lastUpdated"`
	} `json:"status"`
}

// Healthz GETs kube-proxy's /healthz on node.
func (p *NodeProxy) Healthz(ctx context.Context, node string) (Health, error) {
	u := *p.Base
	u.Path = path.Join(u.Path, "/api/v1/nodes", node+":"+strconv.Itoa(p.Port), "proxy", "healthz")
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return Health{}, err
	}
	req.Header.Set("Accept", "application/json")
	p.Requests++
	resp, err := p.Client.Do(req)
	if err != nil {
		return Health{}, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if err != nil {
		return Health{}, err
	}
	return ParseHealthz(resp.StatusCode, body)
}
