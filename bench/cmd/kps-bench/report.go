package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strings"
	"time"
)

// Targets from the benchmark's issue; reported against, never asserted.
const (
	targetNoChangeRequests = 4
	targetRestartRatio     = 1.0
	// the waiting process's peak RSS, at every node count up to 5000
	targetRSSMB    = 40
	targetBinaryMB = 20
)

type sizeResult struct {
	Kind  string           `json:"kind"`
	Bytes map[string]int64 `json:"bytes"`
}

// size records the stripped dist builds' sizes (hack/build/dist.sh builds them
// with -trimpath -ldflags '-s -w').
func (o *options) size(_ context.Context) error {
	res := sizeResult{Kind: "size", Bytes: map[string]int64{}}
	for _, arch := range []string{"amd64", "arm64"} {
		fi, err := os.Stat(filepath.Join(o.DistDir, "kube-proxy-sync-linux-"+arch))
		if err != nil {
			return fmt.Errorf("dist build for %s: %w (run hack/build/dist.sh)", arch, err)
		}
		res.Bytes["linux/"+arch] = fi.Size()
	}
	return o.write(0, res)
}

type machine struct {
	NProc         int    `json:"nproc"`
	MemTotalBytes int64  `json:"mem_total_bytes"`
	GoVersion     string `json:"go_version"`
	OS            string `json:"os"`
	Kernel        string `json:"kernel"`
	K8sServer     string `json:"kubernetes_server_version"`
	Kubectl       string `json:"kubectl_version"`
	QPS           string `json:"control_plane_qps"`
	Binary        string `json:"kube_proxy_sync_version"`
}

type results struct {
	Date      string            `json:"date"`
	Small     bool              `json:"small"`
	Machine   machine           `json:"machine"`
	NoChange  []noChangeResult  `json:"nochange"`
	Needless  []needlessResult  `json:"needless"`
	Kubespray []kubesprayResult `json:"kubespray"`
	Restart   []restartResult   `json:"restart"`
	Pools     []poolsResult     `json:"pools,omitempty"`
	RSS       []rssResult       `json:"rss,omitempty"`
	Ansible   []ansibleResult   `json:"ansible,omitempty"`
	Size      *sizeResult       `json:"size,omitempty"`
}

// report merges the phase files of --dir, prints the markdown tables and
// writes --results.
func (o *options) report(ctx context.Context, out io.Writer) error {
	files, err := filepath.Glob(filepath.Join(o.Dir, "*.json"))
	if err != nil {
		return err
	}
	sort.Strings(files)
	res := results{Date: time.Now().UTC().Format("2006-01-02"), Small: o.Small, Machine: o.machine(ctx)}
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		var kind struct{ Kind string }
		if err := json.Unmarshal(raw, &kind); err != nil {
			return fmt.Errorf("%s: %w", f, err)
		}
		var target any
		switch kind.Kind {
		case "nochange":
			res.NoChange = append(res.NoChange, noChangeResult{})
			target = &res.NoChange[len(res.NoChange)-1]
		case "needless":
			res.Needless = append(res.Needless, needlessResult{})
			target = &res.Needless[len(res.Needless)-1]
		case "kubespray":
			res.Kubespray = append(res.Kubespray, kubesprayResult{})
			target = &res.Kubespray[len(res.Kubespray)-1]
		case "restart":
			res.Restart = append(res.Restart, restartResult{})
			target = &res.Restart[len(res.Restart)-1]
		case "pools":
			res.Pools = append(res.Pools, poolsResult{})
			target = &res.Pools[len(res.Pools)-1]
		case "rss":
			res.RSS = append(res.RSS, rssResult{})
			target = &res.RSS[len(res.RSS)-1]
		case "ansible":
			res.Ansible = append(res.Ansible, ansibleResult{})
			target = &res.Ansible[len(res.Ansible)-1]
		case "size":
			res.Size = &sizeResult{}
			target = res.Size
		default:
			continue
		}
		if err := json.Unmarshal(raw, target); err != nil {
			return fmt.Errorf("%s: %w", f, err)
		}
	}
	sort.SliceStable(res.NoChange, func(i, j int) bool { return res.NoChange[i].Nodes < res.NoChange[j].Nodes })
	sort.SliceStable(res.Needless, func(i, j int) bool { return res.Needless[i].Nodes < res.Needless[j].Nodes })
	sort.SliceStable(res.Kubespray, func(i, j int) bool { return res.Kubespray[i].Nodes < res.Kubespray[j].Nodes })
	sort.SliceStable(res.Restart, func(i, j int) bool { return res.Restart[i].Nodes < res.Restart[j].Nodes })
	sort.SliceStable(res.Pools, func(i, j int) bool { return res.Pools[i].Nodes < res.Pools[j].Nodes })
	writeTables(out, res)
	if o.Results == "" {
		return nil
	}
	b, err := json.MarshalIndent(res, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(o.Results), 0o755); err != nil {
		return err
	}
	return os.WriteFile(o.Results, append(b, '\n'), 0o644)
}

func (o *options) machine(ctx context.Context) machine {
	m := machine{NProc: runtime.NumCPU(), GoVersion: runtime.Version(), OS: runtime.GOOS + "/" + runtime.GOARCH, QPS: o.QPSNote}
	if f, err := os.Open("/proc/meminfo"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			var kb int64
			if n, _ := fmt.Sscanf(sc.Text(), "MemTotal: %d kB", &kb); n == 1 {
				m.MemTotalBytes = kb * 1024
			}
		}
		_ = f.Close()
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	if o.Binary != "" {
		if raw, err := exec.CommandContext(ctx, o.Binary, "--version").Output(); err == nil {
			m.Binary = strings.TrimSpace(string(raw))
		}
	}
	if o.Kubectl != "" {
		var v struct {
			Client struct{ GitVersion string } `json:"clientVersion"`
			Server struct{ GitVersion string } `json:"serverVersion"`
		}
		args := []string{"version", "-o", "json"}
		if o.Kubeconfig != "" {
			args = append(args, "--kubeconfig", o.Kubeconfig)
		}
		raw, _ := exec.CommandContext(ctx, o.Kubectl, args...).Output()
		if json.Unmarshal(raw, &v) == nil {
			m.Kubectl, m.K8sServer = v.Client.GitVersion, v.Server.GitVersion
		}
	}
	return m
}

// loadRange is "min–max" of load averages.
func loadRange(xs []float64) string {
	if len(xs) == 0 {
		return "–"
	}
	st := statsOf(xs)
	if st.Min == st.Max {
		return fmt.Sprintf("%.1f", st.Min)
	}
	return fmt.Sprintf("%.1f–%.1f", st.Min, st.Max)
}

func mark(ok bool) string {
	if ok {
		return "met"
	}
	return "**missed**"
}

func writeTables(w io.Writer, r results) {
	m := r.Machine
	fmt.Fprintf(w, "Measured %s: %s; %d cores, %.1f GiB, %s, %s; Kubernetes %s, kubectl %s; control plane %s.\n\n",
		r.Date, m.Binary, m.NProc, float64(m.MemTotalBytes)/(1<<30), m.GoVersion, m.OS, m.K8sServer, m.Kubectl, m.QPS)

	fmt.Fprintf(w, "### 1. No-change run\n\n")
	fmt.Fprintf(w, "| nodes | API requests (binary) | API server counted | wall median (min–max) | `kubectl get cm` median | ratio | load (1 min) |\n|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, n := range r.NoChange {
		var loads []float64
		for _, run := range n.Runs {
			loads = append(loads, run.Load1)
		}
		fmt.Fprintf(w, "| %d | %d | %d | %.3fs (%.3f–%.3f) | %.3fs | %.2f× | %s |\n", n.Nodes, n.APIRequestsMax, n.ServerCountedMax,
			n.Binary.Median, n.Binary.Min, n.Binary.Max, n.Kubectl.Median, n.Ratio, loadRange(loads))
	}

	fmt.Fprintf(w, "\n### 2. Needless restarts\n\n")
	fmt.Fprintf(w, "| nodes | method | pods restarted | peak nodes without a Ready kube-proxy | time until all Ready again |\n|---:|---|---:|---:|---:|\n")
	for _, n := range r.Needless {
		fmt.Fprintf(w, "| %d | kube-proxy-sync, %d unchanged reruns | %d (UIDs changed: %d) | %d | – |\n", n.Nodes, n.Reruns, n.Pods.Deleted, n.UIDsChanged, n.Pods.PeakUnavailable)
	}
	for _, k := range r.Kubespray {
		fmt.Fprintf(w, "| %d | kubespray: `%s`, once | %d of %d | %d | %.1fs |\n", k.Nodes, k.Command, k.Pods.Replaced, k.Pods.Expected, k.Pods.PeakUnavailable, k.SettleSeconds)
	}

	fmt.Fprintf(w, "\n### 3. Restart run, and 4. memory of the waiting process\n\n")
	fmt.Fprintf(w, "| nodes | maxUnavailable | tool | rounds | wall median (min–max) | ratio to kubectl | peak unavailable | peak RSS median (max) | load (1 min) |\n|---:|---|---|---:|---:|---:|---:|---:|---:|\n")
	for _, x := range r.Restart {
		loads := map[string][]float64{}
		for _, run := range x.Runs {
			loads[run.Tool] = append(loads[run.Tool], run.Load1)
		}
		fmt.Fprintf(w, "| %d | %s | kube-proxy-sync | %d | %.1fs (%.1f–%.1f) | %.2f× (%.2f–%.2f per round) | %d | %.1f MB (%.1f) | %s |\n", x.Nodes, x.MaxUnavailable, x.Binary.N,
			x.Binary.Median, x.Binary.Min, x.Binary.Max, x.Ratio, x.RoundRatio.Min, x.RoundRatio.Max, x.BinaryPeak, x.BinaryRSS.Median, x.BinaryRSS.Max, loadRange(loads["kube-proxy-sync"]))
		fmt.Fprintf(w, "| %d | %s | `kubectl rollout restart` + `status` | %d | %.1fs (%.1f–%.1f) | 1.00× | %d | %.1f MB (%.1f) | %s |\n", x.Nodes, x.MaxUnavailable, x.Kubectl.N,
			x.Kubectl.Median, x.Kubectl.Min, x.Kubectl.Max, x.KubectlPeak, x.KubectlRSS.Median, x.KubectlRSS.Max, loadRange(loads["kubectl"]))
	}
	fmt.Fprintf(w, "\nEvery restart round, in the order run (the binary's wait is its own rollout.duration_seconds; the rest of its wall time is before the restart PATCH and after the wait):\n\n| nodes | round | order | tool | wall | wait | waiting process peak RSS | peak unavailable | pods replaced | load (1 min) |\n|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|\n")
	for _, x := range r.Restart {
		for _, run := range x.Runs {
			wait := "–"
			if run.RolloutSeconds > 0 {
				wait = fmt.Sprintf("%.1fs", run.RolloutSeconds)
			}
			fmt.Fprintf(w, "| %d | %d | %d | %s | %.1fs | %s | %.1f MB | %d | %d/%d | %.1f |\n", x.Nodes, run.Round, run.Order, run.Tool, run.Wall, wait,
				float64(run.WaitMaxRSSKB)*1024/1e6, run.Pods.PeakUnavailable, run.Pods.Replaced, run.Pods.Expected, run.Load1)
		}
	}

	writePoolsTables(w, r)

	if len(r.RSS) > 0 {
		fmt.Fprintf(w, "\nSingle memory measurements (a wait cut short by its own --timeout counts: it watched the rollout as long):\n\n| nodes | what | exit | wall | peak RSS |\n|---:|---|---:|---:|---:|\n")
		for _, x := range r.RSS {
			fmt.Fprintf(w, "| %d | %s | %d | %.1fs | %.1f MB |\n", x.Nodes, x.Label, x.ExitCode, x.Wall, float64(x.MaxRSSKB)*1024/1e6)
		}
	}

	if len(r.Ansible) > 0 {
		fmt.Fprintf(w, "\n### The Ansible task (module copy included)\n\nA no-change task of the binary module on localhost over the local connection (as in molecule's default scenario), timed by the tasks around it; each build in turn, rotating which goes first.\n\n| nodes | build | size | task median (min–max) | `ansible-playbook` median | reps | load (1 min) |\n|---:|---|---:|---:|---:|---:|---:|\n")
		for _, a := range r.Ansible {
			for _, bld := range a.Builds {
				var loads []float64
				for _, run := range a.Runs {
					if run.Build == bld.Build {
						loads = append(loads, run.Load1)
					}
				}
				fmt.Fprintf(w, "| %d | %s | %.1f MB | %.3fs (%.3f–%.3f) | %.2fs | %d | %s |\n", a.Nodes, bld.Build, float64(bld.Bytes)/1e6,
					bld.Task.Median, bld.Task.Min, bld.Task.Max, bld.Playbook.Median, bld.Task.N, loadRange(loads))
			}
		}
	}

	if r.Size != nil {
		fmt.Fprintf(w, "\n### 5. Binary size (stripped, `hack/build/dist.sh`)\n\n| build | bytes | MB |\n|---|---:|---:|\n")
		for _, arch := range []string{"linux/amd64", "linux/arm64"} {
			fmt.Fprintf(w, "| %s | %d | %.1f |\n", arch, r.Size.Bytes[arch], float64(r.Size.Bytes[arch])/1e6)
		}
	}

	fmt.Fprintf(w, "\n### Targets\n\n| target | measured | |\n|---|---|---|\n")
	var maxReq int64
	for _, n := range r.NoChange {
		maxReq = max(maxReq, n.APIRequestsMax)
	}
	if len(r.NoChange) > 0 {
		fmt.Fprintf(w, "| no-change run ≤ %d API requests at every node count | at most %d | %s |\n", targetNoChangeRequests, maxReq, mark(maxReq <= targetNoChangeRequests))
	}
	for _, x := range r.Restart {
		fmt.Fprintf(w, "| restart ≤ %.1f× kubectl's wall time (%d nodes) | %.2f× | %s |\n", targetRestartRatio, x.Nodes, x.Ratio, mark(x.Ratio <= targetRestartRatio))
		fmt.Fprintf(w, "| peak RSS ≤ %d MB (%d nodes; kubectl rollout status: %.1f MB) | %.1f MB | %s |\n", targetRSSMB, x.Nodes, x.KubectlRSS.Max, x.BinaryRSS.Max, mark(x.BinaryRSS.Max <= targetRSSMB))
	}
	for _, x := range r.RSS {
		if strings.HasPrefix(x.Label, "kube-proxy-sync") {
			mb := float64(x.MaxRSSKB) * 1024 / 1e6
			fmt.Fprintf(w, "| peak RSS ≤ %d MB (%d nodes, %s) | %.1f MB | %s |\n", targetRSSMB, x.Nodes, x.Label, mb, mark(mb <= targetRSSMB))
		}
	}
	if r.Size != nil {
		for _, arch := range []string{"linux/amd64", "linux/arm64"} {
			mb := float64(r.Size.Bytes[arch]) / 1e6
			fmt.Fprintf(w, "| binary ≤ %d MB (%s) | %.1f MB | %s |\n", targetBinaryMB, arch, mb, mark(mb <= targetBinaryMB))
		}
	}
}

// poolsLayouts are the layouts of one pools phase, side by side: one
// DaemonSet first, from the phase or, when it left that to the restart
// phase (--one-daemonset=false), from the restart phase at the same node
// count and maxUnavailable (From "restart"); then the pools. Pure.
func poolsLayouts(p poolsResult, restarts []restartResult) []layoutResult {
	var out []layoutResult
	if !slices.ContainsFunc(p.Layouts, func(l layoutResult) bool { return l.Pools == 0 }) {
		for _, x := range restarts {
			if x.Nodes == p.Nodes && x.MaxUnavailable == p.MaxUnavailable {
				out = append(out, layoutResult{Layout: "one DaemonSet", From: "restart", comparison: x.comparison})
				break
			}
		}
	}
	return append(out, p.Layouts...)
}

func writePoolsTables(w io.Writer, r results) {
	if len(r.Pools) == 0 {
		return
	}
	fmt.Fprintf(w, "\n### Pools: one DaemonSet against pools\n\nThe same restart of every node's kube-proxy as one DaemonSet, and with the nodes dealt out to pool DaemonSets (the base kept off them): kube-proxy-sync with `--pool` for each restarts one pool after the other, kubectl restarts every pool in one `rollout restart` and then waits with one `rollout status` each. Every DaemonSet has the same maxUnavailable. The waiting process's peak RSS is the binary's, or the largest `rollout status`'s.\n\n")
	fmt.Fprintf(w, "| nodes | layout | maxUnavailable | tool | rounds | wall median (min–max) | ratio to kubectl | peak unavailable | peak RSS median (max) | load (1 min) |\n|---:|---|---|---|---:|---:|---:|---:|---:|---:|\n")
	for _, p := range r.Pools {
		for _, l := range poolsLayouts(p, r.Restart) {
			name := l.Layout
			if l.From == "restart" {
				name += " (the restart phase's rounds)"
			}
			loads := map[string][]float64{}
			for _, run := range l.Runs {
				loads[run.Tool] = append(loads[run.Tool], run.Load1)
			}
			fmt.Fprintf(w, "| %d | %s | %s | kube-proxy-sync | %d | %.1fs (%.1f–%.1f) | %.2f× (%.2f–%.2f per round) | %d | %.1f MB (%.1f) | %s |\n", p.Nodes, name, p.MaxUnavailable, l.Binary.N,
				l.Binary.Median, l.Binary.Min, l.Binary.Max, l.Ratio, l.RoundRatio.Min, l.RoundRatio.Max, l.BinaryPeak, l.BinaryRSS.Median, l.BinaryRSS.Max, loadRange(loads["kube-proxy-sync"]))
			fmt.Fprintf(w, "| %d | %s | %s | `kubectl rollout restart` + `status` | %d | %.1fs (%.1f–%.1f) | 1.00× | %d | %.1f MB (%.1f) | %s |\n", p.Nodes, name, p.MaxUnavailable, l.Kubectl.N,
				l.Kubectl.Median, l.Kubectl.Min, l.Kubectl.Max, l.KubectlPeak, l.KubectlRSS.Median, l.KubectlRSS.Max, loadRange(loads["kubectl"]))
		}
	}
	fmt.Fprintf(w, "\nEvery round of the pools phase, in the order run (nodes per pool in the layout's name):\n\n| nodes | layout | round | order | tool | wall | waiting process peak RSS | peak unavailable | pods replaced | load (1 min) |\n|---:|---|---:|---:|---|---:|---:|---:|---:|---:|\n")
	for _, p := range r.Pools {
		for _, l := range p.Layouts {
			name := l.Layout
			if l.Pools > 0 && len(p.PoolNodes) > 0 {
				name = fmt.Sprintf("%s of %s nodes", l.Layout, sizesText(p.PoolNodes))
			}
			for _, run := range l.Runs {
				fmt.Fprintf(w, "| %d | %s | %d | %d | %s | %.1fs | %.1f MB | %d | %d/%d | %.1f |\n", p.Nodes, name, run.Round, run.Order, run.Tool, run.Wall,
					float64(run.WaitMaxRSSKB)*1024/1e6, run.Pods.PeakUnavailable, run.Pods.Replaced, run.Pods.Expected, run.Load1)
			}
		}
	}
}

// sizesText is "1000" when all pools are that size, else "1000, 999, ...".
func sizesText(sizes []int) string {
	parts := make([]string, len(sizes))
	same := true
	for i, n := range sizes {
		parts[i] = fmt.Sprint(n)
		same = same && n == sizes[0]
	}
	if same && len(sizes) > 0 {
		return parts[0]
	}
	return strings.Join(parts, ", ")
}
