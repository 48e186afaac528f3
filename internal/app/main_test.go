package app

import (
	"fmt"
	"os"
	"os/exec"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Main itself sets the soft memory limit, unless GOMEMLIMIT is set. The
// limit is process-wide, so Main runs in a child: this test binary again,
// which reports the limit Main left.
func TestMainSetsMemoryLimit(t *testing.T) {
	if os.Getenv("KPS_TEST_MAIN_LIMIT") == "1" {
		os.Args = []string{"kube-proxy-sync", "--version"}
		code := Main()
		fmt.Printf("\nexit=%d limit=%d\n", code, debug.SetMemoryLimit(-1))
		return
	}
	for env, want := range map[string]int64{"": SoftMemoryLimit, "64MiB": 64 << 20} {
		cmd := exec.Command(os.Args[0], "-test.run=^TestMainSetsMemoryLimit$")
		cmd.Env = []string{"KPS_TEST_MAIN_LIMIT=1"}
		for _, kv := range os.Environ() {
			if !strings.HasPrefix(kv, "GOMEMLIMIT=") {
				cmd.Env = append(cmd.Env, kv)
			}
		}
		if env != "" {
			cmd.Env = append(cmd.Env, "GOMEMLIMIT="+env)
		}
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, string(out))
		assert.Contains(t, string(out), fmt.Sprintf("\nexit=0 limit=%d\n", want), "GOMEMLIMIT=%q", env)
	}
}
