package app

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/kube-proxy-sync/kube-proxy-sync/internal/kpsync"
	"github.com/kube-proxy-sync/kube-proxy-sync/internal/kube"
	"github.com/kube-proxy-sync/kube-proxy-sync/internal/kube/kubefake"
)

func TestParseArgs(t *testing.T) {
	cases := []struct {
		name  string
		json  string
		check func(t *testing.T, o *Options)
		err   string
	}{
		{name: "ansible internals accepted", json: `{"server":"https://10.0.0.1:6443","_ansible_check_mode":true,"_ansible_diff":true,"_ansible_verbosity":3,"_ansible_module_name":"kube_proxy_sync"}`,
			check: func(t *testing.T, o *Options) {
				assert.True(t, o.Check)
				assert.True(t, o.Diff)
				assert.Equal(t, "https://10.0.0.1:6443", o.Server)
			}},
		{name: "set dict with typed values", json: `{"set":{"ipvs.strictARP":true,"conntrack.maxPerCore":0,"mode":"ipvs","nodePortAddresses":["10.0.0.0/8"]}}`,
			check: func(t *testing.T, o *Options) {
				assert.Equal(t, []string{"conntrack.maxPerCore=0", "ipvs.strictARP=true", "mode=ipvs", "nodePortAddresses=10.0.0.0/8"}, o.Set)
			}},
		{name: "timeout as duration", json: `{"timeout":"90s"}`, check: func(t *testing.T, o *Options) { assert.Equal(t, 90*time.Second, o.Timeout) }},
		{name: "timeout as seconds", json: `{"timeout":120}`, check: func(t *testing.T, o *Options) { assert.Equal(t, 2*time.Minute, o.Timeout) }},
		{name: "retries as templated string", json: `{"retries":"7"}`, check: func(t *testing.T, o *Options) { assert.Equal(t, 7, o.Retries) }},
		{name: "nulls are unset", json: `{"server":null,"namespace":null}`, check: func(t *testing.T, o *Options) { assert.Equal(t, "kube-system", o.Namespace) }},
		{name: "unknown key", json: `{"serverr":"x"}`, err: "unsupported module args: serverr"},
		{name: "not json", json: `server=x`, err: "not a JSON object"},
		{name: "not an object", json: `["server"]`, err: "not a JSON object"},
		{name: "json null", json: `null`, err: "not a JSON object"},
		{name: "trailing object", json: `{"server":"https://10.0.0.1:6443"} {"restart":"always"}`, err: "unexpected data after the object"},
		{name: "trailing garbage", json: `{"server":"https://10.0.0.1:6443"}garbage`, err: "unexpected data after the object"},
		{name: "trailing whitespace is fine", json: "{\"retries\":3}\n\n", check: func(t *testing.T, o *Options) { assert.Equal(t, 3, o.Retries) }},
		{name: "wrong type string", json: `{"server":5}`, err: "module arg server: want a string, got a number"},
		{name: "wrong type set", json: `{"set":"mode=ipvs"}`, err: "want a dict"},
		{name: "set key with =", json: `{"set":{"mode=ipvs":""}}`, err: `"mode=ipvs": want a field path`},
		{name: "set key empty", json: `{"set":{"":"x"}}`, err: `"": want a field path`},
		{name: "wrong set value", json: `{"set":{"mode":{"a":1}}}`, err: "mode: want a string"},
		{name: "wrong type retries", json: `{"retries":true}`, err: "want a whole number"},
		{name: "bad duration", json: `{"timeout":"soon"}`, err: "want a duration"},
		{name: "check mode as a string", json: `{"_ansible_check_mode":"true"}`, err: "_ansible_check_mode: want a JSON boolean, got a string"},
		{name: "check mode as a number", json: `{"_ansible_check_mode":1}`, err: "_ansible_check_mode: want a JSON boolean, got a number"},
		{name: "check mode null", json: `{"_ansible_check_mode":null}`, err: "_ansible_check_mode: want a JSON boolean, got null"},
		{name: "diff as a string", json: `{"_ansible_diff":"yes"}`, err: "_ansible_diff: want a JSON boolean"},
		{name: "check mode false", json: `{"_ansible_check_mode":false,"_ansible_diff":false}`, check: func(t *testing.T, o *Options) { assert.False(t, o.Check) }},
		{name: "allow insecure server", json: `{"allow_insecure_server":true}`, check: func(t *testing.T, o *Options) { assert.True(t, o.AllowInsecureServer) }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			o := NewOptions()
			err := ParseArgs([]byte(tc.json), o)
			if tc.err != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), tc.err)
				return
			}
			require.NoError(t, err)
			tc.check(t, o)
		})
	}
}

func seed() (*corev1.ConfigMap, *appsv1.DaemonSet) {
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "kube-proxy", Namespace: "kube-system", ResourceVersion: "1"},
		Data: map[string]string{
			"config.conf":     "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\nmode: iptables\n",
			"kubeconfig.conf": "apiVersion: v1\nkind: Config\nclusters:\n- cluster:\n    server: https://127.0.0.1:6443\n  name: default\n",
		},
	}
	ds := &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: "kube-proxy", Namespace: "kube-system", ResourceVersion: "1"},
		Spec: appsv1.DaemonSetSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{
			{Name: "kube-proxy", Image: "registry.k8s.io/kube-proxy:v1.33.6",
				VolumeMounts: []corev1.VolumeMount{{Name: "kube-proxy", MountPath: "/var/lib/kube-proxy"}}},
		}, Volumes: []corev1.Volume{{Name: "kube-proxy", VolumeSource: corev1.VolumeSource{
			ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "kube-proxy"}},
		}}}}}},
	}
	return cm, ds
}

type runResult struct {
	code   int
	stdout string
	stderr string
	client *fake.Clientset
}

func run(t *testing.T, args ...string) runResult {
	t.Helper()
	cm, ds := seed()
	client, api := kubefake.New(cm, ds)
	var out, errOut bytes.Buffer
	code := Run(context.Background(), Streams{Out: &out, ErrOut: &errOut}, args, Deps{
		Clock: clocktesting.NewFakeClock(time.Unix(0, 0)),
		Kube:  api,
	})
	return runResult{code, out.String(), errOut.String(), client}
}

func writes(c *fake.Clientset) int {
	n := 0
	for _, a := range c.Actions() {
		if v := a.GetVerb(); v != "get" && v != "list" && v != "watch" && a.GetResource().Resource != "selfsubjectaccessreviews" {
			n++
		}
	}
	return n
}

func TestBadInputChangesNothing(t *testing.T) {
	manifest := filepath.Join(t.TempDir(), "cm.yaml")
	require.NoError(t, os.WriteFile(manifest, []byte("apiVersion: v1\nkind: Secret\nmetadata:\n  name: kube-proxy\n"), 0o600))
	cases := map[string][]string{
		"unknown set field":   {"--set", "ipvs.strictArp=true"},
		"bad bool":            {"--set", "ipvs.strictARP=maybe"},
		"bad server":          {"--server", "10.0.0.1:6443"},
		"server with path":    {"--server", "https://10.0.0.1:6443/api"},
		"bad probe path":      {"--probe-path", "/readyz"},
		"bad restart":         {"--restart", "sometimes"},
		"negative timeout":    {"--timeout", "-1s"},
		"absurd timeout":      {"--timeout", "1000h"},
		"bad version":         {"--kube-proxy-version", "latest"},
		"bad output":          {"--output", "yaml"},
		"bad namespace":       {"--namespace", "Kube_System"},
		"wrong manifest kind": {"--manifest", manifest},
		"missing manifest":    {"--manifest", "does-not-exist.yaml"},
		"unknown flag":        {"--serverr", "x"},
		"stray argument":      {"--check", "extra"},
	}
	for name, args := range cases {
		t.Run(name, func(t *testing.T) {
			r := run(t, append([]string{"--output", "json"}, args...)...)
			assert.Equal(t, ExitFailed, r.code)
			assert.Empty(t, r.client.Actions(), "nothing may touch the cluster")
			if name == "bad output" {
				assert.Contains(t, r.stderr, `--output "yaml"`)
				return
			}
			var res moduleResult
			require.NoError(t, json.Unmarshal([]byte(r.stdout), &res), "stdout must stay valid JSON: %q", r.stdout)
			assert.True(t, res.Failed)
			assert.NotEmpty(t, res.Msg)
		})
	}
}

func TestModuleModeRoundTrip(t *testing.T) {
	args := filepath.Join(t.TempDir(), "args")
	require.NoError(t, os.WriteFile(args, []byte(`{"server":"https://10.0.0.9:6443","probe_path":"none","_ansible_check_mode":true,"_ansible_diff":true}`), 0o600))
	r := run(t, args)
	require.Equal(t, ExitOK, r.code, r.stderr)
	var res moduleResult
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &res))
	assert.True(t, res.Changed)
	assert.False(t, res.Failed)
	facts := res.Facts
	assert.True(t, facts.CheckMode)
	assert.True(t, facts.ConfigMapChanged)
	assert.Equal(t, []string{"kubeconfig.conf:clusters[0].cluster.server"}, facts.ChangedKeys)
	require.NotNil(t, res.Diff)
	assert.Contains(t, res.Diff.After, "https://10.0.0.9:6443")
	assert.Zero(t, writes(r.client), "check mode writes nothing")
}

// The args file is read up to 1 MiB, far more than any module's
// arguments (a manifest is passed by path); a larger one is refused with a
// result Ansible can parse, and nothing is run.
func TestModuleArgsFileTooLarge(t *testing.T) {
	args := filepath.Join(t.TempDir(), "args")
	padding := strings.Repeat("x", 1<<20)
	require.NoError(t, os.WriteFile(args, []byte(`{"server":"https://10.0.0.9:6443","probe_path":"none","_ansible_padding":"`+padding+`"}`), 0o600))
	r := run(t, args)
	assert.Equal(t, ExitFailed, r.code)
	var res moduleResult
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &res), "stdout must stay valid JSON: %q", r.stdout)
	assert.True(t, res.Failed)
	assert.Contains(t, res.Msg, "read module args file: "+args+" is larger than 1 MiB")
	assert.Zero(t, writes(r.client))
}

// What kube-proxy would load past with a warning is Ansible's standard
// warnings list in the result (shown as [WARNING] lines), and in the log.
func TestWarningsInTheResult(t *testing.T) {
	manifest := filepath.Join(t.TempDir(), "cm.yaml")
	require.NoError(t, os.WriteFile(manifest, []byte(`apiVersion: v1
kind: ConfigMap
metadata:
  name: kube-proxy
  namespace: kube-system
data:
  config.conf: |
    apiVersion: kubeproxy.config.k8s.io/v1alpha1
    kind: KubeProxyConfiguration
    mode: iptables
    nftables:
      masqueradeAll: false
`), 0o600))
	r := run(t, "--manifest", manifest, "--kube-proxy-version", "v1.28.15", "--probe-path", "none", "--check", "--output", "json")
	require.Equal(t, ExitOK, r.code, r.stderr)
	var res moduleResult
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &res))
	want := `configmap kube-system/kube-proxy: config.conf: field "nftables" is ignored by kube-proxy 1.28 (kube-proxy has it from 1.29 on)`
	assert.Equal(t, []string{want}, res.Warnings)
	assert.Contains(t, r.stderr, `level=warning msg="configmap kube-system/kube-proxy: config.conf: field \"nftables\" is ignored by kube-proxy 1.28`)
	assert.True(t, res.Facts.ConfigMapChanged)

	// none: no key at all
	r = run(t, "--probe-path", "none", "--output", "json")
	require.Equal(t, ExitOK, r.code, r.stderr)
	assert.NotContains(t, r.stdout, `"warnings"`)
}

func TestDetailedExitCode(t *testing.T) {
	r := run(t, "--server", "https://10.0.0.9:6443", "--probe-path", "none", "--restart", "never", "--detailed-exitcode")
	assert.Equal(t, ExitChanged, r.code, r.stderr)
	assert.Contains(t, r.stdout, "configmap kube-system/kube-proxy changed")
	r = run(t, "--probe-path", "none", "--restart", "never", "--detailed-exitcode")
	assert.Equal(t, ExitOK, r.code, r.stderr)
}

func TestHelpAndVersion(t *testing.T) {
	r := run(t, "--help")
	assert.Equal(t, ExitOK, r.code)
	assert.Contains(t, r.stderr, "Examples:")
	assert.Contains(t, r.stderr, "--probe-path")
	r = run(t, "--version")
	assert.Equal(t, ExitOK, r.code)
	assert.Contains(t, r.stdout, "kube-proxy-sync ")
}

// --version names galaxy.yml's version (stamped in by kps_ldflags; make
// verify checks a real build) and the commit when there is one.
func TestVersionLine(t *testing.T) {
	defer func(v, c string) { version, commit = v, c }(version, commit)
	for name, tc := range map[string]struct{ version, commit, want string }{
		"release build": {"1.0.0", "v1.0.0", "kube-proxy-sync 1.0.0 (commit v1.0.0)"},
		"dirty tree":    {"1.0.0", "9ed2602-dirty", "kube-proxy-sync 1.0.0 (commit 9ed2602-dirty)"},
		"go build":      {"dev", "", "kube-proxy-sync dev"},
	} {
		t.Run(name, func(t *testing.T) {
			version, commit = tc.version, tc.commit
			assert.Equal(t, tc.want, versionLine())
		})
	}
}

func TestTextOutputShowsEachKeysEffect(t *testing.T) {
	var out bytes.Buffer
	res := &kpsync.Result{Msg: "configmap kube-system/kube-proxy changed", Facts: kpsync.Facts{
		ChangedKeys:       []string{"config.conf:ipvs.scheduler", "config.conf:mode"},
		ChangedKeysEffect: map[string]string{"config.conf:ipvs.scheduler": "no-effect", "config.conf:mode": "restart"},
	}}
	printResult(&out, &Options{Output: "text"}, res, nil)
	assert.Contains(t, out.String(), "  changed config.conf:ipvs.scheduler: no-effect\n  changed config.conf:mode: restart\n")
}

// A mode change's plan is in the text output: the strategy used and
// asked, the canary and batches (not for a rolling one), checks, warnings.
func TestTextOutputShowsTheMigrationPlan(t *testing.T) {
	for _, tc := range []struct {
		name string
		m    kpsync.Migration
		want []string
		not  []string
	}{
		{"canary", kpsync.Migration{From: "iptables", To: "nftables", KubeProxyVersion: "1.34.4", Strategy: "canary", StrategyAsked: "rolling",
			CanaryNodes: []string{"a"}, BatchSize: 2, Batches: 3, VerifyHealth: "auto", VerifyTraffic: "default/kubernetes", VerifyTrafficPaths: []string{"node", "pod"}, Cleanup: "kube-proxy 1.34 removes", Warnings: []string{"nodePortAddresses is not set"}},
			[]string{"proxy mode iptables -> nftables (kube-proxy 1.34.4): canary rollout (--strategy rolling asked), canary [a], then 3 batch(es) of at most 2; checks: --verify-health auto, --verify-traffic default/kubernetes (paths node,pod)",
				"old mode's rules: kube-proxy 1.34 removes", "warning: nodePortAddresses is not set"}, nil},
		{"rolling", kpsync.Migration{From: "iptables", To: "ipvs", Strategy: "rolling", StrategyAsked: "rolling", VerifyHealth: "off"},
			[]string{"iptables -> ipvs", "rolling rollout (--strategy rolling asked); checks: --verify-health off"}, []string{"batch"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			m := tc.m
			printResult(&out, &Options{Output: "text"}, &kpsync.Result{Facts: kpsync.Facts{Migration: &m}}, nil)
			for _, w := range tc.want {
				assert.Contains(t, out.String(), w)
			}
			for _, w := range tc.not {
				assert.NotContains(t, out.String(), w)
			}
		})
	}
}

func TestMemoryLimit(t *testing.T) {
	assert.Equal(t, int64(SoftMemoryLimit), memoryLimit(""), "the binary's own limit by default")
	assert.Equal(t, int64(-1), memoryLimit("64MiB"), "GOMEMLIMIT wins")
	assert.Equal(t, int64(-1), memoryLimit("off"))
}

// --server with credentials is refused, and they appear nowhere: not in
// the result, not on stderr; http is refused unless the user opts out.
func TestServerHygiene(t *testing.T) {
	const secret = "s3cr3t-pw"
	for _, tc := range []struct {
		name string
		args []string
		want string // in msg; empty: the run succeeds
	}{
		{"user info", []string{"--server", "https://admin:" + secret + "@10.0.0.9:6443"}, "user info"},
		{"user info, not a URL", []string{"--server", "admin:" + secret + "@10.0.0.9:6443"}, "want a URL like"},
		{"user info, bad port", []string{"--server", "https://admin:" + secret + "@10.0.0.9:0"}, "user info"},
		{"user info with opt-out", []string{"--allow-insecure-server", "--server", "http://admin:" + secret + "@10.0.0.9:6443"}, "user info"},
		{"http", []string{"--server", "http://10.0.0.9:6443"}, "--allow-insecure-server"},
		{"http with opt-out", []string{"--allow-insecure-server", "--server", "http://10.0.0.9:6443"}, ""},
	} {
		for _, output := range []string{"json", "text"} {
			t.Run(tc.name+"/"+output, func(t *testing.T) {
				r := run(t, append([]string{"--output", output, "--check", "--probe-path", "none"}, tc.args...)...)
				assert.NotContains(t, r.stdout+r.stderr, secret)
				if tc.want == "" {
					assert.Equal(t, ExitOK, r.code, r.stderr)
					return
				}
				assert.Equal(t, ExitFailed, r.code)
				assert.Empty(t, r.client.Actions(), "refused before touching the cluster")
				assert.Contains(t, r.stdout+r.stderr, tc.want)
			})
		}
	}
	// the module arg
	args := filepath.Join(t.TempDir(), "args")
	for allow, code := range map[bool]int{false: ExitFailed, true: ExitOK} {
		require.NoError(t, os.WriteFile(args, []byte(fmt.Sprintf(`{"server":"http://10.0.0.9:6443","probe_path":"none","allow_insecure_server":%t,"_ansible_check_mode":true}`, allow)), 0o600))
		r := run(t, args)
		assert.Equal(t, code, r.code, "allow_insecure_server %t: %s", allow, r.stdout)
	}
}

// A check mode that cannot be read is a failed result, with the cluster
// untouched: never a write.
func TestUnreadableCheckModeWritesNothing(t *testing.T) {
	args := filepath.Join(t.TempDir(), "args")
	require.NoError(t, os.WriteFile(args, []byte(`{"server":"https://10.0.0.9:6443","probe_path":"none","_ansible_check_mode":"yes"}`), 0o600))
	r := run(t, args)
	assert.Equal(t, ExitFailed, r.code)
	assert.Empty(t, r.client.Actions())
	var res moduleResult
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &res), r.stdout)
	assert.True(t, res.Failed)
	assert.Contains(t, res.Msg, "_ansible_check_mode: want a JSON boolean")
}

// The text summary says what became of the readiness probe, also when the
// run left it alone.
func TestTextOutputProbeLine(t *testing.T) {
	r := run(t, "--check", "--probe-path", "none")
	require.Equal(t, ExitOK, r.code, r.stderr)
	assert.Contains(t, r.stdout, "  kube-proxy v1.33.6, readiness probe left alone (--probe-path none)\n")
	assert.NotContains(t, r.stdout, "probe  (")

	r = run(t, "--check", "--probe-path", "auto")
	require.Equal(t, ExitOK, r.code, r.stderr)
	assert.Contains(t, r.stdout, "  kube-proxy v1.33.6, readiness probe /livez (changed: true)\n")
}

// panicky is a client whose ConfigMaps panics, as a bug in the run would.
type panicky struct{ kube.Interface }

func (panicky) ConfigMaps(string) kube.ConfigMaps { panic("boom") }

// A panic in the run is a failed result (exit 1, a JSON result on stdout,
// the stack on stderr), never the Go runtime's exit 2, which
// --detailed-exitcode uses for "changed".
func TestPanicIsAFailedResultNotExitTwo(t *testing.T) {
	cm, ds := seed()
	_, api := kubefake.New(cm, ds)
	var out, errOut bytes.Buffer
	code := Run(context.Background(), Streams{Out: &out, ErrOut: &errOut}, []string{"--output", "json", "--detailed-exitcode", "--probe-path", "none"},
		Deps{Clock: clocktesting.NewFakeClock(time.Unix(0, 0)), Kube: panicky{api}})
	assert.Equal(t, ExitFailed, code)
	var res moduleResult
	require.NoError(t, json.Unmarshal(out.Bytes(), &res), "stdout holds one result: %q", out.String())
	assert.True(t, res.Failed)
	assert.Contains(t, res.Msg, "internal error: boom")
	assert.Contains(t, errOut.String(), "panic: boom")
	assert.Contains(t, errOut.String(), "TestPanicIsAFailedResultNotExitTwo", "with the stack")
}

// panicOnEvent is a client whose Event create panics: a bug that strikes
// after the run wrote the ConfigMap.
type panicOnEvent struct{ kube.Interface }

func (panicOnEvent) Events(string) kube.Events { return panickyEvents{} }

type panickyEvents struct{}

func (panickyEvents) Create(context.Context, *corev1.Event, metav1.CreateOptions) (*corev1.Event, error) {
	panic("boom after the write")
}

// A panic after a write still reports the write: changed, as Ansible must
// show it, and failed.
func TestPanicAfterAWriteReportsTheChange(t *testing.T) {
	cm, ds := seed()
	_, api := kubefake.New(cm, ds)
	var out, errOut bytes.Buffer
	code := Run(context.Background(), Streams{Out: &out, ErrOut: &errOut},
		[]string{"--output", "json", "--probe-path", "none", "--restart", "never", "--server", "https://10.0.0.9:6443"},
		Deps{Clock: clocktesting.NewFakeClock(time.Unix(0, 0)), Kube: panicOnEvent{api}})
	assert.Equal(t, ExitFailed, code)
	var res moduleResult
	require.NoError(t, json.Unmarshal(out.Bytes(), &res), "stdout holds one result: %q", out.String())
	assert.True(t, res.Failed)
	assert.True(t, res.Changed, "the ConfigMap was written before the panic")
	assert.Contains(t, res.Msg, "internal error: boom after the write")
	// the config's copy, and the DaemonSet owing a restart onto it
	ds, err := api.DaemonSets("kube-system").Get(context.Background(), "kube-proxy", metav1.GetOptions{})
	require.NoError(t, err)
	pending := ds.Annotations["kube-proxy-sync.io/pending-config"]
	require.NotEmpty(t, pending)
	live, err := api.ConfigMaps("kube-system").Get(context.Background(), pending, metav1.GetOptions{})
	require.NoError(t, err)
	assert.Contains(t, live.Data["kubeconfig.conf"], "https://10.0.0.9:6443")
}

// An interrupt while kubeadm renders --kubeadm-config stops kubeadm and
// the run: kubeadm runs under the run's context, not a background one.
func TestKubeadmConfigStopsOnInterrupt(t *testing.T) {
	dir := t.TempDir()
	started := filepath.Join(dir, "started")
	require.NoError(t, syscall.Mkfifo(started, 0o600))
	fake := filepath.Join(dir, "kubeadm")
	// says it started, then hangs as a kubeadm stuck on a network call would
	require.NoError(t, os.WriteFile(fake, []byte("#!/bin/sh\necho started >"+started+"\nexec sleep 600\n"), 0o755))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cm, ds := seed()
	client, api := kubefake.New(cm, ds)
	var out, errOut bytes.Buffer
	done := make(chan int, 1)
	go func() {
		done <- Run(ctx, Streams{Out: &out, ErrOut: &errOut}, []string{"--output", "json", "--kubeadm", fake, "--kubeadm-config", filepath.Join(dir, "kubeadm.yaml")},
			Deps{Clock: clocktesting.NewFakeClock(time.Unix(0, 0)), Kube: api})
	}()
	fifo, err := os.Open(started) // blocks until kubeadm runs
	require.NoError(t, err)
	_, err = io.ReadAll(fifo)
	require.NoError(t, err)
	require.NoError(t, fifo.Close())
	cancel() // SIGINT
	select {
	case code := <-done:
		assert.Equal(t, ExitFailed, code)
	case <-time.After(30 * time.Second):
		t.Fatal("the run did not stop on the interrupt while kubeadm ran")
	}
	var res moduleResult
	require.NoError(t, json.Unmarshal(out.Bytes(), &res), "stdout holds one result: %q", out.String())
	assert.Contains(t, res.Msg, "interrupted")
	assert.Zero(t, writes(client), "nothing written")
}

// --kubeadm-config: the ConfigMap kubeadm renders from the file is applied
// like --manifest, and --server then sets the server; a kubeadm that fails
// changes nothing.
func TestKubeadmConfigRendersTheConfigMap(t *testing.T) {
	dir := t.TempDir()
	fake := filepath.Join(dir, "kubeadm")
	rendered := "---\nkind: ConfigMap\napiVersion: v1\nmetadata:\n  name: kube-proxy\n  namespace: kube-system\ndata:\n" +
		"  config.conf: |-\n    apiVersion: kubeproxy.config.k8s.io/v1alpha1\n    kind: KubeProxyConfiguration\n    mode: ipvs\n" +
		"  kubeconfig.conf: |-\n    apiVersion: v1\n    kind: Config\n    clusters:\n    - cluster:\n        server: https://10.0.0.10:6443\n      name: default\n"
	require.NoError(t, os.WriteFile(fake, []byte("#!/bin/sh\n[ \"$6\" = "+filepath.Join(dir, "ok.yaml")+" ] || { echo 'bad config' >&2; exit 1; }\ncat <<'END'\n"+rendered+"END\n"), 0o755))

	r := run(t, "--output", "json", "--check", "--diff", "--kubeadm", fake, "--kubeadm-config", filepath.Join(dir, "ok.yaml"), "--server", "https://127.0.0.1:6443")
	require.Equal(t, ExitOK, r.code, "stdout: %s\nstderr: %s", r.stdout, r.stderr)
	var res moduleResult
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &res))
	assert.True(t, res.Changed)
	assert.Contains(t, res.ChangedKeys, "config.conf", "kubeadm's config.conf")
	require.NotNil(t, res.Diff)
	assert.Contains(t, res.Diff.After, "mode: ipvs")
	assert.Contains(t, res.Diff.After, "server: https://127.0.0.1:6443", "--server sets the server over kubeadm's")
	assert.NotContains(t, res.Diff.After, "10.0.0.10")

	r = run(t, "--output", "json", "--kubeadm", fake, "--kubeadm-config", filepath.Join(dir, "bad.yaml"))
	assert.Equal(t, ExitFailed, r.code)
	assert.Contains(t, r.stdout, "bad config")
	assert.Zero(t, writes(r.client), "nothing written")
}

// --kubeadm-config - takes the kubeadm configuration on standard input and
// hands it to kubeadm as /dev/stdin, so a configuration with a join token
// and certificate key needs no file; empty input, and the module (which has
// no standard input), are refused with nothing written.
func TestKubeadmConfigFromStdin(t *testing.T) {
	dir := t.TempDir()
	fake := filepath.Join(dir, "kubeadm")
	rendered := "---\nkind: ConfigMap\napiVersion: v1\nmetadata:\n  name: kube-proxy\n  namespace: kube-system\ndata:\n" +
		"  config.conf: |-\n    apiVersion: kubeproxy.config.k8s.io/v1alpha1\n    kind: KubeProxyConfiguration\n    mode: ipvs\n"
	require.NoError(t, os.WriteFile(fake, []byte("#!/bin/sh\n[ \"$6\" = /dev/stdin ] || { echo \"config $6\" >&2; exit 1; }\n"+
		"[ \"$(cat \"$6\")\" = 'kind: InitConfiguration' ] || { echo 'not the configuration piped in' >&2; exit 1; }\n"+
		"cat <<'END'\n"+rendered+"END\n"), 0o755))
	runIn := func(in io.Reader, args ...string) runResult {
		cm, ds := seed()
		client, api := kubefake.New(cm, ds)
		var out, errOut bytes.Buffer
		code := Run(context.Background(), Streams{Out: &out, ErrOut: &errOut, In: in}, args,
			Deps{Clock: clocktesting.NewFakeClock(time.Unix(0, 0)), Kube: api})
		return runResult{code, out.String(), errOut.String(), client}
	}

	r := runIn(strings.NewReader("kind: InitConfiguration\n"), "--output", "json", "--check", "--diff", "--kubeadm", fake, "--kubeadm-config", "-")
	require.Equal(t, ExitOK, r.code, "stdout: %s\nstderr: %s", r.stdout, r.stderr)
	var res moduleResult
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &res))
	require.NotNil(t, res.Diff)
	assert.Contains(t, res.Diff.After, "mode: ipvs", "kubeadm's rendering of what came in")

	r = runIn(strings.NewReader("kind: ClusterConfiguration\n"), "--output", "json", "--kubeadm", fake, "--kubeadm-config", "-")
	assert.Equal(t, ExitFailed, r.code)
	assert.Contains(t, r.stdout, "not the configuration piped in")

	r = runIn(strings.NewReader(" \n"), "--output", "json", "--kubeadm", fake, "--kubeadm-config", "-")
	assert.Equal(t, ExitFailed, r.code)
	assert.Contains(t, r.stdout, "standard input is empty")
	assert.Zero(t, writes(r.client), "nothing written")

	args := filepath.Join(dir, "args.json")
	require.NoError(t, os.WriteFile(args, []byte(`{"kubeadm": "`+fake+`", "kubeadm_config": "-"}`), 0o600))
	r = runIn(strings.NewReader("kind: InitConfiguration\n"), args)
	assert.Equal(t, ExitFailed, r.code)
	assert.Contains(t, r.stdout, "only the command reads")
	assert.Zero(t, writes(r.client), "nothing written")
}

// --image kubeadm takes the image kubeadm renders (an upgrade's); without
// --kubeadm-config, or when kubeadm renders no DaemonSet, it is refused
// before anything is read.
func TestImageFromKubeadm(t *testing.T) {
	dir := t.TempDir()
	cmDoc := "---\nkind: ConfigMap\napiVersion: v1\nmetadata:\n  name: kube-proxy\n  namespace: kube-system\ndata:\n" +
		"  config.conf: |-\n    apiVersion: kubeproxy.config.k8s.io/v1alpha1\n    kind: KubeProxyConfiguration\n    mode: iptables\n"
	dsDoc := "---\napiVersion: apps/v1\nkind: DaemonSet\nmetadata:\n  name: kube-proxy\n  namespace: kube-system\nspec:\n  template:\n    spec:\n" +
		"      containers:\n      - name: kube-proxy\n        image: registry.k8s.io/kube-proxy:v1.99.0\n"
	fake := func(name, printed string) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, []byte("#!/bin/sh\ncat <<'END'\n"+printed+"END\n"), 0o755))
		return p
	}
	withDS, withoutDS := fake("kubeadm", cmDoc+dsDoc), fake("kubeadm-no-ds", cmDoc)

	r := run(t, "--output", "json", "--check", "--kubeadm", withDS, "--kubeadm-config", filepath.Join(dir, "kubeadm.yaml"), "--image", "kubeadm")
	require.Equal(t, ExitOK, r.code, "stdout: %s\nstderr: %s", r.stdout, r.stderr)
	var res moduleResult
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &res))
	assert.True(t, res.Changed)
	assert.True(t, res.ImageChanged)
	assert.Equal(t, "registry.k8s.io/kube-proxy:v1.99.0", res.Image)
	assert.Equal(t, "v1.99.0", res.KubeProxyVersion, "the new image's version")

	r = run(t, "--output", "json", "--check", "--kubeadm", withDS, "--kubeadm-config", filepath.Join(dir, "kubeadm.yaml"))
	require.Equal(t, ExitOK, r.code, "stdout: %s\nstderr: %s", r.stdout, r.stderr)
	res = moduleResult{}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &res))
	assert.False(t, res.ImageChanged, "without --image the image is left alone")

	for _, args := range [][]string{
		{"--image", "kubeadm"},
		{"--image", "kubeadm", "--kubeadm", withoutDS, "--kubeadm-config", filepath.Join(dir, "kubeadm.yaml")},
		{"--image", "registry.k8s.io/kube-proxy:v1.34.4 --v=9"},
		{"--image", "registry.k8s.io/kube-proxy:v1.34.4", "--undo"},
	} {
		r = run(t, append([]string{"--output", "json"}, args...)...)
		assert.Equal(t, ExitFailed, r.code, "%v: %s", args, r.stdout)
		assert.Contains(t, r.stdout, "--image", "%v", args)
		assert.Zero(t, writes(r.client), "%v: nothing written", args)
		if slices.Contains(args, withoutDS) {
			assert.Contains(t, r.stdout, "printed no DaemonSet kube-system/kube-proxy", "why kubeadm's image is unknown")
		}
	}
}

// kubeadm always renders kube-system/kube-proxy; a kube-proxy kept in
// another namespace (a test's, say) takes the same data.
func TestKubeadmConfigAppliesToAnotherNamespace(t *testing.T) {
	dir := t.TempDir()
	fake := filepath.Join(dir, "kubeadm")
	rendered := "---\nkind: ConfigMap\napiVersion: v1\nmetadata:\n  name: kube-proxy\n  namespace: kube-system\ndata:\n" +
		"  config.conf: |-\n    apiVersion: kubeproxy.config.k8s.io/v1alpha1\n    kind: KubeProxyConfiguration\n    mode: ipvs\n"
	require.NoError(t, os.WriteFile(fake, []byte("#!/bin/sh\ncat <<'END'\n"+rendered+"END\n"), 0o755))
	cm, ds := seed()
	cm.Namespace, ds.Namespace = "kube-proxy-test", "kube-proxy-test"
	client, api := kubefake.New(cm, ds)
	var out, errOut bytes.Buffer
	code := Run(context.Background(), Streams{Out: &out, ErrOut: &errOut},
		[]string{"--output", "json", "--check", "--diff", "--namespace", "kube-proxy-test", "--kubeadm", fake, "--kubeadm-config", filepath.Join(dir, "kubeadm.yaml")},
		Deps{Clock: clocktesting.NewFakeClock(time.Unix(0, 0)), Kube: api})
	require.Equal(t, ExitOK, code, "stdout: %s\nstderr: %s", out.String(), errOut.String())
	var res moduleResult
	require.NoError(t, json.Unmarshal(out.Bytes(), &res))
	assert.True(t, res.Changed)
	assert.Equal(t, []string{"config.conf"}, res.ChangedKeys)
	require.NotNil(t, res.Diff)
	assert.Contains(t, res.Diff.After, "mode: ipvs")
	assert.Zero(t, writes(client), "check mode writes nothing")
}
