//go:build e2e

package realnode

import (
	"fmt"
	"net/url"
	"testing"
	"time"

	"github.com/kube-proxy-sync/kube-proxy-sync/test/e2e/cluster"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
)

// The connectivity checks on real kube-proxies: a healthy restart passes
// both (kube-proxy's /healthz shows a sync after the restart; a TCP
// connection from each node to the API server's own Service ClusterIP).
func TestConnectivityChecksPassOnAHealthyRestart(t *testing.T) {
	e := connect(t)
	r := e.sync(t, "--restart", "always", "--verify-health", "required",
		"--verify-traffic", "default/kubernetes")
	require.Equal(t, 0, r.code, "healthy restart with checks: %s", r)
	nodes := len(e.podUIDs(t))
	assert.EqualValues(t, nodes, r.field("connectivity.baseline"), "%s", r)
	assert.EqualValues(t, nodes, r.field("connectivity.checked"), "%s", r)
	assert.EqualValues(t, nodes, r.field("connectivity.passed"), "%s", r)
	assert.Empty(t, r.field("connectivity.failed"), "%s", r)
}

// The negative control: a Service whose only endpoint is a closed port on
// the control plane's own address (inside the cluster's network). Every
// kube-proxy pod is Ready and healthy, yet the traffic check, a real TCP
// connection from the node through the rules kube-proxy programmed, fails
// the canary node, and the rollout stops there (--no-rollback, so the other
// nodes' pods are seen untouched rather than rolled back).
func TestConnectivityCheckCatchesWhatReadinessMisses(t *testing.T) {
	e := connect(t)
	svc := e.closedService(t, e.controlPlaneAddressServer(t), 6444)
	before := e.podUIDs(t)
	r := e.sync(t, "--restart", "always", "--strategy", "canary", "--canary-nodes", "1",
		"--verify-health", "required", "--verify-traffic", namespace+"/"+svc, "--verify-traffic-timeout", "20s", "--no-rollback")
	require.Equal(t, 1, r.code, "the traffic check must fail: %s", r)
	failed, _ := r.field("connectivity.failed").([]any)
	require.Len(t, failed, 1, "the canary node failed the check: %s", r)
	node := fmt.Sprint(failed[0].(map[string]any)["node"])
	assert.EqualValues(t, 1, r.field("connectivity.checked"), "only the canary node was checked: %s", r)
	p, ok := e.pods(t, ctxFor(t, 30*time.Second))[node]
	require.True(t, ok)
	assert.True(t, cluster.PodReady(&p), "readiness passes the node the traffic check failed: %s", e.describePods(t))
	after := e.podUIDs(t)
	for other, uid := range before {
		if other != node {
			assert.Equal(t, uid, after[other], "node %s: the failed canary stopped the rollout before it", other)
		}
	}
}

// closedService creates a selector-less Service in kube-system whose one
// endpoint is server's host on port, where nothing listens: inside the
// cluster's network.
func (e *env) closedService(t *testing.T, server string, port int32) string {
	t.Helper()
	u, err := url.Parse(server)
	require.NoError(t, err)
	host := u.Hostname()
	const svcName = "kps-closed"
	ctx := ctxFor(t, 30*time.Second)
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: svcName, Namespace: namespace},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{
			Name: "closed", Port: 80, TargetPort: intstr.FromInt32(port), Protocol: corev1.ProtocolTCP,
		}}},
	}
	made, err := e.client.CoreV1().Services(namespace).Create(ctx, svc, metav1.CreateOptions{})
	require.NoError(t, err)
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: svcName, Namespace: namespace,
			Labels: map[string]string{discoveryv1.LabelServiceName: svcName}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{host}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}}},
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("closed"), Port: ptr.To(port), Protocol: ptr.To(corev1.ProtocolTCP)}},
	}
	_, err = e.client.DiscoveryV1().EndpointSlices(namespace).Create(ctx, slice, metav1.CreateOptions{})
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx := ctxFor(t, 30*time.Second)
		_ = e.client.DiscoveryV1().EndpointSlices(namespace).Delete(ctx, svcName, metav1.DeleteOptions{})
		_ = e.client.CoreV1().Services(namespace).Delete(ctx, svcName, metav1.DeleteOptions{})
	})
	e.waitProgrammed(t, made.Spec.ClusterIP)
	return svcName
}
