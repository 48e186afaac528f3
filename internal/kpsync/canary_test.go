package kpsync

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	k8stesting "k8s.io/client-go/testing"

	"github.com/kube-proxy-sync/kube-proxy-sync/internal/configmap"
)

var podsGVR = corev1.SchemeGroupVersion.WithResource("pods")

// foreignPod carries the DaemonSet's labels on node, generation label gen
// ("" for none), but is not the DaemonSet's: no controller ownerReference,
// like a debug copy of a kube-proxy pod or a sidecar that borrowed its labels.
func foreignPod(name, node, gen string) *corev1.Pod {
	p := kubeProxyPod(node, gen, true)
	p.Name, p.UID, p.OwnerReferences = name, types.UID(name), nil
	if gen == "" {
		delete(p.Labels, "pod-template-generation")
	}
	return p
}

// podUID is the UID of pod name, "" if it is gone.
func (f *rollingFixture) podUID(t *testing.T, name string) types.UID {
	t.Helper()
	obj, err := f.client.Tracker().Get(podsGVR, "kube-system", name)
	if apierrors.IsNotFound(err) {
		return ""
	}
	require.NoError(t, err)
	return obj.(*corev1.Pod).UID
}

// updateDaemonSet changes the DaemonSet in the fake before the run.
func (f *rollingFixture) updateDaemonSet(t *testing.T, change func(ds *appsv1.DaemonSet)) {
	t.Helper()
	ds := f.daemonSet(t)
	change(ds)
	require.NoError(t, f.client.Tracker().Update(appsv1.SchemeGroupVersion.WithResource("daemonsets"), ds, "kube-system"))
}

// podController stands in for the DaemonSet controller under OnDelete: a
// pod deleted is gone, and one of the DaemonSet's own is followed by
// replacement(node, gen), gen being the DaemonSet's template generation
// then (nil: none). Deletions from before the run's first pod watch are
// carried out once it is open: the fake's watch, unlike the API server's,
// does not replay what happened since the list.
func (f *rollingFixture) podController(t *testing.T, replacement func(node, gen string) *corev1.Pod) {
	var mu sync.Mutex
	watching := false
	var held []string
	apply := func(name string) {
		obj, err := f.client.Tracker().Get(podsGVR, "kube-system", name)
		if err != nil {
			return
		}
		p := obj.(*corev1.Pod)
		assert.NoError(t, f.client.Tracker().Delete(podsGVR, "kube-system", name))
		if ref := metav1.GetControllerOf(p); ref == nil || ref.UID != dsUID {
			return
		}
		ds, err := f.client.Tracker().Get(appsv1.SchemeGroupVersion.WithResource("daemonsets"), "kube-system", "kube-proxy")
		if !assert.NoError(t, err) {
			return
		}
		if next := replacement(p.Spec.NodeName, ds.(*appsv1.DaemonSet).Annotations["deprecated.daemonset.template.generation"]); next != nil {
			assert.NoError(t, f.client.Tracker().Create(podsGVR, next, "kube-system"))
		}
	}
	f.client.PrependReactor("delete", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		name := a.(k8stesting.DeleteAction).GetName()
		mu.Lock()
		if !watching {
			held = append(held, name)
			mu.Unlock()
			return true, nil, nil
		}
		mu.Unlock()
		apply(name)
		return true, nil, nil
	})
	go func() {
		<-f.podWatches
		mu.Lock()
		watching = true
		names := held
		held = nil
		mu.Unlock()
		for _, n := range names {
			apply(n)
		}
	}()
}

// A pod with the DaemonSet's labels that the DaemonSet does not control
// never holds its node: a good rolling restart completes (and is not
// rolled back fleet-wide), and the foreign pod is untouched.
func TestRollingRestartIgnoresForeignPods(t *testing.T) {
	f := newRollingFixture(t, 5)
	require.NoError(t, f.client.Tracker().Add(foreignPod("kube-proxy-debug", "node-0", "")))
	go func() {
		w := <-f.watches
		for i := range f.n {
			f.replace(t, kubeProxyPod(fmt.Sprintf("node-%d", i), "2", true))
		}
		w.Modify(f.status("302", 5, 5))
	}()
	res, err := f.run(t, Options{Spec: configmap.Spec{Server: "https://10.0.0.1:6443"}, RollbackOnFailure: true, Timeout: 10 * time.Second})
	require.NoError(t, err)
	assert.False(t, res.Facts.RolledBack)
	r := res.Facts.Rollout
	assert.Equal(t, [3]int32{5, 5, 5}, [3]int32{r.Desired, r.Updated, r.Available}, "the DaemonSet's pods only")
	assert.Equal(t, types.UID("kube-proxy-debug"), f.podUID(t, "kube-proxy-debug"))
	assert.Zero(t, f.count("watch", "pods"), "the status, confirmed by the pods, sufficed")
}

// The canary replaces the DaemonSet's own pods only: a copy of the canary
// node's kube-proxy pod, labels and all, is never deleted and never holds
// the node.
func TestCanaryLeavesForeignPodsAlone(t *testing.T) {
	f := newRollingFixture(t, 3)
	require.NoError(t, f.client.Tracker().Add(foreignPod("kube-proxy-debug", "node-0", "1")))
	f.podController(t, func(node, gen string) *corev1.Pod { return kubeProxyPod(node, gen, true) })
	res, err := f.run(t, Options{Spec: configmap.Spec{Server: "https://10.0.0.1:6443"}, RollbackOnFailure: true,
		Strategy: StrategyCanary, CanaryNodes: 1, Timeout: 10 * time.Second})
	require.NoError(t, err)
	assert.Equal(t, []string{"node-0"}, res.Facts.Rollout.CanaryNodes)
	assert.Equal(t, types.UID("kube-proxy-debug"), f.podUID(t, "kube-proxy-debug"), "the canary deleted a pod not the DaemonSet's")
	for i := range f.n {
		node := fmt.Sprintf("node-%d", i)
		assert.Empty(t, f.podUID(t, "kube-proxy-"+node+"-1"), "old pod on %s replaced", node)
		assert.Equal(t, types.UID(node+"-2"), f.podUID(t, "kube-proxy-"+node+"-2"))
	}
	assert.Equal(t, appsv1.RollingUpdateDaemonSetStrategyType, f.daemonSet(t).Spec.UpdateStrategy.Type, "strategy restored")
}

// A rollback to OnDelete deletes the failed template's pods, the
// DaemonSet's own only: a foreign pod whose label claims the new template
// generation stays.
func TestRollbackToOnDeleteLeavesForeignPodsAlone(t *testing.T) {
	f := newRollingFixture(t, 3)
	f.updateDaemonSet(t, func(ds *appsv1.DaemonSet) {
		ds.Spec.UpdateStrategy = appsv1.DaemonSetUpdateStrategy{Type: appsv1.OnDeleteDaemonSetStrategyType}
	})
	require.NoError(t, f.client.Tracker().Add(foreignPod("kube-proxy-claims-2", "node-2", "2")))
	f.podController(t, func(node, gen string) *corev1.Pod {
		if gen != "2" {
			return kubeProxyPod(node, gen, true) // the rolled-back template
		}
		return crashLoopingPod(node, gen) // the new template cannot run
	})
	res, err := f.run(t, Options{Spec: configmap.Spec{Server: "https://10.0.0.1:6443"}, RollbackOnFailure: true,
		Strategy: StrategyCanary, CanaryNodes: 1, Timeout: 10 * time.Second})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "rolled back")
	require.True(t, res.Facts.RolledBack)
	assert.Equal(t, appsv1.OnDeleteDaemonSetStrategyType, f.daemonSet(t).Spec.UpdateStrategy.Type, "the DaemonSet's own strategy")
	assert.Empty(t, f.podUID(t, "kube-proxy-node-0-2"), "the canary's broken pod deleted by the rollback")
	assert.Equal(t, types.UID("kube-proxy-claims-2"), f.podUID(t, "kube-proxy-claims-2"), "the rollback deleted a pod not the DaemonSet's")
	assert.Equal(t, types.UID("node-1-1"), f.podUID(t, "kube-proxy-node-1-1"), "pods never restarted stay")
}

func TestBatchSize(t *testing.T) {
	ds := func(mu *intstr.IntOrString) *appsv1.DaemonSet {
		d := &appsv1.DaemonSet{}
		if mu != nil {
			d.Spec.UpdateStrategy.RollingUpdate = &appsv1.RollingUpdateDaemonSet{MaxUnavailable: mu}
		}
		return d
	}
	ten := intstr.FromString("10%")
	three := intstr.FromInt32(3)
	cases := []struct {
		name string
		flag string
		ds   *appsv1.DaemonSet
		live int
		want int
	}{
		{"default without rollingUpdate is 1", "", ds(nil), 50, 1},
		{"the DaemonSet's maxUnavailable", "", ds(&three), 50, 3},
		{"a percentage of live nodes, rounded up", "", ds(&ten), 45, 5},
		{"flag wins", "5", ds(&three), 50, 5},
		{"flag percentage", "20%", ds(&three), 50, 10},
		{"never zero", "1%", ds(nil), 10, 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := batchSize(tc.flag, tc.ds, tc.live)
			assert.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
}
