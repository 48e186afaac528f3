// Command kps-bench measures kube-proxy-sync against kubectl on a live
// cluster (the local control plane of hack/cluster/up.sh). `kps-bench run`
// (what hack/test/bench.sh execs) is the whole benchmark: it brings the
// cluster to each node count, runs the phases that count gets (plan.go),
// builds what the Ansible and size phases compare, and reports. Every phase
// writes one JSON file into --dir, and `report` turns the files into a
// markdown table and the results JSON; each phase also runs on its own.
//
// Phases (all talk to --kubeconfig, and to the kube-system/kube-proxy
// ConfigMap and DaemonSet unless --namespace/--name say otherwise):
//
//	nochange   no-change runs of the binary: API requests counted by the
//	           binary and by the API server, wall time vs `kubectl get cm`
//	needless   10 unchanged reruns: pod UIDs and a pod watch must show no restart
//	kubespray  kubespray's `kubectl delete pod --force --grace-period=0`
//	restart    binary change+restart+wait vs `kubectl rollout restart` +
//	           `kubectl rollout status`, alternating, with a pod watch
//	pools      the same restart as one DaemonSet and as --pools pools
//	           (issue 49): the nodes dealt out to pool DaemonSets, the
//	           binary with --pool for each, kubectl restarting them all;
//	           one DaemonSet again afterwards
//	rss        one command's wall time and peak RSS (-- COMMAND...), any exit
//	size       stripped linux/amd64 and arm64 sizes of the dist builds
//	ansible    the Ansible task running the binary module (module copy
//	           included), per build (--builds label=path,...), alternating
//	report     the table and bench/results/<date>.json
//
// No phase fails on a time or a count the targets talk about: those are
// reported. A phase fails on real breakage only: a command that errors, an
// unchanged run that changes or restarts anything, a restart that restarts
// nothing.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/pflag"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil && !errors.Is(err, pflag.ErrHelp) {
		fmt.Fprintf(os.Stderr, "kps-bench: %v\n", err)
		stop()
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, out, errOut io.Writer) error {
	if len(args) == 0 {
		return fmt.Errorf("usage: kps-bench run|nochange|needless|kubespray|restart|pools|rss|ansible|size|report [flags] (--help for each)")
	}
	phase, args := args[0], args[1:]
	if phase == "run" {
		return benchRun(ctx, args, out, errOut)
	}
	o := newOptions(phase)
	if err := o.parse(args, errOut); err != nil {
		return err
	}
	return runPhase(ctx, o, out, errOut)
}

// runPhase runs one phase with its options: from the command line, or from
// `run`'s plan.
func runPhase(ctx context.Context, o *options, out, errOut io.Writer) error {
	switch o.phase {
	case "size":
		return o.size(ctx)
	case "report":
		return o.report(ctx, out)
	}
	b, err := o.connect(errOut)
	if err != nil {
		return err
	}
	switch o.phase {
	case "nochange":
		return b.noChange(ctx)
	case "needless":
		return b.needless(ctx)
	case "kubespray":
		return b.kubespray(ctx)
	case "restart":
		return b.restart(ctx)
	case "pools":
		return b.pools(ctx)
	case "rss":
		return b.rss(ctx, o.Label, o.rest)
	case "ansible":
		return b.ansibleTask(ctx)
	}
	return fmt.Errorf("unknown phase %q", o.phase)
}
