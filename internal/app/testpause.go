//go:build testhooks

package app

import (
	"context"
	"fmt"
	"io"
	"os"
)

// testPause, in a testhooks build, pauses the run at the step that
// TestPauseEnv names: it says so on w and blocks until the run's context
// ends (an interrupt) or the process is killed.
func testPause(w io.Writer) func(context.Context, string) {
	at := os.Getenv(TestPauseEnv)
	if at == "" {
		return nil
	}
	return func(ctx context.Context, step string) {
		if step != at {
			return
		}
		fmt.Fprintf(w, "kube-proxy-sync: test hook: paused at %s\n", step)
		<-ctx.Done()
	}
}
