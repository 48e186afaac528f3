package app

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/kube-proxy-sync/kube-proxy-sync/internal/kpconfig"
)

// FuzzParseArgs feeds arbitrary bytes to the module args parser, as a
// broken or hostile Ansible args file would. It must never panic; what it
// accepts must be one JSON object; each --set it produces must parse back
// to the path it came from; and parsing the same input twice must give the
// same options. Seeds: testdata/fuzz/FuzzParseArgs.
func FuzzParseArgs(f *testing.F) {
	f.Fuzz(func(t *testing.T, raw []byte) {
		o := NewOptions()
		err := ParseArgs(raw, o)
		if err != nil {
			if err.Error() == "" {
				t.Fatalf("error without a message for %q", raw)
			}
			return
		}
		if !json.Valid(raw) || !strings.HasPrefix(strings.TrimLeft(string(raw), " \t\r\n"), "{") {
			t.Fatalf("accepted input that is not one JSON object: %q", raw)
		}
		seen := map[string]bool{}
		for _, s := range o.Set {
			st, err := kpconfig.ParseSetting(s)
			if err != nil {
				t.Fatalf("set %q from %q does not parse: %v", s, raw, err)
			}
			if seen[st.Path] {
				t.Fatalf("set %q: path %q twice from %q", s, st.Path, raw)
			}
			seen[st.Path] = true
		}
		again := NewOptions()
		if err := ParseArgs(raw, again); err != nil {
			t.Fatalf("second parse of %q failed: %v", raw, err)
		}
		a, _ := json.Marshal(o)
		b, _ := json.Marshal(again)
		if string(a) != string(b) {
			t.Fatalf("parsing %q twice differs:\n%s\n%s", raw, a, b)
		}
		// what the parser accepted, the validator must judge without panicking
		o.Manifest = "" // a fuzzed path could name a device that never ends
		if err := o.Complete(); err == nil {
			_ = o.Validate(context.Background())
		}
	})
}
