//go:build e2e

package realnode

import (
	"context"
	"fmt"
	"net/url"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kube-proxy-sync/kube-proxy-sync/test/e2e/cluster"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
)

// probeSelector selects the traffic check's probe pods.
const probeSelector = "app.kubernetes.io/name=kube-proxy-sync-verify"

// The traffic check's three paths on real kube-proxies (iptables mode):
// a NodePort Service whose endpoint is the API server, checked after every
// node's restart from the node to its ClusterIP (nat OUTPUT), from a pod
// on the node to its ClusterIP (nat PREROUTING) and from the node to its
// NodePort on the node's InternalIP. All pass on healthy nodes. Then each
// path is broken for real on one worker, inside its node container, by a
// raw-table DROP of exactly that path's packets (raw runs before kube-proxy's
// nat rules, so it sees the Service address; PREROUTING only sees packets
// that arrive from an interface, OUTPUT only the node's own): the check
// fails that node, names the path, and no other path fails. No probe pod
// is left behind, whatever the outcome.
func TestTrafficPathsPassAndEachFailsWhenBroken(t *testing.T) {
	e := connect(t)
	d := e.dockerOrSkip(t)
	svc := e.nodePortService(t)
	_, workers := e.nodeNames(t)
	broken := workers[0]
	podImage := e.imageWithTag(t, e.kubeProxyTag(t))
	args := func(timeout string) []string {
		return []string{"--restart", "always", "--verify-health", "required", "--verify-traffic", namespace + "/" + svc.Name,
			"--verify-traffic-paths", "node,pod,nodeport", "--verify-traffic-pod-image", podImage,
			"--verify-traffic-timeout", timeout, "--no-rollback", "--timeout", "6m"}
	}

	r := e.sync(t, args("30s")...)
	require.Equal(t, 0, r.code, "healthy nodes pass every path: %s", r)
	nodes := len(e.podUIDs(t))
	assert.EqualValues(t, nodes, r.field("connectivity.checked"), "%s", r)
	assert.EqualValues(t, nodes, r.field("connectivity.passed"), "%s", r)
	assert.Equal(t, []any{"node", "pod", "nodeport"}, r.field("connectivity.traffic_paths"), "%s", r)
	seconds, _ := r.field("connectivity.seconds").(float64)
	requests, _ := r.field("connectivity.api_requests").(float64)
	t.Logf("healthy: %d nodes checked on 3 paths, %.1fs per node, %.1f API requests per node (health and traffic)",
		nodes, seconds/float64(nodes), requests/float64(nodes))
	e.noProbePods(t)

	e.breakEachPath(t, d, svc, broken, args)

	// an image that cannot connect (the pause image: no shell) is found
	// before any restart, and nothing restarts
	before := e.podUIDs(t)
	bad := args("15s")
	bad[slices.Index(bad, "--verify-traffic-pod-image")+1] = "registry.k8s.io/pause:3.10.1"
	r = e.sync(t, bad...)
	require.Equal(t, 1, r.code, "%s", r)
	assert.Contains(t, fmt.Sprint(r.field("msg")), "tried once before any restart", "%s", r)
	assert.Contains(t, fmt.Sprint(r.field("msg")), "--verify-traffic-pod-image", "%s", r)
	assert.Equal(t, before, e.podUIDs(t), "no kube-proxy pod restarted")
	e.noProbePods(t)
}

// The same on a migration, iptables -> nftables -> iptables: each way,
// every migrated node passes the three paths before the rollout goes on,
// and in nftables mode each path broken on one worker fails that node
// with the path named, as in iptables mode.
func TestTrafficPathsOnAMigrationToNFTablesAndBack(t *testing.T) {
	e := connect(t)
	d := e.dockerOrSkip(t)
	cp, workers := e.nodeNames(t)
	d.endsInIPTablesMode(t, cp)
	svc := e.nodePortService(t)
	broken := workers[0]
	podImage := e.imageWithTag(t, e.kubeProxyTag(t))
	checks := func(timeout string) []string {
		return []string{"--verify-health", "required", "--verify-traffic", namespace + "/" + svc.Name,
			"--verify-traffic-paths", "node,pod,nodeport", "--verify-traffic-pod-image", podImage,
			"--verify-traffic-timeout", timeout, "--timeout", "8m"}
	}
	migrate := func(to string) {
		t.Helper()
		r := e.sync(t, append([]string{"--set", "mode=" + to}, checks("30s")...)...)
		require.Equal(t, 0, r.code, "-> %s with every path checked: %s", to, r)
		assert.Equal(t, to, r.field("migration.to"), "%s", r)
		assert.Equal(t, []any{"node", "pod", "nodeport"}, r.field("migration.verify_traffic_paths"), "%s", r)
		nodes := len(e.podUIDs(t))
		assert.EqualValues(t, nodes, r.field("connectivity.checked"), "every migrated node checked: %s", r)
		assert.EqualValues(t, nodes, r.field("connectivity.passed"), "%s", r)
		seconds, _ := r.field("rollout.duration_seconds").(float64)
		checked, _ := r.field("connectivity.seconds").(float64)
		requests, _ := r.field("connectivity.api_requests").(float64)
		t.Logf("-> %s: %d nodes in %.1fs; the checks %.1fs per node, %.1f API requests per node", to, nodes, seconds,
			checked/float64(nodes), requests/float64(nodes))
		e.noProbePods(t)
	}

	migrate("nftables")
	require.True(t, d.proxyRules(t, broken).hasNFTable(), "node %s runs nftables mode", broken)
	e.breakEachPath(t, d, svc, broken, func(timeout string) []string {
		// the ConfigMap says nftables now: a restart in the same mode
		return append([]string{"--restart", "always", "--no-rollback"}, checks(timeout)...)
	})
	migrate("iptables")
	require.False(t, d.proxyRules(t, broken).hasNFTable(), "node %s is back in iptables mode", broken)
}

// breakEachPath breaks one path at a time on node broken, for real (a
// raw-table DROP of that path's packets, removed at the end), runs
// kube-proxy-sync with args, and asserts that the check fails that node
// and names that path, and no other.
func (e *env) breakEachPath(t *testing.T, d docker, svc *corev1.Service, broken string, args func(timeout string) []string) {
	t.Helper()
	nodeIP := e.internalIP(t, broken)
	if !slices.Contains(d.proxyRules(t, broken).nftTables, "ip raw") {
		// iptables -I creates the raw table; -D leaves it, empty
		t.Cleanup(func() {
			out, err := exec.Command("docker", "exec", broken, "nft", "delete", "table", "ip", "raw").CombinedOutput()
			assert.NoError(t, err, "remove the raw table this test made on %s: %s", broken, out)
		})
	}
	for _, tc := range []struct {
		path, chain, dst string
		port             int32
	}{
		{"node", "OUTPUT", svc.Spec.ClusterIP, svc.Spec.Ports[0].Port},
		{"pod", "PREROUTING", svc.Spec.ClusterIP, svc.Spec.Ports[0].Port},
		{"nodeport", "OUTPUT", nodeIP, svc.Spec.Ports[0].NodePort},
	} {
		t.Run(tc.path, func(t *testing.T) {
			rule := []string{tc.chain, "-d", tc.dst, "-p", "tcp", "--dport", fmt.Sprint(tc.port),
				"-m", "comment", "--comment", "kube-proxy-sync realnode: break the " + tc.path + " path", "-j", "DROP"}
			d.iptablesRaw(t, broken, append([]string{"-I"}, rule...))
			t.Cleanup(func() { d.iptablesRaw(t, broken, append([]string{"-D"}, rule...)) })

			start := time.Now()
			r := e.sync(t, args("15s")...)
			require.Equal(t, 1, r.code, "the %s path broken on %s fails the check: %s", tc.path, broken, r)
			failed, _ := r.field("connectivity.failed").([]any)
			require.Len(t, failed, 1, "%s", r)
			f := failed[0].(map[string]any)
			assert.Equal(t, broken, f["node"], "the node whose path is broken: %s", r)
			detail := fmt.Sprint(f["detail"])
			assert.Contains(t, detail, "path "+tc.path+": no TCP connection", "%s", r)
			for _, other := range []string{"node", "pod", "nodeport"} {
				if other != tc.path {
					assert.NotContains(t, detail, "path "+other+":", "only the broken path fails: %s", r)
				}
			}
			t.Logf("%s broken on %s (run %.1fs): %s", tc.path, broken, time.Since(start).Seconds(), detail)
			e.noProbePods(t)
		})
	}
}

// nodePortService creates a selector-less NodePort Service in kube-system
// whose one endpoint is the API server on the control-plane node's
// address (inside the cluster's network), and removes it at the end.
func (e *env) nodePortService(t *testing.T) *corev1.Service {
	t.Helper()
	u, err := url.Parse(e.controlPlaneAddressServer(t))
	require.NoError(t, err)
	const svcName = "kps-verify-paths"
	ctx := ctxFor(t, 30*time.Second)
	svc, err := e.client.CoreV1().Services(namespace).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: svcName, Namespace: namespace},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort, Ports: []corev1.ServicePort{{
			Name: "https", Port: 443, TargetPort: intstr.FromInt32(6443), Protocol: corev1.ProtocolTCP,
		}}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx := ctxFor(t, 30*time.Second)
		_ = e.client.DiscoveryV1().EndpointSlices(namespace).Delete(ctx, svcName, metav1.DeleteOptions{})
		_ = e.client.CoreV1().Services(namespace).Delete(ctx, svcName, metav1.DeleteOptions{})
	})
	_, err = e.client.DiscoveryV1().EndpointSlices(namespace).Create(ctx, &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: svcName, Namespace: namespace,
			Labels: map[string]string{discoveryv1.LabelServiceName: svcName}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{u.Hostname()}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}}},
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("https"), Port: ptr.To(int32(6443)), Protocol: ptr.To(corev1.ProtocolTCP)}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	e.waitProgrammed(t, svc.Spec.ClusterIP)
	return svc
}

// waitProgrammed waits until every node's kube-proxy has a Service's
// ClusterIP in its rules (iptables' nat table or the nftables ruleset),
// for a minute at most: a test that makes a Service and checks traffic
// through it at once would otherwise connect before a node's rules have
// it, and that connection leaves the node unrouted (make kind-down counts
// it). An operator names a Service that is in place; so do the tests. On
// nodes that are not containers of this machine's docker it cannot look,
// and says so and returns; where the tier is required (cluster.Required:
// CI=true, or E2E_REQUIRED=1, which make test sets), which runs it on
// kind's containers, that is a failure, as in dockerOrSkip.
func (e *env) waitProgrammed(t *testing.T, clusterIP string) {
	t.Helper()
	cp, workers := e.nodeNames(t)
	if out, err := exec.Command("docker", "inspect", cp).CombinedOutput(); err != nil {
		msg := fmt.Sprintf("cannot look into node %s's rules for service %s (docker inspect: %v %s); the kind cluster of make kind-up has its nodes in docker containers",
			cp, clusterIP, err, strings.TrimSpace(string(out)))
		if cluster.Required() {
			t.Fatalf("required here (CI=true or E2E_REQUIRED=1): %s", msg)
		}
		t.Logf("%s: not waiting for the rules", msg)
		return
	}
	check := "{ iptables-save -t nat; nft list ruleset; } 2>/dev/null | grep -qF " + clusterIP
	for _, node := range append([]string{cp}, workers...) {
		require.Eventually(t, func() bool {
			return exec.Command("docker", "exec", node, "sh", "-c", check).Run() == nil
		}, time.Minute, 200*time.Millisecond, "service %s in the rules of node %s's kube-proxy", clusterIP, node)
	}
}

// internalIP is node's IPv4 InternalIP.
func (e *env) internalIP(t *testing.T, node string) string {
	t.Helper()
	n, err := e.client.CoreV1().Nodes().Get(ctxFor(t, 30*time.Second), node, metav1.GetOptions{})
	require.NoError(t, err)
	for _, a := range n.Status.Addresses {
		if a.Type == corev1.NodeInternalIP && !strings.Contains(a.Address, ":") {
			return a.Address
		}
	}
	t.Fatalf("node %s has no IPv4 InternalIP", node)
	return ""
}

// kubeProxyTag is the tag of the kube-proxy image the tier found.
func (e *env) kubeProxyTag(t *testing.T) string {
	t.Helper()
	for _, c := range e.origDS.Spec.Template.Spec.Containers {
		if c.Name == name {
			repo, _, _ := strings.Cut(c.Image, "@")
			if i := strings.LastIndex(repo, ":"); i > strings.LastIndex(repo, "/") {
				return repo[i+1:]
			}
		}
	}
	t.Fatal("the kube-proxy image has no tag")
	return ""
}

// noProbePods waits until no probe pod of the traffic check is left.
func (e *env) noProbePods(t *testing.T) {
	t.Helper()
	var left []string
	err := wait.PollUntilContextTimeout(context.Background(), 500*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		list, err := e.client.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{LabelSelector: probeSelector})
		if err != nil {
			return false, nil
		}
		left = left[:0]
		for _, p := range list.Items {
			left = append(left, p.Name)
		}
		return len(left) == 0, nil
	})
	assert.NoError(t, err, "probe pods left behind: %v", left)
}

// iptablesRaw runs iptables -t raw with args inside the node container.
func (d docker) iptablesRaw(t *testing.T, node string, args []string) {
	t.Helper()
	out, err := exec.Command("docker", append([]string{"exec", node, "iptables", "-t", "raw"}, args...)...).CombinedOutput()
	require.NoError(t, err, "iptables -t raw %v on %s: %s", args, node, out)
}
