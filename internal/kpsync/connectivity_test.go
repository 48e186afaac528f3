package kpsync

import (
	"context"
	"fmt"
	"github.com/kube-proxy-sync/kube-proxy-sync/internal/kube/kubefake"
	"github.com/kube-proxy-sync/kube-proxy-sync/internal/verify"
	"github.com/sirupsen/logrus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"io"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"
	"sync"
	"testing"
	"time"
)

// proberFunc answers /healthz for a node.
type proberFunc func(node string) (verify.Health, error)

func (f proberFunc) Healthz(_ context.Context, node string) (verify.Health, error) { return f(node) }

// Nodes that finished are checked before the rollout goes on; one whose
// kube-proxy never syncs after the restart stops it, though its pod is Ready.
func TestCheckDoneStopsOnAFailingNode(t *testing.T) {
	log := logrus.New()
	log.SetOutput(io.Discard)
	restart := time.Now()
	asked := map[string]int{}
	var mu sync.Mutex
	prober := proberFunc(func(node string) (verify.Health, error) {
		mu.Lock()
		defer mu.Unlock()
		asked[node]++
		now := time.Now()
		switch {
		case node == "kwok-0":
			return verify.Health{}, fmt.Errorf("HTTP 400 from the API server, not kube-proxy's answer: address not allowed")
		case asked[node] == 1: // the baseline
			return verify.Health{Code: 200, PerFamily: true, LastSync: restart.Add(-time.Minute), CurrentTime: now}, nil
		case node == "b": // Ready, but no sync since its restart
			return verify.Health{Code: 200, PerFamily: true, LastSync: restart.Add(-time.Minute), CurrentTime: now}, nil
		}
		return verify.Health{Code: 200, PerFamily: true, LastSync: now, CurrentTime: now}, nil
	})
	o := ConnectivityOptions{Health: verify.Auto, HealthTimeout: 30 * time.Millisecond}
	e := &env{
		o: Options{Connectivity: o},
		d: Deps{Log: logrus.NewEntry(log), Clock: clock.RealClock{}, NodeProxy: func(port int) (verify.Prober, error) {
			assert.Equal(t, 10256, port)
			return prober, nil
		}},
		warns: &warnings{log: logrus.NewEntry(log)},
	}
	fleet := newDoneFleet(t, "a", "b", "c", "kwok-0")
	conn, err := baseline(context.Background(), e, o, fleet.Live(), 10256)
	require.NoError(t, err)
	conn.markRestart(restart)

	rl := &rolling{e: e, fleet: fleet, conn: conn}
	err = rl.checkDone(context.Background())
	require.Error(t, err)
	assert.True(t, verify.IsFailure(err))
	assert.Contains(t, err.Error(), "node b")
	assert.Equal(t, 0, asked["c"]-1, "checked in name order: c waits behind the failed b")
	assert.Equal(t, 1, asked["kwok-0"], "unreachable before: asked once, never after")
	r := rl.out.connectivity
	require.NotNil(t, r)
	assert.Equal(t, 2, r.Checked)
	assert.Equal(t, 1, r.Passed)
	assert.Equal(t, "kwok-0", r.Unreachable[0].Node)
}

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
