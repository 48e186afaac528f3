package kube

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
)

// TestResourcesSpeakTheAPI checks each call's verb, path and query against
// what the API server expects, and that the answer decodes into the type.
func TestResourcesSpeakTheAPI(t *testing.T) {
	var got []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = append(got, r.Method+" "+r.URL.Path+"?"+r.URL.RawQuery)
		w.Header().Set("Content-Type", "application/json")
		var body any
		switch r.URL.Path {
		case "/version":
			body = map[string]string{"gitVersion": "v1.34.4"}
		case "/api/v1/namespaces/kube-system/configmaps/kube-proxy":
			body = corev1.ConfigMap{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"}, ObjectMeta: metav1.ObjectMeta{Name: "kube-proxy", ResourceVersion: "7"}}
		case "/apis/apps/v1/namespaces/kube-system/daemonsets/kube-proxy":
			body = appsv1.DaemonSet{TypeMeta: metav1.TypeMeta{APIVersion: "apps/v1", Kind: "DaemonSet"}, ObjectMeta: metav1.ObjectMeta{Name: "kube-proxy", Generation: 3}}
		case "/api/v1/nodes":
			body = corev1.NodeList{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "NodeList"}, Items: []corev1.Node{{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}}}
		case "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases":
			body = coordinationv1.Lease{TypeMeta: metav1.TypeMeta{APIVersion: "coordination.k8s.io/v1", Kind: "Lease"}, ObjectMeta: metav1.ObjectMeta{Name: "l"}}
		case "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews":
			body = authorizationv1.SelfSubjectAccessReview{TypeMeta: metav1.TypeMeta{APIVersion: "authorization.k8s.io/v1", Kind: "SelfSubjectAccessReview"}, Status: authorizationv1.SubjectAccessReviewStatus{Allowed: true}}
		default:
			body = metav1.Status{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Status"}, Status: metav1.StatusSuccess}
		}
		require.NoError(t, json.NewEncoder(w).Encode(body))
	}))
	defer srv.Close()
	c, err := NewForConfig(&rest.Config{Host: srv.URL}, fast)
	require.NoError(t, err)
	ctx := context.Background()

	cm, err := c.ConfigMaps("kube-system").Get(ctx, "kube-proxy", metav1.GetOptions{ResourceVersion: "0"})
	require.NoError(t, err)
	assert.Equal(t, "7", cm.ResourceVersion)
	_, err = c.ConfigMaps("kube-system").Update(ctx, cm, metav1.UpdateOptions{FieldManager: "m"})
	require.NoError(t, err)
	ds, err := c.DaemonSets("kube-system").Patch(ctx, "kube-proxy", types.StrategicMergePatchType, []byte(`{}`), metav1.PatchOptions{})
	require.NoError(t, err)
	assert.Equal(t, int64(3), ds.Generation)
	nodes, err := c.Nodes().List(ctx, metav1.ListOptions{Limit: 500})
	require.NoError(t, err)
	assert.Equal(t, "n1", nodes.Items[0].Name)
	require.NoError(t, c.Pods("kube-system").Delete(ctx, "p", metav1.DeleteOptions{}))
	_, err = c.Leases("kube-system").Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "l"}}, metav1.CreateOptions{})
	require.NoError(t, err)
	review, err := c.SelfSubjectAccessReviews().Create(ctx, &authorizationv1.SelfSubjectAccessReview{}, metav1.CreateOptions{})
	require.NoError(t, err)
	assert.True(t, review.Status.Allowed)
	info, err := c.ServerVersion(ctx)
	require.NoError(t, err)
	assert.Equal(t, "v1.34.4", info.GitVersion)

	assert.Equal(t, []string{
		"GET /api/v1/namespaces/kube-system/configmaps/kube-proxy?resourceVersion=0",
		"PUT /api/v1/namespaces/kube-system/configmaps/kube-proxy?fieldManager=m",
		"PATCH /apis/apps/v1/namespaces/kube-system/daemonsets/kube-proxy?",
		"GET /api/v1/nodes?limit=500",
		"DELETE /api/v1/namespaces/kube-system/pods/p?",
		"POST /apis/coordination.k8s.io/v1/namespaces/kube-system/leases?",
		"POST /apis/authorization.k8s.io/v1/selfsubjectaccessreviews?",
		"GET /version?",
	}, got)
}
