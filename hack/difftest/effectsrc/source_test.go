package effectsrc

import (
	"bufio"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestKubeProxySource checks the mode column of internal/kpvalidate's
// table against the source of every supported kube-proxy minor.
// EFFECTSRC_SOURCES names a file of lines "minor k8s-dir kube-proxy-dir"
// (hack/difftest/effectsrc.sh downloads the sources and writes it); without
// it the test is skipped. With EFFECTSRC_EVERY_MINOR=1 (the list holds every
// supported minor) an exception no minor needs fails it too.
func TestKubeProxySource(t *testing.T) {
	list := os.Getenv("EFFECTSRC_SOURCES")
	if list == "" {
		t.Skip("EFFECTSRC_SOURCES is unset: hack/difftest/effectsrc.sh downloads kube-proxy's sources and runs this test")
	}
	f, err := os.Open(list)
	require.NoError(t, err)
	defer f.Close()
	var reps []Report
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		parts := strings.Fields(sc.Text())
		if len(parts) != 3 {
			continue
		}
		minor, err := strconv.Atoi(strings.TrimPrefix(parts[0], "1."))
		require.NoError(t, err, "minor %q", parts[0])
		t.Run(parts[0], func(t *testing.T) {
			start := time.Now()
			res, err := Analyze(parts[1], parts[2])
			require.NoError(t, err)
			rep := Check(minor, res)
			reps = append(reps, rep)
			t.Logf("kube-proxy 1.%d: %d reads classified (%d of fields only some modes read), %d under a condition it could not evaluate, %d problems, %s",
				minor, rep.Reads, rep.Restricted, rep.Uncertain, len(rep.Problems), time.Since(start).Round(time.Millisecond))
			for _, p := range rep.Problems {
				t.Errorf("1.%d: %s", minor, p)
			}
		})
	}
	require.NoError(t, sc.Err())
	require.NotEmpty(t, reps, "%s lists no minor", list)
	if os.Getenv("EFFECTSRC_EVERY_MINOR") == "1" {
		assert.Empty(t, UnusedExceptions(reps...), "exceptions no supported kube-proxy needs any more: remove them")
	}
}
