//go:build testhooks

package app

import (
	"bytes"
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kube-proxy-sync/kube-proxy-sync/internal/kpsync"
)

// A testhooks build pauses at the named step only, and says so.
func TestHooksBuildPausesAtTheNamedStep(t *testing.T) {
	t.Setenv(TestPauseEnv, kpsync.StepDaemonSetPatched)
	var errOut bytes.Buffer
	step := testPause(&errOut)
	require.NotNil(t, step)
	ctx, cancel := context.WithCancel(context.Background())
	step(ctx, kpsync.StepConfigMapWritten) // not this one: returns at once
	assert.Empty(t, errOut.String())
	cancel()
	step(ctx, kpsync.StepDaemonSetPatched) // blocks until the context ends
	assert.Contains(t, errOut.String(), "paused at "+kpsync.StepDaemonSetPatched)
}
