//go:build !testhooks

package app

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/kube-proxy-sync/kube-proxy-sync/internal/kpsync"
	"github.com/kube-proxy-sync/kube-proxy-sync/internal/kube/kubefake"
)

// A release build (no testhooks tag) has no pause hook: the variable the
// crash tests set is ignored, and the run goes through. (With the hook it
// would block at the step until the deadline below.)
func TestReleaseBuildIgnoresThePauseVariable(t *testing.T) {
	t.Setenv(TestPauseEnv, kpsync.StepConfigMapWritten)
	cm, ds := seed()
	client, api := kubefake.New(cm, ds)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var out, errOut bytes.Buffer
	code := Run(ctx, Streams{Out: &out, ErrOut: &errOut}, []string{"--server", "https://10.0.0.9:6443", "--probe-path", "none", "--restart", "never"},
		Deps{Clock: clocktesting.NewFakeClock(time.Unix(0, 0)), Kube: api})
	require.Equal(t, ExitOK, code, "stdout: %s\nstderr: %s", out.String(), errOut.String())
	assert.NotContains(t, errOut.String(), "test hook")
	// past the step: the DaemonSet owes a restart onto the new config's copy
	ds, err := client.AppsV1().DaemonSets("kube-system").Get(context.Background(), "kube-proxy", metav1.GetOptions{})
	require.NoError(t, err)
	assert.NotEmpty(t, ds.Annotations["kube-proxy-sync.io/pending-config"], "the run went past the step")
}
