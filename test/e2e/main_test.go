//go:build e2e

package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

// binDir holds the kube-proxy-sync binary that tests run as a subprocess
// (crash tests must be able to SIGKILL it); built on first use.
var (
	binDir   string
	binOnce  sync.Once
	binPath  string
	binError error
)

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "kube-proxy-sync-e2e-bin-")
	if err != nil {
		fmt.Fprintf(os.Stderr, "create a directory for the binary: %v\n", err)
		os.Exit(1)
	}
	binDir = dir
	code := m.Run()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

// kubeProxySyncBinary builds cmd/kube-proxy-sync once per test process
// and returns its path.
func kubeProxySyncBinary(t *testing.T) string {
	t.Helper()
	binOnce.Do(func() {
		binPath = filepath.Join(binDir, "kube-proxy-sync")
		// testhooks: the crash tests pause the binary at a step (app.TestPauseEnv)
		cmd := exec.Command("go", "build", "-tags", "testhooks", "-o", binPath, "github.com/kube-proxy-sync/kube-proxy-sync/cmd/kube-proxy-sync")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			binError = fmt.Errorf("go build cmd/kube-proxy-sync: %w\n%s", err, out)
		}
	})
	if binError != nil {
		t.Fatal(binError)
	}
	return binPath
}
