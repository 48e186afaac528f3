package kpsync

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	goruntime "runtime"
	"strings"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
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
	"k8s.io/apimachinery/pkg/util/version"
	k8sversion "k8s.io/apimachinery/pkg/version"
	fakediscovery "k8s.io/client-go/discovery/fake"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/kube-proxy-sync/kube-proxy-sync/internal/audit"
	"github.com/kube-proxy-sync/kube-proxy-sync/internal/configmap"
	"github.com/kube-proxy-sync/kube-proxy-sync/internal/kpconfig"
	"github.com/kube-proxy-sync/kube-proxy-sync/internal/kube/kubefake"
	"github.com/kube-proxy-sync/kube-proxy-sync/internal/lock"
	"github.com/kube-proxy-sync/kube-proxy-sync/internal/probe"
	"github.com/kube-proxy-sync/kube-proxy-sync/internal/rollout"
	"github.com/kube-proxy-sync/kube-proxy-sync/internal/verify"
)

const seedConfig = `apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
bindAddress: 0.0.0.0
clientConnection:
  kubeconfig: /var/lib/kube-proxy/kubeconfig.conf
healthzBindAddress: 0.0.0.0:10256
mode: iptables
ipvs:
  strictARP: false
`

const seedKubeconfig = `apiVersion: v1
kind: Config
clusters:
- cluster:
    certificate-authority: /var/run/secrets/kubernetes.io/serviceaccount/ca.crt
    server: https://127.0.0.1:6443
  name: default
contexts:
- context:
    cluster: default
    namespace: default
    user: default
  name: default
current-context: default
users:
- name: default
  user:
    tokenFile: /var/run/secrets/kubernetes.io/serviceaccount/token
`

func seedConfigMap() *corev1.ConfigMap {
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "kube-proxy", Namespace: "kube-system", ResourceVersion: "100"},
		Data:       map[string]string{"config.conf": seedConfig, "kubeconfig.conf": seedKubeconfig},
	}
}

// dsUID is the seed DaemonSet's UID: its pods name it in their controller
// ownerReference.
const dsUID = types.UID("0d5e7c1a-kube-proxy")

// seedDaemonSet is already in the state a previous run left: stamped with
// the seed data's hash and the right probe, rolled out.
func seedDaemonSet(image string) *appsv1.DaemonSet {
	cm := seedConfigMap()
	return &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{
			Name: "kube-proxy", Namespace: "kube-system", ResourceVersion: "200", Generation: 1, UID: dsUID,
			Annotations: map[string]string{rollout.HashAnnotation: configmap.Hash(cm.Data, nil)},
		},
		Spec: appsv1.DaemonSetSpec{
			UpdateStrategy: appsv1.DaemonSetUpdateStrategy{Type: appsv1.RollingUpdateDaemonSetStrategyType},
			Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{
				Name: "kube-proxy", Image: image,
				ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
					Path: "/livez", Port: intstr.FromInt32(10256), Scheme: corev1.URISchemeHTTP,
				}}},
				// kubeadm's layout: the ConfigMap at /var/lib/kube-proxy
				VolumeMounts: []corev1.VolumeMount{{Name: "kube-proxy", MountPath: "/var/lib/kube-proxy"}},
			}},
				Volumes: []corev1.Volume{{Name: "kube-proxy", VolumeSource: corev1.VolumeSource{
					ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "kube-proxy"}},
				}}},
			}},
		},
		Status: appsv1.DaemonSetStatus{ObservedGeneration: 1, DesiredNumberScheduled: 3, UpdatedNumberScheduled: 3, NumberAvailable: 3},
	}
}

// onCopy is the cluster as a run of this version leaves it: the record,
// and the template mounting the immutable copy of its data.
func onCopy(cm *corev1.ConfigMap, ds *appsv1.DaemonSet) []runtime.Object {
	cp := configmap.NewCopy(cm, cm.Data, nil, 1)
	ds.Spec.Template.Spec.Volumes[0].ConfigMap.Name = cp.Name
	return []runtime.Object{cm, cp, ds}
}

type fixture struct {
	client *fake.Clientset
	clock  *clocktesting.FakeClock
	audit  string
	step   func(ctx context.Context, step string) // Deps.Step
	// prober answers kube-proxy's /healthz for --verify-health (nil:
	// healthy on every node, as a kube-proxy older than 1.33 answers)
	prober verify.Prober
}

// stepWhileWaiting moves the fake clock on by step whenever something
// waits on it (a ticker, a deadline), until the test ends: the run's waits
// pass without real time.
func (f *fixture) stepWhileWaiting(t *testing.T, step time.Duration) {
	done, stopped := make(chan struct{}), make(chan struct{})
	t.Cleanup(func() {
		close(done)
		<-stopped
	})
	go func() {
		defer close(stopped)
		for {
			select {
			case <-done:
				return
			case <-time.After(time.Millisecond):
				if f.clock.HasWaiters() {
					f.clock.Step(step)
				}
			}
		}
	}()
}

func newFixture(t *testing.T, objs ...runtime.Object) *fixture {
	t.Helper()
	return &fixture{
		client: allowAll(kubefake.DaemonSetGenerations(fake.NewClientset(objs...))),
		clock:  clocktesting.NewFakeClock(time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)),
		audit:  filepath.Join(t.TempDir(), "audit.jsonl"),
	}
}

// allowAll answers every SelfSubjectAccessReview with allowed, as an
// admin's would (the fake clientset returns the review unanswered).
func allowAll(c *fake.Clientset) *fake.Clientset {
	// the API server gives a Service its ClusterIP and node ports
	c.PrependReactor("create", "services", func(a k8stesting.Action) (bool, runtime.Object, error) {
		svc := a.(k8stesting.CreateAction).GetObject().(*corev1.Service)
		svc.Spec.ClusterIP = "10.96.0.99"
		for i := range svc.Spec.Ports {
			if svc.Spec.Type == corev1.ServiceTypeNodePort {
				svc.Spec.Ports[i].NodePort = int32(30999 - i)
			}
		}
		return false, nil, nil
	})
	c.PrependReactor("create", "selfsubjectaccessreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		r := a.(k8stesting.CreateAction).GetObject().(*authorizationv1.SelfSubjectAccessReview).DeepCopy()
		r.Status.Allowed = true
		return true, r, nil
	})
	return c
}

func (f *fixture) run(t *testing.T, o Options) (*Result, error) {
	t.Helper()
	o.Namespace, o.ConfigMap, o.DaemonSet, o.Container = "kube-system", "kube-proxy", "kube-proxy", "kube-proxy"
	if o.ProbePath == "" {
		o.ProbePath = "auto"
	}
	if o.Restart == "" {
		o.Restart = RestartAuto
	}
	if o.Connectivity.TrafficImage == "" {
		o.Connectivity.TrafficImage = "registry.k8s.io/pause:3.10.1" // the binary's default
	}
	if o.Timeout == 0 {
		o.Timeout = time.Minute
	}
	log := logrus.New()
	log.SetOutput(io.Discard)
	if os.Getenv("KPS_TEST_LOG") != "" { // the run's log, to debug a test
		log.SetOutput(os.Stderr)
		log.SetLevel(logrus.DebugLevel)
	}
	if o.Strategy == "" {
		o.Strategy = StrategyRolling
	}
	o.LockTimeout = time.Second
	f.client.ClearActions()
	prober := f.prober
	if prober == nil {
		prober = proberFunc(func(string) (verify.Health, error) { return verify.Health{Code: 200}, nil })
	}
	nodeProxy := func(int) (verify.Prober, error) { return prober, nil }
	return New(o, Deps{Kube: kubefake.Wrap(f.client), Clock: f.clock, Log: logrus.NewEntry(log), Audit: audit.Log{Path: f.audit}, Step: f.step, NodeProxy: nodeProxy}).Run(context.Background())
}

// writes returns the mutating actions, as "verb resource", leaving out the
// Lease (internal/lock has its own tests) and dry runs.
func (f *fixture) writes() []string {
	var out []string
	for _, a := range f.client.Actions() {
		switch a.GetVerb() {
		case "get", "list", "watch":
			continue
		}
		if r := a.GetResource().Resource; r == "leases" || r == "selfsubjectaccessreviews" {
			continue
		}
		if p, ok := a.(k8stesting.PatchActionImpl); ok && len(p.PatchOptions.DryRun) > 0 {
			continue // writes nothing
		}
		out = append(out, a.GetVerb()+" "+a.GetResource().Resource)
	}
	return out
}

func (f *fixture) daemonSet(t *testing.T) *appsv1.DaemonSet {
	ds, err := f.client.AppsV1().DaemonSets("kube-system").Get(context.Background(), "kube-proxy", metav1.GetOptions{})
	require.NoError(t, err)
	return ds
}

func TestUnchangedConfigWritesNothing(t *testing.T) {
	f := newFixture(t, seedConfigMap(), seedDaemonSet("registry.k8s.io/kube-proxy:v1.33.6"))
	res, err := f.run(t, Options{Spec: configmap.Spec{Server: "https://127.0.0.1:6443", Settings: []kpconfig.Setting{{Path: "mode", Value: "iptables"}}}})
	require.NoError(t, err)
	assert.Empty(t, f.writes(), "an unchanged run must not write")
	assert.False(t, res.Changed)
	assert.False(t, res.Facts.ConfigMapChanged)
	assert.False(t, res.Facts.Restarted)
	assert.Equal(t, "100", res.Facts.ResourceVersionAfter)
	_, statErr := os.Stat(f.audit)
	assert.True(t, os.IsNotExist(statErr), "no audit record for a run that changed nothing")
}

func TestServerChangeRestartsWithOnePatch(t *testing.T) {
	f := newFixture(t, seedConfigMap(), seedDaemonSet("registry.k8s.io/kube-proxy:v1.33.6"))
	res, err := f.run(t, Options{Spec: configmap.Spec{Server: "https://10.0.0.1:6443"}})
	require.NoError(t, err)
	// the new config in a copy no pod mounts, and (kubeadm's layout) the
	// old one in a copy too, for an undo; the one PATCH pointing the
	// template at it, then the record
	assert.Equal(t, []string{"create configmaps", "create configmaps", "patch daemonsets", "update configmaps", "create events", "create events"}, f.writes())
	assert.True(t, res.Changed)
	assert.True(t, res.Facts.ConfigMapChanged)
	assert.True(t, res.Facts.Restarted)
	assert.Equal(t, ReasonConfigChanged, res.Facts.RestartReason)
	assert.Equal(t, []string{"kubeconfig.conf:clusters[0].cluster.server"}, res.Facts.ChangedKeys)

	cm, err := f.client.CoreV1().ConfigMaps("kube-system").Get(context.Background(), "kube-proxy", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Contains(t, cm.Data["kubeconfig.conf"], "server: https://10.0.0.1:6443")
	assert.Equal(t, seedConfig, cm.Data["config.conf"], "untouched keys stay byte for byte")
	ds := f.daemonSet(t)
	assert.Equal(t, configmap.Hash(cm.Data, nil), ds.Annotations[rollout.HashAnnotation])
	assert.Equal(t, f.clock.Now().Format(time.RFC3339), ds.Spec.Template.Annotations[rollout.RestartedAtAnnotation])

	lease, err := f.client.CoordinationV1().Leases("kube-system").Get(context.Background(), LeaseName, metav1.GetOptions{})
	require.NoError(t, err, "a change run takes the lease")
	assert.Nil(t, lease.Spec.HolderIdentity, "and releases it")

	lines := readAudit(t, f.audit)
	require.Len(t, lines, 3)
	assert.Equal(t, "plan", lines[0].Phase)
	assert.Equal(t, "intent", lines[1].Phase)
	assert.Equal(t, "outcome", lines[2].Phase)
	assert.Equal(t, "succeeded", lines[2].Outcome)
	assert.Equal(t, res.Facts.AuditID, lines[2].AuditID)
}

func TestRelabelOnlyDoesNotRestart(t *testing.T) {
	f := newFixture(t, seedConfigMap(), seedDaemonSet("registry.k8s.io/kube-proxy:v1.33.6"))
	gets := 0
	// someone relabels the ConfigMap while we run: the second capture sees a new resourceVersion, same data
	f.client.PrependReactor("get", "configmaps", func(a k8stesting.Action) (bool, runtime.Object, error) {
		gets++
		cm := seedConfigMap()
		if gets > 1 {
			cm.ResourceVersion = "101"
			cm.Labels = map[string]string{"relabelled": "yes"}
		}
		return true, cm, nil
	})
	res, err := f.run(t, Options{})
	require.NoError(t, err)
	assert.True(t, res.Facts.ResourceVersionChanged)
	assert.False(t, res.Facts.ConfigMapChanged)
	assert.False(t, res.Facts.Restarted)
	assert.Empty(t, f.writes())
}

func TestCheckModeWritesNothing(t *testing.T) {
	ds := seedDaemonSet("registry.k8s.io/kube-proxy:v1.33.6")
	ds.Spec.Template.Spec.Containers[0].ReadinessProbe = nil
	f := newFixture(t, seedConfigMap(), ds)
	res, err := f.run(t, Options{Check: true, Diff: true, Spec: configmap.Spec{Settings: []kpconfig.Setting{{Path: "mode", Value: "ipvs"}, {Path: "ipvs.strictARP", Value: "true"}}}})
	require.NoError(t, err)
	assert.Empty(t, f.writes())
	assert.True(t, res.Changed)
	assert.True(t, res.Facts.ConfigMapChanged)
	assert.True(t, res.Facts.RestartRequired)
	assert.Equal(t, ReasonConfigChanged, res.Facts.RestartReason)
	assert.True(t, res.Facts.ProbeChanged)
	assert.False(t, res.Facts.Restarted)
	require.NotNil(t, res.Diff)
	assert.Contains(t, res.Diff.Before, "strictARP: false")
	assert.Contains(t, res.Diff.After, "strictARP: true")
}

func TestPendingHashRestarts(t *testing.T) {
	ds := seedDaemonSet("registry.k8s.io/kube-proxy:v1.33.6")
	ds.Annotations[rollout.HashAnnotation] = "stale"
	f := newFixture(t, seedConfigMap(), ds)
	res, err := f.run(t, Options{})
	require.NoError(t, err)
	assert.True(t, res.Facts.Restarted)
	assert.Equal(t, ReasonPending, res.Facts.RestartReason)
	// the restart moves kubeadm's layout onto a copy of the same data
	assert.Equal(t, []string{"create configmaps", "patch daemonsets", "create events"}, f.writes())
	assert.Equal(t, configmap.Hash(seedConfigMap().Data, nil), f.daemonSet(t).Annotations[rollout.HashAnnotation])
}

func TestFirstRunAdoptsWithoutRestart(t *testing.T) {
	ds := seedDaemonSet("registry.k8s.io/kube-proxy:v1.33.6")
	delete(ds.Annotations, rollout.HashAnnotation)
	f := newFixture(t, seedConfigMap(), ds)
	res, err := f.run(t, Options{})
	require.NoError(t, err)
	assert.False(t, res.Facts.Restarted)
	// the stamp is a write: Ansible must see it as a change
	assert.True(t, res.Facts.Adopted)
	assert.True(t, res.Changed)
	assert.Equal(t, []string{"patch daemonsets"}, f.writes())
	got := f.daemonSet(t)
	assert.Equal(t, configmap.Hash(seedConfigMap().Data, nil), got.Annotations[rollout.HashAnnotation])
	assert.Empty(t, got.Spec.Template.Annotations[rollout.RestartedAtAnnotation])
}

// Nothing a pod mounts is written before the restart PATCH, so a DaemonSet
// never stamped needs no stamp first (a crash after the copy leaves the
// change to make, which the next run makes).
func TestFirstRunWithChangeNeedsNoStampFirst(t *testing.T) {
	ds := seedDaemonSet("registry.k8s.io/kube-proxy:v1.33.6")
	delete(ds.Annotations, rollout.HashAnnotation)
	f := newFixture(t, seedConfigMap(), ds)
	res, err := f.run(t, Options{Spec: configmap.Spec{Settings: []kpconfig.Setting{{Path: "mode", Value: "ipvs"}}}})
	require.NoError(t, err)
	assert.Equal(t, []string{"create configmaps", "create configmaps", "patch daemonsets", "update configmaps", "create events", "create events"}, f.writes())
	assert.True(t, res.Facts.Restarted)
	assert.Equal(t, ReasonConfigChanged, res.Facts.RestartReason)
}

func TestRestartPolicies(t *testing.T) {
	t.Run("always restarts unchanged config", func(t *testing.T) {
		f := newFixture(t, seedConfigMap(), seedDaemonSet("registry.k8s.io/kube-proxy:v1.33.6"))
		res, err := f.run(t, Options{Restart: RestartAlways})
		require.NoError(t, err)
		assert.True(t, res.Facts.Restarted)
		assert.Equal(t, ReasonForced, res.Facts.RestartReason)
	})
	t.Run("never leaves the restart owed", func(t *testing.T) {
		f := newFixture(t, seedConfigMap(), seedDaemonSet("registry.k8s.io/kube-proxy:v1.33.6"))
		res, err := f.run(t, Options{Restart: RestartNever, Spec: configmap.Spec{Settings: []kpconfig.Setting{{Path: "mode", Value: "ipvs"}}}})
		require.NoError(t, err)
		// the copy, and the DaemonSet saying a restart onto it is owed;
		// the pods and the record are untouched
		assert.Equal(t, []string{"create configmaps", "patch daemonsets", "create events"}, f.writes())
		assert.Equal(t, seedConfigMap().Data, f.configMap(t).Data)
		assert.Equal(t, "kube-proxy", rollout.ConfigVolumeOf(f.daemonSet(t), "kube-proxy"))
		assert.Equal(t, res.Facts.ConfigMapName, f.daemonSet(t).Annotations[rollout.PendingConfigAnnotation])
		assert.True(t, res.Facts.RestartRequired)
		assert.False(t, res.Facts.Restarted)
		// the next auto run pays the debt
		res, err = f.run(t, Options{})
		require.NoError(t, err)
		assert.True(t, res.Facts.Restarted)
		assert.Equal(t, ReasonPending, res.Facts.RestartReason)
	})
}

func TestProbeFix(t *testing.T) {
	cases := []struct {
		name, image string
		current     string
		want        string
		changed     bool
	}{
		{"1.33 with /healthz gets /livez", "registry.k8s.io/kube-proxy:v1.33.1", "/healthz", "/livez", true},
		{"1.33 with /livez stays", "registry.k8s.io/kube-proxy:v1.33.1", "/livez", "/livez", false},
		{"1.27 eks build keeps /healthz", "602401143452.dkr.ecr.us-west-2.amazonaws.com/eks/kube-proxy:v1.27.16-eksbuild.1", "/healthz", "/healthz", false},
		{"1.27 with /livez goes back to /healthz", "registry.k8s.io/kube-proxy:v1.27.16", "/livez", "/healthz", true},
		{"tag and digest", "registry.k8s.io/kube-proxy:v1.30.0@sha256:0000000000000000000000000000000000000000000000000000000000000000", "/healthz", "/livez", true},
		{"digest only: version unknown, probe left alone (the API server says v1.29, kube-proxy may be 1.27)", "registry.k8s.io/kube-proxy@sha256:0000000000000000000000000000000000000000000000000000000000000000", "/healthz", "/healthz", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ds := seedDaemonSet(tc.image)
			ds.Spec.Template.Spec.Containers[0].ReadinessProbe.HTTPGet.Path = tc.current
			f := newFixture(t, seedConfigMap(), ds)
			f.client.Discovery().(*fakediscovery.FakeDiscovery).FakedServerVersion = &k8sversion.Info{GitVersion: "v1.29.3"}
			res, err := f.run(t, Options{})
			require.NoError(t, err)
			assert.Equal(t, tc.want, res.Facts.ProbePath)
			assert.Equal(t, tc.changed, res.Facts.ProbeChanged)
			got := f.daemonSet(t).Spec.Template.Spec.Containers[0].ReadinessProbe.HTTPGet
			assert.Equal(t, tc.want, got.Path)
			assert.Equal(t, "10256", got.Port.String())
			if tc.changed {
				assert.Equal(t, ReasonProbeChanged, res.Facts.RestartReason)
				// the restart moves kubeadm's layout onto a copy
				assert.Equal(t, []string{"create configmaps", "patch daemonsets", "create events"}, f.writes())
			} else {
				assert.Empty(t, f.writes())
			}
		})
	}
}

// Whatever shape the live probe has, one run replaces its handler and the
// next finds nothing to do (a strategic merge alone would keep a host, a
// header or a second handler, and report probe-changed forever).
func TestProbeShapesConverge(t *testing.T) {
	get := func(mut func(g *corev1.HTTPGetAction)) *corev1.Probe {
		g := &corev1.HTTPGetAction{Path: "/healthz", Port: intstr.FromInt32(10256)}
		if mut != nil {
			mut(g)
		}
		return &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: g}, PeriodSeconds: 7}
	}
	cases := []struct {
		name  string
		probe *corev1.Probe
	}{
		{"host 127.0.0.1", get(func(g *corev1.HTTPGetAction) { g.Path, g.Host = "/livez", "127.0.0.1" })},
		{"a header", get(func(g *corev1.HTTPGetAction) {
			g.Path, g.HTTPHeaders = "/livez", []corev1.HTTPHeader{{Name: "X", Value: "y"}}
		})},
		{"https", get(func(g *corev1.HTTPGetAction) { g.Path, g.Scheme = "/livez", corev1.URISchemeHTTPS })},
		{"named port", get(func(g *corev1.HTTPGetAction) { g.Path, g.Port = "/livez", intstr.FromString("healthz") })},
		{"exec", &corev1.Probe{ProbeHandler: corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"true"}}}}},
		{"tcpSocket", &corev1.Probe{ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(10256)}}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ds := seedDaemonSet("registry.k8s.io/kube-proxy:v1.33.1")
			ds.Spec.Template.Spec.Containers[0].ReadinessProbe = tc.probe
			f := newFixture(t, seedConfigMap(), ds)
			res, err := f.run(t, Options{})
			require.NoError(t, err)
			assert.True(t, res.Facts.ProbeChanged)
			got := f.daemonSet(t).Spec.Template.Spec.Containers[0].ReadinessProbe
			require.NotNil(t, got)
			assert.Nil(t, got.Exec, "no second handler")
			assert.Nil(t, got.TCPSocket, "no second handler")
			assert.Equal(t, &corev1.HTTPGetAction{Path: "/livez", Port: intstr.FromInt32(10256), Scheme: corev1.URISchemeHTTP}, got.HTTPGet, "the handler replaced whole")
			assert.Equal(t, tc.probe.PeriodSeconds, got.PeriodSeconds, "timing kept")

			res, err = f.run(t, Options{})
			require.NoError(t, err)
			assert.False(t, res.Facts.ProbeChanged, "the next run finds nothing to do")
			assert.False(t, res.Changed)
		})
	}
}

func TestBadConfigChangesNothing(t *testing.T) {
	cm := seedConfigMap()
	cm.Data["config.conf"] = "kind: KubeProxyConfiguration\nmode: [not, a, string]\n"
	f := newFixture(t, cm, seedDaemonSet("registry.k8s.io/kube-proxy:v1.33.6"))
	_, err := f.run(t, Options{Spec: configmap.Spec{Server: "https://10.0.0.1:6443"}})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "config.conf is not a valid KubeProxyConfiguration")
	assert.Empty(t, f.writes())
}

func TestSecretsNeverInDiff(t *testing.T) {
	cm := seedConfigMap()
	cm.Data["kubeconfig.conf"] = strings.Replace(seedKubeconfig, "tokenFile: /var/run/secrets/kubernetes.io/serviceaccount/token", "token: s3cr3t-t0ken\n    client-key-data: UFJJVkFURSBLRVk=\n    # token: c0mm3nted-t0ken", 1)
	f := newFixture(t, cm, seedDaemonSet("registry.k8s.io/kube-proxy:v1.33.6"))
	res, err := f.run(t, Options{Diff: true, Spec: configmap.Spec{Server: "https://10.0.0.1:6443"}})
	require.NoError(t, err)
	b, err := json.Marshal(res)
	require.NoError(t, err)
	auditLog, err := os.ReadFile(f.audit)
	require.NoError(t, err)
	for _, secret := range []string{"s3cr3t-t0ken", "UFJJVkFURSBLRVk=", "c0mm3nted-t0ken"} {
		assert.NotContains(t, string(b), secret)
		assert.NotContains(t, string(auditLog), secret)
	}
	assert.Contains(t, res.Diff.After, "token: REDACTED")
}

func readAudit(t *testing.T, path string) []audit.Record {
	t.Helper()
	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	st, err := os.Stat(path)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), st.Mode().Perm())
	var out []audit.Record
	for _, line := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
		var r audit.Record
		require.NoError(t, json.Unmarshal([]byte(line), &r))
		out = append(out, r)
	}
	return out
}

// The restart PATCH reaches the API server but its response is lost; the
// transport's repeat (it carries a resourceVersion precondition) gets a
// conflict. The run must see its own restartedAt, not "already restarted
// for this hash by someone else": restarted, waited for and reported.
func TestLostRestartResponseIsRecognised(t *testing.T) {
	f := newFixture(t, seedConfigMap(), seedDaemonSet("registry.k8s.io/kube-proxy:v1.33.6"))
	lost := false
	f.client.PrependReactor("patch", "daemonsets", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if lost || !strings.Contains(string(a.(k8stesting.PatchAction).GetPatch()), rollout.RestartedAtAnnotation) {
			return false, nil, nil
		}
		lost = true
		_, _, err := kubefake.DaemonSetReaction(f.client.Tracker())(a)
		require.NoError(t, err, "the first PATCH is applied")
		return true, nil, apierrors.NewConflict(appsv1.Resource("daemonsets"), "kube-proxy", errors.New("the object has been modified"))
	})
	res, err := f.run(t, Options{Spec: configmap.Spec{Server: "https://10.0.0.1:6443"}})
	require.NoError(t, err)
	require.True(t, lost)
	assert.True(t, res.Facts.Restarted)
	assert.Equal(t, ReasonConfigChanged, res.Facts.RestartReason)
	assert.Equal(t, []string{"create configmaps", "create configmaps", "patch daemonsets", "update configmaps", "create events", "create events"}, f.writes(), "one restart PATCH, not two")
	assert.Equal(t, f.clock.Now().Format(time.RFC3339), f.daemonSet(t).Spec.Template.Annotations[rollout.RestartedAtAnnotation])
	lines := readAudit(t, f.audit)
	require.Len(t, lines, 3, "plan, intent, outcome")
	assert.Equal(t, "succeeded", lines[2].Outcome)
}

// A run that loses the lease (it cannot renew it) stops before its next
// write: here after the ConfigMap write, before the restart.
func TestLostLeaseStopsTheRun(t *testing.T) {
	f := newFixture(t, seedConfigMap(), seedDaemonSet("registry.k8s.io/kube-proxy:v1.33.6"))
	f.step = func(ctx context.Context, step string) {
		if step != StepConfigMapWritten {
			return
		}
		f.client.PrependReactor("update", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
			return true, nil, errors.New("connection refused")
		})
		for ctx.Err() == nil { // renewals fail until the renew deadline
			if f.clock.HasWaiters() {
				f.clock.Step(time.Second)
			}
			goruntime.Gosched()
		}
	}
	_, err := f.run(t, Options{Spec: configmap.Spec{Server: "https://10.0.0.1:6443"}})
	require.ErrorIs(t, err, lock.ErrLost)
	assert.Contains(t, err.Error(), "connection refused")
	assert.Equal(t, 1, strings.Count(err.Error(), "lost the lease"), err.Error())
	assert.Empty(t, f.daemonSet(t).Spec.Template.Annotations[rollout.RestartedAtAnnotation], "no restart after the lease was lost")
	assert.NotContains(t, f.writes(), "patch daemonsets")
}

// A liveness probe on /healthz fails on nodes being deleted from 1.28 on:
// it moves to /livez with the readiness probe; before 1.28 it stays.
func TestLivenessProbeOnHealthz(t *testing.T) {
	for _, tc := range []struct {
		image, want string
	}{
		{"registry.k8s.io/kube-proxy:v1.33.1", "/livez"},
		{"registry.k8s.io/kube-proxy:v1.27.16", "/healthz"},
	} {
		t.Run(tc.image, func(t *testing.T) {
			ds := seedDaemonSet(tc.image)
			c := &ds.Spec.Template.Spec.Containers[0]
			c.ReadinessProbe.HTTPGet.Path = probe.PathFor(version.MustParseGeneric(strings.TrimPrefix(tc.image, "registry.k8s.io/kube-proxy:")))
			c.LivenessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/healthz", Port: intstr.FromInt32(10256), Host: "127.0.0.1"}}, FailureThreshold: 8}
			f := newFixture(t, seedConfigMap(), ds)
			res, err := f.run(t, Options{})
			require.NoError(t, err)
			assert.Equal(t, tc.want == "/livez", res.Facts.ProbeChanged)
			got := f.daemonSet(t).Spec.Template.Spec.Containers[0].LivenessProbe
			assert.Equal(t, tc.want, got.HTTPGet.Path)
			assert.Equal(t, int32(8), got.FailureThreshold, "timing kept")
			if tc.want == "/livez" {
				assert.Empty(t, got.HTTPGet.Host, "handler replaced, not merged")
			}
			res, err = f.run(t, Options{})
			require.NoError(t, err)
			assert.False(t, res.Facts.ProbeChanged, "converged")
		})
	}
}

// A restart costs the same API requests at 10 and at 1000 nodes: none per
// pod or per node (the fake serves a list in one page; on a real server the
// pod and node lists take one request per 500). The budget is the list
// below; a new request per run is a deliberate change of it.
func TestRestartRequestsDoNotGrowWithNodes(t *testing.T) {
	requests := func(nodes int) map[string]int {
		ds := seedDaemonSet("registry.k8s.io/kube-proxy:v1.33.6")
		ds.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"k8s-app": "kube-proxy"}}
		// the pods are labelled with the template generation the restart
		// moves to, so every pod counts as updated and Ready at once: the
		// wait ends before its watch, which costs one request whatever the size
		ds.Annotations["deprecated.daemonset.template.generation"] = "1"
		// a DaemonSet at rest: its controller saw the template, every pod runs it
		ds.Status.DesiredNumberScheduled, ds.Status.UpdatedNumberScheduled = int32(nodes), int32(nodes)
		ds.Status.ObservedGeneration = ds.Generation
		objs := liveFleet(ds, nodes)
		for _, o := range objs {
			if p, ok := o.(*corev1.Pod); ok {
				p.Labels["pod-template-generation"] = "2"
			}
		}
		f := newFixture(t, objs...)
		res, err := f.run(t, Options{Spec: configmap.Spec{Server: "https://10.0.0.1:6443"}})
		require.NoError(t, err)
		require.True(t, res.Facts.Restarted)
		require.Equal(t, int32(nodes), res.Facts.Rollout.Desired)
		out := map[string]int{}
		for _, a := range f.client.Actions() {
			out[a.GetVerb()+" "+a.GetResource().Resource]++
		}
		return out
	}
	small := requests(10)
	assert.Equal(t, map[string]int{
		"get configmaps":                  3,  // plan, plan under the lease, the copy after its create
		"create configmaps":               2,  // the copy, and one of the old data (kubeadm's layout), for an undo
		"update configmaps":               1,  // the record, once no pod mounts it (the fleet says so)
		"list configmaps":                 1,  // the copies, for the history
		"list controllerrevisions":        1,  // what they mount is kept
		"list daemonsets":                 1,  // other DaemonSets on the same config, before the record write and the history
		"get daemonsets":                  2,  // plan, plan under the lease
		"patch daemonsets":                1,  // the restart
		"create selfsubjectaccessreviews": 18, // every verb the run may use, before its first write
		"get leases":                      1,
		"create leases":                   1,
		"update leases":                   1, // the release
		"list nodes":                      1,
		"list pods":                       1, // before the restart; the rollout follows them from there
		"create events":                   2,
	}, small)
	assert.Equal(t, small, requests(1000))
}

// The restart PATCH conflicts when the DaemonSet controller wrote status
// since the DaemonSet was read (all the time while it rolls): the retry
// sends the PATCH on the fresh resourceVersion without listing the nodes
// and pods again, which at 5000 nodes takes long enough to conflict again.
func TestRestartConflictDoesNotListAgain(t *testing.T) {
	ds := seedDaemonSet("registry.k8s.io/kube-proxy:v1.33.6")
	f := newFixture(t, seedConfigMap(), ds)
	conflicts := 2
	f.client.PrependReactor("patch", "daemonsets", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if conflicts == 0 || !strings.Contains(string(a.(k8stesting.PatchAction).GetPatch()), rollout.RestartedAtAnnotation) {
			return false, nil, nil
		}
		conflicts--
		// the controller's status write that caused it
		latest, err := f.client.Tracker().Get(a.GetResource(), "kube-system", "kube-proxy")
		require.NoError(t, err)
		moved := latest.(*appsv1.DaemonSet).DeepCopy()
		moved.Status.NumberReady--
		require.NoError(t, f.client.Tracker().Update(a.GetResource(), moved, "kube-system"))
		return true, nil, apierrors.NewConflict(a.GetResource().GroupResource(), "kube-proxy", errors.New("the object has been modified"))
	})
	res, err := f.run(t, Options{Spec: configmap.Spec{Server: "https://10.0.0.1:6443"}})
	require.NoError(t, err)
	assert.True(t, res.Facts.Restarted)
	assert.Zero(t, conflicts)
	lists := map[string]int{}
	for _, a := range f.client.Actions() {
		if a.GetVerb() == "list" {
			lists[a.GetResource().Resource]++
		}
	}
	assert.Equal(t, map[string]int{"nodes": 1, "pods": 1, "configmaps": 1, "controllerrevisions": 1, "daemonsets": 1}, lists, "listed once before the first PATCH (and the copies, the revisions and the other DaemonSets once rolled out, for the record and the history)")
	assert.Equal(t, f.clock.Now().Format(time.RFC3339), f.daemonSet(t).Spec.Template.Annotations[rollout.RestartedAtAnnotation])
}
