package kube

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	authorizationv1 "k8s.io/api/authorization/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
)

// Every call against a server that always answers 503 with Retry-After:
// reads and writes that are safe to repeat get the retry budget (Retries+1
// attempts, and only that: client-go's own Retry-After retries would
// multiply it), other writes are sent once.
func TestOnlyRequestsSafeToRepeatAreRetried(t *testing.T) {
	ctx := context.Background()
	withRV := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "kube-proxy", ResourceVersion: "7"}}
	noRV := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "kube-proxy"}}
	cases := []struct {
		name string
		call func(c *Client) error
		want int64
	}{
		{"get", func(c *Client) error {
			_, err := c.ConfigMaps("ns").Get(ctx, "kube-proxy", metav1.GetOptions{})
			return err
		}, 4},
		{"list", func(c *Client) error { _, err := c.Nodes().List(ctx, metav1.ListOptions{}); return err }, 4},
		{"watch", func(c *Client) error { _, err := c.Pods("ns").Watch(ctx, metav1.ListOptions{}); return err }, 4},
		{"update with resourceVersion", func(c *Client) error {
			_, err := c.ConfigMaps("ns").Update(ctx, withRV, metav1.UpdateOptions{})
			return err
		}, 4},
		{"update without resourceVersion", func(c *Client) error {
			_, err := c.ConfigMaps("ns").Update(ctx, noRV, metav1.UpdateOptions{})
			return err
		}, 1},
		{"patch with resourceVersion", func(c *Client) error {
			_, err := c.DaemonSets("ns").Patch(ctx, "kube-proxy", types.StrategicMergePatchType, []byte(`{"metadata":{"resourceVersion":"7"}}`), metav1.PatchOptions{})
			return err
		}, 4},
		{"patch without resourceVersion", func(c *Client) error {
			_, err := c.DaemonSets("ns").Patch(ctx, "kube-proxy", types.StrategicMergePatchType, []byte(`{"spec":{"template":{"metadata":{"annotations":{"a":"b"}}}}}`), metav1.PatchOptions{})
			return err
		}, 1},
		{"server-side apply", func(c *Client) error {
			_, err := c.DaemonSets("ns").Patch(ctx, "kube-proxy", types.ApplyPatchType, []byte(`{}`), metav1.PatchOptions{FieldManager: "m"})
			return err
		}, 4},
		{"create", func(c *Client) error {
			_, err := c.Leases("ns").Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "l"}}, metav1.CreateOptions{})
			return err
		}, 1},
		{"delete", func(c *Client) error { return c.Pods("ns").Delete(ctx, "p", metav1.DeleteOptions{}) }, 1},
		{"delete with a UID precondition", func(c *Client) error {
			return c.Pods("ns").Delete(ctx, "p", metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: ptr.To(types.UID("u"))}})
		}, 4},
		{"access review", func(c *Client) error {
			_, err := c.SelfSubjectAccessReviews().Create(ctx, &authorizationv1.SelfSubjectAccessReview{}, metav1.CreateOptions{})
			return err
		}, 4},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			srv, n := serve(t, func(_ int64, w http.ResponseWriter) {
				w.Header().Set("Retry-After", "0")
				w.WriteHeader(http.StatusServiceUnavailable)
			})
			c, err := NewForConfig(&rest.Config{Host: srv.URL}, fast)
			require.NoError(t, err)
			require.Error(t, tc.call(c))
			assert.Equal(t, tc.want, n.Load())
			assert.Equal(t, tc.want, c.Requests.Count())
		})
	}
}

// A 429 is the API server turning a request away before doing anything:
// any request is sent again.
func TestTooManyRequestsRetriesAnyRequest(t *testing.T) {
	srv, n := serve(t, func(n int64, w http.ResponseWriter) {
		if n == 1 {
			w.Header().Set("Retry-After", "0")
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"kind":"Lease","apiVersion":"coordination.k8s.io/v1","metadata":{"name":"l"}}`))
	})
	c, err := NewForConfig(&rest.Config{Host: srv.URL}, fast)
	require.NoError(t, err)
	_, err = c.Leases("ns").Create(context.Background(), &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "l"}}, metav1.CreateOptions{})
	require.NoError(t, err)
	assert.Equal(t, int64(2), n.Load())
}

// The response to a PATCH with a resourceVersion precondition is lost after
// the server applied it: the repeat is answered with a conflict, never
// applied twice. (The run then recognises its own write: see internal/kpsync.)
func TestLostResponseOfAPreconditionedPatchEndsInConflict(t *testing.T) {
	var applied atomic.Int64
	var rv atomic.Int64
	rv.Store(7)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body := make([]byte, r.ContentLength)
		_, _ = r.Body.Read(body)
		if !strings.Contains(string(body), `"resourceVersion":"`+strconv.FormatInt(rv.Load(), 10)+`"`) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusConflict)
			_, _ = w.Write([]byte(`{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"Conflict","code":409,"message":"the object has been modified"}`))
			return
		}
		applied.Add(1)
		rv.Add(1)
		// the write happened; the answer never arrives
		conn, _, err := w.(http.Hijacker).Hijack()
		require.NoError(t, err)
		conn.(*net.TCPConn).SetLinger(0)
		conn.Close()
	}))
	defer srv.Close()
	c, err := NewForConfig(&rest.Config{Host: srv.URL}, fast)
	require.NoError(t, err)
	_, err = c.DaemonSets("ns").Patch(context.Background(), "kube-proxy", types.StrategicMergePatchType,
		[]byte(`{"metadata":{"resourceVersion":"7"},"spec":{"template":{"metadata":{"annotations":{"kubectl.kubernetes.io/restartedAt":"2026-11-23T05:00:00Z"}}}}}`), metav1.PatchOptions{})
	require.True(t, apierrors.IsConflict(err), "got %v", err)
	assert.Equal(t, int64(1), applied.Load(), "applied once")
	assert.Equal(t, int64(2), c.Requests.Count())
}
