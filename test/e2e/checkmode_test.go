//go:build e2e

package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/util/version"

	"github.com/kube-proxy-sync/kube-proxy-sync/internal/app"
	"github.com/kube-proxy-sync/kube-proxy-sync/internal/kpsync"
	"github.com/kube-proxy-sync/kube-proxy-sync/internal/rollout"
	"github.com/kube-proxy-sync/kube-proxy-sync/test/e2e/cluster"
)

// --check is the real run minus its writes: for a run that restarts every
// pod and changes no data (an upgrade of the image, --restart always, a
// restart an earlier --restart never run left owed), check mode with
// --detailed-exitcode exits 2 with changed true, replacing no pod and
// writing neither ConfigMap nor DaemonSet; the real run then changes and
// replaces every pod, as check mode said.
func TestCheckModeSaysARestartIsAChange(t *testing.T) {
	c := cluster.Connect(t)
	cases := []struct {
		name string
		args func(t *testing.T) []string
		// owe leaves a restart owed before the check (nil: none)
		owe    func(t *testing.T)
		reason string
	}{
		{name: "image upgrade", reason: kpsync.ReasonImageChanged, args: func(t *testing.T) []string {
			return []string{"--image", anotherPatch(t, rollout.ContainerImage(c.DaemonSet(t), "kube-proxy"))}
		}},
		{name: "--restart always", reason: kpsync.ReasonForced, args: func(*testing.T) []string {
			return []string{"--restart", "always"}
		}},
		{name: "restart owed", reason: kpsync.ReasonPending, args: func(*testing.T) []string { return nil },
			owe: func(t *testing.T) {
				r := runSync(t, c, "--set", "clusterCIDR=10.76.0.0/16", "--restart", "never", "--probe-path", "none")
				require.Equal(t, 0, r.Code, r.Msg+"\n"+r.Stderr)
				require.True(t, r.facts().RestartRequired, r.Msg)
				require.False(t, r.facts().Restarted)
			}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c.Reset(t)
			t.Cleanup(func() { c.Reset(t) })
			// adopt first: nothing left to do but what the case asks
			r := runSync(t, c, "--probe-path", "none")
			require.Equal(t, 0, r.Code, r.Msg+"\n"+r.Stderr)
			if tc.owe != nil {
				tc.owe(t)
			}
			args := append(tc.args(t), "--probe-path", "none", "--detailed-exitcode")
			state, pods := stateOf(t, c), c.PodUIDs(t)

			r = runSync(t, c, append([]string{"--check"}, args...)...)
			assert.Equal(t, app.ExitChanged, r.Code, r.Msg+"\n"+r.Stderr)
			assert.True(t, r.Changed, r.Msg)
			assert.True(t, r.facts().CheckMode)
			assert.Equal(t, tc.reason, r.facts().RestartReason, r.Msg)
			assert.False(t, r.facts().Restarted)
			assertUntouched(t, c, state)
			cluster.AssertNoneReplaced(t, pods, c.PodUIDs(t))

			// the real run does what check mode said
			r = runSync(t, c, args...)
			require.Equal(t, app.ExitChanged, r.Code, r.Msg+"\n"+r.Stderr)
			assert.True(t, r.Changed, r.Msg)
			assert.True(t, r.facts().Restarted, r.Msg)
			assert.Equal(t, tc.reason, r.facts().RestartReason, r.Msg)
			c.WaitRolloutComplete(t, time.Minute)
			cluster.AssertAllReplaced(t, pods, c.PodUIDs(t))
			assert.NotEqual(t, state.DaemonSetGeneration, c.DaemonSet(t).Generation, "the template moved")
		})
	}
}

// anotherPatch is image with its tag's patch version one higher
// (kube-proxy:v1.33.6 -> kube-proxy:v1.33.7).
func anotherPatch(t *testing.T, image string) string {
	t.Helper()
	i := strings.LastIndex(image, ":")
	require.Positive(t, i, "image %q has no tag", image)
	v, err := version.ParseSemantic(image[i+1:])
	require.NoError(t, err, "image %q", image)
	return fmt.Sprintf("%s:v%d.%d.%d", image[:i], v.Major(), v.Minor(), v.Patch()+1)
}
