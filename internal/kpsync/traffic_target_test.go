package kpsync

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kube-proxy-sync/kube-proxy-sync/internal/kube/kubefake"
	"github.com/kube-proxy-sync/kube-proxy-sync/internal/verify"
)

// The traffic check's target: the ClusterIP and the first TCP port, its
// node port for the nodeport path (refused, before any write, on a Service
// that has none), and the node's InternalIP of the ClusterIP's family.
func TestTrafficTargetPaths(t *testing.T) {
	web := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort, ClusterIP: "10.96.0.10",
			Ports: []corev1.ServicePort{{Port: 80, NodePort: 30080, Protocol: corev1.ProtocolTCP}}}}
	plain := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "plain", Namespace: "default"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP, ClusterIP: "10.96.0.11",
			Ports: []corev1.ServicePort{{Port: 443, Protocol: corev1.ProtocolTCP}}}}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1"}, Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{
		{Type: corev1.NodeHostName, Address: "node-1"}, {Type: corev1.NodeInternalIP, Address: "fd00::7"},
		{Type: corev1.NodeInternalIP, Address: "192.0.2.7"}}}}
	_, kc := kubefake.New(web, plain, node)
	o := ConnectivityOptions{Traffic: "default/web", TrafficPaths: []string{verify.PathNode, verify.PathNodePort}}
	e := &env{o: Options{Namespace: "kube-system", Connectivity: o}, d: Deps{Kube: kc}}

	tr, err := trafficTarget(context.Background(), e, o)
	require.NoError(t, err)
	assert.Equal(t, "10.96.0.10:80", tr.Target)
	assert.Equal(t, int32(30080), tr.NodePort)
	assert.Equal(t, []string{verify.PathNode, verify.PathNodePort}, tr.PathsChecked())
	ip, err := tr.NodeIP(context.Background(), "node-1")
	require.NoError(t, err)
	assert.Equal(t, "192.0.2.7", ip, "the InternalIP of the ClusterIP's family")

	o.Traffic = "default/plain"
	_, err = trafficTarget(context.Background(), e, o)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "--verify-traffic-paths nodeport: service default/plain (type ClusterIP) has no node port on its TCP port 443")

	o.TrafficPaths = []string{verify.PathNode}
	_, err = trafficTarget(context.Background(), e, o)
	assert.NoError(t, err, "no nodeport path: any Service with a ClusterIP")
}
