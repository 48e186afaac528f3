package kpsync

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	k8stesting "k8s.io/client-go/testing"

	"github.com/kube-proxy-sync/kube-proxy-sync/internal/audit"
	"github.com/kube-proxy-sync/kube-proxy-sync/internal/configmap"
	"github.com/kube-proxy-sync/kube-proxy-sync/internal/kpconfig"
	"github.com/kube-proxy-sync/kube-proxy-sync/internal/rollout"
	"github.com/kube-proxy-sync/kube-proxy-sync/internal/verify"
)

func setMode(mode string, more ...kpconfig.Setting) configmap.Spec {
	return configmap.Spec{Settings: append([]kpconfig.Setting{{Path: "mode", Value: mode}}, more...)}
}

// --check says the plan of a mode change: from and to, the canary node and
// the batches after it, the checks, and the settings whose meaning changes;
// the rolling strategy asked for becomes a canary. Nothing is written.
func TestModeChangeCheckSaysThePlan(t *testing.T) {
	f := newRollingFixture(t, 5)
	res, err := f.run(t, Options{Check: true, Spec: setMode("nftables"), BatchSize: "2"})
	require.NoError(t, err)
	assert.Empty(t, f.writes())
	m := res.Facts.Migration
	require.NotNil(t, m)
	assert.Equal(t, "iptables", m.From)
	assert.Equal(t, "nftables", m.To)
	assert.Equal(t, "1.33.6", m.KubeProxyVersion)
	assert.Equal(t, StrategyRolling, m.StrategyAsked)
	assert.Equal(t, StrategyCanary, m.Strategy)
	assert.Equal(t, []string{"node-0"}, m.CanaryNodes)
	assert.Equal(t, 2, m.BatchSize)
	assert.Equal(t, 2, m.Batches, "4 nodes after the canary, 2 at a time")
	assert.Equal(t, verify.Required, m.VerifyHealth, "each migrated node is checked though no check was asked, and one that cannot be stops it")
	assert.Equal(t, "kube-system/"+ProbeServiceName, m.VerifyTraffic, "traffic checked though no Service was named: through the run's own")
	assert.Equal(t, verify.AllPaths, m.VerifyTrafficPaths, "the pod path too, from kube-proxy's own image")
	assert.Contains(t, m.Cleanup, "kube-proxy 1.33 removes the iptables and IPVS rules")
	require.Len(t, m.Warnings, 2, "%q", m.Warnings)
	assert.Contains(t, m.Warnings[0], "nodePortAddresses is not set")
	assert.Contains(t, m.Warnings[1], "iptables.localhostNodePorts is not set")
	assert.Contains(t, res.Warnings, "proxy mode iptables -> nftables: "+m.Warnings[0], "also Ansible's warnings")
}

// Paths named for the run's own check that leave one out are taken as
// named, with a warning naming the path left out.
func TestModeChangeOwnCheckWarnsOfAPathLeftOut(t *testing.T) {
	f := newRollingFixture(t, 3)
	res, err := f.run(t, Options{Check: true, Spec: setMode("nftables"),
		Connectivity: ConnectivityOptions{TrafficPaths: []string{verify.PathNode, verify.PathNodePort}}})
	require.NoError(t, err)
	m := res.Facts.Migration
	require.NotNil(t, m)
	assert.Equal(t, []string{verify.PathNode, verify.PathNodePort}, m.VerifyTrafficPaths)
	assert.True(t, hasWarning(res, "--verify-traffic-paths node,nodeport leaves out pod, which the new mode reprograms as well"), "warnings: %v", res.Warnings)
}

// More canary nodes than the batch size: the canary itself takes rounds,
// and the plan counts them as the run does.
func TestModeChangeCheckCountsTheCanaryRounds(t *testing.T) {
	f := newRollingFixture(t, 5)
	res, err := f.run(t, Options{Check: true, Spec: setMode("nftables"), BatchSize: "1", CanaryNodes: 3})
	require.NoError(t, err)
	m := res.Facts.Migration
	require.NotNil(t, m)
	assert.Len(t, m.CanaryNodes, 3)
	assert.Equal(t, 4, m.Batches, "2 more canary rounds, then 2 nodes one at a time")
}

// zonal stays zonal, with a canary in each zone.
func TestModeChangeZonalStaysZonal(t *testing.T) {
	f := newRollingFixture(t, 4)
	for i, zone := range []string{"b", "a", "b", "a"} {
		f.label(t, fmt.Sprintf("node-%d", i), "zone", zone)
	}
	res, err := f.run(t, Options{Check: true, Spec: setMode("nftables"), Strategy: StrategyCanary, ZoneLabel: "zone", CanaryNodes: 0})
	require.NoError(t, err)
	m := res.Facts.Migration
	require.NotNil(t, m)
	assert.Equal(t, StrategyZonal, m.StrategyAsked)
	assert.Equal(t, StrategyZonal, m.Strategy)
	assert.Equal(t, []string{"a", "b"}, m.Zones)
	assert.Equal(t, []string{"node-1"}, m.CanaryNodes, "a canary of at least one node, though --canary-nodes 0")
	assert.Equal(t, 3, m.Batches, "after zone a's canary, one at a time: zone a's other node, zone b's canary, zone b's other node")
}

// A real run: the canary node first, each node's kube-proxy checked
// before the next one's pod goes, then the DaemonSet's own strategy back.
func TestModeChangeRollsCanaryFirstAndChecksEachNode(t *testing.T) {
	f := newRollingFixture(t, 3)
	var mu sync.Mutex
	var order []string
	asked := map[string]int{}
	f.prober = proberFunc(func(node string) (verify.Health, error) {
		mu.Lock()
		defer mu.Unlock()
		if asked[node]++; asked[node] > 1 { // the first is the baseline
			order = append(order, "check "+node)
		}
		return verify.Health{Code: 200}, nil
	})
	f.podController(t, func(node, gen string) *corev1.Pod {
		mu.Lock()
		order = append(order, "replace "+node)
		mu.Unlock()
		return kubeProxyPod(node, gen, true)
	})
	res, err := f.run(t, Options{Spec: setMode("nftables"), RollbackOnFailure: true, Timeout: 10 * time.Second, Connectivity: noTraffic})
	require.NoError(t, err)
	assert.Equal(t, StrategyCanary, res.Facts.Rollout.Strategy)
	assert.Equal(t, []string{"node-0"}, res.Facts.Rollout.CanaryNodes)
	assert.Equal(t, []string{"node-0"}, res.Facts.Migration.CanaryNodes)
	assert.Equal(t, []string{"replace node-0", "check node-0", "replace node-1", "check node-1", "replace node-2", "check node-2"}, order)
	require.NotNil(t, res.Facts.Connectivity)
	assert.Equal(t, 3, res.Facts.Connectivity.Passed)
	assert.Equal(t, appsv1.RollingUpdateDaemonSetStrategyType, f.daemonSet(t).Spec.UpdateStrategy.Type, "strategy restored")
	assert.Contains(t, f.configMap(t).Data["config.conf"], "mode: nftables")

	// the audit log says the migration from its plan record on: what was
	// asked, what the run did instead, and the checks
	lines := readAudit(t, f.audit)
	require.NotEmpty(t, lines)
	for _, l := range lines {
		m, ok := l.Migration.(map[string]any)
		require.True(t, ok, "%s record: the migration: %#v", l.Phase, l.Migration)
		assert.Equal(t, "iptables", m["from"], "%s record", l.Phase)
		assert.Equal(t, "nftables", m["to"], "%s record", l.Phase)
		assert.Equal(t, StrategyCanary, m["strategy"], "%s record", l.Phase)
		assert.Equal(t, "required", m["verify_health"], "%s record", l.Phase)
	}
	assert.Equal(t, audit.PhasePlan, lines[0].Phase)
	assert.Equal(t, audit.PhaseOutcome, lines[len(lines)-1].Phase)
}

// A canary whose kube-proxy does not come healthy in the new mode stops
// the migration there: rolled back, every other node untouched.
func TestModeChangeFailedCanaryStopsThere(t *testing.T) {
	f := newRollingFixture(t, 3)
	asked := map[string]int{}
	var mu sync.Mutex
	f.prober = proberFunc(func(node string) (verify.Health, error) {
		mu.Lock()
		defer mu.Unlock()
		if asked[node]++; asked[node] > 1 && node == "node-0" {
			f.clock.Step(2 * time.Minute) // past --verify-health-timeout
			return verify.Health{Code: 503}, nil
		}
		return verify.Health{Code: 200}, nil
	})
	f.podController(t, func(node, gen string) *corev1.Pod { return kubeProxyPod(node, gen, true) })
	before := rollout.ConfigVolumeOf(f.daemonSet(t), "kube-proxy")
	require.NotEmpty(t, before)
	// the run's own Service on the node and nodeport paths: the canary
	// fails its health check before any probe pod
	paths := ConnectivityOptions{TrafficPaths: []string{verify.PathNode, verify.PathNodePort}}
	res, err := f.run(t, Options{Spec: setMode("nftables"), RollbackOnFailure: true, Timeout: 10 * time.Second, Connectivity: paths})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "node node-0")
	assert.True(t, res.Facts.RolledBack)
	// the rollback points the template back at the config the fleet ran:
	// the canary's next pod runs iptables again
	mounted := rollout.ConfigVolumeOf(f.daemonSet(t), "kube-proxy")
	assert.Equal(t, before, mounted, "the template mounts the pre-change config again")
	cm, err := f.client.CoreV1().ConfigMaps("kube-system").Get(context.Background(), mounted, metav1.GetOptions{})
	require.NoError(t, err)
	assert.Contains(t, cm.Data["config.conf"], "mode: iptables")
	assert.NotContains(t, cm.Data["config.conf"], "mode: nftables")
	for _, n := range []string{"node-1", "node-2"} {
		assert.Equal(t, types.UID(n+"-1"), f.podUID(t, "kube-proxy-"+n+"-1"), "node %s never migrated", n)
	}
	assert.Equal(t, 1, asked["node-1"], "node-1: its baseline only")
}

// A switch kube-proxy would not clean up after is refused before any write.
func TestModeChangeKubeProxyWouldNotCleanIsRefused(t *testing.T) {
	nft := func(gate string) *corev1.ConfigMap {
		cm := seedConfigMap()
		cm.Data["config.conf"] = seedConfig + "featureGates:\n  NFTablesProxyMode: " + gate + "\n"
		cm.Data["config.conf"] = replaceMode(cm.Data["config.conf"], "nftables")
		return cm
	}
	cases := []struct {
		name  string
		cm    *corev1.ConfigMap
		image string
		spec  configmap.Spec
		want  string
		// newImage: the run changes the image too (--image)
		newImage string
	}{
		{"leaving nftables on 1.30 with the gate turned off", nft("true"), "registry.k8s.io/kube-proxy:v1.30.14",
			setMode("iptables", kpconfig.Setting{Path: "featureGates.NFTablesProxyMode", Value: "false"}),
			"mode nftables -> iptables refused: kube-proxy 1.30 removes its nftables rules at start-up only with the NFTablesProxyMode feature gate on", ""},
		{"leaving nftables on 1.32 with the beta gate turned off", nft("true"), "registry.k8s.io/kube-proxy:v1.32.13",
			setMode("ipvs", kpconfig.Setting{Path: "featureGates.NFTablesProxyMode", Value: "false"}),
			"keep featureGates.NFTablesProxyMode: true in the new config", ""},
		{"an image without a version", seedConfigMap(), "registry.k8s.io/kube-proxy@sha256:0000000000000000000000000000000000000000000000000000000000000000",
			setMode("nftables"), "pass --kube-proxy-version", ""},
		{"nftables on 1.28", seedConfigMap(), "registry.k8s.io/kube-proxy:v1.28.15", setMode("nftables"), "nftables from 1.29 on", ""},
		// a failed canary is rolled back to the running config: its
		// kube-proxy must remove the nftables tables, which 1.30 does only
		// with the gate on
		{"entering nftables on 1.30 from a config with the gate off", seedConfigMap(), "registry.k8s.io/kube-proxy:v1.30.14",
			setMode("nftables", kpconfig.Setting{Path: "featureGates.NFTablesProxyMode", Value: "true"}),
			"first add featureGates.NFTablesProxyMode: true to the running config", ""},
		// the same with an upgrade to 1.31, whose nftables gate is on by
		// default: the rollback brings 1.30 back, judged as well
		{"entering nftables with an upgrade from 1.30 to 1.31, the gate off in the running config", seedConfigMap(), "registry.k8s.io/kube-proxy:v1.30.14",
			setMode("nftables"), "rolls back to the image the fleet runs (registry.k8s.io/kube-proxy:v1.30.14): kube-proxy 1.30 removes nftables' tables at start-up only with the NFTablesProxyMode feature gate on",
			"registry.k8s.io/kube-proxy:v1.31.14"},
		{"entering nftables with an upgrade from 1.28 to 1.33", seedConfigMap(), "registry.k8s.io/kube-proxy:v1.28.15",
			setMode("nftables"), "kube-proxy 1.28 has no nftables mode and leaves nftables' tables on every node it comes back on",
			"registry.k8s.io/kube-proxy:v1.33.6"},
	}
	// --kube-proxy-version speaks of the new kube-proxy: the one a
	// rollback brings back is judged by its image's own tag
	cases = append(cases, struct {
		name     string
		cm       *corev1.ConfigMap
		image    string
		spec     configmap.Spec
		want     string
		newImage string
	}{"entering nftables with an upgrade from 1.28, --kube-proxy-version 1.33.6", seedConfigMap(), "registry.k8s.io/kube-proxy:v1.28.15",
		setMode("nftables"), "kube-proxy 1.28 has no nftables mode", "registry.k8s.io/kube-proxy:v1.33.6"})
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, tc.cm, seedDaemonSet(tc.image))
			o := Options{Spec: tc.spec, ProbePath: "none", Image: tc.newImage, Container: "kube-proxy"}
			if strings.Contains(tc.name, "--kube-proxy-version") {
				o.KubeProxyVersion = "1.33.6"
			}
			_, err := f.run(t, o)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
			assert.Contains(t, err.Error(), "nothing was written")
			assert.Empty(t, f.writes())
		})
	}
}

// With the gate already on in the running config, the same switch on 1.30
// is planned: a rolled-back kube-proxy cleans up after nftables.
func TestModeChangeEnteringNFTablesWithTheGateOnIsPlanned(t *testing.T) {
	cm := seedConfigMap()
	cm.Data["config.conf"] = seedConfig + "featureGates:\n  NFTablesProxyMode: true\n"
	f := newFixture(t, cm, seedDaemonSet("registry.k8s.io/kube-proxy:v1.30.14"))
	res, err := f.run(t, Options{Check: true, Spec: setMode("nftables"), ProbePath: "none", Connectivity: noTraffic})
	require.NoError(t, err)
	require.NotNil(t, res.Facts.Migration)
	assert.Contains(t, res.Facts.Migration.Cleanup, "kube-proxy 1.30 removes the iptables and IPVS rules")
	assert.Empty(t, f.writes())
}

// Between iptables and ipvs kube-proxy cleans up neither mode: rolled as
// asked, with a warning naming what stays.
func TestModeChangeIPTablesToIPVSWarns(t *testing.T) {
	f := newFixture(t, seedConfigMap(), seedDaemonSet("registry.k8s.io/kube-proxy:v1.33.6"))
	res, err := f.run(t, Options{Check: true, Spec: setMode("ipvs")})
	require.NoError(t, err)
	m := res.Facts.Migration
	require.NotNil(t, m)
	assert.Equal(t, StrategyRolling, m.Strategy, "rolled as asked")
	assert.Contains(t, m.Cleanup, "none")
	require.NotEmpty(t, m.Warnings)
	assert.Contains(t, m.Warnings[0], "kube-proxy 1.33 does not remove the iptables mode's rules when it starts in ipvs mode")
	assert.Contains(t, m.Warnings[0], "a clean way is through nftables")
}

// Between iptables and ipvs no kube-proxy cleans up, so an unknown version
// changes nothing: warned, not refused (to nftables it is refused).
func TestModeChangeIPTablesToIPVSUnknownVersion(t *testing.T) {
	f := newFixture(t, seedConfigMap(), seedDaemonSet("registry.k8s.io/kube-proxy:latest"))
	res, err := f.run(t, Options{Check: true, Spec: setMode("ipvs"), ProbePath: "none"})
	require.NoError(t, err)
	require.NotNil(t, res.Facts.Migration)
	assert.Empty(t, res.Facts.Migration.KubeProxyVersion)
	assert.Contains(t, res.Facts.Migration.Warnings[0], "kube-proxy does not remove the iptables mode's rules")
	assert.Contains(t, res.Facts.Migration.Warnings[0], "from kube-proxy 1.29 a clean way is through nftables")
}

// The mode the fleet runs is that of the ConfigMap its template mounts,
// not that of a restart owed (--restart never wrote the copy).
func TestModeChangeOwedFromTheMountedMode(t *testing.T) {
	f := newRollingFixture(t, 3)
	_, err := f.run(t, Options{Spec: setMode("nftables"), Restart: RestartNever})
	require.NoError(t, err)
	res, err := f.run(t, Options{Check: true})
	require.NoError(t, err)
	assert.Equal(t, ReasonPending, res.Facts.RestartReason)
	require.NotNil(t, res.Facts.Migration, "the owed restart is the migration")
	assert.Equal(t, "iptables", res.Facts.Migration.From)
	assert.Equal(t, StrategyCanary, res.Facts.Migration.Strategy)
}

func replaceMode(conf, mode string) string {
	return strings.Replace(conf, "mode: iptables", "mode: "+mode, 1)
}

func (f *rollingFixture) label(t *testing.T, node, key, value string) {
	t.Helper()
	n, err := f.client.CoreV1().Nodes().Get(context.Background(), node, metav1.GetOptions{})
	require.NoError(t, err)
	if n.Labels == nil {
		n.Labels = map[string]string{}
	}
	n.Labels[key] = value
	_, err = f.client.CoreV1().Nodes().Update(context.Background(), n, metav1.UpdateOptions{})
	require.NoError(t, err)
}

// The check of each migrated node needs get on nodes/proxy, asked for
// before any write; the message says why the run wants it.
func TestModeChangeNeedsNodeProxyBeforeAnyWrite(t *testing.T) {
	f := newRollingFixture(t, 3)
	f.client.PrependReactor("create", "selfsubjectaccessreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		r := a.(k8stesting.CreateAction).GetObject().(*authorizationv1.SelfSubjectAccessReview).DeepCopy()
		ra := r.Spec.ResourceAttributes
		r.Status.Allowed = !(ra.Resource == "nodes" && ra.Subresource == "proxy")
		return true, r, nil
	})
	_, err := f.run(t, Options{Spec: setMode("nftables")})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "get on nodes/proxy because the proxy-mode change iptables -> nftables checks each migrated node's kube-proxy")
	assert.Empty(t, f.writes())
}

// IPVS -> nftables (kubespray's default mode to the GA one): migrated, with
// the ipvs settings that stop applying named.
func TestModeChangeFromIPVS(t *testing.T) {
	cm := seedConfigMap()
	cm.Data["config.conf"] = strings.Replace(replaceMode(seedConfig, "ipvs"), "strictARP: false", "strictARP: true\n  scheduler: lc", 1)
	ds := seedDaemonSet("registry.k8s.io/kube-proxy:v1.34.4")
	ds.Annotations[rollout.HashAnnotation] = configmap.Hash(cm.Data, nil)
	f := newFixture(t, cm, ds)
	res, err := f.run(t, Options{Check: true, Spec: setMode("nftables"), Strategy: StrategyCanary, CanaryNodes: 2, Connectivity: noTraffic})
	require.NoError(t, err)
	m := res.Facts.Migration
	require.NotNil(t, m)
	assert.Equal(t, "ipvs", m.From)
	assert.Equal(t, StrategyCanary, m.StrategyAsked)
	assert.Contains(t, m.Cleanup, "removes the iptables and IPVS rules")
	require.NotEmpty(t, m.Warnings)
	assert.Contains(t, m.Warnings[0], `ipvs.scheduler: "lc"; ipvs.strictARP: true, which kube-proxy 1.34 reads in ipvs mode only`)
	for _, w := range m.Warnings {
		assert.NotContains(t, w, "localhostNodePorts", "ipvs mode had no localhost NodePorts to lose")
	}
}

// noTraffic is an operator's --verify-traffic none: a migration's tests
// that are not about its traffic check (probe pods need a kubelet).
var noTraffic = ConnectivityOptions{Traffic: TrafficNone}

// A migration stopped half-way (here by --timeout on a node whose new pod
// never came; a SIGKILL leaves the same) is resumed by the next run as the
// migration it is, decided from the pods: their older template's config
// runs iptables, the template's nftables. So the next run checks every
// node by health and traffic through the run's own Service (a leftover of
// it deleted first), though it was asked nothing, and says so.
func TestResumedMigrationKeepsItsChecks(t *testing.T) {
	f := newRollingFixture(t, 3)
	f.prober = proberFunc(func(string) (verify.Health, error) { return verify.Health{Code: 200}, nil })
	// each pod mounts what the template mounted when it was made, as the
	// DaemonSet controller's do
	mounting := func(p *corev1.Pod) *corev1.Pod {
		obj, err := f.client.Tracker().Get(appsv1.SchemeGroupVersion.WithResource("daemonsets"), "kube-system", "kube-proxy")
		require.NoError(t, err)
		p.Spec.Volumes = obj.(*appsv1.DaemonSet).Spec.Template.Spec.Volumes
		return p
	}
	for i := range 3 {
		name := fmt.Sprintf("kube-proxy-node-%d-1", i)
		obj, err := f.client.Tracker().Get(podsGVR, "kube-system", name)
		require.NoError(t, err)
		require.NoError(t, f.client.Tracker().Update(podsGVR, mounting(obj.(*corev1.Pod)), "kube-system"))
	}
	f.podController(t, func(node, gen string) *corev1.Pod {
		if node == "node-1" {
			return nil // the controller cannot make it (a webhook refuses it, say): the run times out
		}
		return mounting(kubeProxyPod(node, gen, true))
	})
	f.probeKubelet(t, func(path string) corev1.PodStatus {
		if path == verify.PathPod {
			return corev1.PodStatus{Phase: corev1.PodSucceeded}
		}
		return corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}
	})
	_, err := f.run(t, Options{Spec: setMode("nftables"), Timeout: 3 * time.Second})
	require.Error(t, err)
	require.Contains(t, err.Error(), "--timeout exceeded")
	require.True(t, rollout.CanaryLeftover(f.daemonSet(t)), "stopped half-way, on OnDelete")
	require.Equal(t, types.UID("node-2-1"), f.podUID(t, "kube-proxy-node-2-1"), "node-2 still runs its old pod")
	// what a SIGKILL would have left too: the run's own Service
	_, err = f.client.CoreV1().Services("kube-system").Create(context.Background(), &corev1.Service{ObjectMeta: metav1.ObjectMeta{
		Name: ProbeServiceName, Namespace: "kube-system", Labels: map[string]string{configmap.ManagedByLabel: "kube-proxy-sync"}}}, metav1.CreateOptions{})
	require.NoError(t, err)

	// the controller makes node-1's pod at last, and goes on as it should
	// (a controller of its own for the run: the fake's pod watch does not
	// replay the deletions made before it opened)
	require.NoError(t, f.client.Tracker().Create(podsGVR, mounting(kubeProxyPod("node-1", "2", true)), "kube-system"))
	f.podController(t, func(node, gen string) *corev1.Pod { return mounting(kubeProxyPod(node, gen, true)) })
	res, err := f.run(t, Options{Timeout: time.Minute})
	require.NoError(t, err)
	m := res.Facts.Migration
	require.NotNil(t, m, "the resumed canary is a migration: %s", res.Msg)
	assert.True(t, m.Resumed)
	assert.Equal(t, "iptables", m.From, "what the older pods run")
	assert.Equal(t, "nftables", m.To)
	assert.Equal(t, verify.Required, m.VerifyHealth)
	assert.Equal(t, "kube-system/"+ProbeServiceName, m.VerifyTraffic)
	require.NotNil(t, res.Facts.Connectivity)
	assert.Equal(t, 3, res.Facts.Connectivity.Checked, "every node, the earlier run's canary too")
	assert.Equal(t, 3, res.Facts.Connectivity.Passed)
	assert.Equal(t, verify.AllPaths, res.Facts.Connectivity.TrafficPaths, "the pod path too, from kube-proxy's own image")
	assert.True(t, res.Facts.Restarted)
	_, err = f.client.Tracker().Get(podsGVR, "kube-system", "kube-proxy-node-2-1")
	assert.True(t, apierrors.IsNotFound(err), "node-2's old pod replaced by the resumed run: %v", err)
	_, err = f.client.CoreV1().Services("kube-system").Get(context.Background(), ProbeServiceName, metav1.GetOptions{})
	assert.True(t, apierrors.IsNotFound(err), "neither the leftover nor the run's own Service is left: %v", err)
	assert.Equal(t, appsv1.RollingUpdateDaemonSetStrategyType, f.daemonSet(t).Spec.UpdateStrategy.Type, "strategy restored")
}
