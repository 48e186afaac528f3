package app

import (
	"context"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kube-proxy-sync/kube-proxy-sync/internal/kpsync"
	"github.com/kube-proxy-sync/kube-proxy-sync/internal/nodes"
	"github.com/kube-proxy-sync/kube-proxy-sync/internal/probe"
	"github.com/kube-proxy-sync/kube-proxy-sync/internal/rollout"
	"github.com/kube-proxy-sync/kube-proxy-sync/internal/verify"
)

// Every row is whole: names unique, a release, a help text that renders,
// a default of the field's type, choices that Validate accepts.
func TestOptionTable(t *testing.T) {
	semver := regexp.MustCompile(`^[0-9]+\.[0-9]+\.[0-9]+$`)
	seen := map[string]string{}
	unique := func(t *testing.T, kind, name string) {
		t.Helper()
		if name == "" {
			return
		}
		assert.Empty(t, seen[kind+" "+name], "%s %q is in two rows", kind, name)
		seen[kind+" "+name] = name
	}
	for _, opt := range OptionTable() {
		t.Run(opt.Flag, func(t *testing.T) {
			require.NotEmpty(t, opt.Flag)
			require.NotNil(t, opt.field)
			unique(t, "flag", opt.Flag)
			unique(t, "shorthand", opt.Short)
			unique(t, "module argument", opt.Arg)
			unique(t, "role variable", opt.Role)
			unique(t, "name", opt.Name())
			assert.Regexp(t, semver, opt.Since, "Since: the release it appeared in")
			assert.NotEmpty(t, opt.Kind())
			assert.NotEmpty(t, opt.Help)
			assert.NotPanics(t, func() { _ = opt.Usage() }, "every O() names an option with a flag")
			if opt.Role != "" {
				assert.True(t, strings.HasPrefix(opt.Role, "kpsync_"), "public role variables are prefixed kpsync_")
				assert.NotEmpty(t, opt.Arg, "the role passes a module argument")
				assert.NotEmpty(t, opt.RoleDefault, "a role variable needs its value in defaults/main.yml")
			}
			if kind := opt.Kind(); kind == "int" || kind == "duration" {
				assert.NotNil(t, opt.Range, "an int or a duration says its range (Range), which Validate enforces and the help says")
			}
			assert.NotRegexp(t, `\b[0-9]+ to [0-9]+\b`, opt.Help, "a range is written once, in Range, not in Help")
			if len(opt.Choices) > 0 && opt.Default != nil {
				assert.Contains(t, opt.Choices, opt.Default)
			}
			for _, choice := range opt.Choices {
				fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
				o := NewOptions()
				o.AddFlags(fs)
				require.NoError(t, fs.Parse([]string{"--" + opt.Flag + "=" + choice}))
				require.NoError(t, o.Complete())
				assert.NoError(t, o.Validate(context.Background()), "choice %q", choice)
			}
		})
	}
}

// The defaults, flags and module arguments from before the option table
// are all still there, as they were: a new option is added, none of these
// is dropped, renamed or given another default by accident.
func TestOptionTableKeepsTheOptions(t *testing.T) {
	defaults := reflect.ValueOf(NewOptions()).Elem()
	for field, want := range map[string]any{
		"Namespace":         "kube-system",
		"ConfigMap":         "kube-proxy",
		"DaemonSet":         "kube-proxy",
		"Container":         "kube-proxy",
		"ProbePath":         probe.Auto,
		"Restart":           kpsync.RestartAuto,
		"RequestTimeout":    20 * time.Second,
		"Retries":           5,
		"Output":            "text",
		"LogLevel":          "info",
		"LogFormat":         "text",
		"LockTimeout":       5 * time.Minute,
		"Strategy":          kpsync.StrategyRolling,
		"CanaryNodes":       1,
		"ConfigHistory":     kpsync.DefaultHistory,
		"Kubeadm":           "kubeadm",
		"ZoneLabel":         rollout.DefaultZoneLabel,
		"VerifyHealth":      verify.Off,
		"VerifyHealthWait":  time.Minute,
		"VerifyTrafficImg":  DefaultTrafficImage,
		"VerifyTrafficWait": 30 * time.Second,
		"RollbackOnFailure": true,
		"NotReadyTolerance": nodes.DefaultPolicy.NotReadyTolerance,
	} {
		assert.Equal(t, want, defaults.FieldByName(field).Interface(), field)
	}
	zero := reflect.ValueOf(Options{})
	for _, field := range []string{
		"Kubeconfig", "Context", "Server", "AllowInsecureServer", "Set", "Manifest", "KubeadmConfig", "KubeProxyVersion",
		"Timeout", "Check", "Diff", "AuditLog", "DetailedExitCode", "ShowVersion", "Undo", "BatchSize", "Verify",
		"VerifyEndpoints", "VerifyTraffic", "NoRollback", "ProgressDeadline", "SkipUnschedulable",
	} {
		assert.Equal(t, zero.FieldByName(field).Interface(), defaults.FieldByName(field).Interface(), field)
	}

	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	NewOptions().AddFlags(fs)
	var flags []string
	fs.VisitAll(func(f *pflag.Flag) {
		name := f.Name + " " + f.Value.Type()
		if f.Shorthand != "" {
			name += " -" + f.Shorthand
		}
		flags = append(flags, name)
	})
	assert.Subset(t, flags, []string{
		"allow-insecure-server bool", "audit-log string", "batch-size string", "canary-nodes int", "check bool",
		"config-history int", "configmap string", "container string", "context string", "daemonset string",
		"detailed-exitcode bool", "diff bool", "kube-proxy-version string", "kubeadm string", "kubeadm-config string",
		"kubeconfig string", "lock-timeout duration", "log-format string", "log-level string", "manifest string",
		"namespace string -n", "no-rollback bool", "not-ready-tolerance duration", "output string -o", "probe-path string",
		"progress-deadline duration", "request-timeout duration", "restart string", "retries int", "rollback-on-failure bool",
		"server string", "set stringArray", "skip-unschedulable bool", "strategy string", "timeout duration", "undo bool",
		"verify bool", "verify-endpoints int", "verify-health string", "verify-health-timeout duration", "verify-traffic string",
		"verify-traffic-image string", "verify-traffic-paths string", "verify-traffic-pod-image string", "verify-traffic-timeout duration", "version bool", "zone-label string",
	})

	assert.Subset(t, ModuleArgNames(), []string{
		"allow_insecure_server", "audit_log", "batch_size", "canary_nodes", "config_history", "configmap", "container",
		"context", "daemonset", "kube_proxy_version", "kubeadm", "kubeadm_config", "kubeconfig", "lock_timeout", "log_level",
		"manifest", "namespace", "no_rollback", "not_ready_tolerance", "probe_path", "progress_deadline", "request_timeout",
		"restart", "retries", "rollback_on_failure", "server", "set", "skip_unschedulable", "strategy", "timeout", "undo",
		"verify", "verify_endpoints", "verify_health", "verify_health_timeout", "verify_traffic", "verify_traffic_image",
		"verify_traffic_timeout", "zone_label",
	})
}

// Each range is enforced as written: its ends pass Validate (Min not,
// when AboveMin), one step past either end fails with a message that says
// the range, and the default is inside it.
func TestOptionRanges(t *testing.T) {
	validate := func(t *testing.T, opt Option, value string) error {
		t.Helper()
		fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
		o := NewOptions()
		o.AddFlags(fs)
		// --verify: --verify-endpoints needs it, no other option minds it
		require.NoError(t, fs.Parse([]string{"--verify", "--" + opt.Flag + "=" + value}))
		require.NoError(t, o.Complete())
		return o.Validate(context.Background())
	}
	n := 0
	for _, opt := range OptionTable() {
		if opt.Range == nil {
			continue
		}
		n++
		t.Run(opt.Flag, func(t *testing.T) {
			r := opt.Range
			var low, high, below, over string
			switch opt.Kind() {
			case "int":
				lo, ok1 := r.Min.(int)
				hi, ok2 := r.Max.(int)
				require.True(t, ok1 && ok2, "Min and Max of an int option are ints")
				require.Less(t, lo, hi)
				d := reflect.ValueOf(opt.field(NewOptions())).Elem().Interface().(int)
				assert.True(t, d >= lo && d <= hi, "the default %d is in the range", d)
				low, high, below, over = strconv.Itoa(lo), strconv.Itoa(hi), strconv.Itoa(lo-1), strconv.Itoa(hi+1)
			case "duration":
				lo, ok1 := r.Min.(time.Duration)
				hi, ok2 := r.Max.(time.Duration)
				require.True(t, ok1 && ok2, "Min and Max of a duration option are durations")
				require.Less(t, lo, hi)
				d := reflect.ValueOf(opt.field(NewOptions())).Elem().Interface().(time.Duration)
				assert.True(t, d >= lo && d <= hi && !(r.AboveMin && d == lo), "the default %s is in the range", d)
				low, high, below, over = lo.String(), hi.String(), (lo - time.Nanosecond).String(), (hi + time.Nanosecond).String()
			default:
				t.Fatalf("a range on a %s option", opt.Kind())
			}
			assert.NoError(t, validate(t, opt, high))
			if r.AboveMin {
				assert.ErrorContains(t, validate(t, opt, low), "--"+opt.Flag+" ")
			} else {
				assert.NoError(t, validate(t, opt, low))
			}
			for _, bad := range []string{below, over} {
				err := validate(t, opt, bad)
				require.Error(t, err, bad)
				assert.Contains(t, err.Error(), "--"+opt.Flag+" ")
				assert.Contains(t, err.Error(), ": want ")
				assert.Contains(t, err.Error(), valueText(r.Max), "the message says the range")
			}
			assert.Contains(t, opt.Usage(), valueText(r.Max), "the flag's help says the range")
		})
	}
	assert.NotZero(t, n)
}

func TestSentence(t *testing.T) {
	for in, want := range map[string]string{
		"Path to the kubeconfig.":           "path to the kubeconfig",
		"A node NotReady.":                  "a node NotReady",
		"API server URL.":                   "API server URL",
		"KubeProxyConfiguration fields.":    "KubeProxyConfiguration fields",
		"kube-proxy version that it takes.": "kube-proxy version that it takes",
		"NAMESPACE/NAME of a Service":       "NAMESPACE/NAME of a Service",
	} {
		assert.Equal(t, want, Sentence(in), in)
	}
}

func TestRenderHelp(t *testing.T) {
	ref := func(name, value string) (string, error) { return "<" + name + "|" + value + ">", nil }
	lit := func(kind, text string) string { return kind + ":" + text }
	out, err := RenderHelp("O(a) O(b=c) V(off) C({\"x\": 1}) RV(k) fooO(x)", ref, lit)
	require.NoError(t, err)
	assert.Equal(t, `<a|> <b|c> V:off C:{"x": 1} RV:k fooO(x)`, out)
	_, err = RenderHelp("see M(some.module)", ref, lit)
	assert.ErrorContains(t, err, "M(some.module)")
}

// --verify-traffic-paths: known paths once each; pod needs its image.
func TestVerifyTrafficPathsValidation(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		err  string
	}{
		{"default node", nil, ""},
		{"all three", []string{"--verify-traffic-paths", "node,pod,nodeport", "--verify-traffic-pod-image", "example.test/agent:1"}, ""},
		{"nodeport alone", []string{"--verify-traffic-paths", "nodeport"}, ""},
		{"unknown", []string{"--verify-traffic-paths", "node,external"}, `"external" is not one of node,pod,nodeport`},
		{"twice", []string{"--verify-traffic-paths", "node,node"}, "named twice"},
		{"empty", []string{"--verify-traffic-paths", ","}, "want one or more of node,pod,nodeport"},
		{"pod without its image", []string{"--verify-traffic-paths", "pod"}, "--verify-traffic-paths pod needs --verify-traffic-pod-image"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
			o := NewOptions()
			o.AddFlags(fs)
			require.NoError(t, fs.Parse(append([]string{"--verify-health", "auto", "--verify-traffic", "default/kubernetes"}, tc.args...)))
			require.NoError(t, o.Complete())
			err := o.Validate(context.Background())
			if tc.err == "" {
				assert.NoError(t, err)
			} else {
				assert.ErrorContains(t, err, tc.err)
			}
		})
	}
}
