package kubeperm

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/client-go/kubernetes/scheme"
)

const rbacPath = "../../../roles/kpsync/files/rbac.yaml"

// rbacRules reads the Role's and the ClusterRole's rules from rbac.yaml.
func rbacRules(t *testing.T) (role, cluster []rbacv1.PolicyRule, text string) {
	t.Helper()
	raw, err := os.ReadFile(filepath.FromSlash(rbacPath))
	require.NoError(t, err)
	list, _, err := scheme.Codecs.UniversalDeserializer().Decode(raw, nil, nil)
	require.NoError(t, err, "rbac.yaml")
	require.IsType(t, &corev1.List{}, list, "rbac.yaml is one v1 List")
	for _, item := range list.(*corev1.List).Items {
		obj, _, err := scheme.Codecs.UniversalDeserializer().Decode(item.Raw, nil, nil)
		require.NoError(t, err)
		switch o := obj.(type) {
		case *rbacv1.Role:
			role = o.Rules
		case *rbacv1.ClusterRole:
			cluster = o.Rules
		}
	}
	require.NotEmpty(t, role, "rbac.yaml has a Role with rules")
	require.NotEmpty(t, cluster, "rbac.yaml has a ClusterRole with rules")
	return role, cluster, string(raw)
}

// rbac.yaml grants exactly what the client surface can call, less the
// optional permissions: nothing missing, nothing the code never calls.
func TestRBACGrantsExactlyWhatTheCodeCalls(t *testing.T) {
	role, cluster, text := rbacRules(t)
	required, err := Required()
	require.NoError(t, err)
	granted := append(Granted(role, true), Granted(cluster, false)...)
	assert.ElementsMatch(t, required, granted, "rbac.yaml (want, from kube.Interface) vs (granted)")
	for p, flag := range Optional {
		assert.NotContains(t, granted, p, "%s is only for %s: rbac.yaml has it commented out", p, flag)
		if flag != "" {
			assert.Contains(t, text, "Only for "+flag, "rbac.yaml says which flag needs %s", p)
		}
	}
}

// Calls sees every method of the client surface: a resource that is not
// mapped fails it instead of being skipped.
func TestCallsCoverEveryAccessor(t *testing.T) {
	calls, err := Calls()
	require.NoError(t, err)
	seen := map[string]bool{}
	for _, p := range calls {
		seen[p.Resource] = true
	}
	for name, res := range resources {
		assert.True(t, seen[res.Resource], "kube.Interface.%s is mapped but has no call", name)
	}
	var verbs []string
	for _, p := range calls {
		if p.Resource == "nodes" {
			verbs = append(verbs, p.Verb)
		}
	}
	assert.Equal(t, "get list patch", strings.Join(verbs, " "), "nodes are read, never watched; patched only to move one between pools")
}
