package main

import (
	"cmp"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/sirupsen/logrus"
	"github.com/spf13/pflag"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// runOptions are the flags of `kps-bench run`: the whole benchmark, from the
// node counts to the report. hack/test/bench.sh turns the BENCH_* variables
// into these flags.
type runOptions struct {
	Small            bool
	Nodes            nodeList
	RestartNodes     nodeList
	KubesprayNodes   nodeList
	PoolsNodes       nodeList
	Pools            int
	Rounds           int
	LargeRounds      int
	Reps             int
	Reruns           int
	MaxUnavailable   string
	Ansible          bool
	OldCommit        string
	DisableQPSLimits bool
	HeartbeatFactor  int
	Binary           string
	Kubeconfig       string
	CacheDir         string
	ClusterName      string
	AnsiblePlaybook  string
	Results          string
	Timeout          time.Duration

	fs *pflag.FlagSet
}

// Defaults of the full run (make bench); --small changes the ones its help
// names, unless they are given.
func newRunOptions() *runOptions {
	return &runOptions{
		Nodes: nodeList{10, 1000}, RestartNodes: nodeList{1000, 5000}, KubesprayNodes: nodeList{1000},
		PoolsNodes: nodeList{5000}, Pools: 5,
		Rounds: 5, LargeRounds: 3, Reps: 5, Reruns: 10, MaxUnavailable: "10%",
		Ansible: true, OldCommit: "3d17aa1", DisableQPSLimits: true, HeartbeatFactor: 20,
		Binary: "bin/kube-proxy-sync", CacheDir: ".cache", ClusterName: "kps",
		AnsiblePlaybook: ".venv/kubespray/bin/ansible-playbook", Timeout: 30 * time.Minute,
	}
}

const runUsage = `Usage: kps-bench run [flags]

The whole benchmark (make bench; make bench-small with --small): for each
node count of --nodes, brings the local control plane there
(hack/cluster/up.sh), runs the phases that count gets, then records the
binary sizes and prints the report (markdown on stdout, the results JSON in
--results). With --kubeconfig, that cluster is used as it is, at its node
count, with every phase, and never scaled.

A small run scales the running cluster to its node count and back to the
count it had, also when a phase fails, and keeps the cluster's
DISABLE_QPS_LIMITS and HEARTBEAT_FACTOR (others would recreate it).

Run it from the repository root. Logs go to stderr.

Flags:
`

func (o *runOptions) addFlags(fs *pflag.FlagSet) {
	fs.BoolVar(&o.Small, "small", o.Small, "the small run of make test: one round at 20 nodes on the running cluster, which is scaled back afterwards; changes the defaults marked 'small:'")
	fs.Var(&o.Nodes, "nodes", "node counts to run at, in order, separated by commas or spaces (small: 20)")
	fs.Var(&o.RestartNodes, "restart-nodes", "node counts that get the restart phase (small: every count of --nodes)")
	fs.Var(&o.KubesprayNodes, "kubespray-nodes", "node counts that get kubespray's forced delete of every pod (small: every count of --nodes)")
	fs.Var(&o.PoolsNodes, "pools-nodes", "node counts that get the pools phase: the restart as one DaemonSet and as --pools pools (small: every count of --nodes)")
	fs.IntVar(&o.Pools, "pools", o.Pools, "pools in the pools phase, the nodes dealt out to them in turn")
	fs.IntVar(&o.Rounds, "rounds", o.Rounds, fmt.Sprintf("restart rounds at %d nodes or fewer, each one kube-proxy-sync and one kubectl restart (small: 1)", largeNodes))
	fs.IntVar(&o.LargeRounds, "large-rounds", o.LargeRounds, fmt.Sprintf("restart rounds above %d nodes (small: 1)", largeNodes))
	fs.IntVar(&o.Reps, "reps", o.Reps, "measured runs of each command in the no-change and Ansible phases (small: 3)")
	fs.IntVar(&o.Reruns, "reruns", o.Reruns, "unchanged reruns in the needless-restart phase")
	fs.StringVar(&o.MaxUnavailable, "max-unavailable", o.MaxUnavailable, "the DaemonSet's maxUnavailable in the restart phase, for both tools")
	fs.BoolVar(&o.Ansible, "ansible", o.Ansible, "time the Ansible task with the release build, the same padded to the old build's size, and the old build (--old-commit); makes the kubespray venv and dist/ (small: false)")
	fs.StringVar(&o.OldCommit, "old-commit", o.OldCommit, "the old build of the Ansible phase: the last commit with client-go's full clientset (48 MB); skipped when this clone lacks it")
	fs.BoolVar(&o.DisableQPSLimits, "disable-qps-limits", o.DisableQPSLimits, "DISABLE_QPS_LIMITS for hack/cluster/up.sh (small: the running cluster's, else false)")
	fs.IntVar(&o.HeartbeatFactor, "heartbeat-factor", o.HeartbeatFactor, "HEARTBEAT_FACTOR for hack/cluster/up.sh: kwok's node leases and status that many times less often than a kubelet's; 0: kwokctl's default (small: the running cluster's, else 0)")
	fs.StringVar(&o.Binary, "binary", o.Binary, "the kube-proxy-sync build under test (made with make build when missing)")
	fs.StringVar(&o.Kubeconfig, "kubeconfig", o.Kubeconfig, "benchmark this cluster as it is (no scaling, every phase); empty: the local control plane")
	fs.StringVar(&o.CacheDir, "cache-dir", o.CacheDir, "the cache (CACHE_DIR of hack/): the local cluster, its kubectl, this run's phase files")
	fs.StringVar(&o.ClusterName, "cluster-name", o.ClusterName, "the local cluster's name (CLUSTER_NAME of hack/cluster/up.sh)")
	fs.StringVar(&o.AnsiblePlaybook, "ansible-playbook", o.AnsiblePlaybook, "the kubespray toolchain's ansible-playbook, for the Ansible phase")
	fs.StringVar(&o.Results, "results", o.Results, "where to write the results JSON (default: bench/results/<date>.json; small: <cache-dir>/bench/small-results.json)")
	fs.DurationVar(&o.Timeout, "timeout", o.Timeout, "bound of one rollout or settle wait")
}

// parse reads the flags and fills the defaults --small changes.
func (o *runOptions) parse(args []string, errOut io.Writer) error {
	o.fs = pflag.NewFlagSet("kps-bench run", pflag.ContinueOnError)
	o.fs.SetOutput(errOut)
	o.fs.Usage = func() {
		fmt.Fprint(errOut, runUsage)
		o.fs.PrintDefaults()
	}
	o.addFlags(o.fs)
	if err := o.fs.Parse(args); err != nil {
		return err
	}
	if o.fs.NArg() > 0 {
		return fmt.Errorf("run takes no arguments, got %q", o.fs.Args())
	}
	if o.Small {
		o.smallDefaults()
	}
	if o.Results == "" {
		o.Results = filepath.Join("bench", "results", time.Now().UTC().Format("2006-01-02")+".json")
		if o.Small {
			o.Results = filepath.Join(o.CacheDir, "bench", "small-results.json")
		}
	}
	return o.validate()
}

// smallDefaults: what --small changes, for every flag not given.
func (o *runOptions) smallDefaults() {
	set := func(name string, f func()) {
		if !o.fs.Changed(name) {
			f()
		}
	}
	set("nodes", func() { o.Nodes = nodeList{20} })
	set("restart-nodes", func() { o.RestartNodes = o.Nodes })
	set("kubespray-nodes", func() { o.KubesprayNodes = o.Nodes })
	set("pools-nodes", func() { o.PoolsNodes = o.Nodes })
	set("rounds", func() { o.Rounds = 1 })
	set("large-rounds", func() { o.LargeRounds = 1 })
	set("reps", func() { o.Reps = 3 })
	set("ansible", func() { o.Ansible = false })
	set("disable-qps-limits", func() { o.DisableQPSLimits = false })
	set("heartbeat-factor", func() { o.HeartbeatFactor = 0 })
}

func (o *runOptions) validate() error {
	var errs []error
	if len(o.Nodes) == 0 && o.Kubeconfig == "" {
		errs = append(errs, errors.New("--nodes: no node count"))
	}
	for name, v := range map[string]int{"--rounds": o.Rounds, "--large-rounds": o.LargeRounds, "--reps": o.Reps, "--reruns": o.Reruns, "--pools": o.Pools} {
		if v < 1 {
			errs = append(errs, fmt.Errorf("%s must be at least 1, got %d", name, v))
		}
	}
	if o.HeartbeatFactor < 0 {
		errs = append(errs, fmt.Errorf("--heartbeat-factor must be 0 (kwokctl's default) or more, got %d", o.HeartbeatFactor))
	}
	if o.MaxUnavailable == "" {
		errs = append(errs, errors.New("--max-unavailable is empty"))
	}
	if o.Ansible && o.OldCommit == "" {
		errs = append(errs, errors.New("--old-commit is empty"))
	}
	if o.ClusterName == "" || o.CacheDir == "" || o.Binary == "" {
		errs = append(errs, errors.New("--cluster-name, --cache-dir and --binary must not be empty"))
	}
	return errors.Join(errs...)
}

// clusterOptions reads the settings a running local cluster was made with
// from hack/cluster/up.sh's kps-options line
// ("... disable-qps-limits=1 heartbeat-factor=20 ..."). ok is false when
// the line names no disable-qps-limits; no heartbeat-factor is 0, kwokctl's
// default.
func clusterOptions(line string) (qps bool, heartbeat int, ok bool) {
	for _, f := range strings.Fields(line) {
		k, v, _ := strings.Cut(f, "=")
		switch k {
		case "disable-qps-limits":
			if v == "0" || v == "1" {
				qps, ok = v == "1", true
			}
		case "heartbeat-factor":
			heartbeat, _ = strconv.Atoi(v)
		}
	}
	return qps, heartbeat, ok
}

// runner carries one benchmark run.
type runner struct {
	*runOptions
	out, errOut io.Writer
	log         *logrus.Entry
	work        string // this run's phase files
	kubeconfig  string // the cluster under test
	kubectl     string
	external    bool
	builds      []string // the Ansible phase's label=path
}

// benchRun is `kps-bench run`.
func benchRun(ctx context.Context, args []string, out, errOut io.Writer) error {
	o := newRunOptions()
	if err := o.parse(args, errOut); err != nil {
		return err
	}
	l := logrus.New()
	l.SetOutput(errOut)
	l.SetFormatter(&logrus.TextFormatter{FullTimestamp: true, TimestampFormat: "15:04:05"})
	r := &runner{runOptions: o, out: out, errOut: errOut, log: logrus.NewEntry(l).WithField("phase", "run")}
	return r.run(ctx)
}

func (r *runner) run(ctx context.Context) (err error) {
	start := time.Now()
	if _, err := os.Stat(filepath.Join("hack", "cluster", "up.sh")); err != nil {
		return fmt.Errorf("no hack/cluster/up.sh here: run kps-bench run from the repository root: %w", err)
	}
	r.work = filepath.Join(r.CacheDir, "bench", start.UTC().Format("20060102T150405Z"))
	if err := os.MkdirAll(r.work, 0o755); err != nil {
		return fmt.Errorf("phase file directory: %w", err)
	}
	if !executable(r.Binary) {
		if err := r.script(ctx, "make", "--no-print-directory", "build"); err != nil {
			return err
		}
		if !executable(r.Binary) {
			return fmt.Errorf("--binary %s: no executable there after make build", r.Binary)
		}
	}
	r.kubectl = filepath.Join(r.CacheDir, "bin", "kubectl")
	if !executable(r.kubectl) {
		if err := r.script(ctx, "hack/build/tools.sh"); err != nil {
			return err
		}
	}
	r.external = r.Kubeconfig != ""
	r.kubeconfig = r.Kubeconfig
	if r.external {
		r.log.Infof("--kubeconfig is given: benchmarking that cluster as it is (no scaling)")
	} else {
		r.kubeconfig = filepath.Join(r.CacheDir, "cluster", "kubeconfig")
		if r.Small {
			r.keepClusterSettings()
			if orig := r.originalNodes(ctx); orig > 0 {
				defer func() {
					// the cluster goes back also when a phase failed or the run was interrupted
					if err := r.clusterAt(context.WithoutCancel(ctx), orig); err != nil {
						r.log.Warnf("could not scale the cluster back to %d nodes: %v", orig, err)
					}
				}()
			}
		}
	}
	if r.Ansible {
		if err := r.ansibleBuilds(ctx); err != nil {
			return err
		}
	}

	externalNodes := 0
	if r.external {
		if externalNodes, err = r.desiredPods(ctx); err != nil {
			return err
		}
	}
	for _, s := range r.plan(r.external, externalNodes) {
		if s.Scale {
			if err := r.clusterAt(ctx, s.Nodes); err != nil {
				return err
			}
		}
		for _, p := range s.Phases {
			if err := r.phase(ctx, s.Nodes, p); err != nil {
				return fmt.Errorf("%d nodes, %s phase: %w", s.Nodes, p.Phase, err)
			}
		}
	}

	if !r.Small && !r.Ansible {
		r.log.Infof("stripped linux builds of the collection's modules (hack/build/dist.sh)")
		if err := r.script(ctx, "hack/build/dist.sh"); err != nil {
			return err
		}
	}
	if executable(filepath.Join("dist", "kube-proxy-sync-linux-amd64")) && executable(filepath.Join("dist", "kube-proxy-sync-linux-arm64")) {
		o := r.phaseOptions("size")
		o.DistDir = "dist"
		if err := o.size(ctx); err != nil {
			return fmt.Errorf("size: %w", err)
		}
	}
	if err := r.report(ctx); err != nil {
		return err
	}
	r.log.Infof("benchmark done in %.0fs; results: %s; phase files: %s", time.Since(start).Seconds(), relative(r.Results), relative(r.work))
	return nil
}

// keepClusterSettings: a small run takes DISABLE_QPS_LIMITS and
// HEARTBEAT_FACTOR from the running cluster, since others would recreate it.
func (r *runner) keepClusterSettings() {
	raw, err := os.ReadFile(filepath.Join(r.CacheDir, "cluster", "kwok", "clusters", r.ClusterName, "kps-options"))
	if err != nil {
		return // no cluster yet: up.sh makes one with the flags
	}
	if qps, heartbeat, ok := clusterOptions(string(raw)); ok {
		r.DisableQPSLimits, r.HeartbeatFactor = qps, heartbeat
	}
}

// originalNodes is the local cluster's kwok node count before a small run,
// 0 when there is no cluster to count (nothing is scaled back then).
func (r *runner) originalNodes(ctx context.Context) int {
	if _, err := os.Stat(r.kubeconfig); err != nil {
		return 0
	}
	cs, err := r.client()
	if err != nil {
		r.log.Warnf("not scaling the cluster back afterwards: %v", err)
		return 0
	}
	nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: "type=kwok"})
	if err != nil {
		r.log.Warnf("not scaling the cluster back afterwards: list kwok nodes: %v", err)
		return 0
	}
	return len(nodes.Items)
}

// desiredPods is the kube-proxy DaemonSet's desiredNumberScheduled on the
// external cluster: the node count it is benchmarked at.
func (r *runner) desiredPods(ctx context.Context) (int, error) {
	cs, err := r.client()
	if err != nil {
		return 0, err
	}
	o := newOptions("")
	ds, err := cs.AppsV1().DaemonSets(o.Namespace).Get(ctx, o.Name, metav1.GetOptions{})
	if err != nil {
		return 0, fmt.Errorf("get daemonset %s/%s on %s: %w", o.Namespace, o.Name, r.kubeconfig, err)
	}
	return int(ds.Status.DesiredNumberScheduled), nil
}

func (r *runner) client() (kubernetes.Interface, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", r.kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("load kubeconfig %s: %w", r.kubeconfig, err)
	}
	cfg.Timeout = 30 * time.Second
	cfg.UserAgent = "kps-bench"
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("client for %s: %w", r.kubeconfig, err)
	}
	return cs, nil
}

// clusterAt brings the local cluster to n kwok nodes (hack/cluster/up.sh
// is idempotent: it only scales a healthy cluster of the same settings).
func (r *runner) clusterAt(ctx context.Context, n int) error {
	heartbeat := ""
	if r.HeartbeatFactor > 0 {
		heartbeat = strconv.Itoa(r.HeartbeatFactor)
	}
	r.log.Infof("local cluster %q at %d nodes (DISABLE_QPS_LIMITS=%s, HEARTBEAT_FACTOR=%s)", r.ClusterName, n, r.qpsValue(), cmp.Or(heartbeat, "kwokctl default"))
	cmd := r.command(ctx, "hack/cluster/up.sh")
	cmd.Env = append(cmd.Env, "NODES="+strconv.Itoa(n), "DISABLE_QPS_LIMITS="+r.qpsValue(), "HEARTBEAT_FACTOR="+heartbeat)
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("local cluster at %d nodes (hack/cluster/up.sh): %w", n, err)
	}
	return nil
}

func (r *runner) qpsValue() string {
	if r.DisableQPSLimits {
		return "1"
	}
	return "0"
}

// command is a repository script run with the cache and cluster this run
// uses; its output goes to the log stream (stdout carries the report only).
func (r *runner) command(ctx context.Context, argv ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = r.errOut, r.errOut
	cmd.Env = append(os.Environ(), "CACHE_DIR="+r.absCache(), "CLUSTER_NAME="+r.ClusterName)
	return cmd
}

func (r *runner) script(ctx context.Context, argv ...string) error {
	if err := r.command(ctx, argv...).Run(); err != nil {
		return fmt.Errorf("%s: %w", strings.Join(argv, " "), err)
	}
	return nil
}

// absCache is --cache-dir for the scripts, which run in other directories too.
func (r *runner) absCache() string {
	if abs, err := filepath.Abs(r.CacheDir); err == nil {
		return abs
	}
	return r.CacheDir
}

// phaseOptions are the flags of one phase, as `kps-bench PHASE` would get them.
func (r *runner) phaseOptions(phase string) *options {
	o := newOptions(phase)
	o.Dir, o.Kubeconfig, o.Binary, o.Kubectl, o.Timeout = r.work, r.kubeconfig, r.Binary, r.kubectl, r.Timeout
	return o
}

// phase runs one step of the plan in this process.
func (r *runner) phase(ctx context.Context, nodes int, p step) error {
	o := r.phaseOptions(p.Phase)
	switch p.Phase {
	case "nochange":
		r.log.Infof("[%d nodes] no-change runs", nodes)
		o.Reps = p.Reps
	case "needless":
		r.log.Infof("[%d nodes] %d unchanged reruns: no pod may restart", nodes, p.Reruns)
		o.Reruns = p.Reruns
	case "kubespray":
		r.log.Infof("[%d nodes] kubespray's method: kubectl delete pod --force --grace-period=0", nodes)
	case "ansible":
		r.log.Infof("[%d nodes] the Ansible task, module copy included: %s", nodes, strings.Join(r.builds, ", "))
		o.Reps, o.Builds, o.AnsiblePlaybook = p.Reps, r.builds, r.AnsiblePlaybook
	case "restart":
		r.log.Infof("[%d nodes] restart: kube-proxy-sync vs kubectl rollout restart + status, %d round(s), maxUnavailable %s", nodes, p.Rounds, p.MaxUnavailable)
		o.Rounds, o.MaxUnavail = p.Rounds, p.MaxUnavailable
	case "pools":
		what := "one DaemonSet (the restart phase's rounds) and"
		if p.OneDaemonSet {
			what = "one DaemonSet and"
		}
		r.log.Infof("[%d nodes] pools: %s %d pools, kube-proxy-sync vs kubectl rollout restart + status, %d round(s) each, maxUnavailable %s", nodes, what, p.Pools, p.Rounds, p.MaxUnavailable)
		o.Rounds, o.MaxUnavail, o.Pools, o.OneDaemonSet = p.Rounds, p.MaxUnavailable, p.Pools, p.OneDaemonSet
	}
	return runPhase(ctx, o, r.out, r.errOut)
}

// ansibleBuilds makes the Ansible phase's builds: the release build
// (hack/build/dist.sh), the same padded with random bytes to the old
// build's size (the copy alone costs), and the old build itself (the copy
// and its start: it registers every API group).
func (r *runner) ansibleBuilds(ctx context.Context) error {
	if err := r.script(ctx, "hack/build/venv.sh", "kubespray"); err != nil {
		return err
	}
	if err := r.script(ctx, "hack/build/dist.sh"); err != nil {
		return err
	}
	small, err := filepath.Abs(filepath.Join("dist", "kube-proxy-sync-linux-"+runtime.GOARCH))
	if err != nil {
		return fmt.Errorf("release build: %w", err)
	}
	r.builds = []string{"small=" + small}
	old, err := r.oldBuild(ctx)
	if err != nil {
		return err
	}
	if old == "" {
		r.log.Infof("no commit %s in this clone: the Ansible phase times the small build only", r.OldCommit)
		return nil
	}
	padded := filepath.Join(r.work, "kube-proxy-sync-padded")
	if err := pad(small, old, padded); err != nil {
		return err
	}
	r.builds = append(r.builds, "padded="+padded, "old-"+r.OldCommit+"="+old)
	return nil
}

// oldBuild is the release build of --old-commit for this machine's
// architecture, built once into the cache; "" when this clone lacks it.
func (r *runner) oldBuild(ctx context.Context) (string, error) {
	dir, err := filepath.Abs(filepath.Join(r.CacheDir, "bench", "old-"+r.OldCommit))
	if err != nil {
		return "", fmt.Errorf("old build directory: %w", err)
	}
	out := filepath.Join(dir, "kube-proxy-sync")
	if executable(out) {
		return out, nil
	}
	if exec.CommandContext(ctx, "git", "cat-file", "-e", r.OldCommit+"^{commit}").Run() != nil {
		return "", nil
	}
	r.log.Infof("building kube-proxy-sync at %s (48 MB, the full clientset) for the Ansible phase", r.OldCommit)
	src := filepath.Join(dir, "src")
	if err := os.RemoveAll(dir); err != nil {
		return "", fmt.Errorf("old build directory: %w", err)
	}
	if err := os.MkdirAll(src, 0o755); err != nil {
		return "", fmt.Errorf("old build directory: %w", err)
	}
	if err := r.script(ctx, "bash", "-o", "pipefail", "-c", `git archive "$1" | tar -x -C "$2"`, "archive", r.OldCommit, src); err != nil {
		return "", fmt.Errorf("the source of %s: %w", r.OldCommit, err)
	}
	// the release build flags live in one place: build_static in hack/lib.sh
	lib, err := filepath.Abs(filepath.Join("hack", "lib.sh"))
	if err != nil {
		return "", fmt.Errorf("hack/lib.sh: %w", err)
	}
	cmd := r.command(ctx, "bash", "-c", `source "$1" && cd "$2" && build_static "$3" "$4"`, "build", lib, src, runtime.GOARCH, out)
	cmd.Env = append(cmd.Env, "VERSION="+r.OldCommit)
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("build kube-proxy-sync at %s: %w", r.OldCommit, err)
	}
	return out, nil
}

// pad writes small followed by random bytes up to old's size to out.
func pad(small, old, out string) error {
	oldInfo, err := os.Stat(old)
	if err != nil {
		return fmt.Errorf("padded build: %w", err)
	}
	src, err := os.Open(small)
	if err != nil {
		return fmt.Errorf("padded build: %w", err)
	}
	defer src.Close()
	dst, err := os.OpenFile(out, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o755)
	if err != nil {
		return fmt.Errorf("padded build: %w", err)
	}
	n, err := io.Copy(dst, src)
	if err == nil && oldInfo.Size() > n {
		_, err = io.CopyN(dst, rand.Reader, oldInfo.Size()-n)
	}
	if cerr := dst.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("padded build %s: %w", out, err)
	}
	return nil
}

// report prints the tables to stdout and <work>/table.md, and writes --results.
func (r *runner) report(ctx context.Context) error {
	o := r.phaseOptions("report")
	o.Results, o.Small, o.QPSNote = r.Results, r.Small, "DISABLE_QPS_LIMITS="+r.qpsValue()
	if r.external {
		o.QPSNote = "external cluster"
	}
	table, err := os.Create(filepath.Join(r.work, "table.md"))
	if err != nil {
		return fmt.Errorf("report: %w", err)
	}
	err = o.report(ctx, io.MultiWriter(r.out, table))
	if cerr := table.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("report: %w", err)
	}
	return nil
}

// relative is path from the working directory (the repository root), for logs.
func relative(path string) string {
	wd, err := os.Getwd()
	if err != nil {
		return path
	}
	if rel, err := filepath.Rel(wd, path); err == nil && !strings.HasPrefix(rel, "..") {
		return rel
	}
	return path
}

func executable(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0
}
