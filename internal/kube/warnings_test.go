package kube

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/sirupsen/logrus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
)

func bufferLog(level logrus.Level) (*bytes.Buffer, *logrus.Entry) {
	var buf bytes.Buffer
	l := logrus.New()
	l.SetOutput(&buf)
	l.SetLevel(level)
	return &buf, logrus.NewEntry(l)
}

// The API server's deprecation warnings reach the run's log, once each.
func TestAPIServerWarningsAreLogged(t *testing.T) {
	srv, _ := serve(t, func(_ int64, w http.ResponseWriter) {
		w.Header().Add("Warning", `299 - "v1 ComponentStatus is deprecated in v1.19+"`)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"kube-proxy"}}`))
	})
	buf, log := bufferLog(logrus.InfoLevel)
	o := fast
	o.Log = log
	c, err := NewForConfig(&rest.Config{Host: srv.URL}, o)
	require.NoError(t, err)
	for range 2 {
		_, err = c.ConfigMaps("kube-system").Get(context.Background(), "kube-proxy", metav1.GetOptions{})
		require.NoError(t, err)
	}
	assert.Equal(t, 1, strings.Count(buf.String(), "API server warning: v1 ComponentStatus is deprecated in v1.19+"), buf.String())
}

// klog (client-go's logger) writes into the run's log instead of nowhere;
// verbose messages only at debug level.
func TestKlogGoesToTheLogger(t *testing.T) {
	buf, log := bufferLog(logrus.InfoLevel)
	klog.SetLogger(NewKlogLogger(log))
	t.Cleanup(klog.ClearLogger)
	klog.Warning("watch of pods ended")
	klog.ErrorS(errors.New("boom"), "request failed", "verb", "GET")
	klog.V(4).Info("chatty detail")
	klog.Flush()
	out := buf.String()
	assert.Contains(t, out, "level=warning msg=\"watch of pods ended")
	assert.Contains(t, out, "level=error msg=\"request failed\"")
	assert.Contains(t, out, "error=boom")
	assert.Contains(t, out, "verb=GET")
	assert.NotContains(t, out, "chatty detail")
}
