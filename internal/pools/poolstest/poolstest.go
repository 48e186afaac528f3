// Package poolstest plays the DaemonSet controller for tests of node moves
// between kube-proxy DaemonSets (internal/pools) on a fake clientset.
package poolstest

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"

	"github.com/kube-proxy-sync/kube-proxy-sync/internal/nodes"
)

// DaemonSets plays the DaemonSet controller on node patches: after each,
// the node runs a pod (DAEMONSET-NODE) of every DaemonSet whose template it
// matches, Ready unless unready names the DaemonSet, and none of the
// others'. On the tracker, not the client: a reactor holds the fake's lock.
func DaemonSets(t *testing.T, c *fake.Clientset, unready map[string]bool, dss ...*appsv1.DaemonSet) {
	nodesGVR := corev1.SchemeGroupVersion.WithResource("nodes")
	podsGVR := corev1.SchemeGroupVersion.WithResource("pods")
	c.PrependReactor("patch", "nodes", func(a k8stesting.Action) (bool, runtime.Object, error) {
		p := a.(k8stesting.PatchActionImpl)
		obj, err := c.Tracker().Get(nodesGVR, "", p.Name)
		require.NoError(t, err)
		n := obj.(*corev1.Node).DeepCopy()
		var patch struct {
			Metadata struct {
				Labels map[string]*string `json:"labels"`
			} `json:"metadata"`
		}
		require.NoError(t, json.Unmarshal(p.Patch, &patch))
		if n.Labels == nil {
			n.Labels = map[string]string{}
		}
		for k, v := range patch.Metadata.Labels {
			if v == nil {
				delete(n.Labels, k)
			} else {
				n.Labels[k] = *v
			}
		}
		require.NoError(t, c.Tracker().Update(nodesGVR, n, ""))
		for _, ds := range dss {
			name := ds.Name + "-" + n.Name
			_, err := c.Tracker().Get(podsGVR, ds.Namespace, name)
			switch runs := nodes.Runs(&ds.Spec.Template.Spec)(n); {
			case !runs && err == nil:
				require.NoError(t, c.Tracker().Delete(podsGVR, ds.Namespace, name))
			case runs && err != nil:
				require.NoError(t, c.Tracker().Create(podsGVR, KubeProxyPod(name, n.Name, ds, !unready[ds.Name]), ds.Namespace))
			}
		}
		return true, n, nil
	})
}

// KubeProxyPod is ds's pod name on node, Ready or not.
func KubeProxyPod(name, node string, ds *appsv1.DaemonSet, ready bool) *corev1.Pod {
	status := map[bool]corev1.ConditionStatus{true: corev1.ConditionTrue, false: corev1.ConditionFalse}[ready]
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ds.Namespace, UID: types.UID(name),
		OwnerReferences: []metav1.OwnerReference{{Kind: "DaemonSet", Name: ds.Name, UID: ds.UID, Controller: ptr.To(true)}}},
		Spec:   corev1.PodSpec{NodeName: node},
		Status: corev1.PodStatus{Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: status}}}}
}
