package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/sirupsen/logrus"
	"github.com/spf13/pflag"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

type options struct {
	phase      string
	Kubeconfig string
	Binary     string
	Kubectl    string
	Namespace  string
	Name       string
	Dir        string
	Reps       int
	Reruns     int
	Rounds     int
	MaxUnavail string
	Timeout    time.Duration
	// pools
	Pools        int
	OneDaemonSet bool
	// report
	Results string
	QPSNote string
	Small   bool
	DistDir string
	// rss
	Label string
	rest  []string
	// ansible
	AnsiblePlaybook string
	Builds          []string
}

func newOptions(phase string) *options {
	return &options{
		phase: phase, Namespace: "kube-system", Name: "kube-proxy",
		Reps: 5, Reruns: 10, Rounds: 3, MaxUnavail: "10%", Timeout: 30 * time.Minute,
		Pools: 5, OneDaemonSet: true,
	}
}

func (o *options) parse(args []string, errOut io.Writer) error {
	fs := pflag.NewFlagSet("kps-bench "+o.phase, pflag.ContinueOnError)
	fs.SetOutput(errOut)
	fs.StringVar(&o.Kubeconfig, "kubeconfig", o.Kubeconfig, "admin kubeconfig of the cluster under test")
	fs.StringVar(&o.Binary, "binary", o.Binary, "kube-proxy-sync binary")
	fs.StringVar(&o.Kubectl, "kubectl", o.Kubectl, "kubectl binary")
	fs.StringVar(&o.Namespace, "namespace", o.Namespace, "namespace of the ConfigMap and DaemonSet")
	fs.StringVar(&o.Name, "name", o.Name, "name of the ConfigMap and DaemonSet")
	fs.StringVar(&o.Dir, "dir", o.Dir, "directory for this benchmark run's phase files")
	fs.IntVar(&o.Reps, "reps", o.Reps, "nochange: measured runs of each command")
	fs.IntVar(&o.Reruns, "reruns", o.Reruns, "needless: unchanged reruns")
	fs.IntVar(&o.Rounds, "rounds", o.Rounds, "restart, pools: rounds (of each layout), each one binary and one kubectl restart")
	fs.StringVar(&o.MaxUnavail, "max-unavailable", o.MaxUnavail, "restart, pools: every DaemonSet's maxUnavailable, for both tools")
	fs.IntVar(&o.Pools, "pools", o.Pools, "pools: how many pools the nodes are dealt out to")
	fs.BoolVar(&o.OneDaemonSet, "one-daemonset", o.OneDaemonSet, "pools: also run the rounds as one DaemonSet first (false: the report takes them from the restart phase at the same node count)")
	fs.DurationVar(&o.Timeout, "timeout", o.Timeout, "bound of one rollout or settle wait")
	fs.StringVar(&o.Results, "results", o.Results, "report: where to write the results JSON")
	fs.StringVar(&o.QPSNote, "qps", o.QPSNote, "report: the control plane's client rate limit setting, as recorded")
	fs.BoolVar(&o.Small, "small", o.Small, "report: this was the small run of make test")
	fs.StringVar(&o.DistDir, "dist", o.DistDir, "size: directory holding kube-proxy-sync-linux-{amd64,arm64}")
	fs.StringVar(&o.Label, "label", o.Label, "rss: what the command is, for the report")
	fs.StringVar(&o.AnsiblePlaybook, "ansible-playbook", o.AnsiblePlaybook, "ansible: the ansible-playbook to run")
	fs.StringSliceVar(&o.Builds, "builds", o.Builds, "ansible: the builds to time the task with, label=path,...")
	if err := fs.Parse(args); err != nil {
		return err
	}
	o.rest = fs.Args()
	if o.Dir == "" {
		return fmt.Errorf("--dir is required")
	}
	return os.MkdirAll(o.Dir, 0o755)
}

// bench is a connected phase.
type bench struct {
	*options
	cs  kubernetes.Interface
	log *logrus.Entry
	// kubectlBase is kubectl with the kubeconfig, namespace and a private
	// discovery cache.
	kubectlBase []string
}

func (o *options) connect(errOut io.Writer) (*bench, error) {
	for flag, v := range map[string]string{"--kubeconfig": o.Kubeconfig, "--binary": o.Binary, "--kubectl": o.Kubectl} {
		if v == "" {
			return nil, fmt.Errorf("%s is required", flag)
		}
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", o.Kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("load kubeconfig %s: %w", o.Kubeconfig, err)
	}
	// the bench's own watches and lists must not be slowed by client-side limits
	cfg.QPS, cfg.Burst = -1, -1
	cfg.UserAgent = "kps-bench"
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	l := logrus.New()
	l.SetOutput(errOut)
	l.SetFormatter(&logrus.TextFormatter{DisableTimestamp: false, FullTimestamp: true, TimestampFormat: "15:04:05"})
	return &bench{
		options: o, cs: cs, log: logrus.NewEntry(l).WithField("phase", o.phase),
		kubectlBase: []string{o.Kubectl, "--kubeconfig", o.Kubeconfig, "--cache-dir", filepath.Join(o.Dir, "kubectl-cache"), "-n", o.Namespace},
	}, nil
}

// write stores a phase's result as <dir>/<seq>-<phase>-<nodes>.json.
func (o *options) write(nodes int32, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	name := fmt.Sprintf("%s-%s-%05d.json", time.Now().UTC().Format("150405.000"), o.phase, nodes)
	return os.WriteFile(filepath.Join(o.Dir, name), append(b, '\n'), 0o644)
}
