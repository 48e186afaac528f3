package kpsync

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"

	"github.com/kube-proxy-sync/kube-proxy-sync/internal/configmap"
)

// --check is the real run minus its writes: its changed is what the real
// run on the same cluster then reports, restarts included (an upgrade
// restarts every pod, and Ansible's --check of it must not show ok).
func TestCheckModeChangedIsTheRealRuns(t *testing.T) {
	seed := func(t *testing.T) *fixture {
		return newFixture(t, seedConfigMap(), seedDaemonSet("registry.k8s.io/kube-proxy:v1.33.6"))
	}
	// owed is a cluster an earlier --restart never run left a restart owed on
	owed := func(t *testing.T) *fixture {
		f := seed(t)
		res, err := f.run(t, Options{Spec: configmap.Spec{Server: "https://10.0.0.1:6443"}, Restart: RestartNever})
		require.NoError(t, err)
		require.True(t, res.Facts.RestartRequired, "%s", res.Msg)
		require.False(t, res.Facts.Restarted)
		return f
	}
	cases := []struct {
		name    string
		cluster func(t *testing.T) *fixture
		o       Options
		reason  string
		changed bool
	}{
		{"image change", seed, Options{Image: "registry.k8s.io/kube-proxy:v1.33.7"}, ReasonImageChanged, true},
		{"--restart always", seed, Options{Restart: RestartAlways}, ReasonForced, true},
		{"owed restart", owed, Options{}, ReasonPending, true},
		// --restart never does not send the restart it owes: no change
		{"owed restart, --restart never", owed, Options{Restart: RestartNever}, ReasonPending, false},
		{"no change", seed, Options{}, "", false},
		{"probe change", func(t *testing.T) *fixture {
			ds := seedDaemonSet("registry.k8s.io/kube-proxy:v1.33.6")
			ds.Spec.Template.Spec.Containers[0].ReadinessProbe = nil
			return newFixture(t, seedConfigMap(), ds)
		}, Options{}, ReasonProbeChanged, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := tc.cluster(t)
			before := f.objects(t)

			o := tc.o
			o.Check = true
			check, err := f.run(t, o)
			require.NoError(t, err)
			assert.Empty(t, f.writes(), "check mode writes nothing")
			assert.Equal(t, before, f.objects(t), "check mode leaves the cluster as it was")
			assert.Equal(t, tc.reason, check.Facts.RestartReason, "%s", check.Msg)
			assert.False(t, check.Facts.Restarted)
			if !tc.changed {
				assert.NotContains(t, check.Msg, "would restart")
			}

			run, err := f.run(t, tc.o)
			require.NoError(t, err)
			assert.Equal(t, tc.changed, run.Changed, "the real run: %s", run.Msg)
			assert.Equal(t, run.Changed, check.Changed, "check mode: %s; the real run: %s", check.Msg, run.Msg)
			assert.Equal(t, run.Facts.RestartReason, check.Facts.RestartReason)
		})
	}
}

// Check mode refuses what the real run refuses before its first write,
// and creates nothing: a verb the run may use that RBAC denies, and a
// Service of the name of the traffic check's own that is not the tool's.
func TestCheckModeRefusesWhatTheRealRunRefuses(t *testing.T) {
	cases := []struct {
		name  string
		setup func(t *testing.T, f *rollingFixture)
		msg   string
	}{
		{"a verb RBAC denies", func(t *testing.T, f *rollingFixture) {
			f.client.PrependReactor("create", "selfsubjectaccessreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
				r := a.(k8stesting.CreateAction).GetObject().(*authorizationv1.SelfSubjectAccessReview).DeepCopy()
				r.Status.Allowed = r.Spec.ResourceAttributes.Verb != "patch"
				return true, r, nil
			})
		}, "forbidden: the kubeconfig user needs patch on daemonsets.apps"},
		{"a Service of the traffic check's name that is not the tool's", func(t *testing.T, f *rollingFixture) {
			theirs := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: ProbeServiceName, Namespace: "kube-system", UID: "theirs"}}
			_, err := f.client.CoreV1().Services("kube-system").Create(context.Background(), theirs, metav1.CreateOptions{})
			require.NoError(t, err)
		}, "is not kube-proxy-sync's"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			for _, check := range []bool{true, false} {
				f := newRollingFixture(t, 3)
				tc.setup(t, f)
				before := f.objects(t)
				_, err := f.run(t, Options{Spec: setMode("nftables"), Check: check})
				require.Error(t, err, "check mode %t", check)
				assert.Contains(t, err.Error(), tc.msg)
				assert.Contains(t, err.Error(), "nothing was")
				assert.Empty(t, f.writes())
				assert.Equal(t, before, f.objects(t))
			}
		})
	}
}

// objects are the DaemonSet and the ConfigMaps as the API server holds
// them.
type objects struct {
	ds  *appsv1.DaemonSet
	cms []corev1.ConfigMap
}

func (f *fixture) objects(t *testing.T) (out objects) {
	t.Helper()
	out.ds = f.daemonSet(t)
	cms, err := f.client.CoreV1().ConfigMaps("kube-system").List(context.Background(), metav1.ListOptions{})
	require.NoError(t, err)
	out.cms = cms.Items
	return out
}
