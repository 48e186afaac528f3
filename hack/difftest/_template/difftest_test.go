// Differential test: kube-proxy's own decoding, defaulting and validation at
// the k8s.io/kubernetes version this module pins, next to internal/kpvalidate,
// on the same inputs. Every module hack/difftest/v1.NN links this file (see
// gen.sh), so the reference below is the same code at every minor.
package difftest

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"testing"

	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/component-base/featuregate"
	logsapi "k8s.io/component-base/logs/api/v1"
	// kube-proxy's main registers the json log format; Validate checks
	// logging.format against the registered ones
	_ "k8s.io/component-base/logs/json/register"
	metricsfeatures "k8s.io/component-base/metrics/features"
	"k8s.io/klog/v2"
	kubeproxyv1alpha1 "k8s.io/kube-proxy/config/v1alpha1"
	kubeproxyconfig "k8s.io/kubernetes/pkg/proxy/apis/config"
	"k8s.io/kubernetes/pkg/proxy/apis/config/scheme"
	"k8s.io/kubernetes/pkg/proxy/apis/config/validation"

	"github.com/kube-proxy-sync/kube-proxy-sync/internal/kpvalidate"
	"github.com/kube-proxy-sync/kube-proxy-sync/internal/kpvalidate/kpvalidatetest"
)

// The gates cmd/kube-proxy/app adds to the process-wide gate in its init.
func init() {
	// and no warnings about deprecated gates: the tests look at errors only
	klog.LogToStderr(false)
	klog.SetOutput(io.Discard)
	if err := metricsfeatures.AddFeatureGates(utilfeature.DefaultMutableFeatureGate); err != nil {
		panic(err)
	}
	if err := logsapi.AddFeatureGates(utilfeature.DefaultMutableFeatureGate); err != nil {
		panic(err)
	}
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
// (cmd/kube-proxy/app: Options.Complete then Options.Validate), minus the
// lenient fallback it logs as a warning: strict decoding into the internal
// type with defaults, the Linux platform defaults that Validate can see, the
// feature gates set on the process-wide gate (which Validate reads), then
// Validate.
func reference(text []byte) error {
	obj, gvk, err := scheme.Codecs.UniversalDecoder().Decode(text, nil, nil)
	if err != nil {
		return fmt.Errorf("decode: %w", err)
	}
	cfg, ok := obj.(*kubeproxyconfig.KubeProxyConfiguration)
	if !ok {
		return fmt.Errorf("decode: got %v", gvk)
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
		return fmt.Errorf("feature gates: %w", err)
	}
	if errs := validation.Validate(cfg); len(errs) > 0 {
		return errs.ToAggregate()
	}
	return nil
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
