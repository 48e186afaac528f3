// Package kube builds the Kubernetes client: kubeconfig loading the kubectl
// way, typed clients of the few resources the tool uses (see Interface) over
// client-go's REST client and a scheme of four API groups, a retrying
// transport for network jitter, and a request counter.
package kube

import (
	"context"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-retryablehttp"
	"github.com/sirupsen/logrus"
	appsv1 "k8s.io/api/apps/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// Options select the cluster and shape retries.
type Options struct {
	Kubeconfig string
	Context    string
	// Retries is how many times a request is retried after a connection
	// error, 429 or 5xx (not 501).
	Retries int
	// RetryWaitMin and RetryWaitMax bound the jittered exponential backoff.
	RetryWaitMin time.Duration
	RetryWaitMax time.Duration
	// RequestTimeout bounds one HTTP request (not a watch).
	RequestTimeout time.Duration
	Log            *logrus.Entry
}

// Client is the typed client of the few resources the tool uses (see
// Interface), plus what the run reports about it.
type Client struct {
	groups   groups
	Config   *rest.Config
	Server   string
	Requests *Counter
}

var _ Interface = (*Client)(nil)

// scheme knows only the API groups the tool talks to (rbac: kube-proxy's
// own RBAC as kubeadm renders it, --template kubeadm).
func scheme() *runtime.Scheme {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{corev1.AddToScheme, appsv1.AddToScheme, coordinationv1.AddToScheme, authorizationv1.AddToScheme, rbacv1.AddToScheme} {
		utilruntime.Must(add(s))
	}
	metav1.AddToGroupVersion(s, schema.GroupVersion{Version: "v1"})
	return s
}

// LoadConfig resolves the kubeconfig like kubectl does: --kubeconfig,
// KUBECONFIG, ~/.kube/config, then in-cluster.
func LoadConfig(o Options) (*rest.Config, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = o.Kubeconfig
	overrides := &clientcmd.ConfigOverrides{CurrentContext: o.Context}
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, overrides).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("load kubeconfig: %w (pass --kubeconfig, set KUBECONFIG, or run inside the cluster)", err)
	}
	return cfg, nil
}

// New builds the client.
func New(o Options) (*Client, error) {
	cfg, err := LoadConfig(o)
	if err != nil {
		return nil, err
	}
	return NewForConfig(cfg, o)
}

// NewForConfig builds the client for a rest.Config.
func NewForConfig(cfg *rest.Config, o Options) (*Client, error) {
	cfg = rest.CopyConfig(cfg)
	counter := &Counter{}
	cfg.UserAgent = "kube-proxy-sync"
	// our own transport retries; client-go's rate limiter would only add waits
	cfg.QPS, cfg.Burst = 50, 100
	cfg.Timeout = 0 // watches must not be cut; RequestTimeout applies per request below
	// protobuf for built-in types: listing and watching 5000 pods decodes
	// far less than JSON (the rollout wait's main memory cost)
	cfg.ContentType = runtime.ContentTypeProtobuf
	cfg.AcceptContentTypes = runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON
	if o.Log != nil {
		// deprecations and the like, which client-go would send to klog
		cfg.WarningHandler = &warningLogger{log: o.Log}
	}
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return NewRetryingTransport(counter.Wrap(rt), o)
	})
	httpClient, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("build kubernetes client: %w", err)
	}
	codecs := serializer.NewCodecFactory(scheme()).WithoutConversion()
	forGroup := func(gv schema.GroupVersion) (rest.Interface, error) {
		c := rest.CopyConfig(cfg)
		c.GroupVersion, c.APIPath, c.NegotiatedSerializer = &gv, "/apis", codecs
		if gv.Group == "" {
			c.APIPath = "/api"
		}
		rc, err := rest.RESTClientForConfigAndClient(c, httpClient)
		if err != nil {
			return nil, fmt.Errorf("build kubernetes client for %s: %w", gv, err)
		}
		return rc, nil
	}
	var g groups
	for _, r := range []struct {
		gv  schema.GroupVersion
		out *rest.Interface
	}{
		{corev1.SchemeGroupVersion, &g.core},
		{appsv1.SchemeGroupVersion, &g.apps},
		{coordinationv1.SchemeGroupVersion, &g.coordination},
		{authorizationv1.SchemeGroupVersion, &g.authorization},
		{rbacv1.SchemeGroupVersion, &g.rbac},
	} {
		if *r.out, err = forGroup(r.gv); err != nil {
			return nil, err
		}
	}
	return &Client{groups: g, Config: cfg, Server: cfg.Host, Requests: counter}, nil
}

// Counter counts HTTP requests that reach the wire, retries included.
type Counter struct{ n atomic.Int64 }

// Count is the number of requests so far.
func (c *Counter) Count() int64 {
	if c == nil {
		return 0
	}
	return c.n.Load()
}

// Wrap counts every request rt sends.
func (c *Counter) Wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripperFunc(func(r *http.Request) (*http.Response, error) {
		c.n.Add(1)
		return rt.RoundTrip(r)
	})
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// NewRetryingTransport retries requests over rt on connection errors, 429
// and 5xx other than 501, at most o.Retries times, with jittered exponential
// backoff that honours Retry-After. Only requests a repeat cannot harm are
// retried (see Idempotent); others only after a 429, which the API server
// sends before doing anything. It is the one retry budget: the clients of
// this package turn client-go's own retries off.
func NewRetryingTransport(rt http.RoundTripper, o Options) http.RoundTripper {
	c := retryablehttp.NewClient()
	// each attempt gets its own timeout, so a blackholed attempt is retried
	c.HTTPClient = &http.Client{Transport: &timeoutTransport{inner: rt, timeout: o.RequestTimeout}}
	c.RetryMax = o.Retries
	c.RetryWaitMin, c.RetryWaitMax = o.RetryWaitMin, o.RetryWaitMax
	if c.RetryWaitMin <= 0 {
		c.RetryWaitMin = 250 * time.Millisecond
	}
	if c.RetryWaitMax <= 0 {
		c.RetryWaitMax = 8 * time.Second
	}
	c.Backoff = Backoff
	c.CheckRetry = CheckRetry
	c.Logger = nil
	if o.Log != nil {
		log := o.Log
		c.RequestLogHook = func(_ retryablehttp.Logger, r *http.Request, attempt int) {
			if attempt > 0 {
				log.Warnf("retrying %s %s (attempt %d of %d)", r.Method, r.URL.Path, attempt+1, c.RetryMax+1)
			}
		}
	}
	// hand the last response or error back to client-go instead of a generic "giving up" error
	c.ErrorHandler = retryablehttp.PassthroughErrorHandler
	retrying := &retryablehttp.RoundTripper{Client: c}
	return roundTripperFunc(func(r *http.Request) (*http.Response, error) {
		return retrying.RoundTrip(r.WithContext(context.WithValue(r.Context(), idempotentKey{}, Idempotent(r))))
	})
}

type idempotentKey struct{}

// Repeatable marks a write sent with ctx as safe to repeat: a PUT or PATCH
// with a resourceVersion precondition (a repeat of a write that succeeded
// fails with a conflict instead of writing twice), a DELETE with a UID or
// resourceVersion precondition (a repeat finds the object gone), a
// server-side apply (declarative: a repeat writes the same), or a review
// that only asks.
func Repeatable(ctx context.Context) context.Context {
	return context.WithValue(ctx, repeatableKey{}, true)
}

type repeatableKey struct{}

// Idempotent reports whether sending r twice does no more than sending it
// once: reads (GET, which includes LIST and WATCH, and HEAD), and writes
// marked Repeatable. Any other write, e.g. a PATCH without a precondition,
// is never repeated: its response may have been lost after it happened.
func Idempotent(r *http.Request) bool {
	if r.Method == http.MethodGet || r.Method == http.MethodHead {
		return true
	}
	marked, _ := r.Context().Value(repeatableKey{}).(bool)
	return marked
}

// CheckRetry is retryablehttp's default policy (connection errors, 429, 5xx
// but 501) for idempotent requests, only 429 for others; it also stops when
// the caller's context ends.
func CheckRetry(ctx context.Context, resp *http.Response, err error) (bool, error) {
	if ctx.Err() != nil {
		return false, ctx.Err()
	}
	if idempotent, _ := ctx.Value(idempotentKey{}).(bool); !idempotent {
		return err == nil && resp != nil && resp.StatusCode == http.StatusTooManyRequests, nil
	}
	return retryablehttp.DefaultRetryPolicy(ctx, resp, err)
}

// Backoff waits lo*2^attempt with full jitter, capped at hi; a 429 or 503
// with Retry-After waits what the server asked (capped at hi).
func Backoff(lo, hi time.Duration, attempt int, resp *http.Response) time.Duration {
	if resp != nil && (resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode == http.StatusServiceUnavailable) {
		if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && s >= 0 {
			return min(time.Duration(s)*time.Second, hi)
		}
	}
	ceiling := float64(lo) * math.Pow(2, float64(attempt))
	if ceiling > float64(hi) || math.IsInf(ceiling, 0) {
		ceiling = float64(hi)
	}
	// full jitter, but never below min
	return lo + time.Duration(rand.Float64()*(ceiling-float64(lo)))
}

// timeoutTransport bounds each non-watch attempt so a blackholed connection
// fails within the retry budget instead of hanging.
type timeoutTransport struct {
	inner   http.RoundTripper
	timeout time.Duration
}

func (t *timeoutTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if t.timeout <= 0 || r.URL.Query().Get("watch") == "true" {
		return t.inner.RoundTrip(r)
	}
	ctx, cancel := context.WithTimeout(r.Context(), t.timeout)
	resp, err := t.inner.RoundTrip(r.WithContext(ctx))
	if err != nil {
		cancel()
		return nil, err
	}
	resp.Body = &cancelOnClose{ReadCloser: resp.Body, cancel: cancel}
	return resp, nil
}

type cancelOnClose struct {
	io.ReadCloser
	cancel context.CancelFunc
}

func (c *cancelOnClose) Close() error {
	err := c.ReadCloser.Close()
	c.cancel()
	return err
}
