//go:build e2e

// Package realnode is the real-node e2e tier: kube-proxy-sync against real
// kubelets and a real kube-proxy (the kind cluster of `make kind-up`, or any
// cluster in KUBECONFIG). kwok marks every pod Ready whatever its probe or
// config, so everything promised about kube-proxy itself is asserted here:
// readiness as the kubelet reports it, pod UIDs, and HTTP codes from
// kube-proxy's own ports, reached through the API server's node proxy.
//
// A real kube-proxy connects to whatever server it is given, so every
// --server these tests pass is the cluster's own control plane, read from
// the cluster (never an invented address).
package realnode

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kube-proxy-sync/kube-proxy-sync/test/e2e/cluster"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/yaml"
)

const (
	namespace   = "kube-system"
	name        = "kube-proxy"
	podSelector = "k8s-app=kube-proxy"
	modulePath  = "github.com/kube-proxy-sync/kube-proxy-sync"
	healthzPort = 10256
	// rolloutTimeout bounds one rollout of the (small) real cluster.
	rolloutTimeout = 4 * time.Minute
)

type env struct {
	client     kubernetes.Interface
	restConfig *rest.Config
	http       *http.Client
	kubeconfig string
	root       string
	bin        string
	// origCM and origDS are the objects as the tier found them: every test
	// puts them back.
	origCM *corev1.ConfigMap
	origDS *appsv1.DaemonSet
}

var (
	shared     *env
	sharedErr  error
	sharedOnce sync.Once
)

// connect returns the shared environment, skipping (or failing, where a
// cluster is required) when no real cluster answers.
func connect(t *testing.T) *env {
	t.Helper()
	sharedOnce.Do(func() { shared, sharedErr = newEnv() })
	if sharedErr != nil {
		if cluster.Required() {
			t.Fatalf("real-node cluster required (CI=true or E2E_REQUIRED=1) but unavailable: %v", sharedErr)
		}
		t.Skipf("no real-node cluster: %v; run `make kind-up` or set KUBECONFIG", sharedErr)
	}
	// checked last, after the restore: a packet any step of this test
	// sent out of the cluster's network fails this test, by name
	if before, ok := shared.egress(t); ok {
		t.Cleanup(func() { shared.noEgressSince(t, before) })
	}
	t.Cleanup(func() { shared.restore(t) })
	return shared
}

// unavailable ends a test that cannot do its work here for want of what it
// needs (msg says what, and what to run): a skip on a developer's machine,
// a failure where the tier is required (cluster.Required: CI=true, or
// E2E_REQUIRED=1, which make test sets), since a skipped test proves nothing.
func unavailable(t testing.TB, msg string) {
	t.Helper()
	if cluster.Required() {
		t.Fatalf("required here (CI=true or E2E_REQUIRED=1) but cannot run: %s", msg)
	} else {
		t.Skip(msg)
	}
}

// egress is the number of packets that tried to leave the kind cluster's
// docker network since make kind-up (hack/kind/egress.sh, which counts and
// drops them), and whether it could be read. It is read on the tier's own
// cluster only, the one whose kubeconfig make kind-up wrote
// (.cache/kind/kubeconfig): on a cluster of the user's (KUBECONFIG naming
// another file, as make test-real and make test with KUBECONFIG run) no
// rule of make kind-up watches the network, so the check is off, and the
// test says so. On the tier's own cluster a count that cannot be read (no
// counting rule, no iptables) would pass whatever left: that fails the
// test where the tier is required (cluster.Required: CI=true, or
// E2E_REQUIRED=1, which make test sets), and is said otherwise.
func (e *env) egress(t testing.TB) (int, bool) {
	t.Helper()
	own := filepath.Join(e.root, ".cache", "kind", "kubeconfig")
	if ours, err := os.Stat(own); err != nil {
		t.Logf("egress check off: no kind cluster of make kind-up here (%v), so the kubeconfig %s is a cluster of the user's, and no rule of make kind-up counts the packets that leave its network", err, e.kubeconfig)
		return 0, false
	} else if used, err := os.Stat(e.kubeconfig); err != nil || !os.SameFile(ours, used) {
		t.Logf("egress check off: the kubeconfig %s is not the kind tier's own (%s, from make kind-up), so no rule of make kind-up counts the packets that leave its cluster's network", e.kubeconfig, own)
		return 0, false
	}
	script := filepath.Join(e.root, "hack", "kind", "egress.sh")
	if out, err := exec.Command(script, "check", "kind").CombinedOutput(); err != nil {
		msg := fmt.Sprintf("egress check cannot run on the kind tier's own cluster (hack/kind/egress.sh check kind: %v): %s", err, strings.TrimSpace(string(out)))
		if cluster.Required() {
			t.Fatalf("required here (CI=true or E2E_REQUIRED=1): %s", msg)
		}
		t.Logf("egress check off: %s", msg)
		return 0, false
	}
	out, err := exec.Command(script, "count", "kind").Output()
	require.NoError(t, err, "count the packets that left the kind network (hack/kind/egress.sh count kind)")
	n, err := strconv.Atoi(strings.TrimSpace(string(out)))
	require.NoError(t, err, "hack/kind/egress.sh count kind printed %q", out)
	return n, true
}

// noEgressSince fails the test when packets tried to leave the kind
// cluster's network since the count was before, and says where they went
// (the kernel log since make kind-up; the newest last).
func (e *env) noEgressSince(t *testing.T, before int) {
	t.Helper()
	n, ok := e.egress(t)
	if !ok || n == before {
		return
	}
	where, _ := exec.Command(filepath.Join(e.root, "hack", "kind", "egress.sh"), "where", "kind").Output()
	t.Errorf("%d packet(s) tried to leave the kind cluster's network during this test (dropped; make kind-down fails on them too): every test's traffic stays inside it. Where they went, since make kind-up:\n%s",
		n-before, where)
}

func newEnv() (*env, error) {
	root, err := cluster.RepoRoot()
	if err != nil {
		return nil, err
	}
	path := os.Getenv("KUBECONFIG")
	if path == "" {
		path = filepath.Join(root, ".cache", "kind", "kubeconfig")
	}
	if _, err := os.Stat(path); err != nil {
		return nil, fmt.Errorf("no kubeconfig at %s", path)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		return nil, fmt.Errorf("load kubeconfig %s: %w", path, err)
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	nodes, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list nodes of %s: %w", path, err)
	}
	for _, n := range nodes.Items {
		if n.Annotations["kwok.x-k8s.io/node"] != "" {
			return nil, fmt.Errorf("node %s of %s is a kwok fake node: this tier needs real kubelets", n.Name, path)
		}
	}
	cm, err := client.CoreV1().ConfigMaps(namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("get configmap %s/%s: %w", namespace, name, err)
	}
	ds, err := client.AppsV1().DaemonSets(namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("get daemonset %s/%s: %w", namespace, name, err)
	}
	bin := filepath.Join(os.TempDir(), fmt.Sprintf("kube-proxy-sync-realnode-%d", os.Getpid()))
	build := exec.Command("go", "build", "-o", bin, modulePath+"/cmd/kube-proxy-sync")
	build.Dir, build.Env = root, append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("go build cmd/kube-proxy-sync: %w\n%s", err, out)
	}
	httpClient, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, err
	}
	return &env{client: client, restConfig: cfg, http: httpClient, kubeconfig: path, root: root, bin: bin, origCM: cm, origDS: ds}, nil
}

func ctxFor(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// restore puts the ConfigMap data, the DaemonSet's template and strategy,
// and every node's taints back as the tier found them, and waits until
// every node runs a Ready kube-proxy again.
func (e *env) restore(t *testing.T) {
	t.Helper()
	ctx := ctxFor(t, rolloutTimeout+time.Minute)
	require.NoError(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cm, err := e.client.CoreV1().ConfigMaps(namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		cm.Data = e.origCM.Data
		_, err = e.client.CoreV1().ConfigMaps(namespace).Update(ctx, cm, metav1.UpdateOptions{})
		return err
	}), "restore the kube-proxy ConfigMap")
	require.NoError(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		ds, err := e.client.AppsV1().DaemonSets(namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		ds.Spec.Template = e.origDS.Spec.Template
		ds.Spec.UpdateStrategy = e.origDS.Spec.UpdateStrategy
		ds.Annotations = e.origDS.Annotations
		_, err = e.client.AppsV1().DaemonSets(namespace).Update(ctx, ds, metav1.UpdateOptions{})
		return err
	}), "restore the kube-proxy DaemonSet")
	nodes, err := e.client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	for _, n := range nodes.Items {
		e.untaint(t, n.Name)
	}
	// A pod the test broke (crash loop, unready) is replaced, so the next
	// test starts from Ready pods of the restored template, which run what
	// the restored record holds.
	e.waitRolledOut(t, ctx)
	if e.restartPodsOlderThanTheRecord(t, ctx) {
		e.waitRolledOut(t, ctx)
	}
}

// waitRolledOut waits until the DaemonSet's status shows every pod updated
// and available, then until each node's pod is Ready per the kubelet; a pod
// still unready then is deleted once so its replacement starts clean.
func (e *env) waitRolledOut(t *testing.T, ctx context.Context) {
	t.Helper()
	err := wait.PollUntilContextCancel(ctx, 500*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		ds, err := e.client.AppsV1().DaemonSets(namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		st := ds.Status
		if st.ObservedGeneration < ds.Generation || st.UpdatedNumberScheduled != st.DesiredNumberScheduled ||
			st.NumberAvailable != st.DesiredNumberScheduled {
			return false, nil
		}
		pods := e.pods(t, ctx)
		for _, p := range pods {
			if !cluster.PodReady(&p) {
				return false, nil
			}
		}
		return len(pods) == int(st.DesiredNumberScheduled), nil
	})
	require.NoError(t, err, "kube-proxy did not come back Ready on every node within the deadline: %s", e.describePods(t))
}

// pods returns the kube-proxy pods that are not being deleted, by node.
func (e *env) pods(t *testing.T, ctx context.Context) map[string]corev1.Pod {
	t.Helper()
	list, err := e.client.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{LabelSelector: podSelector})
	require.NoError(t, err)
	out := map[string]corev1.Pod{}
	for _, p := range list.Items {
		if p.DeletionTimestamp == nil && p.Spec.NodeName != "" {
			out[p.Spec.NodeName] = p
		}
	}
	return out
}

func (e *env) podUIDs(t *testing.T) map[string]types.UID {
	t.Helper()
	out := map[string]types.UID{}
	for node, p := range e.pods(t, ctxFor(t, 30*time.Second)) {
		out[node] = p.UID
	}
	return out
}

func (e *env) describePods(t *testing.T) string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	list, err := e.client.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{LabelSelector: podSelector})
	if err != nil {
		return err.Error()
	}
	var b strings.Builder
	for _, p := range list.Items {
		fmt.Fprintf(&b, "\n  %s on %s: phase %s ready %v probe %q", p.Name, p.Spec.NodeName, p.Status.Phase, cluster.PodReady(&p), probePathOf(&p))
		if p.DeletionTimestamp != nil {
			b.WriteString(" deleting")
		}
		for _, cs := range p.Status.ContainerStatuses {
			fmt.Fprintf(&b, " restarts %d", cs.RestartCount)
			if w := cs.State.Waiting; w != nil {
				fmt.Fprintf(&b, " waiting %s: %s", w.Reason, w.Message)
			}
		}
	}
	return b.String()
}

// nodeNames returns the cluster's nodes, control plane first, sorted.
func (e *env) nodeNames(t *testing.T) (controlPlane string, workers []string) {
	t.Helper()
	nodes, err := e.client.CoreV1().Nodes().List(ctxFor(t, 30*time.Second), metav1.ListOptions{})
	require.NoError(t, err)
	for _, n := range nodes.Items {
		if _, ok := n.Labels["node-role.kubernetes.io/control-plane"]; ok {
			controlPlane = n.Name
		} else {
			workers = append(workers, n.Name)
		}
	}
	sort.Strings(workers)
	require.NotEmpty(t, controlPlane, "no control-plane node")
	return controlPlane, workers
}

// controlPlaneServer is the cluster's own API server as kube-proxy reaches
// it: the server of the kubeconfig.conf kubeadm wrote into the ConfigMap.
func (e *env) controlPlaneServer(t *testing.T) string {
	t.Helper()
	cfg, err := clientcmd.Load([]byte(e.origCM.Data["kubeconfig.conf"]))
	require.NoError(t, err, "parse kubeconfig.conf of the kube-proxy ConfigMap")
	for _, c := range cfg.Clusters {
		return c.Server
	}
	t.Fatal("kubeconfig.conf has no cluster")
	return ""
}

// controlPlaneAddressServer is the same API server by the control-plane
// node's InternalIP (in the API server's certificate).
func (e *env) controlPlaneAddressServer(t *testing.T) string {
	t.Helper()
	cp, _ := e.nodeNames(t)
	n, err := e.client.CoreV1().Nodes().Get(ctxFor(t, 30*time.Second), cp, metav1.GetOptions{})
	require.NoError(t, err)
	for _, a := range n.Status.Addresses {
		if a.Type == corev1.NodeInternalIP && !strings.Contains(a.Address, ":") {
			return "https://" + a.Address + ":6443"
		}
	}
	t.Fatalf("control-plane node %s has no IPv4 InternalIP", cp)
	return ""
}

// proxyGet does GET path on port of node through the API server's node
// proxy, and returns kube-proxy's HTTP status code and body. (client-go's
// REST client drops the status code of a non-Status error body, so this
// uses the kubeconfig's HTTP client directly.)
func (e *env) proxyGet(ctx context.Context, node string, port int, path string) (int, []byte, error) {
	u := strings.TrimSuffix(e.restConfig.Host, "/") + fmt.Sprintf("/api/v1/nodes/%s:%d/proxy/%s", node, port, strings.TrimPrefix(path, "/"))
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return 0, nil, err
	}
	resp, err := e.http.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return resp.StatusCode, body, err
}

// waitHTTP polls node's port/path until it answers want (deadline-bound).
func (e *env) waitHTTP(t *testing.T, node string, port int, path string, want int, within time.Duration) []byte {
	t.Helper()
	var last int
	var lastBody []byte
	var lastErr error
	err := wait.PollUntilContextTimeout(context.Background(), 300*time.Millisecond, within, true, func(ctx context.Context) (bool, error) {
		last, lastBody, lastErr = e.proxyGet(ctx, node, port, path)
		return last == want, nil
	})
	require.NoError(t, err, "%s:%d%s on node %s: want HTTP %d, last %d %s (%v)", node, port, path, node, want, last, lastBody, lastErr)
	return lastBody
}

func (e *env) taint(t *testing.T, node string, taint corev1.Taint) {
	t.Helper()
	ctx := ctxFor(t, 30*time.Second)
	require.NoError(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n, err := e.client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return err
		}
		n.Spec.Taints = append(n.Spec.Taints, taint)
		_, err = e.client.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{})
		return err
	}))
}

// untaint removes the cluster-autoscaler taint the tests add.
func (e *env) untaint(t *testing.T, node string) {
	t.Helper()
	ctx := ctxFor(t, 30*time.Second)
	require.NoError(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n, err := e.client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return err
		}
		var keep []corev1.Taint
		for _, tt := range n.Spec.Taints {
			if tt.Key != toBeDeletedTaint {
				keep = append(keep, tt)
			}
		}
		if len(keep) == len(n.Spec.Taints) {
			return nil
		}
		n.Spec.Taints = keep
		_, err = e.client.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{})
		return err
	}))
}

const toBeDeletedTaint = "ToBeDeletedByClusterAutoscaler"

// setImage points the DaemonSet's kube-proxy container at image, without a
// readiness probe as kubeadm deploys it (a probe path one version serves may
// be one the other does not), and waits for the rollout.
func (e *env) setImage(t *testing.T, image string) {
	t.Helper()
	e.updateTemplate(t, func(c *corev1.Container) {
		c.Image, c.ReadinessProbe = image, nil
	})
}

// updateTemplate changes the kube-proxy container of the template and
// waits for the rollout.
func (e *env) updateTemplate(t *testing.T, change func(c *corev1.Container)) {
	t.Helper()
	ctx := ctxFor(t, rolloutTimeout)
	require.NoError(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		ds, err := e.client.AppsV1().DaemonSets(namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for i := range ds.Spec.Template.Spec.Containers {
			if ds.Spec.Template.Spec.Containers[i].Name == name {
				change(&ds.Spec.Template.Spec.Containers[i])
			}
		}
		_, err = e.client.AppsV1().DaemonSets(namespace).Update(ctx, ds, metav1.UpdateOptions{})
		return err
	}))
	e.waitRolledOut(t, ctx)
}

// image returns the kube-proxy image the tier found, with its tag replaced.
func (e *env) imageWithTag(t *testing.T, tag string) string {
	t.Helper()
	for _, c := range e.origDS.Spec.Template.Spec.Containers {
		if c.Name == name {
			repo, _, _ := strings.Cut(c.Image, "@")
			if i := strings.LastIndex(repo, ":"); i > strings.LastIndex(repo, "/") {
				repo = repo[:i]
			}
			return repo + ":" + tag
		}
	}
	t.Fatal("no kube-proxy container in the DaemonSet")
	return ""
}

// readinessPath is the readiness probe's HTTP path in the live template.
func (e *env) readinessPath(t *testing.T) string {
	t.Helper()
	ds, err := e.client.AppsV1().DaemonSets(namespace).Get(ctxFor(t, 30*time.Second), name, metav1.GetOptions{})
	require.NoError(t, err)
	for _, c := range ds.Spec.Template.Spec.Containers {
		if c.Name == name && c.ReadinessProbe != nil && c.ReadinessProbe.HTTPGet != nil {
			return c.ReadinessProbe.HTTPGet.Path
		}
	}
	return ""
}

// run is one kube-proxy-sync run as a subprocess, JSON output.
type run struct {
	code   int
	out    map[string]any
	stderr string
}

func (e *env) sync(t *testing.T, args ...string) run {
	t.Helper()
	args = append([]string{"--kubeconfig", e.kubeconfig, "--output", "json"}, args...)
	cmd := exec.Command(e.bin, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	r := run{stderr: stderr.String()}
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		r.code = exit.ExitCode()
	case err != nil:
		t.Fatalf("run kube-proxy-sync: %v", err)
	}
	require.NoError(t, json.Unmarshal(stdout.Bytes(), &r.out), "stdout must be one JSON result\nstdout: %s\nstderr: %s", stdout.String(), stderr.String())
	return r
}

// field reads a result value by dotted path, at the top level or under
// ansible_facts.kube_proxy_sync.
func (r run) field(path string) any {
	for _, root := range []any{r.out, dig(r.out, "ansible_facts.kube_proxy_sync")} {
		if v := dig(root, path); v != nil {
			return v
		}
	}
	return nil
}

// dig follows path's keys through maps, and a number through a list.
func dig(v any, path string) any {
	for _, k := range strings.Split(path, ".") {
		switch c := v.(type) {
		case map[string]any:
			v = c[k]
		case []any:
			i, err := strconv.Atoi(k)
			if err != nil || i < 0 || i >= len(c) {
				return nil
			}
			v = c[i]
		default:
			return nil
		}
	}
	return v
}

func (r run) String() string {
	b, _ := json.MarshalIndent(r.out, "", "  ")
	return fmt.Sprintf("exit %d\nstdout: %s\nstderr (tail): %s", r.code, b, tail(r.stderr, 2000))
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// podWatch records every kube-proxy pod UID each node had while it ran.
type podWatch struct {
	mu   sync.Mutex
	uids map[string]map[types.UID]bool
	// crashed holds, by node, the pods whose kube-proxy container the
	// kubelet reported exited with a non-zero code.
	crashed   map[string]map[types.UID]bool
	stopWatch func()
}

func (e *env) watchPods(t *testing.T) *podWatch {
	t.Helper()
	pods := e.client.CoreV1().Pods(namespace)
	pw := &podWatch{uids: map[string]map[types.UID]bool{}, crashed: map[string]map[types.UID]bool{}}
	pw.stopWatch = cluster.Follow(t, func(ctx context.Context) (watch.Interface, error) {
		list, err := pods.List(ctxFor(t, 30*time.Second), metav1.ListOptions{LabelSelector: podSelector})
		if err != nil {
			return nil, err
		}
		for i := range list.Items {
			pw.add(&list.Items[i])
		}
		return pods.Watch(ctx, metav1.ListOptions{LabelSelector: podSelector, ResourceVersion: list.ResourceVersion})
	}, func(_ context.Context, _ watch.EventType, p *corev1.Pod) { pw.add(p) })
	return pw
}

func (pw *podWatch) add(p *corev1.Pod) {
	if p.Spec.NodeName == "" {
		return
	}
	pw.mu.Lock()
	defer pw.mu.Unlock()
	if pw.uids[p.Spec.NodeName] == nil {
		pw.uids[p.Spec.NodeName] = map[types.UID]bool{}
	}
	pw.uids[p.Spec.NodeName][p.UID] = true
	for _, cs := range p.Status.ContainerStatuses {
		if cs.Name != name {
			continue
		}
		for _, st := range []corev1.ContainerState{cs.State, cs.LastTerminationState} {
			if st.Terminated != nil && st.Terminated.ExitCode != 0 {
				if pw.crashed[p.Spec.NodeName] == nil {
					pw.crashed[p.Spec.NodeName] = map[types.UID]bool{}
				}
				pw.crashed[p.Spec.NodeName][p.UID] = true
			}
		}
	}
}

// crashedPods returns, by node, the pods seen with a kube-proxy container
// that exited non-zero (call after stop).
func (pw *podWatch) crashedPods() map[string]map[types.UID]bool {
	pw.mu.Lock()
	defer pw.mu.Unlock()
	return pw.crashed
}

// stop ends the watch and returns how many pods each node had.
func (pw *podWatch) stop() map[string]int {
	pw.stopWatch()
	pw.mu.Lock()
	defer pw.mu.Unlock()
	out := map[string]int{}
	for node, uids := range pw.uids {
		out[node] = len(uids)
	}
	return out
}

// setProbePath changes the readiness probe's path in the template (a
// rollout of its own) and deletes the leaving node's pod so its replacement
// runs the new probe without waiting for the controller's order.
func (e *env) setProbePath(t *testing.T, path string) {
	t.Helper()
	ctx := ctxFor(t, time.Minute)
	require.NoError(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		ds, err := e.client.AppsV1().DaemonSets(namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for i, c := range ds.Spec.Template.Spec.Containers {
			if c.Name == name && c.ReadinessProbe != nil && c.ReadinessProbe.HTTPGet != nil {
				ds.Spec.Template.Spec.Containers[i].ReadinessProbe.HTTPGet.Path = path
			}
		}
		_, err = e.client.AppsV1().DaemonSets(namespace).Update(ctx, ds, metav1.UpdateOptions{})
		return err
	}))
}

// setYAMLField sets a nested field of a YAML document.
func setYAMLField(doc string, path []string, value any) (string, error) {
	var m map[string]any
	if err := yaml.Unmarshal([]byte(doc), &m); err != nil {
		return "", err
	}
	cur := m
	for _, k := range path[:len(path)-1] {
		next, ok := cur[k].(map[string]any)
		if !ok {
			next = map[string]any{}
			cur[k] = next
		}
		cur = next
	}
	cur[path[len(path)-1]] = value
	out, err := yaml.Marshal(m)
	return string(out), err
}

// configConf is config.conf in the kube-proxy ConfigMap.
func (e *env) configConf(t *testing.T) string {
	t.Helper()
	cm, err := e.client.CoreV1().ConfigMaps(namespace).Get(ctxFor(t, 30*time.Second), name, metav1.GetOptions{})
	require.NoError(t, err)
	return cm.Data["config.conf"]
}
