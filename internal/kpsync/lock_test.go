package kpsync

import (
	"testing"

	"github.com/stretchr/testify/assert"
	corev1 "k8s.io/api/core/v1"

	"github.com/kube-proxy-sync/kube-proxy-sync/internal/configmap"
	"github.com/kube-proxy-sync/kube-proxy-sync/internal/kpconfig"
	"github.com/kube-proxy-sync/kube-proxy-sync/internal/kube/kubeperm"
	"github.com/kube-proxy-sync/kube-proxy-sync/internal/verify"
)

// --verify-traffic creates a probe pod per node and deletes it after its
// check: with the rolling strategy and --no-rollback nothing else needs
// delete on pods, and a run without it would leave probe pods behind.
func TestVerifyTrafficNeedsPodDelete(t *testing.T) {
	o := Options{Namespace: "kube-system", ConfigMap: "kube-proxy", DaemonSet: "kube-proxy", Restart: RestartAuto, Strategy: StrategyRolling,
		RollbackOnFailure: false, Spec: configmap.Spec{Settings: []kpconfig.Setting{{Path: "mode", Value: "ipvs"}}},
		Connectivity: ConnectivityOptions{Health: verify.Auto, Traffic: "default/web"}}
	p := plan{ds: seedDaemonSet("registry.k8s.io/kube-proxy:v1.33.6"), keys: []string{"config.conf:mode"}, roll: rollAsked(o)}
	has := func(verb, resource string) bool {
		for _, a := range neededAccess(o, p) {
			if a.verb == verb && a.resource == resource && a.subresource == "" {
				return true
			}
		}
		return false
	}
	assert.True(t, has("create", "pods"))
	assert.True(t, has("delete", "pods"), "the probe pods are deleted after their check")
	o.Connectivity.Traffic = ""
	p.roll = rollAsked(o)
	assert.False(t, has("delete", "pods"), "rolling, no rollback, no traffic check: no pod is deleted")
}

// The pre-check asks only for verbs the client surface can call (the same
// set rbac.yaml is checked against), over every option that adds one.
func TestNeededAccessIsWhatTheCodeCalls(t *testing.T) {
	calls, err := kubeperm.Calls()
	assert.NoError(t, err)
	callable := map[string]bool{}
	for _, c := range calls {
		callable[c.String()] = true
	}
	p := plan{ds: seedDaemonSet("registry.k8s.io/kube-proxy:v1.33.6"), keys: []string{"config.conf:mode"}}
	for _, o := range []Options{
		{Restart: RestartAuto, Strategy: StrategyRolling},
		{Restart: RestartAuto, Strategy: StrategyCanary, RollbackOnFailure: true, Spec: configmap.Spec{Manifest: seedConfigMap()}},
		{Restart: RestartAlways, Strategy: StrategyRolling, Verify: true, VerifyEndpoints: 1,
			Connectivity: ConnectivityOptions{Health: verify.Required, Traffic: "default/web"}},
	} {
		o.Namespace, o.ConfigMap, o.DaemonSet = "kube-system", "kube-proxy", "kube-proxy"
		p.roll = rollAsked(o)
		for _, a := range neededAccess(o, p) {
			res := a.resource
			if a.subresource != "" {
				res += "/" + a.subresource
			}
			key := kubeperm.Permission{Group: a.group, Resource: res, Verb: a.verb}.String()
			assert.True(t, callable[key], "the pre-check asks for %s, which no call of kube.Interface needs", key)
		}
	}
}

// A change is a new copy of the config, created before the restart, and a
// restart for any other reason moves the template onto one too: the
// pre-check asks for create on configmaps then, before the first write.
// A change with no effect creates none.
func TestNeededAccessCreatesTheCopy(t *testing.T) {
	ds := seedDaemonSet("registry.k8s.io/kube-proxy:v1.33.6")
	for _, tc := range []struct {
		name    string
		restart string
		p       plan
		want    bool
	}{
		{name: "a change", restart: RestartAuto, p: plan{ds: ds, keys: []string{"config.conf:mode"}}, want: true},
		{name: "a change under --restart never (the restart it owes)", restart: RestartNever, p: plan{ds: ds, keys: []string{"config.conf:mode"}}, want: true},
		{name: "a restart owed", restart: RestartAuto, p: plan{ds: ds, reason: ReasonPending}, want: true},
		{name: "a probe fix", restart: RestartAuto, p: plan{ds: ds, probe: probePlan{probe: &corev1.Probe{}}}, want: true},
		{name: "a change with no effect", restart: RestartAuto, p: plan{ds: ds, keys: []string{"config.conf:ipvs.scheduler"}, noEffect: true}},
		{name: "a restart owed, --restart never", restart: RestartNever, p: plan{ds: ds, reason: ReasonPending}},
		{name: "nothing to do", restart: RestartAuto, p: plan{ds: ds}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := Options{Namespace: "kube-system", ConfigMap: "kube-proxy", DaemonSet: "kube-proxy", Restart: tc.restart, Strategy: StrategyRolling}
			tc.p.roll = rollAsked(o)
			got := false
			for _, a := range neededAccess(o, tc.p) {
				if a.verb == "create" && a.resource == "configmaps" {
					got = true
					assert.Empty(t, a.name, "a copy's name comes from its data: no name to review")
				}
			}
			assert.Equal(t, tc.want, got, "create on configmaps asked for")
		})
	}
}
