package rollout

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kube-proxy-sync/kube-proxy-sync/internal/nodes"
)

func node(name string, l map[string]string) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: l}}
}

func TestKeepOffPoolsAndOnPool(t *testing.T) {
	linux := corev1.NodeSelectorRequirement{Key: "kubernetes.io/arch", Operator: corev1.NodeSelectorOpIn, Values: []string{"amd64"}}
	for name, spec := range map[string]corev1.PodSpec{
		"no affinity": {},
		"two terms": {Affinity: &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
			NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{linux}}, {MatchFields: []corev1.NodeSelectorRequirement{{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{"a", "b", "p"}}}}},
		}}}},
	} {
		t.Run(name, func(t *testing.T) {
			plain := node("a", map[string]string{"kubernetes.io/arch": "amd64"})
			pooled := node("p", map[string]string{"kubernetes.io/arch": "amd64", PoolLabel: "rhel8"})
			require.False(t, KeepsOffPools(&spec))
			base := spec.DeepCopy()
			KeepOffPools(base)
			assert.True(t, KeepsOffPools(base))
			again := base.DeepCopy()
			KeepOffPools(again)
			assert.Equal(t, base, again, "once")
			assert.True(t, nodes.Runs(base)(plain))
			assert.False(t, nodes.Runs(base)(pooled), "kept off a pool's node")

			pool := spec.DeepCopy()
			OnPool(pool, "rhel8")
			assert.False(t, nodes.Runs(pool)(plain), "a pool runs on its nodes only")
			assert.True(t, nodes.Runs(pool)(pooled))
			other := spec.DeepCopy()
			OnPool(other, "gpu")
			assert.False(t, nodes.Runs(other)(pooled), "nor on another pool's")
		})
	}
}

// --template kubeadm replaces the whole template: kubeadm's has no such
// affinity, and dropping it would put a second kube-proxy on each pool
// node.
func TestOwnTemplateKeepsTheDaemonSetOffThePools(t *testing.T) {
	live := &appsv1.DaemonSet{Spec: appsv1.DaemonSetSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
		Containers: []corev1.Container{{Name: "kube-proxy", Image: "old"}},
	}}}}
	rendered := live.Spec.Template.DeepCopy()
	rendered.Spec.Containers[0].Image = "new"
	own, err := OwnTemplate(rendered, live, "kube-proxy", "")
	require.NoError(t, err)
	assert.False(t, KeepsOffPools(&own.Spec), "nothing added where the live one has none")

	KeepOffPools(&live.Spec.Template.Spec)
	own, err = OwnTemplate(rendered, live, "kube-proxy", "")
	require.NoError(t, err)
	assert.True(t, KeepsOffPools(&own.Spec))
	assert.False(t, KeepsOffPools(&rendered.Spec), "kubeadm's rendering untouched")
}
