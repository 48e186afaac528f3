//go:build e2e

package realnode

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// restartPodsOlderThanTheRecord deletes every kube-proxy pod that mounts
// the record and was made before the record's last write (the latest time
// of its managedFields), so that the next test starts from pods that run
// what the record holds: kube-proxy-sync cannot tell what such a pod runs
// and judges it as the riskiest case (docs/design.md). It reports whether
// it deleted any; the caller waits for the rollout.
func (e *env) restartPodsOlderThanTheRecord(t *testing.T, ctx context.Context) bool {
	t.Helper()
	cm, err := e.client.CoreV1().ConfigMaps(namespace).Get(ctx, name, metav1.GetOptions{})
	require.NoError(t, err)
	written := cm.CreationTimestamp.Time
	for _, f := range cm.ManagedFields {
		if f.Time != nil && f.Time.After(written) {
			written = f.Time.Time
		}
	}
	deleted := false
	for node, p := range e.pods(t, ctx) {
		if !p.CreationTimestamp.Time.Before(written) || !mountsRecord(p) {
			continue
		}
		t.Logf("node %s: kube-proxy pod %s was made before the record's last write (%s): deleted, so the next test starts on what the record holds", node, p.Name, written.Format(time.RFC3339))
		require.NoError(t, e.client.CoreV1().Pods(namespace).Delete(ctx, p.Name, metav1.DeleteOptions{}))
		deleted = true
	}
	return deleted
}

// mountsRecord: the pod mounts the record itself (kubeadm's layout).
func mountsRecord(p corev1.Pod) bool {
	for _, v := range p.Spec.Volumes {
		if v.ConfigMap != nil && v.ConfigMap.Name == name {
			return true
		}
	}
	return false
}
