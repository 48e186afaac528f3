//go:build e2e

package realnode

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// A config kube-proxy accepts but cannot run with crash-loops the real pod
// the rollout restarts first; the run stops there and rolls back on its own:
// the template is put back (the record was never written), the crashed node gets a
// Ready kube-proxy of the old template, and every other node keeps the pod
// it had. conntrack.maxPerCore=32768 is valid (kube-proxy's validation and
// ours accept it), but kube-proxy exits when it cannot raise the node's
// conntrack table, which a kind node's read-only /proc/sys/net refuses.
func TestCrashLoopOnARealKubeletRollsBack(t *testing.T) {
	for _, strategy := range [][]string{
		{"--strategy", "rolling"},
		{"--strategy", "canary", "--canary-nodes", "1"},
	} {
		t.Run(strategy[1], func(t *testing.T) {
			e := connect(t)
			before := e.podUIDs(t)
			require.GreaterOrEqual(t, len(before), 2, "needs two nodes to show untouched ones")

			pw := e.watchPods(t)
			args := append([]string{"--set", "conntrack.maxPerCore=32768", "--progress-deadline", "3m"}, strategy...)
			r := e.sync(t, args...)
			seen := pw.stop()
			// pods restarted by this run only: one there before may carry an
			// earlier test's crash in its last termination state
			crashed := map[string]map[types.UID]bool{}
			for node, uids := range pw.crashedPods() {
				for uid := range uids {
					if uid != before[node] {
						if crashed[node] == nil {
							crashed[node] = map[types.UID]bool{}
						}
						crashed[node][uid] = true
					}
				}
			}

			require.Equal(t, 1, r.code, "a crash-looping kube-proxy must fail the run: %s", r)
			assert.Equal(t, true, r.field("rolled_back"), "the run rolls back by default: %s", r)
			require.NotEmpty(t, crashed, "the control: a real kube-proxy crashed on the new config: %s", e.describePods(t))

			cm, err := e.client.CoreV1().ConfigMaps(namespace).Get(ctxFor(t, 30*time.Second), name, metav1.GetOptions{})
			require.NoError(t, err)
			assert.Equal(t, e.origCM.Data, cm.Data, "the rollback puts the ConfigMap data back")

			// The kubelet replaces the crashed pod with one of the old
			// template; it must be Ready, and every node not restarted keeps
			// its pod.
			e.waitRolledOut(t, ctxFor(t, rolloutTimeout))
			after := e.podUIDs(t)
			var replaced []string
			for node, uid := range before {
				if after[node] != uid {
					replaced = append(replaced, node)
					assert.Contains(t, crashed, node, "node %s: only the node that crashed was restarted", node)
				}
			}
			assert.Len(t, replaced, len(crashed), "exactly the crashed nodes were replaced, the others untouched: seen %v", seen)
			assert.Less(t, len(replaced), len(before), "the rollout stopped before reaching every node")
			pods := e.pods(t, ctxFor(t, 30*time.Second))
			for _, node := range replaced {
				p := pods[node]
				assert.NotContains(t, crashed[node], p.UID, "node %s: the pod now running is not the crashed one", node)
				for _, cs := range p.Status.ContainerStatuses {
					assert.Zero(t, cs.RestartCount, "node %s: the pod of the old template runs without restarts", node)
				}
			}
			assert.Contains(t, fmt.Sprint(r.field("msg")), "CrashLoopBackOff", "the error says why: %s", r)

			// no node is left on the crashing config, whatever restarts its
			// kube-proxy later: each one killed comes back Ready in its pod
			// (the config that crashes would crash-loop it)
			e.dockerOrSkip(t)
			for node, uid := range e.podUIDs(t) {
				e.killKubeProxy(t, node, uid)
			}
		})
	}
}
