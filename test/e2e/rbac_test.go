//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/scheme"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/yaml"

	"github.com/kube-proxy-sync/kube-proxy-sync/internal/kube/kubeperm"
	"github.com/kube-proxy-sync/kube-proxy-sync/internal/rollout"
	"github.com/kube-proxy-sync/kube-proxy-sync/test/e2e/cluster"
)

// rbacSubject is who roles/kpsync/files/rbac.yaml grants to.
const rbacSubject = "kube-proxy-sync"

// rbacObjects are the objects of rbac.yaml.
type rbacObjects struct {
	role               *rbacv1.Role
	roleBinding        *rbacv1.RoleBinding
	clusterRole        *rbacv1.ClusterRole
	clusterRoleBinding *rbacv1.ClusterRoleBinding
}

// The binary runs as a user bound only to rbac.yaml: a change (the copy of
// the new config, restart, probe fix, rollout wait, the ConfigMap write
// after it) succeeds. Then, one permission at a time taken away, a run
// fails before its first write, and the error names the verb and the
// resource it lacked.
func TestLeastPrivilegeRBAC(t *testing.T) {
	c := cluster.Connect(t)
	c.Reset(t)
	objs := loadRBAC(t, c)
	applyRBAC(t, c, objs)
	t.Cleanup(func() { deleteRBAC(t, c, objs) })
	for _, p := range requiredPermissions(t) {
		waitAccess(t, c, p, true)
	}
	// the admin kubeconfig, impersonating the unprivileged user and group
	kubeconfig := kubeconfigCopy(t, c, func(cfg *clientcmdapi.Config, cur *clientcmdapi.Context) {
		ai := cfg.AuthInfos[cur.AuthInfo]
		ai.Impersonate, ai.ImpersonateGroups = rbacSubject, []string{rbacSubject}
	})
	run := func(t *testing.T, server string) cliRun {
		t.Helper()
		return runCLI(t, "--kubeconfig", kubeconfig, "--output", "json", "--timeout", "2m", "--server", server)
	}

	t.Run("a change succeeds with rbac.yaml alone", func(t *testing.T) {
		before := c.PodUIDs(t)
		r := run(t, "https://10.96.0.11:6443")
		require.Equal(t, 0, r.Code, "msg: %s\nstderr: %s", r.Msg, r.Stderr)
		f := r.facts()
		assert.True(t, f.ConfigMapChanged)
		assert.True(t, f.ProbeChanged, "the probe was set too (a 1.33 image wants /livez)")
		assert.True(t, f.Restarted)
		cluster.AssertAllReplaced(t, before, c.PodUIDs(t))
		assert.True(t, hashConsistent(t, c), "the restart is stamped with the new data's hash")
		assert.Contains(t, assertMountsCopy(t, c).Data["kubeconfig.conf"], "https://10.96.0.11:6443", "the copy created")
		assert.True(t, f.RecordChanged, "the ConfigMap kube-proxy written (update) after the rollout")
		assertRecordFollows(t, c)

		// --manifest writes with an update too: rbac.yaml grants no patch on configmaps
		cm := c.ConfigMap(t)
		cm.Data["config.conf"] = strings.Replace(cm.Data["config.conf"], "mode: iptables", "mode: ipvs", 1)
		require.Contains(t, cm.Data["config.conf"], "mode: ipvs")
		manifest, err := yaml.Marshal(map[string]any{
			"apiVersion": "v1", "kind": "ConfigMap",
			"metadata": map[string]string{"name": cluster.Name, "namespace": c.Namespace},
			"data":     map[string]string{"config.conf": cm.Data["config.conf"]},
		})
		require.NoError(t, err)
		path := filepath.Join(t.TempDir(), "kube-proxy.yaml")
		require.NoError(t, os.WriteFile(path, manifest, 0o600))
		r = runCLI(t, "--kubeconfig", kubeconfig, "--output", "json", "--timeout", "2m", "--manifest", path)
		require.Equal(t, 0, r.Code, "msg: %s\nstderr: %s", r.Msg, r.Stderr)
		assert.Equal(t, []string{"config.conf"}, r.facts().ChangedKeys)
		assert.True(t, r.facts().Restarted)
		assert.Contains(t, assertMountsCopy(t, c).Data["config.conf"], "mode: ipvs")
		assertRecordFollows(t, c)
	})

	cases := []struct {
		name     string
		resource string
		verb     string
		// unstamped: remove the config-hash stamp first, so the run's first
		// write is the DaemonSet PATCH that stamps it
		unstamped bool
		msg       string
	}{
		{name: "no get on configmaps", resource: "configmaps", verb: "get",
			msg: `get configmap "kube-system/kube-proxy": forbidden: the kubeconfig user needs get on configmaps`},
		{name: "no get on daemonsets", resource: "daemonsets", verb: "get",
			msg: `get daemonset "kube-system/kube-proxy": forbidden: the kubeconfig user needs get on daemonsets`},
		// every verb the run will use is asked for (SelfSubjectAccessReview)
		// before the first write, also those it would need only later
		// the copy of the new config, created before the restart
		{name: "no create on configmaps", resource: "configmaps", verb: "create",
			msg: `forbidden: the kubeconfig user needs create on configmaps in namespace kube-system`},
		// the ConfigMap kube-proxy, written only after the rollout
		{name: "no update on configmaps", resource: "configmaps", verb: "update",
			msg: `forbidden: the kubeconfig user needs update on configmaps "kube-proxy" in namespace kube-system`},
		{name: "no patch on daemonsets", resource: "daemonsets", verb: "patch", unstamped: true,
			msg: `forbidden: the kubeconfig user needs patch on daemonsets.apps "kube-proxy" in namespace kube-system`},
		{name: "no watch on pods", resource: "pods", verb: "watch",
			msg: `forbidden: the kubeconfig user needs watch on pods in namespace kube-system`},
		{name: "no delete on pods (the rollback may need it)", resource: "pods", verb: "delete",
			msg: `forbidden: the kubeconfig user needs delete on pods in namespace kube-system`},
		// the revisions, listed before the history of copies is collected
		{name: "no list on controllerrevisions", resource: "controllerrevisions", verb: "list",
			msg: `forbidden: the kubeconfig user needs list on controllerrevisions.apps in namespace kube-system`},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if tc.unstamped {
				unstamp(t, c)
			}
			p := permission{resource: tc.resource, verb: tc.verb}
			for _, r := range requiredPermissions(t) {
				if r.resource == tc.resource && r.verb == tc.verb {
					p = r
				}
			}
			require.NotEmpty(t, p.group+p.resource, "%s %s is not a permission rbac.yaml grants", tc.verb, tc.resource)
			setRole(t, c, withoutVerb(objs.role, tc.resource, tc.verb))
			t.Cleanup(func() {
				setRole(t, c, objs.role)
				waitAccess(t, c, p, true)
			})
			waitAccess(t, c, p, false)

			before := stateOf(t, c)
			r := run(t, fmt.Sprintf("https://10.96.0.%d:6443", 20+i))
			assert.Equal(t, 1, r.Code, "stderr: %s", r.Stderr)
			assert.True(t, r.Failed)
			assert.Contains(t, r.Msg, tc.msg)
			assert.Contains(t, r.Msg, "rbac.yaml", "the error points at the RBAC manifest")
			assertUntouched(t, c, before)
		})
	}
}

// permission is one verb on one resource, as the binary needs it.
type permission struct {
	group, resource, name, verb string
	namespaced                  bool
}

// requiredPermissions lists what the binary needs: every call of its client
// surface (internal/kube/kubeperm), less the flags' optional ones, on the
// names rbac.yaml limits them to (on ConfigMaps only the update: the
// copies' names come from their data).
func requiredPermissions(t *testing.T) []permission {
	t.Helper()
	req, err := kubeperm.Required()
	require.NoError(t, err)
	var ps []permission
	for _, p := range req {
		if p.Group == "authorization.k8s.io" {
			continue // every authenticated user may review its own access
		}
		name := ""
		switch {
		case p.Resource == "daemonsets" && p.Verb != "list", p.Resource == "configmaps" && p.Verb == "update":
			name = cluster.Name
		case p.Resource == "leases" && p.Verb != "create":
			name = "kube-proxy-sync"
		}
		ps = append(ps, permission{group: p.Group, resource: p.Resource, name: name, verb: p.Verb, namespaced: p.Namespaced})
	}
	return ps
}

// waitAccess waits until the authorizer's answer for the rbac.yaml subject
// is allowed: RBAC changes reach the authorizer through an informer.
func waitAccess(t *testing.T, c *cluster.Cluster, p permission, allowed bool) {
	t.Helper()
	attrs := &authorizationv1.ResourceAttributes{Group: p.group, Resource: p.resource, Name: p.name, Verb: p.verb}
	if p.namespaced {
		attrs.Namespace = c.Namespace
	}
	sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User: rbacSubject, Groups: []string{rbacSubject, "system:authenticated"}, ResourceAttributes: attrs,
	}}
	var last string
	err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		res, err := c.Client.AuthorizationV1().SubjectAccessReviews().Create(ctx, sar, metav1.CreateOptions{})
		if err != nil {
			return false, err
		}
		last = res.Status.Reason
		return res.Status.Allowed == allowed, nil
	})
	require.NoError(t, err, "%s %s/%s %q: want allowed=%t (last reason: %s)", p.verb, p.group, p.resource, p.name, allowed, last)
}

func loadRBAC(t *testing.T, c *cluster.Cluster) rbacObjects {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(c.RepoRoot, "roles", "kpsync", "files", "rbac.yaml"))
	require.NoError(t, err)
	var objs rbacObjects
	list, _, err := scheme.Codecs.UniversalDeserializer().Decode(raw, nil, nil)
	require.NoError(t, err, "rbac.yaml")
	require.IsType(t, &corev1.List{}, list, "rbac.yaml is one v1 List")
	for _, item := range list.(*corev1.List).Items {
		obj, _, err := scheme.Codecs.UniversalDeserializer().Decode(item.Raw, nil, nil)
		require.NoError(t, err, "rbac.yaml item:\n%s", item.Raw)
		switch o := obj.(type) {
		case *rbacv1.Role:
			objs.role = o
		case *rbacv1.RoleBinding:
			objs.roleBinding = o
		case *rbacv1.ClusterRole:
			objs.clusterRole = o
		case *rbacv1.ClusterRoleBinding:
			objs.clusterRoleBinding = o
		default:
			t.Fatalf("rbac.yaml: unexpected %T", obj)
		}
	}
	require.NotNil(t, objs.role, "rbac.yaml has a Role")
	require.NotNil(t, objs.roleBinding, "rbac.yaml has a RoleBinding")
	require.NotNil(t, objs.clusterRole, "rbac.yaml has a ClusterRole")
	require.NotNil(t, objs.clusterRoleBinding, "rbac.yaml has a ClusterRoleBinding")
	require.Equal(t, c.Namespace, objs.role.Namespace)
	return objs
}

func applyRBAC(t *testing.T, c *cluster.Cluster, objs rbacObjects) {
	t.Helper()
	ctx := context.Background()
	rbac := c.Client.RbacV1()
	deleteRBAC(t, c, objs) // leftovers of an interrupted run
	_, err := rbac.ClusterRoles().Create(ctx, objs.clusterRole, metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = rbac.ClusterRoleBindings().Create(ctx, objs.clusterRoleBinding, metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = rbac.Roles(c.Namespace).Create(ctx, objs.role, metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = rbac.RoleBindings(c.Namespace).Create(ctx, objs.roleBinding, metav1.CreateOptions{})
	require.NoError(t, err)
}

func deleteRBAC(t *testing.T, c *cluster.Cluster, objs rbacObjects) {
	t.Helper()
	ctx := context.Background()
	rbac := c.Client.RbacV1()
	for _, err := range []error{
		rbac.RoleBindings(c.Namespace).Delete(ctx, objs.roleBinding.Name, metav1.DeleteOptions{}),
		rbac.Roles(c.Namespace).Delete(ctx, objs.role.Name, metav1.DeleteOptions{}),
		rbac.ClusterRoleBindings().Delete(ctx, objs.clusterRoleBinding.Name, metav1.DeleteOptions{}),
		rbac.ClusterRoles().Delete(ctx, objs.clusterRole.Name, metav1.DeleteOptions{}),
	} {
		if err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("delete rbac.yaml object: %v", err)
		}
	}
}

// setRole replaces the live Role's rules.
func setRole(t *testing.T, c *cluster.Cluster, want *rbacv1.Role) {
	t.Helper()
	roles := c.Client.RbacV1().Roles(c.Namespace)
	cur, err := roles.Get(context.Background(), want.Name, metav1.GetOptions{})
	require.NoError(t, err)
	cur.Rules = want.Rules
	_, err = roles.Update(context.Background(), cur, metav1.UpdateOptions{})
	require.NoError(t, err)
}

// withoutVerb is role with verb taken away from the rules on resource.
func withoutVerb(role *rbacv1.Role, resource, verb string) *rbacv1.Role {
	out := role.DeepCopy()
	for i := range out.Rules {
		r := &out.Rules[i]
		if slices.Contains(r.Resources, resource) {
			r.Verbs = slices.DeleteFunc(r.Verbs, func(v string) bool { return v == verb })
		}
	}
	out.Rules = slices.DeleteFunc(out.Rules, func(r rbacv1.PolicyRule) bool { return len(r.Verbs) == 0 })
	return out
}

// unstamp removes the config-hash annotation, as on a DaemonSet this tool
// has never touched.
func unstamp(t *testing.T, c *cluster.Cluster) {
	t.Helper()
	patch := []byte(`{"metadata":{"annotations":{"` + rollout.HashAnnotation + `":null}}}`)
	_, err := c.Client.AppsV1().DaemonSets(c.Namespace).Patch(context.Background(), cluster.Name, types.StrategicMergePatchType, patch, metav1.PatchOptions{})
	require.NoError(t, err)
}
