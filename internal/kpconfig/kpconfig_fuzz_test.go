package kpconfig

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// seedConfig is config.conf as kubeadm writes it: a copy of the one in
// test/manifests/kube-proxy-configmap.yaml, the e2e suite's seed object.
func seedConfig(f *testing.F) string {
	f.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "kubeadm-config.conf"))
	if err != nil {
		f.Fatal(err)
	}
	return string(b)
}

// FuzzSetting parses two --set arguments and applies them to kubeadm's
// config.conf. It must never panic; a result without error must strictly
// decode as a KubeProxyConfiguration, list exactly the paths it was given
// as changed, and be a fixed point (applying the same settings again
// changes nothing). Seeds: testdata/fuzz/FuzzSetting.
func FuzzSetting(f *testing.F) {
	text := seedConfig(f)
	f.Fuzz(func(t *testing.T, a, b string) {
		var settings []Setting
		for _, s := range []string{a, b} {
			st, err := ParseSetting(s)
			if err != nil {
				return
			}
			settings = append(settings, st)
		}
		checkApply(t, text, settings)
	})
}

// FuzzApplyConfig sets one setting to an arbitrary config.conf, as found
// in a hand-edited ConfigMap. Same properties as FuzzSetting; in addition
// a text that does not decode must be refused. Seeds:
// testdata/fuzz/FuzzApplyConfig.
func FuzzApplyConfig(f *testing.F) {
	f.Fuzz(func(t *testing.T, text, setting string) {
		st, err := ParseSetting(setting)
		if err != nil {
			return
		}
		decodeErr := Decode(text)
		_, _, applyErr := Set(text, []Setting{st})
		if decodeErr != nil && applyErr == nil {
			t.Fatalf("Set accepted config.conf that does not decode (%v):\n%s", decodeErr, text)
		}
		if decodeErr == nil {
			checkApply(t, text, []Setting{st})
		}
	})
}

func checkApply(t *testing.T, text string, settings []Setting) {
	t.Helper()
	out, changed, err := Set(text, settings)
	if err != nil {
		return
	}
	if err := Decode(out); err != nil {
		t.Fatalf("Set(%q) returned config.conf that does not decode: %v\n%s", settings, err, out)
	}
	for _, p := range changed {
		if !slices.ContainsFunc(settings, func(s Setting) bool { return s.Path == p }) {
			t.Fatalf("Set(%q) reports %q changed, which was not set", settings, p)
		}
	}
	if len(changed) == 0 && out != text {
		t.Fatalf("Set(%q) changed nothing but rewrote the text:\n%s", settings, out)
	}
	again, changedAgain, err := Set(out, settings)
	if err != nil {
		t.Fatalf("Set(%q) on its own output failed: %v\n%s", settings, err, out)
	}
	if len(changedAgain) > 0 || again != out {
		t.Fatalf("Set(%q) is not a fixed point: second run changed %q\nfirst:\n%s\nsecond:\n%s", settings, changedAgain, out, again)
	}
}
