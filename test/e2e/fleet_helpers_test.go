//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/kube-proxy-sync/kube-proxy-sync/test/e2e/cluster"
)

// kwok manages (heartbeats, starts pods on) nodes carrying this annotation.
const kwokNodeAnnotation = "kwok.x-k8s.io/node"

// addNodes creates kwok-managed nodes, waits until the DaemonSet runs a
// Ready pod on each, and removes them (and their pods) when the test ends.
// Each test uses a prefix of its own: kwok remembers a deleted node's name.
func addNodes(t *testing.T, c *cluster.Cluster, prefix string, n int) []string {
	t.Helper()
	ctx := context.Background()
	var names []string
	for i := 0; i < n; i++ {
		name := fmt.Sprintf("%s-%02d", prefix, i)
		names = append(names, name)
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{
			Name:        name,
			Annotations: map[string]string{kwokNodeAnnotation: "fake"},
			Labels:      map[string]string{"kubernetes.io/os": "linux", "kubernetes.io/hostname": name, "type": "kwok"},
		}}
		_, err := c.Client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
		require.NoError(t, err)
	}
	t.Cleanup(func() { removeNodes(t, c, names) })
	c.WaitRolloutComplete(t, 3*time.Minute)
	require.Eventually(t, func() bool {
		uids := c.PodUIDs(t)
		for _, n := range names {
			if _, ok := uids[n]; !ok {
				return false
			}
		}
		return true
	}, 2*time.Minute, 200*time.Millisecond, "a kube-proxy pod on every new node")
	return names
}

func removeNodes(t *testing.T, c *cluster.Cluster, names []string) {
	ctx := context.Background()
	gone := map[string]bool{}
	for _, n := range names {
		gone[n] = true
		if err := c.Client.CoreV1().Nodes().Delete(ctx, n, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("delete node %s: %v", n, err)
		}
	}
	// nothing runs a kubelet there: force the pods away, as the pod GC would later
	pods, err := c.Client.CoreV1().Pods(c.Namespace).List(ctx, metav1.ListOptions{LabelSelector: "k8s-app=kube-proxy"})
	if err != nil {
		t.Errorf("list pods: %v", err)
		return
	}
	for _, p := range pods.Items {
		if gone[p.Spec.NodeName] {
			_ = c.Client.CoreV1().Pods(c.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To(int64(0))})
		}
	}
}

// unmanage drops the annotation kwok selects its nodes by (see
// hack/cluster/up.sh), so that kwok does not put back the node and pod
// statuses a test sets by hand.
func unmanage(t *testing.T, c *cluster.Cluster, node string) {
	t.Helper()
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:null}}}`, kwokNodeAnnotation)
	_, err := c.Client.CoreV1().Nodes().Patch(context.Background(), node, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
	require.NoError(t, err)
}

func taintToBeDeleted(t *testing.T, c *cluster.Cluster, node string) {
	t.Helper()
	patch := `{"spec":{"taints":[{"key":"ToBeDeletedByClusterAutoscaler","value":"1700000000","effect":"NoSchedule"}]}}`
	_, err := c.Client.CoreV1().Nodes().Patch(context.Background(), node, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
	require.NoError(t, err)
}

// setNodeReady sets the node's Ready condition and waits until it reads
// back the same several times in a row (kwok may have had one heartbeat in
// flight when it stopped managing the node).
func setNodeReady(t *testing.T, c *cluster.Cluster, node string, status corev1.ConditionStatus) {
	t.Helper()
	ctx := context.Background()
	stable := 0
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		n, err := c.Client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		for i := range n.Status.Conditions {
			cond := &n.Status.Conditions[i]
			if cond.Type != corev1.NodeReady {
				continue
			}
			if cond.Status == status {
				stable++
				return stable >= 5, nil
			}
			stable = 0
			cond.Status, cond.Reason, cond.LastTransitionTime = status, "KubeletStoppedPostingStatus", metav1.Now()
		}
		if _, err = c.Client.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{}); apierrors.IsConflict(err) {
			err = nil
		}
		return false, err
	})
	require.NoError(t, err)
}

// setPodUnready marks the kube-proxy pod on node not Ready, as kube-proxy's
// /healthz does on nodes being deleted (kwok must not manage the node).
func setPodUnready(t *testing.T, c *cluster.Cluster, node string) {
	t.Helper()
	ctx := context.Background()
	pods, err := c.Client.CoreV1().Pods(c.Namespace).List(ctx, metav1.ListOptions{LabelSelector: "k8s-app=kube-proxy", FieldSelector: "spec.nodeName=" + node})
	require.NoError(t, err)
	require.Len(t, pods.Items, 1)
	p := pods.Items[0]
	for i := range p.Status.Conditions {
		if p.Status.Conditions[i].Type == corev1.PodReady || p.Status.Conditions[i].Type == corev1.ContainersReady {
			p.Status.Conditions[i].Status = corev1.ConditionFalse
		}
	}
	_, err = c.Client.CoreV1().Pods(c.Namespace).UpdateStatus(ctx, &p, metav1.UpdateOptions{})
	require.NoError(t, err)
}

// setMaxUnavailable changes the DaemonSet's rolling update budget.
func setMaxUnavailable(t *testing.T, c *cluster.Cluster, v string) {
	t.Helper()
	val, _ := json.Marshal(v)
	if v == "1" {
		val = []byte("1")
	}
	patch := fmt.Sprintf(`{"spec":{"updateStrategy":{"type":"RollingUpdate","rollingUpdate":{"maxUnavailable":%s}}}}`, val)
	_, err := c.Client.AppsV1().DaemonSets(c.Namespace).Patch(context.Background(), "kube-proxy", types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{})
	require.NoError(t, err)
}

// denyKubeProxyPodsOn makes the API server refuse new kube-proxy pods for
// the given nodes (a ValidatingAdmissionPolicy on the DaemonSet controller's
// node affinity), so a restart there never comes back. Removed at the end,
// or earlier by the returned func.
func denyKubeProxyPodsOn(t *testing.T, c *cluster.Cluster, nodes ...string) (remove func()) {
	t.Helper()
	ctx := context.Background()
	quoted := make([]string, len(nodes))
	for i, n := range nodes {
		quoted[i] = fmt.Sprintf("'%s'", n)
	}
	expr := fmt.Sprintf(`!has(object.spec.affinity) || !has(object.spec.affinity.nodeAffinity) ||
		!has(object.spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution) ||
		!object.spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms.exists(t,
			has(t.matchFields) && t.matchFields.exists(f, f.values.exists(v, v in [%s])))`, strings.Join(quoted, ","))
	name := "e2e-deny-kube-proxy-" + strings.ToLower(strings.NewReplacer("/", "-", "_", "-").Replace(t.Name()))
	fail := admissionregistrationv1.Fail
	policy := &admissionregistrationv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: &fail,
			MatchConstraints: &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
				RuleWithOperations: admissionregistrationv1.RuleWithOperations{
					Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
					Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"}},
				},
			}}},
			Validations: []admissionregistrationv1.Validation{{Expression: expr, Message: "e2e: this node's kube-proxy never comes back"}},
		},
	}
	binding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{
			PolicyName:        name,
			ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny},
			MatchResources: &admissionregistrationv1.MatchResources{
				NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": c.Namespace}},
			},
		},
	}
	ar := c.Client.AdmissionregistrationV1()
	// the policy takes effect, and is gone, once the API server has seen
	// it: both are probed with a dry run of a pod for the first node
	admitted := func() (bool, error) {
		_, err := c.Client.CoreV1().Pods(c.Namespace).Create(ctx, admissionProbe(c, nodes[0]), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if apierrors.IsInvalid(err) || apierrors.IsForbidden(err) {
			return false, nil
		}
		return err == nil, err
	}
	remove = func() {
		_ = ar.ValidatingAdmissionPolicyBindings().Delete(ctx, name, metav1.DeleteOptions{})
		_ = ar.ValidatingAdmissionPolicies().Delete(ctx, name, metav1.DeleteOptions{})
		// the DaemonSet controller backs off after each refused pod: a
		// refusal after this returns would delay the node's pod by minutes
		err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) { return admitted() })
		assert.NoError(t, err, "admission policy never went away")
	}
	_, err := ar.ValidatingAdmissionPolicies().Create(ctx, policy, metav1.CreateOptions{})
	require.NoError(t, err)
	t.Cleanup(remove)
	_, err = ar.ValidatingAdmissionPolicyBindings().Create(ctx, binding, metav1.CreateOptions{})
	require.NoError(t, err)
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		ok, err := admitted()
		return !ok && err == nil, nil
	})
	require.NoError(t, err, "admission policy never took effect")
	return remove
}

// admissionProbe is a pod the DaemonSet controller would make for node, for a dry
// run through admission.
func admissionProbe(c *cluster.Cluster, node string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "e2e-admission-probe-", Namespace: c.Namespace},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{Name: "x", Image: "x"}},
			Affinity: &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
				NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchFields: []corev1.NodeSelectorRequirement{{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{node}}}}},
			}}},
		},
	}
}
