//go:build e2e

package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	watchtools "k8s.io/client-go/tools/watch"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/yaml"

	"github.com/kube-proxy-sync/kube-proxy-sync/internal/configmap"
)

const (
	// Namespace holds the seed objects, as on a kubeadm cluster.
	Namespace = "kube-system"
	// Name of the seed ConfigMap, DaemonSet and ServiceAccount.
	Name = "kube-proxy"
	// PodSelector selects the seed DaemonSet's pods.
	PodSelector = "k8s-app=kube-proxy"

	modulePath = "github.com/kube-proxy-sync/kube-proxy-sync"
	// templateGenerationAnnotation is kept by the API server itself; Reset
	// leaves it alone.
	templateGenerationAnnotation = "deprecated.daemonset.template.generation"
)

// Cluster is a connection to the cluster under test.
type Cluster struct {
	Client         kubernetes.Interface
	RestConfig     *rest.Config
	KubeconfigPath string
	Namespace      string
	// RepoRoot is the directory holding the project's go.mod.
	RepoRoot string
}

// Connect returns a client for $KUBECONFIG if it is set, else for the local
// cluster's kubeconfig (.cache/cluster/kubeconfig). When no cluster answers,
// the test is skipped with a hint to run `make cluster-up`, or fails when
// CI=true or E2E_REQUIRED=1.
func Connect(t testing.TB) *Cluster {
	t.Helper()
	root, err := RepoRoot()
	if err != nil {
		t.Fatalf("find the repository root: %v", err)
	}

	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	path := os.Getenv(clientcmd.RecommendedConfigPathEnvVar)
	if path == "" {
		path = filepath.Join(root, ".cache", "cluster", "kubeconfig")
		rules.ExplicitPath = path
		if _, err := os.Stat(path); err != nil {
			unavailable(t, fmt.Sprintf("no kubeconfig at %s and KUBECONFIG is not set", path))
		}
	}
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		unavailable(t, fmt.Sprintf("load kubeconfig %s: %v", path, err))
	}
	// Tests list and watch every node's pod; the client's default 5 QPS
	// would make that the slowest part of a 1000-node test.
	cfg.QPS, cfg.Burst = 200, 400
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatalf("create client for %s: %v", path, err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	body, err := client.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
	if err != nil {
		unavailable(t, fmt.Sprintf("cluster of %s is not ready: %v %s", path, err, bytes.TrimSpace(body)))
	}
	if err := onlyFakeNodes(ctx, client); err != nil {
		t.Fatalf("refusing to run the kwok e2e suite against %s: %v", path, err)
	}
	return &Cluster{Client: client, RestConfig: cfg, KubeconfigPath: path, Namespace: Namespace, RepoRoot: root}
}

// onlyFakeNodes refuses a cluster with real nodes. This suite replaces
// kube-proxy's objects with the seed manifests and writes made-up server
// addresses: on a real node, kube-proxy would connect to them. Real clusters
// get test/realnode, which only writes the cluster's own control plane.
func onlyFakeNodes(ctx context.Context, client kubernetes.Interface) error {
	nodes, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("list nodes: %w", err)
	}
	for _, n := range nodes.Items {
		if n.Labels["type"] != "kwok" {
			return fmt.Errorf("node %s is not a kwok fake node (label type=kwok): this suite writes made-up API server addresses that a real kube-proxy would connect to; run test/realnode (make test-real) against real clusters", n.Name)
		}
	}
	return nil
}

func unavailable(t testing.TB, reason string) {
	t.Helper()
	if Required() {
		t.Fatalf("e2e cluster required (CI=true or E2E_REQUIRED=1) but unavailable: %s", reason)
	}
	t.Skipf("no e2e cluster: %s; run `make cluster-up` or set KUBECONFIG", reason)
}

// Required reports whether the e2e tiers must run here rather than skip
// for want of what they need (a cluster, kubectl, kubeadm): under CI=true,
// and with E2E_REQUIRED=1, which make test sets. A test that skips without
// something then fails instead, saying what to install or run.
func Required() bool {
	return os.Getenv("CI") == "true" || os.Getenv("E2E_REQUIRED") == "1"
}

// RepoRoot walks up from the working directory to the project's go.mod.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		data, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && strings.HasPrefix(string(data), "module "+modulePath+"\n") {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod of module " + modulePath + " above the working directory")
		}
		dir = parent
	}
}

func (c *Cluster) ctx(t testing.TB, timeout time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	t.Cleanup(cancel)
	return ctx
}

// ConfigMap returns the current kube-system/kube-proxy ConfigMap.
func (c *Cluster) ConfigMap(t testing.TB) *corev1.ConfigMap {
	t.Helper()
	cm, err := c.Client.CoreV1().ConfigMaps(c.Namespace).Get(c.ctx(t, 30*time.Second), Name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get configmap %s/%s: %v", c.Namespace, Name, err)
	}
	return cm
}

// ConfigMapNamed returns the ConfigMap of that name in the namespace: a
// copy of the record (see MountedConfigMap), say.
func (c *Cluster) ConfigMapNamed(t testing.TB, name string) *corev1.ConfigMap {
	t.Helper()
	cm, err := c.Client.CoreV1().ConfigMaps(c.Namespace).Get(c.ctx(t, 30*time.Second), name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get configmap %s/%s: %v", c.Namespace, name, err)
	}
	return cm
}

// MountedConfigMapName is the ConfigMap the DaemonSet's pod template
// mounts as kube-proxy's config: the record kube-system/kube-proxy itself
// (kubeadm's layout, and the seed's) or one of the immutable copies
// kube-proxy-sync points the template at (kube-proxy-<hash>); "" when it
// mounts neither.
func MountedConfigMapName(ds *appsv1.DaemonSet) string {
	return configMapOf(ds.Spec.Template.Spec.Volumes)
}

// configMapOf is the record or copy among the volumes, "" if none.
func configMapOf(volumes []corev1.Volume) string {
	for _, v := range volumes {
		if v.ConfigMap != nil && (v.ConfigMap.Name == Name || configmap.IsCopyName(Name, v.ConfigMap.Name)) {
			return v.ConfigMap.Name
		}
	}
	return ""
}

// MountedConfigMap returns the ConfigMap the DaemonSet's pod template
// mounts (see MountedConfigMapName): the config the pods it starts read.
func (c *Cluster) MountedConfigMap(t testing.TB) *corev1.ConfigMap {
	t.Helper()
	ds := c.DaemonSet(t)
	name := MountedConfigMapName(ds)
	if name == "" {
		t.Fatalf("daemonset %s/%s mounts neither configmap %s nor a copy of it", c.Namespace, Name, Name)
	}
	return c.ConfigMapNamed(t, name)
}

// Copies returns the copies of the record kube-proxy-sync made (label
// configmap.CopyOfLabel), by name.
func (c *Cluster) Copies(t testing.TB) map[string]*corev1.ConfigMap {
	t.Helper()
	list, err := c.Client.CoreV1().ConfigMaps(c.Namespace).List(c.ctx(t, 30*time.Second), metav1.ListOptions{LabelSelector: copySelector})
	if err != nil {
		t.Fatalf("list the copies of configmap %s/%s: %v", c.Namespace, Name, err)
	}
	out := make(map[string]*corev1.ConfigMap, len(list.Items))
	for i := range list.Items {
		out[list.Items[i].Name] = &list.Items[i]
	}
	return out
}

// PodConfigMaps maps node name to the ConfigMap the DaemonSet's live
// kube-proxy pod there (see DaemonSetPods) mounts, the record or a copy:
// what that kube-proxy reads whenever it starts, whatever restarts it.
func (c *Cluster) PodConfigMaps(t testing.TB) map[string]string {
	t.Helper()
	pods := c.DaemonSetPods(t)
	out := make(map[string]string, len(pods))
	for _, p := range pods {
		if p.DeletionTimestamp != nil || p.Spec.NodeName == "" {
			continue
		}
		out[p.Spec.NodeName] = configMapOf(p.Spec.Volumes)
	}
	return out
}

// PodsMounting lists the DaemonSet's kube-proxy pods ("node/pod", see
// DaemonSetPods) that mount the ConfigMap name, terminating ones included:
// a pod being deleted still runs its kube-proxy until it is gone.
func (c *Cluster) PodsMounting(t testing.TB, name string) []string {
	t.Helper()
	var out []string
	for _, p := range c.DaemonSetPods(t) {
		if configMapOf(p.Spec.Volumes) == name {
			out = append(out, p.Spec.NodeName+"/"+p.Name)
		}
	}
	return out
}

// DaemonSet returns the current kube-system/kube-proxy DaemonSet.
func (c *Cluster) DaemonSet(t testing.TB) *appsv1.DaemonSet {
	t.Helper()
	ds, err := c.Client.AppsV1().DaemonSets(c.Namespace).Get(c.ctx(t, 30*time.Second), Name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get daemonset %s/%s: %v", c.Namespace, Name, err)
	}
	return ds
}

// SeedConfigMap returns the ConfigMap of test/manifests.
func (c *Cluster) SeedConfigMap(t testing.TB) *corev1.ConfigMap {
	t.Helper()
	cm := &corev1.ConfigMap{}
	c.readManifest(t, "kube-proxy-configmap.yaml", cm)
	cm.Namespace = c.Namespace
	return cm
}

// SeedDaemonSet returns the DaemonSet of test/manifests.
func (c *Cluster) SeedDaemonSet(t testing.TB) *appsv1.DaemonSet {
	t.Helper()
	ds := &appsv1.DaemonSet{}
	c.readManifest(t, "kube-proxy-daemonset.yaml", ds)
	ds.Namespace = c.Namespace
	return ds
}

func (c *Cluster) readManifest(t testing.TB, name string, into runtime.Object) {
	t.Helper()
	path := filepath.Join(c.RepoRoot, "test", "manifests", name)
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read seed manifest: %v", err)
	}
	if err := yaml.UnmarshalStrict(data, into); err != nil {
		t.Fatalf("decode seed manifest %s: %v", path, err)
	}
}

// Reset puts the seed objects back exactly as test/manifests has them and
// waits until every kube-proxy pod is updated, Ready and alone on its node.
// Objects already equal to the manifests are left alone, so their pods keep
// running; a DaemonSet whose spec differs is deleted (its pods first) and
// created again, which is much faster on 1000 nodes than a rolling update
// at maxUnavailable 1.
func (c *Cluster) Reset(t testing.TB) {
	t.Helper()
	ctx := c.ctx(t, c.rolloutTimeout(t)+2*time.Minute)
	c.resetServiceAccount(ctx, t)
	// a record made again under the pods of a DaemonSet kept as it was
	// would be newer than what they run, which kube-proxy-sync then cannot
	// tell (kubeadm's layout): the DaemonSet is made again too, as a
	// cluster set up from the manifests has it
	remade := c.resetConfigMap(ctx, t)
	c.resetDaemonSet(ctx, t, remade)
	c.resetCopies(ctx, t)
	c.WaitRolloutComplete(t, c.rolloutTimeout(t))
	c.waitPodsSettled(ctx, t)
}

func (c *Cluster) resetServiceAccount(ctx context.Context, t testing.TB) {
	t.Helper()
	sa := &corev1.ServiceAccount{}
	c.readManifest(t, "kube-proxy-serviceaccount.yaml", sa)
	_, err := c.Client.CoreV1().ServiceAccounts(c.Namespace).Create(ctx, sa, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("create serviceaccount %s/%s: %v", c.Namespace, Name, err)
	}
}

// resetConfigMap makes the record the seed's again, and says whether it
// wrote it.
func (c *Cluster) resetConfigMap(ctx context.Context, t testing.TB) bool {
	t.Helper()
	seed := c.SeedConfigMap(t)
	cms := c.Client.CoreV1().ConfigMaps(c.Namespace)
	cur, err := cms.Get(ctx, Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		t.Fatalf("get configmap %s/%s: %v", c.Namespace, Name, err)
	case equalMaps(cur.Data, seed.Data) && len(cur.BinaryData) == 0 &&
		equalMaps(cur.Labels, seed.Labels) && equalMaps(cur.Annotations, seed.Annotations):
		return false
	default:
		// Delete and create, so that no field manager or annotation of an
		// earlier test survives.
		err := cms.Delete(ctx, Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &cur.UID}})
		if err != nil && !apierrors.IsNotFound(err) {
			t.Fatalf("delete configmap %s/%s: %v", c.Namespace, Name, err)
		}
	}
	err = wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		// kubeadm's own field manager, as on a cluster kubeadm set up: a
		// test's later edit of one key is then another manager's, which
		// kube-proxy-sync tells from a write of config.conf
		_, err := cms.Create(ctx, seed, metav1.CreateOptions{FieldManager: "kubeadm"})
		if apierrors.IsAlreadyExists(err) {
			return false, nil // the deletion is not through yet
		}
		return err == nil, err
	})
	if err != nil {
		t.Fatalf("create configmap %s/%s from test/manifests: %v", c.Namespace, Name, err)
	}
	return true
}

// copySelector selects the copies of the record kube-proxy-sync makes.
var copySelector = configmap.CopyOfLabel + "=" + Name

// resetCopies deletes every copy of the record an earlier test left, and
// waits until they are gone. The DaemonSet owns its copies, but the
// garbage collector deletes them only some time after it is gone (and not
// at all when the DaemonSet was only edited back): a copy of that name
// created by the next test in the meantime would be found there, and then
// collected under it.
func (c *Cluster) resetCopies(ctx context.Context, t testing.TB) {
	t.Helper()
	cms := c.Client.CoreV1().ConfigMaps(c.Namespace)
	err := cms.DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: copySelector})
	if err != nil {
		t.Fatalf("delete the copies of configmap %s/%s: %v", c.Namespace, Name, err)
	}
	err = wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		list, err := cms.List(ctx, metav1.ListOptions{LabelSelector: copySelector})
		return err == nil && len(list.Items) == 0, err
	})
	if err != nil {
		t.Fatalf("wait for the copies of configmap %s/%s to be gone: %v", c.Namespace, Name, err)
	}
}

// resetDaemonSet makes the DaemonSet the seed's again; remake: delete and
// create it even when its spec is the seed's.
func (c *Cluster) resetDaemonSet(ctx context.Context, t testing.TB, remake bool) {
	t.Helper()
	seed := c.SeedDaemonSet(t)
	// The DaemonSet controller keeps writing the status, so an update based
	// on what we read may conflict: read again and retry.
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		return c.resetDaemonSetOnce(ctx, t, seed, remake)
	})
	if err != nil {
		t.Fatalf("reset daemonset %s/%s: %v", c.Namespace, Name, err)
	}
}

func (c *Cluster) resetDaemonSetOnce(ctx context.Context, t testing.TB, seed *appsv1.DaemonSet, remake bool) error {
	t.Helper()
	dss := c.Client.AppsV1().DaemonSets(c.Namespace)
	cur, err := dss.Get(ctx, Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		c.createDaemonSet(ctx, t, seed)
		return nil
	}
	if err != nil {
		return fmt.Errorf("get: %w", err)
	}

	want := cur.DeepCopy()
	want.Spec = seed.Spec
	want.Labels = seed.Labels
	want.Annotations = map[string]string{}
	for k, v := range seed.Annotations {
		want.Annotations[k] = v
	}
	if v, ok := cur.Annotations[templateGenerationAnnotation]; ok {
		want.Annotations[templateGenerationAnnotation] = v
	}
	// A dry run lets the API server default the seed spec; an unchanged
	// generation then means the spec already equals the manifest.
	dry, err := dss.Update(ctx, want, metav1.UpdateOptions{DryRun: []string{metav1.DryRunAll}})
	if err != nil {
		return fmt.Errorf("dry-run update: %w", err)
	}
	switch {
	case dry.Generation != cur.Generation || remake:
		t.Logf("daemonset %s/%s spec differs from test/manifests, or its record was made again: deleting and creating it", c.Namespace, Name)
		c.deleteDaemonSet(ctx, t, cur)
		c.createDaemonSet(ctx, t, seed)
	case !equalMaps(cur.Labels, want.Labels) || !equalMaps(cur.Annotations, want.Annotations):
		if _, err := dss.Update(ctx, want, metav1.UpdateOptions{}); err != nil {
			return fmt.Errorf("update metadata: %w", err)
		}
	}
	return nil
}

func (c *Cluster) deleteDaemonSet(ctx context.Context, t testing.TB, cur *appsv1.DaemonSet) {
	t.Helper()
	fg := metav1.DeletePropagationForeground
	err := c.Client.AppsV1().DaemonSets(c.Namespace).Delete(ctx, Name, metav1.DeleteOptions{
		PropagationPolicy: &fg,
		Preconditions:     &metav1.Preconditions{UID: &cur.UID},
	})
	if err != nil && !apierrors.IsNotFound(err) {
		t.Fatalf("delete daemonset %s/%s: %v", c.Namespace, Name, err)
	}
	// Foreground deletion: the DaemonSet is gone once its pods are.
	_, err = c.watchDaemonSet(ctx, func(ev watch.Event) (bool, error) {
		return ev.Type == watch.Deleted, nil
	}, true)
	if err != nil {
		t.Fatalf("wait for daemonset %s/%s and its pods to be deleted: %v", c.Namespace, Name, err)
	}
}

func (c *Cluster) createDaemonSet(ctx context.Context, t testing.TB, seed *appsv1.DaemonSet) {
	t.Helper()
	if _, err := c.Client.AppsV1().DaemonSets(c.Namespace).Create(ctx, seed, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create daemonset %s/%s from test/manifests: %v", c.Namespace, Name, err)
	}
}

// watchDaemonSet watches the kube-proxy DaemonSet until cond holds. With
// goneIsDone, a DaemonSet that does not exist (any more) also ends the wait.
func (c *Cluster) watchDaemonSet(ctx context.Context, cond watchtools.ConditionFunc, goneIsDone bool) (*appsv1.DaemonSet, error) {
	sel := fields.OneTermEqualSelector("metadata.name", Name).String()
	lw := &cache.ListWatch{
		ListFunc: func(opts metav1.ListOptions) (runtime.Object, error) {
			opts.FieldSelector = sel
			// The reflector lists at resourceVersion 0, from the API
			// server's watch cache, which can lag a write the test has
			// just made: a template patched a moment ago would show as
			// the one before it, fully rolled out. An empty
			// resourceVersion reads from etcd.
			opts.ResourceVersion, opts.ResourceVersionMatch = "", ""
			return c.Client.AppsV1().DaemonSets(c.Namespace).List(ctx, opts)
		},
		WatchFunc: func(opts metav1.ListOptions) (watch.Interface, error) {
			opts.FieldSelector = sel
			return c.Client.AppsV1().DaemonSets(c.Namespace).Watch(ctx, opts)
		},
	}
	precondition := func(store cache.Store) (bool, error) {
		_, exists, err := store.GetByKey(c.Namespace + "/" + Name)
		if err != nil {
			return false, err
		}
		if !exists && !goneIsDone {
			return false, fmt.Errorf("daemonset %s/%s not found", c.Namespace, Name)
		}
		return !exists, nil
	}
	ev, err := watchtools.UntilWithSync(ctx, lw, &appsv1.DaemonSet{}, precondition, cond)
	if err != nil || ev == nil {
		return nil, err
	}
	ds, _ := ev.Object.(*appsv1.DaemonSet)
	return ds, nil
}

// RolloutComplete reports what `kubectl rollout status` checks: the
// controller has seen the latest spec, and every scheduled pod is updated
// and available.
func RolloutComplete(ds *appsv1.DaemonSet) bool {
	s := ds.Status
	return s.ObservedGeneration >= ds.Generation &&
		s.UpdatedNumberScheduled == s.DesiredNumberScheduled &&
		s.NumberAvailable == s.DesiredNumberScheduled
}

// WaitRolloutComplete watches the kube-proxy DaemonSet until its rollout is
// complete (see RolloutComplete) and returns it; it fails the test after
// timeout.
func (c *Cluster) WaitRolloutComplete(t testing.TB, timeout time.Duration) *appsv1.DaemonSet {
	t.Helper()
	ctx := c.ctx(t, timeout)
	var last *appsv1.DaemonSet
	ds, err := c.watchDaemonSet(ctx, func(ev watch.Event) (bool, error) {
		if ev.Type == watch.Deleted {
			return false, fmt.Errorf("daemonset %s/%s was deleted", c.Namespace, Name)
		}
		ds, ok := ev.Object.(*appsv1.DaemonSet)
		if !ok {
			return false, nil
		}
		last = ds
		return RolloutComplete(ds), nil
	}, false)
	if err != nil {
		status := "never seen"
		if last != nil {
			s := last.Status
			status = fmt.Sprintf("generation %d observed %d, desired %d updated %d available %d ready %d",
				last.Generation, s.ObservedGeneration, s.DesiredNumberScheduled,
				s.UpdatedNumberScheduled, s.NumberAvailable, s.NumberReady)
		}
		t.Fatalf("daemonset %s/%s rollout not complete within %s (%s): %v", c.Namespace, Name, timeout, status, err)
	}
	return ds
}

// waitPodsSettled waits until the DaemonSet's pods are exactly its desired
// count, one per node, all Ready and none terminating, so that a test
// starts from a quiet state.
func (c *Cluster) waitPodsSettled(ctx context.Context, t testing.TB) {
	t.Helper()
	var problem string
	err := wait.PollUntilContextCancel(ctx, 250*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		ds, err := c.Client.AppsV1().DaemonSets(c.Namespace).Get(ctx, Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		pods, err := c.Client.CoreV1().Pods(c.Namespace).List(ctx, metav1.ListOptions{LabelSelector: PodSelector})
		if err != nil {
			return false, err
		}
		perNode := map[string]int{}
		for i := range pods.Items {
			p := &pods.Items[i]
			switch {
			case p.DeletionTimestamp != nil:
				problem = fmt.Sprintf("pod %s is terminating", p.Name)
				return false, nil
			case !PodReady(p):
				problem = fmt.Sprintf("pod %s on node %q is not Ready", p.Name, p.Spec.NodeName)
				return false, nil
			}
			perNode[p.Spec.NodeName]++
		}
		if want := int(ds.Status.DesiredNumberScheduled); len(pods.Items) != want || len(perNode) != want {
			problem = fmt.Sprintf("%d pods on %d nodes, want %d", len(pods.Items), len(perNode), want)
			return false, nil
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("kube-proxy pods did not settle: %s: %v", problem, err)
	}
}

// PodReady reports the pod's Ready condition as the kubelet set it.
func PodReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// rolloutTimeout scales with the cluster: a few minutes, plus time for a
// slow rollout on many nodes.
func (c *Cluster) rolloutTimeout(t testing.TB) time.Duration {
	t.Helper()
	nodes, err := c.Client.CoreV1().Nodes().List(c.ctx(t, time.Minute), metav1.ListOptions{ResourceVersion: "0"})
	if err != nil {
		t.Fatalf("list nodes: %v", err)
	}
	return 3*time.Minute + time.Duration(len(nodes.Items))*200*time.Millisecond
}

// DaemonSetPods lists the pods the kube-proxy DaemonSet controls (its
// controller reference, as kube-proxy-sync selects them): a pod that only
// carries its labels, such as a static pod's mirror or another DaemonSet's
// pod, is not one of them.
func (c *Cluster) DaemonSetPods(t testing.TB) []corev1.Pod {
	t.Helper()
	ds := c.DaemonSet(t)
	pods, err := c.Client.CoreV1().Pods(c.Namespace).List(c.ctx(t, time.Minute), metav1.ListOptions{LabelSelector: PodSelector})
	if err != nil {
		t.Fatalf("list pods %s in %s: %v", PodSelector, c.Namespace, err)
	}
	var out []corev1.Pod
	for i := range pods.Items {
		if metav1.IsControlledBy(&pods.Items[i], ds) {
			out = append(out, pods.Items[i])
		}
	}
	return out
}

// PodUIDs maps node name to the UID of the kube-proxy pod on it (of the
// DaemonSet's, see DaemonSetPods). Pods that are terminating are left out;
// two live pods on one node fail the test.
func (c *Cluster) PodUIDs(t testing.TB) map[string]types.UID {
	t.Helper()
	pods := c.DaemonSetPods(t)
	uids := make(map[string]types.UID, len(pods))
	for _, p := range pods {
		if p.DeletionTimestamp != nil || p.Spec.NodeName == "" {
			continue
		}
		if other, ok := uids[p.Spec.NodeName]; ok {
			t.Fatalf("two live kube-proxy pods on node %q: %s and %s", p.Spec.NodeName, other, p.UID)
		}
		uids[p.Spec.NodeName] = p.UID
	}
	return uids
}

func equalMaps(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// RevisionConfigMaps are the ConfigMaps that the ControllerRevisions of ds
// mount (what `kubectl rollout undo --to-revision` restores), each with the
// number of a revision that mounts it.
func RevisionConfigMaps(t testing.TB, client kubernetes.Interface, ds *appsv1.DaemonSet) map[string]int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	list, err := client.AppsV1().ControllerRevisions(ds.Namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatalf("list the controllerrevisions of daemonset %s/%s: %v", ds.Namespace, ds.Name, err)
	}
	out := map[string]int64{}
	for _, cr := range list.Items {
		if !metav1.IsControlledBy(&cr, ds) {
			continue
		}
		var data struct {
			Spec struct {
				Template corev1.PodTemplateSpec `json:"template"`
			} `json:"spec"`
		}
		if err := yaml.Unmarshal(cr.Data.Raw, &data); err != nil {
			t.Fatalf("controllerrevision %s: %v", cr.Name, err)
		}
		for _, v := range data.Spec.Template.Spec.Volumes {
			if v.ConfigMap != nil {
				out[v.ConfigMap.Name] = cr.Revision
			}
		}
	}
	return out
}
