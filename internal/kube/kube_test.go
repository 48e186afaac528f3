package kube

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
)

// tiny waits, as go-retryablehttp's own tests do
var fast = Options{Retries: 3, RetryWaitMin: time.Microsecond, RetryWaitMax: 10 * time.Microsecond, RequestTimeout: 2 * time.Second}

func serve(t *testing.T, h func(n int64, w http.ResponseWriter)) (*httptest.Server, *atomic.Int64) {
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h(n.Add(1), w)
	}))
	t.Cleanup(srv.Close)
	return srv, &n
}

func get(t *testing.T, srv *httptest.Server, o Options) (*http.Response, error) {
	t.Helper()
	rt := NewRetryingTransport(http.DefaultTransport, o)
	req, err := http.NewRequest(http.MethodGet, srv.URL+"/api/v1/namespaces/kube-system/configmaps/kube-proxy", nil)
	require.NoError(t, err)
	resp, err := rt.RoundTrip(req)
	if resp != nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	return resp, err
}

func TestRetryPolicy(t *testing.T) {
	cases := []struct {
		name      string
		failFirst int
		status    int
		wantCalls int64
		wantCode  int
	}{
		{"500 then ok", 2, http.StatusInternalServerError, 3, 200},
		{"503 then ok", 1, http.StatusServiceUnavailable, 2, 200},
		{"429 then ok", 1, http.StatusTooManyRequests, 2, 200},
		{"501 is not retried", 1, http.StatusNotImplemented, 1, 501},
		{"404 is not retried", 1, http.StatusNotFound, 1, 404},
		{"bounded attempts", 100, http.StatusBadGateway, 4, 502},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			srv, n := serve(t, func(n int64, w http.ResponseWriter) {
				if n <= int64(tc.failFirst) {
					w.WriteHeader(tc.status)
					return
				}
				w.WriteHeader(200)
			})
			resp, err := get(t, srv, fast)
			require.NoError(t, err)
			assert.Equal(t, tc.wantCode, resp.StatusCode)
			assert.Equal(t, tc.wantCalls, n.Load())
		})
	}
}

func TestRetryAfterIsHonouredAndCapped(t *testing.T) {
	resp := &http.Response{StatusCode: http.StatusTooManyRequests, Header: http.Header{"Retry-After": []string{"3"}}}
	assert.Equal(t, 3*time.Second, Backoff(time.Millisecond, time.Minute, 0, resp))
	assert.Equal(t, 2*time.Second, Backoff(time.Millisecond, 2*time.Second, 0, resp), "capped at max")
	for attempt := 0; attempt < 40; attempt++ {
		d := Backoff(100*time.Millisecond, time.Second, attempt, nil)
		assert.GreaterOrEqual(t, d, 100*time.Millisecond)
		assert.LessOrEqual(t, d, time.Second)
	}
}

func TestConnectionResetIsRetried(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var calls atomic.Int64
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) == 1 {
			// reset the connection instead of answering
			conn, _, err := w.(http.Hijacker).Hijack()
			if err == nil {
				conn.(*net.TCPConn).SetLinger(0)
				conn.Close()
			}
			return
		}
		w.WriteHeader(200)
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { srv.Close() })
	rt := NewRetryingTransport(&http.Transport{DisableKeepAlives: true}, fast)
	req, _ := http.NewRequest(http.MethodGet, "http://"+ln.Addr().String()+"/api", nil)
	resp, err := rt.RoundTrip(req)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, 200, resp.StatusCode)
	assert.Equal(t, int64(2), calls.Load())
}

func TestBlackholedAttemptTimesOutAndFails(t *testing.T) {
	// accepts connections, never answers
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			t.Cleanup(func() { c.Close() })
		}
	}()
	o := fast
	o.Retries, o.RequestTimeout = 1, 50*time.Millisecond
	rt := NewRetryingTransport(http.DefaultTransport, o)
	req, _ := http.NewRequest(http.MethodGet, "http://"+ln.Addr().String()+"/api", nil)
	_, err = rt.RoundTrip(req)
	require.Error(t, err)
}

func TestCounterCountsRetriesThroughClientGo(t *testing.T) {
	srv, n := serve(t, func(n int64, w http.ResponseWriter) {
		if n == 1 {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"kube-proxy","namespace":"kube-system","resourceVersion":"7"}}`)
	})
	c, err := NewForConfig(&rest.Config{Host: srv.URL}, fast)
	require.NoError(t, err)
	cm, err := c.ConfigMaps("kube-system").Get(context.Background(), "kube-proxy", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, "7", cm.ResourceVersion)
	assert.Equal(t, int64(2), n.Load())
	assert.Equal(t, int64(2), c.Requests.Count())
}
