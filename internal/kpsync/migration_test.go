package kpsync

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
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
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/watch"
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

// stoppedAfterCanary leaves a 3-node fixture as a migration to nftables
// that stopped after its canary: --timeout on node-1, whose new pod the
// controller cannot make (a webhook refuses it, say; a SIGKILL leaves the
// same), node-2 still on its old pod, the DaemonSet on OnDelete. Every
// node's kube-proxy answers its health check. It returns mounting, which
// gives a pod the volumes the template has now, as the DaemonSet
// controller's pods get.
func (f *rollingFixture) stoppedAfterCanary(t *testing.T) func(*corev1.Pod) *corev1.Pod {
	t.Helper()
	f.prober = proberFunc(func(string) (verify.Health, error) { return verify.Health{Code: 200}, nil })
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
			return nil
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
	return mounting
}

// A migration stopped half-way (here by --timeout on a node whose new pod
// never came; a SIGKILL leaves the same) is resumed by the next run as the
// migration it is, decided from the pods: their older template's config
// runs iptables, the template's nftables. So the next run checks every
// node by health and traffic through the run's own Service (a leftover of
// it deleted first), though it was asked nothing, and says so.
func TestResumedMigrationKeepsItsChecks(t *testing.T) {
	f := newRollingFixture(t, 3)
	mounting := f.stoppedAfterCanary(t)
	// what a SIGKILL would have left too: the run's own Service
	_, err := f.client.CoreV1().Services("kube-system").Create(context.Background(), &corev1.Service{ObjectMeta: metav1.ObjectMeta{
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

// setKernel writes a node's kernel version, as its kubelet reports it.
func (f *rollingFixture) setKernel(t *testing.T, node, kernel string) {
	t.Helper()
	n, err := f.client.CoreV1().Nodes().Get(context.Background(), node, metav1.GetOptions{})
	require.NoError(t, err)
	n.Status.NodeInfo.KernelVersion = kernel
	_, err = f.client.CoreV1().Nodes().UpdateStatus(context.Background(), n, metav1.UpdateOptions{})
	require.NoError(t, err)
}

// A move to nftables while a node the DaemonSet runs on has a kernel older
// than 5.13 is refused before any write, naming the node and its kernel;
// a kernel that does not parse is reported, not judged; the container's
// own skip of kube-proxy's check skips it here too.
func TestModeChangeOntoNFTablesChecksEveryNodesKernel(t *testing.T) {
	f := newRollingFixture(t, 3)
	f.setKernel(t, "node-0", "6.8.0-49-generic")
	f.setKernel(t, "node-1", "4.18.0-553.el8_10.x86_64")
	f.setKernel(t, "node-2", "kwok-0.8.0")
	_, err := f.run(t, Options{Spec: setMode("nftables")})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "node-1 (kernel 4.18.0-553.el8_10.x86_64)")
	assert.NotContains(t, err.Error(), "node-0")
	assert.Contains(t, err.Error(), "nothing was written")
	assert.Empty(t, f.writes())

	f.setKernel(t, "node-1", "5.14.0-427.el9.x86_64")
	res, err := f.run(t, Options{Spec: setMode("nftables"), Check: true})
	require.NoError(t, err)
	require.NotNil(t, res.Facts.Migration)
	assert.True(t, hasWarning(res, `node-2 ("kwok-0.8.0")`), "warnings: %v", res.Warnings)
}

func TestModeChangeKernelCheckSkippedAsKubeProxySkipsIt(t *testing.T) {
	f := newRollingFixture(t, 2)
	f.setKernel(t, "node-0", "5.4.0-200-generic")
	ds := f.daemonSet(t)
	ds.Spec.Template.Spec.Containers[0].Env = []corev1.EnvVar{{Name: skipKernelCheckEnvVar, Value: "1"}}
	_, err := f.client.AppsV1().DaemonSets("kube-system").Update(context.Background(), ds, metav1.UpdateOptions{})
	require.NoError(t, err)
	res, err := f.run(t, Options{Spec: setMode("nftables"), Check: true})
	require.NoError(t, err)
	assert.True(t, hasWarning(res, skipKernelCheckEnvVar), "warnings: %v", res.Warnings)
}

// fleetWithAnUnreachableNode is 3 nodes whose kube-proxies answer but
// node-2's, which the node proxy cannot reach.
func fleetWithAnUnreachableNode(t *testing.T) *rollingFixture {
	f := newRollingFixture(t, 3)
	f.prober = proberFunc(func(node string) (verify.Health, error) {
		if node == "node-2" {
			return verify.Health{}, errors.New("dial tcp 10.0.0.2:10256: connect: no route to host")
		}
		return verify.Health{Code: 200}, nil
	})
	f.podController(t, func(node, gen string) *corev1.Pod { return kubeProxyPod(node, gen, true) })
	return f
}

// By default a migration checks every node: one whose kube-proxy cannot
// be asked stops it before any pod is replaced. --verify-health auto is
// the operator accepting such a node: it is reported and the migration
// goes on.
func TestModeChangeStopsOnANodeThatCannotBeChecked(t *testing.T) {
	f := fleetWithAnUnreachableNode(t)
	res, err := f.run(t, Options{Spec: setMode("nftables"), RollbackOnFailure: true, Timeout: 10 * time.Second})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "node-2")
	require.NotNil(t, res.Facts.Migration)
	assert.Equal(t, verify.Required, res.Facts.Migration.VerifyHealth)
	for _, n := range []string{"node-0", "node-1", "node-2"} {
		assert.Equal(t, types.UID(n+"-1"), f.podUID(t, "kube-proxy-"+n+"-1"), "node %s kept its pod", n)
	}
	// the traffic check's own Service: made before the first write,
	// deleted when the run ended, though it failed
	w := f.writes()
	require.NotEmpty(t, w)
	assert.Equal(t, "create services", w[0], "the Service made before any other write: %v", w)
	w = slices.DeleteFunc(w, func(v string) bool { return v == "create events" }) // the run's report
	assert.Equal(t, "delete services", w[len(w)-1], "deleted when the run ends: %v", w)
	_, err = f.client.CoreV1().Services("kube-system").Get(context.Background(), ProbeServiceName, metav1.GetOptions{})
	assert.True(t, apierrors.IsNotFound(err), "no Service left behind: %v", err)
}

func TestModeChangeAcceptsAnUncheckedNodeWhenAsked(t *testing.T) {
	f := fleetWithAnUnreachableNode(t)
	res, err := f.run(t, Options{Spec: setMode("nftables"), Connectivity: ConnectivityOptions{Health: verify.Auto, Traffic: TrafficNone}, RollbackOnFailure: true, Timeout: 10 * time.Second})
	require.NoError(t, err)
	require.NotNil(t, res.Facts.Connectivity)
	assert.Equal(t, 2, res.Facts.Connectivity.Passed)
	assert.Equal(t, verify.Auto, res.Facts.Migration.VerifyHealth)
}

// The run's own Service selects kube-proxy's pods on the healthz port the
// new config gives them, and is a NodePort Service; a config whose
// kube-proxy serves healthz on loopback only is refused before any write.
func TestModeChangeOwnServiceTargetsKubeProxysHealthzPort(t *testing.T) {
	f := newRollingFixture(t, 2)
	var made *corev1.Service
	f.client.PrependReactor("create", "services", func(a k8stesting.Action) (bool, runtime.Object, error) {
		made = a.(k8stesting.CreateAction).GetObject().(*corev1.Service).DeepCopy()
		return false, nil, nil
	})
	f.prober = proberFunc(func(string) (verify.Health, error) { return verify.Health{}, errors.New("unreachable") })
	_, err := f.run(t, Options{Spec: setMode("nftables", kpconfig.Setting{Path: "healthzBindAddress", Value: "0.0.0.0:10266"})})
	require.Error(t, err, "the baseline fails: every node unreachable")
	require.NotNil(t, made)
	assert.Equal(t, corev1.ServiceTypeNodePort, made.Spec.Type)
	assert.Equal(t, f.daemonSet(t).Spec.Selector.MatchLabels, made.Spec.Selector)
	require.Len(t, made.Spec.Ports, 1)
	assert.EqualValues(t, 10266, made.Spec.Ports[0].Port)
	assert.Equal(t, intstr.FromInt32(10266), made.Spec.Ports[0].TargetPort)
	// a node's connections reach its own kube-proxy only
	require.NotNil(t, made.Spec.InternalTrafficPolicy)
	assert.Equal(t, corev1.ServiceInternalTrafficPolicyLocal, *made.Spec.InternalTrafficPolicy)
	assert.Equal(t, corev1.ServiceExternalTrafficPolicyLocal, made.Spec.ExternalTrafficPolicy)

	loopback := newRollingFixture(t, 2)
	_, err = loopback.run(t, Options{Spec: setMode("nftables", kpconfig.Setting{Path: "healthzBindAddress", Value: "127.0.0.1:10256"})})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "--verify-traffic NAMESPACE/NAME")
	assert.Empty(t, loopback.writes())
}

// A move to nftables on a cluster with thousands of Services warns that
// each node's first full sync takes minutes, from one LIST of one item.
func TestModeChangeOntoNFTablesCountsTheServices(t *testing.T) {
	for _, tc := range []struct {
		remaining int64
		warned    bool
	}{{4998, false}, {44124, true}} {
		f := newRollingFixture(t, 2)
		f.client.PrependReactor("list", "services", func(a k8stesting.Action) (bool, runtime.Object, error) {
			l := a.(k8stesting.ListAction)
			require.Equal(t, "", l.GetNamespace(), "every namespace")
			r := tc.remaining
			return true, &corev1.ServiceList{ListMeta: metav1.ListMeta{RemainingItemCount: &r}, Items: []corev1.Service{{}}}, nil
		})
		res, err := f.run(t, Options{Spec: setMode("nftables"), Check: true})
		require.NoError(t, err)
		assert.Equal(t, tc.warned, hasWarning(res, fmt.Sprintf("the cluster holds %d Services", tc.remaining+1)), "%d: %v", tc.remaining+1, res.Warnings)
	}
}

// A Service of that name that is not the tool's is never deleted: the run
// refuses before any write.
func TestModeChangeLeavesAServiceOfThatNameThatIsNotItsOwn(t *testing.T) {
	f := fleetWithAnUnreachableNode(t)
	theirs := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: ProbeServiceName, Namespace: "kube-system", UID: "theirs"}}
	_, err := f.client.CoreV1().Services("kube-system").Create(context.Background(), theirs, metav1.CreateOptions{})
	require.NoError(t, err)
	f.client.ClearActions()
	_, err = f.run(t, Options{Spec: setMode("nftables")})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "is not kube-proxy-sync's")
	assert.Empty(t, f.writes())
	svc, err := f.client.CoreV1().Services("kube-system").Get(context.Background(), ProbeServiceName, metav1.GetOptions{})
	require.NoError(t, err)
	assert.EqualValues(t, "theirs", svc.UID)
}

// probeStatuses are what the kubelet reports of a probe pod: ready (a node
// or nodeport path's TCP probe passes), connected (the pod path's pod
// connected and exited 0), noShell (the pod path's image has no shell).
func probeStatuses() (ready, connected, noShell corev1.PodStatus) {
	ready = corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}},
		ContainerStatuses: []corev1.ContainerStatus{{Name: "connect", Ready: true, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}}}
	connected = corev1.PodStatus{Phase: corev1.PodSucceeded}
	noShell = corev1.PodStatus{Phase: corev1.PodFailed, ContainerStatuses: []corev1.ContainerStatus{{Name: "connect",
		State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 128, Reason: "StartError",
			Message: `exec: "/bin/sh": stat /bin/sh: no such file or directory`}}}}}
	return ready, connected, noShell
}

// podPathFixture is a rolling fixture of 3 nodes whose kube-proxies answer
// healthy and roll, and whose probe pods end in pod on the pod path and in
// ready on the others; images are the probe pods' images by path.
func podPathFixture(t *testing.T, ready, pod corev1.PodStatus) (*rollingFixture, func() map[string][]string) {
	f := newRollingFixture(t, 3)
	f.prober = proberFunc(func(string) (verify.Health, error) { return verify.Health{Code: 200}, nil })
	f.podController(t, func(node, gen string) *corev1.Pod { return kubeProxyPod(node, gen, true) })
	images := f.probeKubelet(t, func(path string) corev1.PodStatus {
		if path == verify.PathPod {
			return pod
		}
		return ready
	})
	return f, images
}

// probeKubelet plays the kubelet for the traffic check's probe pods: each
// gets the status status(path) once its watch is open; images records the
// image of each, by path.
func (f *rollingFixture) probeKubelet(t *testing.T, status func(path string) corev1.PodStatus) (images func() map[string][]string) {
	t.Helper()
	var mu sync.Mutex
	seen := map[string][]string{}
	n := 0
	f.client.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		p := a.(k8stesting.CreateAction).GetObject().(*corev1.Pod)
		if p.Labels[verify.ProbeLabel] == verify.ProbeLabelValue {
			mu.Lock()
			n++
			p.Name = fmt.Sprintf("%s%d", p.GenerateName, n)
			// the fake's pod watches are not filtered by label: the
			// DaemonSet's pod watch sees the probe pods too, and needs a
			// resourceVersion on each
			p.ResourceVersion = fmt.Sprint(1000 + n)
			seen[p.Labels[verify.PathLabel]] = append(seen[p.Labels[verify.PathLabel]], p.Spec.Containers[0].Image)
			mu.Unlock()
		}
		return false, nil, nil
	})
	f.client.PrependWatchReactor("pods", func(a k8stesting.Action) (bool, watch.Interface, error) {
		name, ok := a.(k8stesting.WatchAction).GetWatchRestrictions().Fields.RequiresExactMatch("metadata.name")
		if !ok || !strings.HasPrefix(name, "kube-proxy-sync-verify-") {
			return false, nil, nil
		}
		obj, err := f.client.Tracker().Get(podsGVR, "kube-system", name)
		if err != nil {
			return true, nil, err
		}
		p := obj.(*corev1.Pod).DeepCopy()
		p.Status = status(p.Labels[verify.PathLabel])
		w := watch.NewFake()
		go w.Modify(p)
		return true, w, nil
	})
	for i := range f.n {
		node := fmt.Sprintf("node-%d", i)
		n, err := f.client.CoreV1().Nodes().Get(context.Background(), node, metav1.GetOptions{})
		require.NoError(t, err)
		n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: fmt.Sprintf("10.0.0.%d", i+1)}}
		_, err = f.client.CoreV1().Nodes().UpdateStatus(context.Background(), n, metav1.UpdateOptions{})
		require.NoError(t, err)
	}
	return func() map[string][]string {
		mu.Lock()
		defer mu.Unlock()
		return maps.Clone(seen)
	}
}

// A migration with default flags checks all three paths on every node,
// the pod path from a pod running the image kube-proxy runs before the
// change (every node has it). An image that cannot connect from the pod
// network (no shell, as upstream's distroless kube-proxy) is found once,
// before any restart: the pod path is left out with a warning that says
// what to pass, the result says the two paths checked, and the migration
// goes on.
func TestModeChangeChecksThePodPathFromKubeProxysImage(t *testing.T) {
	ready, connected, noShell := probeStatuses()
	for _, c := range []struct {
		name     string
		pod      corev1.PodStatus
		paths    []string
		podPods  int
		warnLeft bool
	}{
		{"an image with a shell", connected, verify.AllPaths, 4, false}, // once before, then each of 3 nodes
		{"an image without", noShell, []string{verify.PathNode, verify.PathNodePort}, 1, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			f, images := podPathFixture(t, ready, c.pod)
			res, err := f.run(t, Options{Spec: setMode("nftables"), RollbackOnFailure: true, Timeout: time.Minute})
			require.NoError(t, err)
			require.NotNil(t, res.Facts.Connectivity)
			assert.Equal(t, 3, res.Facts.Connectivity.Passed)
			assert.Equal(t, c.paths, res.Facts.Connectivity.TrafficPaths)
			assert.Equal(t, c.paths, res.Facts.Migration.VerifyTrafficPaths, "the migration's plan says what was checked")
			pods := images()[verify.PathPod]
			assert.Len(t, pods, c.podPods)
			for _, image := range pods {
				assert.Equal(t, "registry.k8s.io/kube-proxy:v1.33.6", image, "the image the fleet ran before")
			}
			assert.Len(t, images()[verify.PathNodePort], 4, "node-0's NodePort before the first try of a ClusterIP, then every node's")
			assert.Equal(t, c.warnLeft, hasWarning(res, "leaves out the pod path (PREROUTING)"), "warnings: %v", res.Warnings)
			if c.warnLeft {
				assert.True(t, hasWarning(res, "--verify-traffic-pod-image"), "says what to pass: %v", res.Warnings)
			}
			for i := range 3 {
				n := fmt.Sprintf("node-%d", i)
				assert.Empty(t, f.podUID(t, "kube-proxy-"+n+"-1"), "node %s: its old pod replaced", n)
			}
		})
	}
}

// A migration with a pod image to connect from checks all three paths
// through the run's own Service on every node: the pod path is tried once
// before any restart, once the Service is in that node's kube-proxy's
// rules (its /healthz shows a sync since, then its NodePort connects),
// then on each node after its restart. An image that cannot connect stops
// the run before any restart.
func TestModeChangeChecksThePodPathWithTheImageGiven(t *testing.T) {
	ready, connected, noShell := probeStatuses()
	for _, c := range []struct {
		name    string
		pod     corev1.PodStatus
		podPods int
		fails   bool
	}{
		{"an image with a shell", connected, 4, false}, // once before, then each of 3 nodes
		{"an image without", noShell, 1, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			f, images := podPathFixture(t, ready, c.pod)
			res, err := f.run(t, Options{Spec: setMode("nftables"), RollbackOnFailure: true, Timeout: time.Minute,
				Connectivity: ConnectivityOptions{TrafficPodImage: "example.test/agent:1"}})
			pods := images()[verify.PathPod]
			assert.Len(t, pods, c.podPods)
			for _, image := range pods {
				assert.Equal(t, "example.test/agent:1", image)
			}
			if c.fails {
				require.Error(t, err)
				assert.Contains(t, err.Error(), "nothing was restarted")
				for i := range 3 {
					n := fmt.Sprintf("node-%d", i)
					assert.Equal(t, types.UID(n+"-1"), f.podUID(t, "kube-proxy-"+n+"-1"), "node %s: no pod replaced", n)
				}
				return
			}
			require.NoError(t, err)
			require.NotNil(t, res.Facts.Connectivity)
			assert.Equal(t, 3, res.Facts.Connectivity.Passed)
			assert.Equal(t, verify.AllPaths, res.Facts.Connectivity.TrafficPaths)
			assert.Equal(t, verify.AllPaths, res.Facts.Migration.VerifyTrafficPaths)
			assert.Len(t, images()[verify.PathNodePort], 4, "node-0's NodePort before the first try of a ClusterIP, then every node's")
		})
	}
}

// The pod path's try before any restart connects to the run's own Service
// only once the node's kube-proxy shows a sync since the Service was made:
// a connection before its rules have the Service would leave the node
// unrouted (the kind tier counts such packets). Here node-0's kube-proxy
// reports an old sync twice more after the baseline, then a new one.
func TestModeChangePodPathWaitsForTheServiceInTheRules(t *testing.T) {
	f := newRollingFixture(t, 3)
	var mu sync.Mutex
	calls, podAt := 0, -1
	f.prober = proberFunc(func(node string) (verify.Health, error) {
		mu.Lock()
		defer mu.Unlock()
		now := f.clock.Now()
		h := verify.Health{Code: 200, PerFamily: true, LastSync: now.Add(-time.Hour), NewestSync: now.Add(-time.Hour), CurrentTime: now}
		if node != "node-0" {
			h.LastSync, h.NewestSync = now, now
			return h, nil
		}
		calls++
		if calls <= 3 { // the baseline's, then two polls
			f.clock.Step(time.Second)
			return h, nil
		}
		h.NewestSync = now
		return h, nil
	})
	f.podController(t, func(node, gen string) *corev1.Pod { return kubeProxyPod(node, gen, true) })
	f.client.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		p := a.(k8stesting.CreateAction).GetObject().(*corev1.Pod)
		mu.Lock()
		defer mu.Unlock()
		if p.Labels[verify.PathLabel] == verify.PathPod && podAt < 0 {
			podAt = calls
		}
		return false, nil, nil
	})
	f.probeKubelet(t, func(path string) corev1.PodStatus {
		if path == verify.PathPod {
			return corev1.PodStatus{Phase: corev1.PodFailed, ContainerStatuses: []corev1.ContainerStatus{{Name: "connect",
				State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 3, Reason: "Error", Message: "neither bash nor nc"}}}}}
		}
		return corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}
	})
	_, err := f.run(t, Options{Spec: setMode("nftables"), Timeout: time.Minute, Connectivity: ConnectivityOptions{TrafficPodImage: "example.test/agent:1"}})
	require.Error(t, err, "the image cannot connect: refused before any restart")
	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, 4, podAt, "the pod path's probe pod made after node-0's kube-proxy showed the sync, not before")
}

// A sync since the run's own Service was made is not proof that it is in
// the rules (that sync may have begun before the Service reached
// kube-proxy): the NodePort, whose connection never leaves the node,
// connects first. While it does not, nothing connects to the ClusterIP
// and nothing is restarted.
func TestModeChangePodPathWaitsForTheNodePortBeforeTheClusterIP(t *testing.T) {
	f := newRollingFixture(t, 3)
	f.prober = proberFunc(func(string) (verify.Health, error) {
		// a sync that ended after the Service was made (the clock stands)
		now := f.clock.Now()
		synced := now.Add(time.Millisecond)
		return verify.Health{Code: 200, PerFamily: true, LastSync: synced, NewestSync: synced, CurrentTime: now}, nil
	})
	f.podController(t, func(node, gen string) *corev1.Pod { return kubeProxyPod(node, gen, true) })
	var mu sync.Mutex
	var made []string
	f.client.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		p := a.(k8stesting.CreateAction).GetObject().(*corev1.Pod)
		if path := p.Labels[verify.PathLabel]; path != "" {
			mu.Lock()
			made = append(made, path+" "+p.Spec.NodeName)
			mu.Unlock()
		}
		return false, nil, nil
	})
	f.probeKubelet(t, func(path string) corev1.PodStatus {
		ready := corev1.ConditionTrue
		if path == verify.PathNodePort {
			ready = corev1.ConditionFalse // not in the rules yet
		}
		return corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: ready}},
			ContainerStatuses: []corev1.ContainerStatus{{Name: "connect", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}}}
	})
	_, err := f.run(t, Options{Spec: setMode("nftables"), Timeout: time.Minute,
		Connectivity: ConnectivityOptions{TrafficPodImage: "example.test/agent:1", TrafficTimeout: time.Second}})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "before its try on node node-0: the run's own Service is in no rules of its kube-proxy yet: path nodeport, tried first")
	assert.Contains(t, err.Error(), "nothing was restarted")
	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, []string{"nodeport node-0"}, made, "no connection to the ClusterIP")
	for i := range 3 {
		n := fmt.Sprintf("node-%d", i)
		assert.Equal(t, types.UID(n+"-1"), f.podUID(t, "kube-proxy-"+n+"-1"), "node %s: no pod replaced", n)
	}
}
