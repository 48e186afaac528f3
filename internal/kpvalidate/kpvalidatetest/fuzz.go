package kpvalidatetest

import (
	"math/rand"
	"testing"

	"github.com/kube-proxy-sync/kube-proxy-sync/internal/kpvalidate"
)

// Fuzz is the differential fuzz target: the fuzzer's bytes pick up to eight
// (field, value) pairs from the fields of the newest minor and their value
// pools, so every input is a plausible config.conf and a disagreement is a
// real difference in the rules, not in YAML corner cases.
func Fuzz(f *testing.F, minor int, ref Reference) {
	for _, seed := range [][]byte{{}, {0, 0}, {5, 3, 17, 2}, {40, 1, 41, 7, 42, 3}, {255, 255, 1, 1, 2, 2, 3, 3}} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		Compare(t, minor, FromBytes(b), ref)
	})
}

// unknownPaths are fields no kube-proxy has (kube-proxy drops them with a
// warning), mixed into the fuzz input with unknownValues.
var (
	unknownPaths  = []string{"bogus", "Mode", "ipvs.strictArp", "conntrack.maxPerCPU", "logging.options.yaml.splitStream"}
	unknownValues = []string{"1", "x", "null", "[1, {a: b}]", "{a: 1}", "-1"}
)

// FromBytes turns fuzz bytes into a config.conf: each pair of bytes picks a
// field (of the newest minor, or one no minor has) and one of its pool's
// values.
func FromBytes(b []byte) string {
	all := kpvalidate.Fields(kpvalidate.Newest)
	var settings [][2]string
	for i := 0; i+1 < len(b) && len(settings) < 8; i += 2 {
		n := int(b[i]) % (len(all) + len(unknownPaths))
		if n >= len(all) {
			settings = append(settings, kv(unknownPaths[n-len(all)], unknownValues[int(b[i+1])%len(unknownValues)]))
			continue
		}
		p := pool(all[n])
		settings = append(settings, kv(all[n].Path, p[int(b[i+1])%len(p)]))
	}
	return doc(settings...)
}

// RunRandom compares n configs from FromBytes on a fixed pseudo-random
// sequence (the same at every run, so a failure reproduces).
func RunRandom(t *testing.T, minor int, ref Reference, n int) {
	r := rand.New(rand.NewSource(int64(minor)))
	for i := 0; i < n; i++ {
		b := make([]byte, 2+2*r.Intn(8))
		r.Read(b)
		Compare(t, minor, FromBytes(b), ref)
		if t.Failed() {
			return // one disagreement is enough to look at
		}
	}
}
