// Differential test: kube-proxy's own decoding, defaulting and validation at
// the k8s.io/kubernetes version this module pins, next to internal/kpvalidate,
// on the same inputs. Every module hack/difftest/v1.NN links this file (see
// gen.sh), so the reference below is the same code at every minor.
package difftest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"
	_ "unsafe" // go:linkname, for kube-proxy's loadConfig

	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/component-base/featuregate"
	// kube-proxy's main registers the json log format; Validate checks
	// logging.format against the registered ones
	_ "k8s.io/component-base/logs/json/register"
	"k8s.io/klog/v2"
	kubeproxyv1alpha1 "k8s.io/kube-proxy/config/v1alpha1"
	// kube-proxy's command: its init adds the metrics and logging feature
	// gates to the process-wide gate, as in the real binary
	proxyapp "k8s.io/kubernetes/cmd/kube-proxy/app"
	kubeproxyconfig "k8s.io/kubernetes/pkg/proxy/apis/config"
	"k8s.io/kubernetes/pkg/proxy/apis/config/validation"

	"github.com/kube-proxy-sync/kube-proxy-sync/internal/kpvalidate"
	"github.com/kube-proxy-sync/kube-proxy-sync/internal/kpvalidate/kpvalidatetest"
)

// loadConfig is kube-proxy's own loading of its --config file
// (cmd/kube-proxy/app, (*Options).loadConfig, the same signature at every
// supported minor): strict decoding, and when that fails only on unknown or
// duplicate fields, a lenient decode of v1alpha1 that it logs as a warning
// and runs with. It is unexported and the exported path to it
// (Options.Complete) starts a file watcher per call, hence the linkname.
//
//go:linkname loadConfig k8s.io/kubernetes/cmd/kube-proxy/app.(*Options).loadConfig
func loadConfig(o *proxyapp.Options, data []byte) (*kubeproxyconfig.KubeProxyConfiguration, error)

// lenientLog is what loadConfig logs when it falls back (every supported
// minor: klog.InfoS before 1.30, its logger from then on, both through klog).
const lenientLog = "Using lenient decoding as strict decoding failed"

// klogOut collects klog's output, where reference looks for lenientLog.
var klogOut bytes.Buffer

func init() {
	klog.LogToStderr(false)
	klog.SetOutput(&klogOut)
}

// minor is this module's kube-proxy minor, from its directory name (v1.NN).
func minor(t testing.TB) int {
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	var major, m int
	if _, err := fmt.Sscanf(filepath.Base(wd), "v%d.%d", &major, &m); err != nil {
		t.Fatalf("module directory %q is not v1.NN: %v", wd, err)
	}
	return m
}

// reference is what kube-proxy does with its --config file before it starts
// (cmd/kube-proxy/app: Options.Complete then Options.Validate): its own
// loadConfig (strict decoding into the internal type with defaults, else
// the lenient fallback, reported as lenient), the Linux platform defaults
// that Validate can see, the feature gates set on the process-wide gate
// (which Validate reads), then Validate.
func reference(text []byte) (lenient bool, err error) {
	klogOut.Reset()
	cfg, err := loadConfig(proxyapp.NewOptions(), text)
	klog.Flush()
	lenient = strings.Contains(klogOut.String(), lenientLog)
	if err != nil {
		return lenient, fmt.Errorf("load: %w", err)
	}
	if cfg.Mode == "" {
		cfg.Mode = kubeproxyconfig.ProxyModeIPTables
	}
	if cfg.DetectLocalMode == "" {
		cfg.DetectLocalMode = kubeproxyconfig.LocalModeClusterCIDR
	}
	// a copy of the process-wide gate, set from the config and put in its
	// place for Validate, so no case leaks into the next
	saved, savedRO := utilfeature.DefaultMutableFeatureGate, utilfeature.DefaultFeatureGate
	fg := saved.DeepCopy()
	utilfeature.DefaultMutableFeatureGate, utilfeature.DefaultFeatureGate = fg, fg
	defer func() { utilfeature.DefaultMutableFeatureGate, utilfeature.DefaultFeatureGate = saved, savedRO }()
	if err := fg.SetFromMap(cfg.FeatureGates); err != nil {
		return lenient, fmt.Errorf("feature gates: %w", err)
	}
	if errs := validation.Validate(cfg); len(errs) > 0 {
		return lenient, errs.ToAggregate()
	}
	return lenient, nil
}

// TestLenientLogSeen: the lenient fallback's log line is where reference
// looks for it (a renamed message would make every lenient case look
// strict).
func TestLenientLogSeen(t *testing.T) {
	lenient, err := reference([]byte("apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\nbogus: 1\n"))
	if err != nil || !lenient {
		t.Fatalf("an unknown field: want a lenient load and no error, got lenient=%t, %v; klog said:\n%s", lenient, err, klogOut.String())
	}
}

func TestCases(t *testing.T) {
	kpvalidatetest.RunCases(t, minor(t), reference)
}

// TestRandom: a fixed pseudo-random sweep over the fuzz target's input
// space, so every minor gets it without the fuzzing engine's build.
func TestRandom(t *testing.T) {
	kpvalidatetest.RunRandom(t, minor(t), reference, 3000)
}

func FuzzDiff(f *testing.F) {
	kpvalidatetest.Fuzz(f, minor(f), reference)
}

// TestFieldTable: the field table in internal/kpvalidate lists exactly the
// fields of this version's k8s.io/kube-proxy type, each with its kind.
func TestFieldTable(t *testing.T) {
	kpvalidatetest.CheckFields(t, minor(t), reflect.TypeOf(kubeproxyv1alpha1.KubeProxyConfiguration{}))
}

// TestFeatureGates: for every gate this kube-proxy knows, which values it
// accepts and its default, against internal/kpvalidate's generated table.
// DIFFTEST_GATES_OUT=file writes this version's gates as JSON for
// hack/difftest/gengates.
func TestFeatureGates(t *testing.T) {
	gates := map[string]kpvalidate.Gate{}
	for name, spec := range utilfeature.DefaultMutableFeatureGate.GetAll() {
		g := kpvalidate.Gate{Default: spec.Default}
		for _, v := range []bool{true, false} {
			fg := utilfeature.DefaultMutableFeatureGate.DeepCopy()
			if fg.SetFromMap(map[string]bool{string(name): v}) == nil {
				if v {
					g.True = true
				} else {
					g.False = true
				}
			}
		}
		gates[string(name)] = g
	}
	if out := os.Getenv("DIFFTEST_GATES_OUT"); out != "" {
		b, err := json.MarshalIndent(gates, "", "  ")
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(out, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	m := minor(t)
	var names []string
	for n := range gates {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		got, ok := kpvalidate.GateAt(m, n)
		if !ok || got != gates[n] {
			t.Errorf("feature gate %s at 1.%d: kube-proxy %+v, table %+v (known: %v); rerun hack/difftest/gengates", n, m, gates[n], got, ok)
		}
	}
	for _, n := range kpvalidate.GateNames(m) {
		if _, ok := gates[n]; !ok {
			t.Errorf("feature gate %s at 1.%d: in the table, unknown to kube-proxy", n, m)
		}
	}
}

// TestGateStages: the stage (alpha, beta, other) internal/kpvalidate gives
// each gate its rules read, for AllAlpha and AllBeta, against this
// kube-proxy's own gate.
func TestGateStages(t *testing.T) {
	m := minor(t)
	all := utilfeature.DefaultMutableFeatureGate.GetAll()
	for _, name := range kpvalidate.StagedGates() {
		want := kpvalidate.StageOther
		if spec, ok := all[featuregate.Feature(name)]; ok {
			switch spec.PreRelease {
			case featuregate.Alpha:
				want = kpvalidate.StageAlpha
			case featuregate.Beta:
				want = kpvalidate.StageBeta
			}
		}
		if got, _ := kpvalidate.StageAt(m, name); got != want {
			t.Errorf("feature gate %s at 1.%d: kube-proxy's stage %q, internal/kpvalidate's gateStages %q", name, m, want, got)
		}
	}
}
