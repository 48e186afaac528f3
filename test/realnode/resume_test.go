//go:build e2e

package realnode

import (
	"context"
	"os/exec"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/kube-proxy-sync/kube-proxy-sync/internal/kpsync"
	"github.com/kube-proxy-sync/kube-proxy-sync/test/e2e/cluster"
)

// A migration killed (SIGKILL) once its canary runs the new mode is
// resumed as a migration by the next run of the same command: the pods
// of the older template run another mode than the template's, and that
// is all the next run needs to know. It keeps the canary's pod, replaces
// the other nodes' pods with every check of a migration (health required,
// traffic through the run's own Service), and deletes the Service the
// killed run left. Then every node runs nftables mode (/configz) and no
// Service or probe pod is left.
func TestProxyModeMigrationKilledIsResumed(t *testing.T) {
	e := connect(t)
	d := e.dockerOrSkip(t)
	cp, _ := e.nodeNames(t)
	d.endsInIPTablesMode(t, cp)
	args := []string{"--set", "mode=nftables", "--set", "metricsBindAddress=0.0.0.0:10249", "--timeout", "8m"}
	before := e.podUIDs(t)

	// the first run, killed once a new pod is Ready on one node
	canary, canaryPod := e.killWhenANewPodIsReady(t, before, args...)
	_, err := e.client.CoreV1().Services(namespace).Get(ctxFor(t, 30*time.Second), kpsync.ProbeServiceName, metav1.GetOptions{})
	require.NoError(t, err, "the killed run left its own Service")
	mid := e.podUIDs(t)
	for n, uid := range before {
		if n != canary {
			require.Equal(t, uid, mid[n], "node %s: the killed run had not reached it", n)
		}
	}

	// the same command again
	r := e.sync(t, args...)
	require.Equal(t, 0, r.code, "the rerun: %s", r)
	assert.Equal(t, true, r.field("migration.resumed"), "%s", r)
	assert.Equal(t, "iptables", r.field("migration.from"), "%s", r)
	assert.Equal(t, "nftables", r.field("migration.to"), "%s", r)
	assert.Equal(t, "required", r.field("connectivity.mode"), "%s", r)
	assert.Equal(t, namespace+"/"+kpsync.ProbeServiceName, r.field("connectivity.traffic"), "%s", r)
	// the canary too: its kube-proxy restarted before the rerun made its
	// Service, so its check waits until that kube-proxy has it in its
	// rules (an earlier connection would leave the node unrouted: the
	// kind tier's egress check counts those)
	assert.EqualValues(t, len(before), r.field("connectivity.checked"), "every node checked: %s", r)
	assert.EqualValues(t, len(before), r.field("connectivity.passed"), "%s", r)
	assert.Empty(t, r.field("connectivity.failed"), "%s", r)
	after := e.podUIDs(t)
	assert.Equal(t, canaryPod, after[canary], "canary %s: its pod runs the new mode already, kept", canary)
	for n, uid := range before {
		if n != canary {
			assert.NotEqual(t, uid, after[n], "node %s: its old pod replaced", n)
		}
		mode, _ := runningValue(e.configz(t, n), "mode")
		assert.Equal(t, "nftables", mode, "node %s: kube-proxy's own /configz", n)
	}
	_, err = e.client.CoreV1().Services(namespace).Get(ctxFor(t, 30*time.Second), kpsync.ProbeServiceName, metav1.GetOptions{})
	assert.True(t, apierrors.IsNotFound(err), "the killed run's Service is gone: %v", err)
	e.noProbePods(t)
}

// killWhenANewPodIsReady starts kube-proxy-sync with args and kills it
// (SIGKILL) as soon as a kube-proxy pod that is not one of before is
// Ready: it returns that pod's node and UID.
func (e *env) killWhenANewPodIsReady(t *testing.T, before map[string]types.UID, args ...string) (string, types.UID) {
	t.Helper()
	old := map[types.UID]bool{}
	for _, uid := range before {
		old[uid] = true
	}
	type newPod struct {
		node string
		uid  types.UID
	}
	ready := make(chan newPod, 1)
	pods := e.client.CoreV1().Pods(namespace)
	stop := cluster.Follow(t, func(ctx context.Context) (watch.Interface, error) {
		return pods.Watch(ctx, metav1.ListOptions{LabelSelector: podSelector})
	}, func(_ context.Context, _ watch.EventType, p *corev1.Pod) {
		if !old[p.UID] && p.DeletionTimestamp == nil && p.Spec.NodeName != "" && cluster.PodReady(p) {
			select {
			case ready <- newPod{p.Spec.NodeName, p.UID}:
			default:
			}
		}
	})
	defer stop()
	cmd := exec.Command(e.bin, append([]string{"--kubeconfig", e.kubeconfig, "--output", "json"}, args...)...)
	require.NoError(t, cmd.Start())
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	select {
	case p := <-ready:
		require.NoError(t, cmd.Process.Kill())
		<-exited
		return p.node, p.uid
	case err := <-exited:
		t.Fatalf("the run ended before any new pod was Ready: %v", err)
	case <-time.After(rolloutTimeout):
		_ = cmd.Process.Kill()
		<-exited
		t.Fatalf("no new kube-proxy pod Ready within %s", rolloutTimeout)
	}
	return "", ""
}
