package main

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/tools/clientcmd"
)

// desired waits until the DaemonSet's pods are settled (one Ready pod on
// every node it wants, none terminating, none left on deleted nodes: after a
// scale-down the pod garbage collector takes a while) and returns its node
// count. Every phase starts from there.
func (b *bench) desired(ctx context.Context) (int32, error) {
	w, err := b.watchPods(ctx)
	if err != nil {
		return 0, err
	}
	err = w.waitSettled(ctx, b.Timeout, false)
	rep := w.Stop()
	if err != nil {
		return 0, fmt.Errorf("daemonset %s/%s before the phase: %w", b.Namespace, b.Name, err)
	}
	return int32(rep.Expected), nil
}

// nodeCount is the DaemonSet's desiredNumberScheduled, as it is now.
func (b *bench) nodeCount(ctx context.Context) (int32, error) {
	ds, err := b.cs.AppsV1().DaemonSets(b.Namespace).Get(ctx, b.Name, metav1.GetOptions{})
	if err != nil {
		return 0, fmt.Errorf("get daemonset %s/%s: %w", b.Namespace, b.Name, err)
	}
	return ds.Status.DesiredNumberScheduled, nil
}

type rssResult struct {
	Kind  string `json:"kind"`
	Nodes int32  `json:"nodes"`
	Label string `json:"label"`
	timed
}

// rss runs one command (the arguments after --) and records its wall time
// and peak RSS, whatever its exit code: for measuring a wait that is cut
// short by its own --timeout on a cluster too slow to finish a rollout.
func (b *bench) rss(ctx context.Context, label string, argv []string) error {
	if len(argv) == 0 {
		return fmt.Errorf("rss: no command after --")
	}
	nodes, err := b.nodeCount(ctx)
	if err != nil {
		return err
	}
	r, err := b.exec(ctx, argv...)
	if err != nil {
		return err
	}
	b.log.Infof("nodes=%d %s: exit %d after %.1fs, peak RSS %.1f MB", nodes, label, r.ExitCode, r.Wall, float64(r.MaxRSSKB)*1024/1e6)
	return b.write(nodes, rssResult{Kind: "rss", Nodes: nodes, Label: label, timed: r})
}

// currentServer is the server: the ConfigMap's kubeconfig.conf has now, so
// that a run with it is a rerun with the same inputs.
func (b *bench) currentServer(ctx context.Context) (string, error) {
	cm, err := b.cs.CoreV1().ConfigMaps(b.Namespace).Get(ctx, b.Name, metav1.GetOptions{})
	if err != nil {
		return "", fmt.Errorf("get configmap %s/%s: %w", b.Namespace, b.Name, err)
	}
	kc, err := clientcmd.Load([]byte(cm.Data["kubeconfig.conf"]))
	if err != nil {
		return "", fmt.Errorf("configmap %s/%s kubeconfig.conf: %w", b.Namespace, b.Name, err)
	}
	for _, c := range kc.Clusters {
		return c.Server, nil
	}
	return "", fmt.Errorf("configmap %s/%s kubeconfig.conf has no cluster", b.Namespace, b.Name)
}

// syncArgv is one kube-proxy-sync run, over --daemonset and then each
// pool. The readiness probe is left alone (--probe-path none), so the
// ConfigMap alone decides a restart.
func (b *bench) syncArgv(server string, pools ...string) []string {
	argv := []string{b.Binary, "--kubeconfig", b.Kubeconfig, "-n", b.Namespace, "--configmap", b.Name, "--daemonset", b.Name,
		"--server", server, "--probe-path", "none", "--output", "json", "--timeout", b.Timeout.String()}
	for _, p := range pools {
		argv = append(argv, "--pool", p)
	}
	return argv
}

// unchangedRun runs the binary with the current inputs and fails unless it
// changed and restarted nothing.
func (b *bench) unchangedRun(ctx context.Context, server string) (timed, syncResult, error) {
	r, err := b.exec(ctx, b.syncArgv(server)...)
	if err != nil {
		return r, syncResult{}, err
	}
	s, err := parseSync(r)
	if err != nil {
		return r, s, err
	}
	if s.Changed || s.Facts.KPS.Restarted {
		return r, s, fmt.Errorf("an unchanged run changed something: %s", s.Msg)
	}
	return r, s, nil
}

// prime makes the next run a no-change one: the first run on a DaemonSet
// without the hash annotation adopts it (one PATCH, no restart).
func (b *bench) prime(ctx context.Context) (string, error) {
	server, err := b.currentServer(ctx)
	if err != nil {
		return "", err
	}
	r, err := b.exec(ctx, b.syncArgv(server)...)
	if err != nil {
		return "", err
	}
	s, err := parseSync(r)
	if err != nil {
		return "", err
	}
	if s.Facts.KPS.Restarted {
		b.log.Infof("priming run restarted the DaemonSet (%s): a restart was owed", s.Facts.KPS.RestartReason)
	}
	return server, nil
}

type noChangeRun struct {
	Wall          float64          `json:"wall_seconds"`
	MaxRSSKB      int64            `json:"max_rss_kb"`
	APIRequests   int64            `json:"api_requests"`
	ServerCounted int64            `json:"apiserver_request_total_delta"`
	ServerPerVerb map[string]int64 `json:"apiserver_requests"`
	KubectlGetCM  float64          `json:"kubectl_get_configmap_seconds"`
	Load1         float64          `json:"load1"`
}

type noChangeResult struct {
	Kind    string        `json:"kind"`
	Nodes   int32         `json:"nodes"`
	Runs    []noChangeRun `json:"runs"`
	Binary  stats         `json:"binary_wall_seconds"`
	Kubectl stats         `json:"kubectl_get_configmap_wall_seconds"`
	Ratio   float64       `json:"ratio_median"`
	// APIRequestsMax is the most requests any run made (the binary's count).
	APIRequestsMax    int64 `json:"api_requests_max"`
	ServerCountedMax  int64 `json:"apiserver_request_total_delta_max"`
	RequestCountMatch bool  `json:"request_count_matches_apiserver"`
}

// noChange: --reps no-change runs, each next to one `kubectl get configmap`,
// alternating which goes first. It does not wait for settled pods: what a
// no-change run costs does not depend on them.
func (b *bench) noChange(ctx context.Context) error {
	nodes, err := b.nodeCount(ctx)
	if err != nil {
		return err
	}
	server, err := b.prime(ctx)
	if err != nil {
		return err
	}
	getCM := append(slices.Clone(b.kubectlBase), "get", "configmap", b.Name)
	// warm kubectl's discovery cache, as on any admin's machine
	if r, err := b.exec(ctx, getCM...); err != nil || r.mustSucceed() != nil {
		return fmt.Errorf("kubectl get configmap: %v %v", err, r.mustSucceed())
	}
	res := noChangeResult{Kind: "nochange", Nodes: nodes, RequestCountMatch: true}
	var bw, kw []float64
	for i := 0; i < b.Reps; i++ {
		var run noChangeRun
		kubectlFirst := i%2 == 1
		if kubectlFirst {
			if run.KubectlGetCM, err = b.timeKubectl(ctx, getCM); err != nil {
				return err
			}
		}
		before, err := b.requestCounts(ctx)
		if err != nil {
			return err
		}
		r, s, err := b.unchangedRun(ctx, server)
		if err != nil {
			return err
		}
		after, err := b.requestCounts(ctx)
		if err != nil {
			return err
		}
		if !kubectlFirst {
			if run.KubectlGetCM, err = b.timeKubectl(ctx, getCM); err != nil {
				return err
			}
		}
		run.Wall, run.MaxRSSKB, run.APIRequests, run.Load1 = r.Wall, r.MaxRSSKB, s.Facts.KPS.APIRequests, r.Load1
		run.ServerCounted, run.ServerPerVerb = requestDelta(before, after)
		res.Runs = append(res.Runs, run)
		bw, kw = append(bw, run.Wall), append(kw, run.KubectlGetCM)
		res.APIRequestsMax = max(res.APIRequestsMax, run.APIRequests)
		res.ServerCountedMax = max(res.ServerCountedMax, run.ServerCounted)
		if run.ServerCounted != run.APIRequests {
			res.RequestCountMatch = false
		}
		b.log.Infof("nodes=%d run %d: %.3fs, %d requests (API server counted %d: %v), kubectl get cm %.3fs",
			nodes, i+1, run.Wall, run.APIRequests, run.ServerCounted, run.ServerPerVerb, run.KubectlGetCM)
	}
	res.Binary, res.Kubectl = statsOf(bw), statsOf(kw)
	if res.Kubectl.Median > 0 {
		res.Ratio = res.Binary.Median / res.Kubectl.Median
	}
	return b.write(nodes, res)
}

func (b *bench) timeKubectl(ctx context.Context, argv []string) (float64, error) {
	r, err := b.exec(ctx, argv...)
	if err != nil {
		return 0, err
	}
	return r.Wall, r.mustSucceed()
}

type needlessResult struct {
	Kind        string    `json:"kind"`
	Nodes       int32     `json:"nodes"`
	Reruns      int       `json:"reruns"`
	UIDsChanged int       `json:"pod_uids_changed"`
	Pods        podReport `json:"pod_watch"`
	Walls       stats     `json:"wall_seconds"`
}

// needless: --reruns unchanged reruns; pod UIDs before and after, and a pod
// watch throughout, must show no restart.
func (b *bench) needless(ctx context.Context) error {
	nodes, err := b.desired(ctx)
	if err != nil {
		return err
	}
	server, err := b.prime(ctx)
	if err != nil {
		return err
	}
	before, err := b.podUIDs(ctx)
	if err != nil {
		return err
	}
	w, err := b.watchPods(ctx)
	if err != nil {
		return err
	}
	var walls []float64
	for i := 0; i < b.Reruns; i++ {
		r, _, err := b.unchangedRun(ctx, server)
		if err != nil {
			w.Stop()
			return err
		}
		walls = append(walls, r.Wall)
	}
	rep := w.Stop()
	after, err := b.podUIDs(ctx)
	if err != nil {
		return err
	}
	changed := 0
	for node, uid := range before {
		if after[node] != uid {
			changed++
		}
	}
	res := needlessResult{Kind: "needless", Nodes: nodes, Reruns: b.Reruns, UIDsChanged: changed, Pods: rep, Walls: statsOf(walls)}
	b.log.Infof("nodes=%d: %d unchanged reruns, pod UIDs changed: %d, pods deleted: %d, peak unavailable: %d", nodes, b.Reruns, changed, rep.Deleted, rep.PeakUnavailable)
	if err := b.write(nodes, res); err != nil {
		return err
	}
	if changed > 0 || rep.Deleted > 0 || rep.PeakUnavailable > 0 {
		return fmt.Errorf("unchanged reruns restarted pods: %d pod UIDs changed, %d pods deleted, peak %d nodes without a Ready pod", changed, rep.Deleted, rep.PeakUnavailable)
	}
	return nil
}

// podUIDs maps node -> pod UID.
func (b *bench) podUIDs(ctx context.Context) (map[string]types.UID, error) {
	ds, err := b.cs.AppsV1().DaemonSets(b.Namespace).Get(ctx, b.Name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	list, err := b.cs.CoreV1().Pods(b.Namespace).List(ctx, metav1.ListOptions{LabelSelector: metav1.FormatLabelSelector(ds.Spec.Selector)})
	if err != nil {
		return nil, err
	}
	out := map[string]types.UID{}
	for _, p := range list.Items {
		out[p.Spec.NodeName] = p.UID
	}
	return out, nil
}

type kubesprayResult struct {
	Kind string `json:"kind"`
	// Nodes is the node count.
	Nodes   int32  `json:"nodes"`
	Command string `json:"command"`
	// DeleteSeconds is kubectl delete's own wall time; SettleSeconds from
	// its start until every node has a new Ready pod again.
	DeleteSeconds float64   `json:"delete_seconds"`
	SettleSeconds float64   `json:"settle_seconds"`
	Pods          podReport `json:"pod_watch"`
}

// kubespray: what kubespray does on every run where the ConfigMap's
// resourceVersion moved (which `kubectl replace` makes it do every time).
func (b *bench) kubespray(ctx context.Context) error {
	nodes, err := b.desired(ctx)
	if err != nil {
		return err
	}
	w, err := b.watchPods(ctx)
	if err != nil {
		return err
	}
	argv := append(slices.Clone(b.kubectlBase), "delete", "pod", "-l", "k8s-app=kube-proxy", "--force", "--grace-period=0")
	start := time.Now()
	r, err := b.exec(ctx, argv...)
	if err == nil {
		err = r.mustSucceed()
	}
	if err == nil {
		err = w.waitSettled(ctx, b.Timeout, true)
	}
	settle := time.Since(start).Seconds()
	rep := w.Stop()
	if err != nil {
		return err
	}
	res := kubesprayResult{Kind: "kubespray", Nodes: nodes, Command: "kubectl delete pod -l k8s-app=kube-proxy --force --grace-period=0",
		DeleteSeconds: r.Wall, SettleSeconds: settle, Pods: rep}
	b.log.Infof("nodes=%d: kubespray's delete replaced %d pods, peak %d nodes without a Ready pod, settled in %.1fs", nodes, rep.Replaced, rep.PeakUnavailable, settle)
	return b.write(nodes, res)
}

type restartRun struct {
	Tool  string  `json:"tool"`
	Round int     `json:"round"`
	Order int     `json:"order_in_round"`
	Wall  float64 `json:"wall_seconds"`
	// Steps: the binary is one process; kubectl is restart then status
	// (one status per DaemonSet).
	Steps []timed `json:"steps"`
	// WaitMaxRSSKB is the peak RSS of the process that waited: the binary,
	// or `kubectl rollout status` (the largest of them).
	WaitMaxRSSKB int64 `json:"wait_max_rss_kb"`
	APIRequests  int64 `json:"api_requests,omitempty"`
	// Load1 is the 1-minute load average when the tool started.
	Load1 float64 `json:"load1"`
	// RolloutSeconds is the binary's own rollout.duration_seconds: the wait
	// alone, so that wall - rollout is its time before and after the wait.
	// Only for one DaemonSet: with pools the binary reports it for the base.
	RolloutSeconds float64   `json:"rollout_seconds,omitempty"`
	Pods           podReport `json:"pod_watch"`
}

// comparison is the rounds of one tool against the other over the same
// DaemonSets, and what they sum up to.
type comparison struct {
	Runs    []restartRun `json:"runs"`
	Binary  stats        `json:"binary_wall_seconds"`
	Kubectl stats        `json:"kubectl_wall_seconds"`
	Ratio   float64      `json:"ratio_median"`
	// RoundRatio is the binary's wall over kubectl's within each round:
	// the spread of the ratio, each pair run back to back.
	RoundRatio  stats `json:"ratio_per_round"`
	BinaryRSS   stats `json:"binary_max_rss_mb"`
	KubectlRSS  stats `json:"kubectl_rollout_status_max_rss_mb"`
	BinaryPeak  int   `json:"binary_peak_unavailable"`
	KubectlPeak int   `json:"kubectl_peak_unavailable"`
}

// compare sums up runs: each tool's wall times and waiting-process RSS
// (MB), the ratio of the medians, and the ratio within each round that
// has both tools. Pure.
func compare(runs []restartRun) comparison {
	c := comparison{Runs: runs}
	var bw, kw, brss, krss []float64
	binary, kubectl := map[int]float64{}, map[int]float64{}
	var rounds []int
	for _, run := range runs {
		mb := float64(run.WaitMaxRSSKB) * 1024 / 1e6
		if run.Tool == "kubectl" {
			kw, krss = append(kw, run.Wall), append(krss, mb)
			c.KubectlPeak = max(c.KubectlPeak, run.Pods.PeakUnavailable)
			kubectl[run.Round] = run.Wall
		} else {
			bw, brss = append(bw, run.Wall), append(brss, mb)
			c.BinaryPeak = max(c.BinaryPeak, run.Pods.PeakUnavailable)
			binary[run.Round] = run.Wall
		}
		if !slices.Contains(rounds, run.Round) {
			rounds = append(rounds, run.Round)
		}
	}
	var perRound []float64
	for _, r := range rounds {
		if k, ok := kubectl[r]; ok && k > 0 {
			if bin, ok := binary[r]; ok {
				perRound = append(perRound, bin/k)
			}
		}
	}
	c.Binary, c.Kubectl = statsOf(bw), statsOf(kw)
	c.BinaryRSS, c.KubectlRSS = statsOf(brss), statsOf(krss)
	c.RoundRatio = statsOf(perRound)
	if c.Kubectl.Median > 0 {
		c.Ratio = c.Binary.Median / c.Kubectl.Median
	}
	return c
}

type restartResult struct {
	Kind           string `json:"kind"`
	Nodes          int32  `json:"nodes"`
	MaxUnavailable string `json:"max_unavailable"`
	comparison
}

// layout is what one restart goes over: the base DaemonSet (--name) alone,
// or the base, kept off every pool's node, and its pools.
type layout struct {
	// Name is how the report calls it: "one DaemonSet", "5 pools".
	Name  string
	Pools []string
}

// daemonSets are the DaemonSets whose pods the layout runs: the base first.
func (l layout) daemonSets(base string) []string {
	return append([]string{base}, l.Pools...)
}

// restarted are the DaemonSets kubectl restarts: the ones with nodes.
func (l layout) restarted(base string) []string {
	if len(l.Pools) > 0 {
		return l.Pools
	}
	return []string{base}
}

// kubectlSteps is kubectl's restart of the DaemonSets: one `rollout
// restart` of them all, then one `rollout status` each, in order. Pure.
func kubectlSteps(daemonSets []string, timeout time.Duration) [][]string {
	restart := []string{"rollout", "restart"}
	var status [][]string
	for _, ds := range daemonSets {
		restart = append(restart, "daemonset/"+ds)
		status = append(status, []string{"rollout", "status", "daemonset/" + ds, "--timeout", timeout.String()})
	}
	return append([][]string{restart}, status...)
}

// servers hands out API server addresses for restarts: a new one each
// time, never the one the ConfigMap has (a run with it changes nothing).
type servers struct {
	n     int
	avoid string
}

// newServers starts at seed (the bench's start time, so that a rerun does
// not begin where the last one ended).
func newServers(seed int64, avoid string) *servers {
	return &servers{n: int(seed % 65536), avoid: avoid}
}

func (s *servers) next() string {
	for {
		s.n = (s.n + 1) % 65536
		if a := fmt.Sprintf("https://10.96.%d.%d:6443", s.n>>8, s.n&255); a != s.avoid {
			return a
		}
	}
}

// restartSetup is where every restart phase starts: the nodes the
// DaemonSet wants, --max-unavailable set on it (restore puts the value
// before back) and the servers the rounds write in turn, primed.
func (b *bench) restartSetup(ctx context.Context) (nodes int32, srv *servers, restore func(), err error) {
	if nodes, err = b.desired(ctx); err != nil {
		return 0, nil, nil, err
	}
	before, err := b.setMaxUnavailable(ctx, b.MaxUnavail)
	if err != nil {
		return 0, nil, nil, err
	}
	restore = func() { b.restoreMaxUnavailable(ctx, before) }
	server, err := b.prime(ctx)
	if err != nil {
		restore()
		return 0, nil, nil, err
	}
	return nodes, newServers(time.Now().Unix(), server), restore, nil
}

// restart: --rounds rounds of one binary restart and one kubectl restart,
// alternating which goes first, with the same maxUnavailable.
func (b *bench) restart(ctx context.Context) error {
	nodes, srv, restore, err := b.restartSetup(ctx)
	if err != nil {
		return err
	}
	defer restore()
	runs, err := b.restartRounds(ctx, nodes, layout{Name: "one DaemonSet"}, srv)
	if err != nil {
		return err
	}
	return b.write(nodes, restartResult{Kind: "restart", Nodes: nodes, MaxUnavailable: b.MaxUnavail, comparison: compare(runs)})
}

// restoreMaxUnavailable puts back what setMaxUnavailable changed, also
// when the phase failed or was interrupted.
func (b *bench) restoreMaxUnavailable(ctx context.Context, v string) {
	if _, err := b.setMaxUnavailable(context.WithoutCancel(ctx), v); err != nil {
		b.log.Warnf("restore maxUnavailable %s: %v", v, err)
	}
}

// restartRounds runs --rounds rounds over l, each one binary restart and
// one kubectl restart, alternating which goes first.
func (b *bench) restartRounds(ctx context.Context, nodes int32, l layout, srv *servers) ([]restartRun, error) {
	var runs []restartRun
	for round := 1; round <= b.Rounds; round++ {
		tools := []string{"kube-proxy-sync", "kubectl"}
		if round%2 == 0 {
			tools = []string{"kubectl", "kube-proxy-sync"}
		}
		for order, tool := range tools {
			run, err := b.restartOnce(ctx, l, tool, srv.next())
			if err != nil {
				return runs, fmt.Errorf("%s, round %d, %s: %w", l.Name, round, tool, err)
			}
			run.Round, run.Order = round, order+1
			runs = append(runs, run)
			b.log.Infof("nodes=%d %s round %d %s: %.1fs, peak RSS %.1f MB, peak unavailable %d, replaced %d/%d (load %.1f)",
				nodes, l.Name, round, tool, run.Wall, float64(run.WaitMaxRSSKB)*1024/1e6, run.Pods.PeakUnavailable, run.Pods.Replaced, run.Pods.Expected, run.Load1)
		}
	}
	return runs, nil
}

// kubectlRestartedAt is the pod template annotation `kubectl rollout
// restart` sets, to the second.
const kubectlRestartedAt = "kubectl.kubernetes.io/restartedAt"

// afterLastKubectlRestart waits, outside the timed steps, until the second
// of the DaemonSet's last `kubectl rollout restart` is over: kubectl refuses
// a second restart within it ("if restart has already been triggered within
// the past second"), which a small fast cluster reaches when a round that
// starts with kubectl follows one that ended with it.
func (b *bench) afterLastKubectlRestart(ctx context.Context, name string) error {
	ds, err := b.cs.AppsV1().DaemonSets(b.Namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("daemonset %s/%s before kubectl's restart: %w", b.Namespace, name, err)
	}
	at, err := time.Parse(time.RFC3339, ds.Spec.Template.Annotations[kubectlRestartedAt])
	if err != nil {
		return nil // never restarted by kubectl
	}
	t := time.NewTimer(time.Until(at.Add(time.Second)))
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// restartOnce restarts every pod of l with one tool and waits until the
// pods are settled again. kube-proxy-sync: one run with --server set to
// server (and --pool for each pool), which must restart every DaemonSet
// with nodes. kubectl: kubectlSteps, the wall time their sum, the waiting
// process the largest `rollout status`.
func (b *bench) restartOnce(ctx context.Context, l layout, tool, server string) (restartRun, error) {
	run := restartRun{Tool: tool}
	w, err := b.watchPods(ctx, l.daemonSets(b.Name)...)
	if err != nil {
		return run, err
	}
	fail := func(err error) (restartRun, error) {
		w.Stop()
		return run, err
	}
	switch tool {
	case "kubectl":
		for _, ds := range l.restarted(b.Name) {
			if err := b.afterLastKubectlRestart(ctx, ds); err != nil {
				return fail(err)
			}
		}
		for i, verb := range kubectlSteps(l.restarted(b.Name), b.Timeout) {
			r, err := b.exec(ctx, append(slices.Clone(b.kubectlBase), verb...)...)
			if err == nil {
				err = r.mustSucceed()
			}
			if err != nil {
				return fail(err)
			}
			run.Steps = append(run.Steps, r)
			run.Wall += r.Wall
			if i > 0 { // the status steps wait
				run.WaitMaxRSSKB = max(run.WaitMaxRSSKB, r.MaxRSSKB)
			}
		}
	default:
		r, err := b.exec(ctx, b.syncArgv(server, l.Pools...)...)
		if err != nil {
			return fail(err)
		}
		s, err := parseSync(r)
		if err != nil {
			return fail(err)
		}
		if err := s.restartedAll(l.restarted(b.Name), b.Name); err != nil {
			return fail(fmt.Errorf("kube-proxy-sync --server %s: %w", server, err))
		}
		run.Steps = []timed{r}
		run.Wall, run.WaitMaxRSSKB, run.APIRequests = r.Wall, r.MaxRSSKB, s.Facts.KPS.APIRequests
		if len(l.Pools) == 0 {
			run.RolloutSeconds = s.Facts.KPS.Rollout.Duration
		}
	}
	if len(run.Steps) > 0 {
		run.Load1 = run.Steps[0].Load1
	}
	// the rollout is complete by the DaemonSet's status; wait until the pod
	// watch agrees, so the next measurement starts from a settled state
	err = w.waitSettled(ctx, b.Timeout, false)
	run.Pods = w.Stop()
	if err != nil {
		return run, err
	}
	if run.Pods.Replaced != run.Pods.Expected {
		return run, fmt.Errorf("%s replaced %d of %d pods", tool, run.Pods.Replaced, run.Pods.Expected)
	}
	return run, nil
}

// setMaxUnavailable patches the DaemonSet's rolling update and returns the
// value it had.
func (b *bench) setMaxUnavailable(ctx context.Context, v string) (string, error) {
	dss := b.cs.AppsV1().DaemonSets(b.Namespace)
	ds, err := dss.Get(ctx, b.Name, metav1.GetOptions{})
	if err != nil {
		return "", err
	}
	old := "1"
	if ru := ds.Spec.UpdateStrategy.RollingUpdate; ru != nil && ru.MaxUnavailable != nil {
		old = ru.MaxUnavailable.String()
	}
	if old == v {
		return old, nil
	}
	val := intstr.Parse(v)
	patch, _ := json.Marshal(map[string]any{"spec": map[string]any{"updateStrategy": map[string]any{
		"type": appsv1.RollingUpdateDaemonSetStrategyType, "rollingUpdate": map[string]any{"maxUnavailable": val}}}})
	if _, err := dss.Patch(ctx, b.Name, types.StrategicMergePatchType, patch, metav1.PatchOptions{FieldManager: "kps-bench"}); err != nil {
		return "", fmt.Errorf("set maxUnavailable of daemonset %s/%s to %s: %w", b.Namespace, b.Name, v, err)
	}
	b.log.Infof("maxUnavailable of daemonset %s/%s: %s -> %s", b.Namespace, b.Name, old, v)
	return old, nil
}
