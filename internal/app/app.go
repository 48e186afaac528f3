// Package app is the command: flags or an Ansible args file in, one kpsync
// run per DaemonSet (--daemonset, then each pool, one after the other: the
// loop over pools lives here), one result on stdout, logs on stderr, and the
// exit code.
package app

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/debug"
	"strings"
	"syscall"

	"github.com/sirupsen/logrus"
	"github.com/spf13/pflag"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/kube-proxy-sync/kube-proxy-sync/internal/audit"
	"github.com/kube-proxy-sync/kube-proxy-sync/internal/kpsync"
	"github.com/kube-proxy-sync/kube-proxy-sync/internal/kube"
	"github.com/kube-proxy-sync/kube-proxy-sync/internal/pools"
	"github.com/kube-proxy-sync/kube-proxy-sync/internal/probe"
	"github.com/kube-proxy-sync/kube-proxy-sync/internal/verify"
)

// version and commit are set at build time (-ldflags -X, kps_ldflags in
// hack/lib.sh): version is galaxy.yml's, the one version of the binary, the
// collection and the release; commit is the git commit it was built from.
var (
	version = "dev"
	commit  = ""
)

// versionLine is what --version prints.
func versionLine() string {
	if commit == "" {
		return "kube-proxy-sync " + version
	}
	return "kube-proxy-sync " + version + " (commit " + commit + ")"
}

// Exit codes.
const (
	ExitOK      = 0
	ExitFailed  = 1
	ExitChanged = 2 // only with --detailed-exitcode
)

// Streams are where the command reads and writes.
type Streams struct {
	Out    io.Writer
	ErrOut io.Writer
	// In is what --kubeadm-config - reads; nil reads nothing.
	In io.Reader
}

// SoftMemoryLimit is the Go runtime's soft memory limit for the process,
// unless GOMEMLIMIT sets one. While it waits for a rollout the binary keeps
// a few fields per pod, some megabytes at 5000 nodes; what makes its
// resident set grow is the garbage of decoding the node and pod lists and
// the watch, which the collector, left to its default pace, lets grow to
// twice the live heap. Under the limit it collects sooner (and, should the
// live heap ever exceed it, as often as it can, taking CPU rather than
// memory). GOMEMLIMIT=off lifts it.
const SoftMemoryLimit = 24 << 20

// memoryLimit is the limit Main sets given GOMEMLIMIT's value, -1 for none.
func memoryLimit(env string) int64 {
	if env != "" {
		return -1 // the runtime has read it
	}
	return SoftMemoryLimit
}

// Main runs the command with the process's arguments and signals.
func Main() int {
	if limit := memoryLimit(os.Getenv("GOMEMLIMIT")); limit > 0 {
		debug.SetMemoryLimit(limit)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return Run(ctx, Streams{Out: os.Stdout, ErrOut: os.Stderr, In: os.Stdin}, os.Args[1:], Deps{Clock: clock.RealClock{}})
}

// Deps lets tests inject the clock and a ready client.
type Deps struct {
	Clock clock.WithTicker
	// Kube, when set, is used instead of a client built from the
	// kubeconfig (tests pass kubefake's).
	Kube kube.Interface
}

const usage = `kube-proxy-sync keeps kube-proxy's ConfigMap in sync and restarts the
kube-proxy DaemonSet only when the configuration really changed.

It captures the ConfigMap, applies the desired configuration through the
API into an immutable copy (kube-proxy-<hash>) that no running kube-proxy
mounts, compares the data (not just the resourceVersion), and only then
points the pod template at the copy in one rollout restart (respecting
maxUnavailable) and waits for it; kube-system/kube-proxy, which kubeadm
reads, follows once no pod mounts it. It also sets the readiness probe path
kube-proxy's version needs (/livez from 1.28 on).

Usage:
  kube-proxy-sync [flags]
  kube-proxy-sync ARGS_FILE     (as an Ansible binary module)

Examples:
  # point kube-proxy at a new API server endpoint; restart only if that changed it
  kube-proxy-sync --server https://lb.example.internal:6443

  # MetalLB needs strict ARP in IPVS mode
  kube-proxy-sync --set mode=ipvs --set ipvs.strictARP=true

  # what would change, without changing anything
  kube-proxy-sync --set conntrack.maxPerCore=0 --check --diff

  # back to the config the fleet ran before the last change, through the same rollout
  kube-proxy-sync --undo

  # in CI: exit 2 when something changed, JSON result on stdout
  kube-proxy-sync --server https://10.0.0.1:6443 --output json --detailed-exitcode

Exit codes: 0 success (nothing changed with --detailed-exitcode), 1 failure,
2 changed (only with --detailed-exitcode; with --check: the real run would
write or restart something). A crash of the Go runtime exits 2 too, but with
no result on stdout and "panic:" or "fatal error:" on stderr.

Flags:
`

// Run is the whole command, in-process.
func Run(ctx context.Context, streams Streams, args []string, deps Deps) (code int) {
	o := NewOptions()
	var s *kpsync.Syncer
	// a panic in the run (a bug) is a failed result, exit 1: Go's own exit
	// on a panic is 2, which --detailed-exitcode means as "changed". A
	// panic in another goroutine, or a fatal runtime error, still exits 2
	// with no result on stdout (README, Exit codes). The result says what
	// the run had written by then.
	defer func() {
		if r := recover(); r != nil {
			fmt.Fprintf(streams.ErrOut, "panic: %v\n\n%s\n", r, debug.Stack())
			var res *kpsync.Result
			if s != nil {
				res = s.Partial()
			}
			code = fail(streams, o, res, fmt.Errorf("internal error: %v (a bug: please report it with the stack trace on stderr); a rerun with the same values finishes what this run left", r))
		}
	}()
	if len(args) == 1 && !strings.HasPrefix(args[0], "-") {
		o.module = true
		o.Output = "json"
		if err := LoadArgsFile(args[0], o); err != nil {
			return fail(streams, o, nil, err)
		}
	} else {
		o.stdin = streams.In
		fs := pflag.NewFlagSet("kube-proxy-sync", pflag.ContinueOnError)
		fs.SetOutput(streams.ErrOut)
		o.AddFlags(fs)
		fs.Usage = func() {
			fmt.Fprint(streams.ErrOut, usage)
			fs.PrintDefaults()
		}
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, pflag.ErrHelp) {
				return ExitOK
			}
			if o.Output != "json" && wantsJSON(args) {
				o.Output = "json" // the error came before --output was read
			}
			return fail(streams, o, nil, fmt.Errorf("%w (see --help)", err))
		}
		if fs.NArg() > 0 {
			return fail(streams, o, nil, fmt.Errorf("unexpected arguments %q (see --help)", fs.Args()))
		}
		if o.ShowVersion {
			fmt.Fprintln(streams.Out, versionLine())
			return ExitOK
		}
	}
	if err := o.Complete(); err != nil {
		return fail(streams, o, nil, err)
	}
	if err := o.Validate(ctx); err != nil {
		return fail(streams, o, nil, err)
	}
	log := newLogger(streams.ErrOut, o)
	// what client-go logs through klog goes to the same log, never stdout
	klog.SetLogger(kube.NewKlogLogger(log))

	d := kpsync.Deps{
		Kube: deps.Kube, Clock: deps.Clock, Log: log, Audit: audit.Log{Path: o.AuditLog},
		Step: testPause(streams.ErrOut),
	}
	if d.Kube == nil {
		client, err := kube.New(kube.Options{
			Kubeconfig: o.Kubeconfig, Context: o.Context, Retries: o.Retries,
			RequestTimeout: o.RequestTimeout, Log: log,
		})
		if err != nil {
			return fail(streams, o, nil, err)
		}
		d.Kube, d.Server, d.Requests = client, client.Server, client.Requests.Count
		d.NodeProxy = func(port int) (verify.Prober, error) {
			return verify.NewNodeProxy(client.Config, client.Requests.Wrap, port, o.RequestTimeout)
		}
	}
	var res *kpsync.Result
	var err error
	switch {
	case o.Split != "" || o.Merge != "":
		var out *pools.Outcome
		var warnings []string
		res, out, warnings, err = runSplit(ctx, o, d)
		res = splitOutcome(o, res, out, warnings)
	case len(o.pools) > 0:
		var runs []poolRun
		var warnings []string
		runs, warnings, err = runPools(ctx, o, d)
		res = poolsOutcome(o, runs, warnings, d.Requests)
	default:
		s = kpsync.New(o.syncOptions(), d)
		res, err = s.Run(ctx)
	}
	if err != nil {
		return fail(streams, o, res, err)
	}
	printResult(streams.Out, o, res, nil)
	if o.DetailedExitCode && res.Changed {
		return ExitChanged
	}
	return ExitOK
}

// TestPauseEnv names a step boundary (see kpsync.Step*) at which the run
// announces itself on stderr and blocks until it is killed or interrupted.
// Crash-safety tests use it to SIGKILL the binary at an exact point; it is
// not a user feature, and only a binary built with the testhooks build tag
// reads it (see testpause.go): the e2e tests build theirs so.
const TestPauseEnv = "KUBE_PROXY_SYNC_TEST_PAUSE_AT"

func wantsJSON(args []string) bool {
	for i, a := range args {
		if a == "--output=json" || a == "-ojson" || (a == "--output" || a == "-o") && i+1 < len(args) && args[i+1] == "json" {
			return true
		}
	}
	return false
}

func newLogger(w io.Writer, o *Options) *logrus.Entry {
	l := logrus.New()
	l.SetOutput(w)
	lvl, _ := logrus.ParseLevel(o.LogLevel) // validated
	l.SetLevel(lvl)
	if o.LogFormat == "json" {
		l.SetFormatter(&logrus.JSONFormatter{})
	}
	return logrus.NewEntry(l)
}

func fail(streams Streams, o *Options, res *kpsync.Result, err error) int {
	printResult(streams.Out, o, res, err)
	if o.Output != "json" {
		fmt.Fprintf(streams.ErrOut, "error: %v\n", err)
	}
	return ExitFailed
}

// moduleResult is the one JSON object on stdout: Ansible's module result,
// also printed by --output json. The facts are its top-level return values
// (read through `register`); no ansible_facts, so no fact cache keeps an old
// result (the role sets a fact only when asked, kpsync_set_facts).
//
// Each field's doc comment (and each of kpsync.Facts) is its row in the
// README's result table (go run ./hack/gen-options writes it).
type moduleResult struct {
	// Changed: the run wrote something or restarted kube-proxy (in check
	// mode: the real run would, exactly when it would report changed).
	Changed bool `json:"changed"`
	// Failed: the run failed; this result is still printed, whole as far
	// as the run got.
	Failed bool `json:"failed"`
	// Msg says what the run did, in one sentence; the error on failure.
	Msg string `json:"msg"`
	kpsync.Facts
	// Diff is the ConfigMap data before and after, credentials redacted;
	// with `--diff`, when the data differs.
	Diff *kpsync.Diff `json:"diff,omitempty"`
	// Pools is each DaemonSet of the run, --daemonset first, then each
	// --pool in order, as far as the run got (only with --pool; see
	// docs/design.md).
	Pools []poolResult `json:"pools,omitempty"`
	// PoolMove is what --split or --merge did (only with them; see
	// docs/design.md).
	PoolMove *pools.Outcome `json:"pool_move,omitempty"`
	// Warnings is Ansible's standard list, each shown as a [WARNING]
	// (absent when empty): what the kube-proxy in use would load past with
	// a warning (fields it does not have, keys given twice; see
	// docs/validation.md), and validation rules picked for an unknown
	// version.
	Warnings []string `json:"warnings,omitempty"`
}

// probeLine says what became of the readiness probe, for the text summary.
func probeLine(o *Options, f kpsync.Facts) string {
	switch {
	case f.ProbePath != "":
		return fmt.Sprintf("%s (changed: %t)", f.ProbePath, f.ProbeChanged)
	case o.ProbePath == probe.None:
		return "left alone (--probe-path none)"
	}
	return "left alone"
}

func orUnknown(s string) string {
	if s == "" {
		return "version unknown"
	}
	return s
}

func printResult(w io.Writer, o *Options, res *kpsync.Result, err error) {
	if res == nil {
		res = &kpsync.Result{Facts: kpsync.Facts{CheckMode: o.Check, ChangedKeys: []string{}, ChangedKeysEffect: map[string]string{}}}
	}
	msg := res.Msg
	if err != nil {
		msg = err.Error()
	}
	if o.Output == "json" {
		out := moduleResult{
			Changed: res.Changed, Failed: err != nil, Msg: msg,
			Facts: res.Facts, Diff: res.Diff, Warnings: res.Warnings, Pools: o.poolResults, PoolMove: o.poolMove,
		}
		b, _ := json.Marshal(out)
		fmt.Fprintln(w, string(b))
		return
	}
	if err != nil {
		return
	}
	f := res.Facts
	fmt.Fprintln(w, msg)
	fmt.Fprintf(w, "  configmap resourceVersion: %s -> %s\n", f.ResourceVersionBefore, f.ResourceVersionAfter)
	for _, k := range f.ChangedKeys {
		fmt.Fprintf(w, "  changed %s: %s\n", k, f.ChangedKeysEffect[k])
	}
	fmt.Fprintf(w, "  kube-proxy %s, readiness probe %s\n", orUnknown(f.KubeProxyVersion), probeLine(o, f))
	if f.ImageChanged {
		fmt.Fprintf(w, "  image %s -> %s\n", f.ImageBefore, o.image)
	}
	if f.TemplateChanged {
		fmt.Fprintf(w, "  pod template: kubeadm's (--template %s)\n", TemplateFromKubeadm)
	}
	if len(f.AccessChanged) > 0 {
		fmt.Fprintf(w, "  %s as kubeadm renders them: %s\n", map[bool]string{true: "would apply", false: "applied"}[f.CheckMode], strings.Join(f.AccessChanged, ", "))
	}
	fmt.Fprintf(w, "  rollout: %d desired, %d updated, %d available, %.1fs\n", f.Rollout.Desired, f.Rollout.Updated, f.Rollout.Available, f.Rollout.Duration)
	if m := f.Migration; m != nil {
		fmt.Fprintf(w, "  proxy mode %s -> %s (kube-proxy %s): %s rollout (--strategy %s asked)", m.From, m.To, m.KubeProxyVersion, m.Strategy, m.StrategyAsked)
		if m.Strategy != kpsync.StrategyRolling {
			fmt.Fprintf(w, ", canary %v, then %d batch(es) of at most %d", m.CanaryNodes, m.Batches, m.BatchSize)
		}
		fmt.Fprintf(w, "; checks: --verify-health %s", m.VerifyHealth)
		if m.VerifyTraffic != "" {
			fmt.Fprintf(w, ", --verify-traffic %s", m.VerifyTraffic)
			if len(m.VerifyTrafficPaths) > 0 {
				fmt.Fprintf(w, " (paths %s)", strings.Join(m.VerifyTrafficPaths, ","))
			}
		}
		fmt.Fprintf(w, "\n  old mode's rules: %s\n", m.Cleanup)
		for _, warn := range m.Warnings {
			fmt.Fprintf(w, "  warning: %s\n", warn)
		}
	}
	fmt.Fprintf(w, "  api requests: %d, audit id: %s\n", f.APIRequests, f.AuditID)
	for _, p := range o.poolResults[min(1, len(o.poolResults)):] {
		fmt.Fprintf(w, "pool %s (configmap %s): %s\n", p.DaemonSet, p.ConfigMap, p.Msg)
	}
	if res.Diff != nil {
		fmt.Fprintf(w, "--- %s\n%s+++ %s\n%s", res.Diff.BeforeHeader, res.Diff.Before, res.Diff.AfterHeader, res.Diff.After)
	}
}
