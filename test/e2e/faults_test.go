//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/kube-proxy-sync/kube-proxy-sync/internal/configmap"
	"github.com/kube-proxy-sync/kube-proxy-sync/internal/kpsync"
	"github.com/kube-proxy-sync/kube-proxy-sync/test/e2e/cluster"
)

// faultRunArgs bound every faulted run: each request attempt, the retries
// of one request, and the rollout wait.
var faultRunArgs = []string{"--probe-path", "none", "--retries", "5", "--request-timeout", "3s", "--timeout", "40s"}

// faultRunBound is the wall time a faulted run must end within, success or
// failure: the rollout wait plus a few requests' worth of retry budget.
const faultRunBound = 90 * time.Second

// faultProxy is a real TCP proxy (toxiproxy, as a library) between the
// binary and the API server.
type faultProxy struct {
	proxy *toxiproxy.Proxy
	// kubeconfig is the cluster's, with the server pointed at the proxy.
	kubeconfig string
}

func newFaultProxy(t *testing.T, c *cluster.Cluster) *faultProxy {
	t.Helper()
	u, err := url.Parse(c.RestConfig.Host)
	require.NoError(t, err)
	require.Equal(t, "https", u.Scheme, "the API server is reached over TLS")
	server := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(nil), zerolog.Nop())
	p := toxiproxy.NewProxy(server, "kube-apiserver", "127.0.0.1:0", u.Host)
	require.NoError(t, p.Start())
	t.Cleanup(p.Stop)
	kubeconfig := kubeconfigCopy(t, c, func(cfg *clientcmdapi.Config, cur *clientcmdapi.Context) {
		cl := cfg.Clusters[cur.Cluster]
		cl.Server = "https://" + p.Listen
		if cl.TLSServerName == "" {
			cl.TLSServerName = u.Hostname() // the certificate is the API server's
		}
	})
	return &faultProxy{proxy: p, kubeconfig: kubeconfig}
}

func (f *faultProxy) add(t *testing.T, toxic string) {
	t.Helper()
	_, err := f.proxy.Toxics.AddToxicJson(strings.NewReader(toxic))
	require.NoError(t, err, toxic)
}

// TestNetworkFaults runs a real change (a new --server) through a TCP fault
// proxy. Whatever the fault does, the run ends within its bounds, and it
// never leaves the pods' config half-changed: the DaemonSet's config-hash
// stamp always matches the data of the ConfigMap its template mounts (the
// restart PATCH moves both at once), and either that is the new config
// (the change was made) or a follow-up run without faults, with the same
// server, makes it — exactly one of the two. In the end the ConfigMap
// kube-proxy (the record kubeadm reads) holds the config the fleet runs.
func TestNetworkFaults(t *testing.T) {
	c := cluster.Connect(t)
	c.Reset(t)
	t.Cleanup(func() { c.Reset(t) })
	// adopt: stamp the hash, so that every case starts with nothing owed
	r := runSync(t, c, "--probe-path", "none")
	require.Equal(t, 0, r.Code, r.Msg)
	require.True(t, hashConsistent(t, c))

	cases := []struct {
		name string
		// toxics are in place for the whole run
		toxics []string
		// http1 makes client-go open one connection per concurrent request
		// (DISABLE_HTTP2), so a per-connection fault hits more requests
		http1 bool
		// blackhole drops every byte both ways for 10s from the moment the
		// run creates the copy of the new config: between it and the restart
		blackhole bool
		// mustSucceed: this fault is within what retries absorb
		mustSucceed bool
		// runs: change runs under this fault (default 1); a fault that hits
		// a random share of connections gets more, to meet more dice
		runs int
		// args override faultRunArgs
		args []string
	}{
		{name: "latency 300ms", mustSucceed: true, toxics: []string{
			`{"name":"latency-down","type":"latency","stream":"downstream","attributes":{"latency":300,"jitter":30}}`,
			`{"name":"latency-up","type":"latency","stream":"upstream","attributes":{"latency":300,"jitter":30}}`,
		}},
		{name: "reset 30% of connections", http1: true, runs: 5, toxics: []string{
			`{"name":"reset","type":"reset_peer","stream":"downstream","toxicity":0.3,"attributes":{"timeout":0}}`,
		}},
		{name: "reset 30% of connections mid-stream", runs: 5, toxics: []string{
			`{"name":"reset-late","type":"reset_peer","stream":"downstream","toxicity":0.3,"attributes":{"timeout":30}}`,
		}},
		{name: "blackhole 10s after the copy is made", blackhole: true},
		// a retry budget smaller than the blackhole: the run gives up
		// between the copy and the restart
		{name: "blackhole 10s, 2 attempts of 1s", blackhole: true, args: []string{"--retries", "1", "--request-timeout", "1s"}},
		{name: "bandwidth 16 KB/s", mustSucceed: true, toxics: []string{
			`{"name":"bandwidth","type":"bandwidth","stream":"downstream","attributes":{"rate":16}}`,
		}},
	}
	var matrix []string
	t.Cleanup(func() {
		t.Logf("fault matrix:\n  %s", strings.Join(matrix, "\n  "))
	})
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if tc.http1 {
				t.Setenv("DISABLE_HTTP2", "1")
			}
			for run := 0; run < max(tc.runs, 1); run++ {
				// a proxy of its own per run: client-go caches transports by
				// address, and a pooled connection would dodge the dice
				fp := newFaultProxy(t, c)
				for _, toxic := range tc.toxics {
					fp.add(t, toxic)
				}
				if tc.blackhole {
					blackholeOnCopy(t, c, fp, 10*time.Second)
				}
				server := fmt.Sprintf("https://10.96.%d.%d:6443", i+1, run+1)
				matrix = append(matrix, fmt.Sprintf("%-40s %s", tc.name, faultedChange(t, c, fp, server, tc.args, tc.mustSucceed)))
			}
		})
	}
}

// faultedChange makes one change through the fault proxy, checks the
// outcome as TestNetworkFaults says, and describes it.
func faultedChange(t *testing.T, c *cluster.Cluster, fp *faultProxy, server string, args []string, mustSucceed bool) string {
	t.Helper()
	args = append(append([]string{"--kubeconfig", fp.kubeconfig, "--output", "json", "--server", server}, faultRunArgs...), args...)
	r := runCLI(t, args...)
	outcome := "succeeded"
	if r.Code != 0 {
		outcome = "failed (" + r.Msg + ")"
	}
	assert.Less(t, r.Elapsed, faultRunBound, "the run must end within its retry budget and --timeout")
	if r.Code == 0 {
		assert.False(t, r.Failed)
		assert.True(t, r.facts().ConfigMapChanged, "the change was made")
		assert.True(t, r.facts().Restarted, "and restarted for")
	} else {
		assert.Equal(t, 1, r.Code, "a failure exits 1")
		assert.True(t, r.Failed)
		assert.NotEmpty(t, r.Msg, "a failure says what failed")
	}
	if mustSucceed {
		assert.Equal(t, 0, r.Code, "msg: %s\nstderr: %s", r.Msg, r.Stderr)
	}

	// never a template on config its stamp does not name
	assert.True(t, hashConsistent(t, c), "the stamp matches the data of the ConfigMap the template mounts")
	made := strings.Contains(c.MountedConfigMap(t).Data["kubeconfig.conf"], server)
	if r.Code == 0 {
		assert.True(t, made, "a successful run leaves the template on the new config")
	}
	follow := runSync(t, c, "--server", server, "--probe-path", "none")
	require.Equal(t, 0, follow.Code, "follow-up run without faults: %s\n%s", follow.Msg, follow.Stderr)
	ff := follow.facts()
	owed := ff.Restarted && ff.RestartReason == kpsync.ReasonConfigChanged
	assert.True(t, made != owed, "exactly one must hold: the template mounts the new config (%t), the follow-up run makes the change (%t, reason %q)",
		made, owed, ff.RestartReason)
	assert.True(t, hashConsistent(t, c), "after the follow-up run nothing is owed")
	assert.Contains(t, c.MountedConfigMap(t).Data["kubeconfig.conf"], server)
	c.WaitRolloutComplete(t, time.Minute)
	// the record: written by the faulted run, the follow-up, or (when both
	// ended before the rollout did) this one
	last := runSync(t, c, "--server", server, "--probe-path", "none")
	require.Equal(t, 0, last.Code, "%s\n%s", last.Msg, last.Stderr)
	assert.False(t, last.Restarted)
	assertRecordFollows(t, c)

	followUp := "the change made by the run"
	if ff.Restarted {
		followUp = "the change made by the follow-up (" + ff.RestartReason + ")"
	}
	return fmt.Sprintf("%s in %.1fs, %d API requests, %d retries; %s",
		outcome, r.Elapsed.Seconds(), r.facts().APIRequests, strings.Count(r.Stderr, "retrying "), followUp)
}

// blackholeOnCopy watches the copies of the ConfigMap and, when the first
// one is created, makes the proxy drop everything both ways for d.
func blackholeOnCopy(t *testing.T, c *cluster.Cluster, fp *faultProxy, d time.Duration) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cms := c.Client.CoreV1().ConfigMaps(c.Namespace)
	selector := configmap.CopyOfLabel + "=" + cluster.Name
	list, err := cms.List(ctx, metav1.ListOptions{LabelSelector: selector})
	require.NoError(t, err)
	w, err := cms.Watch(ctx, metav1.ListOptions{LabelSelector: selector, ResourceVersion: list.ResourceVersion})
	require.NoError(t, err)
	names := []string{"blackhole-down", "blackhole-up"}
	over := make(chan struct{}) // closed when the blackhole is gone, or never came
	go func() {
		defer w.Stop()
		for ev := range w.ResultChan() {
			if _, ok := ev.Object.(*corev1.ConfigMap); !ok || ev.Type != watch.Added {
				continue
			}
			for i, stream := range []string{"downstream", "upstream"} {
				toxic := fmt.Sprintf(`{"name":%q,"type":"timeout","stream":%q,"attributes":{"timeout":0}}`, names[i], stream)
				if _, err := fp.proxy.Toxics.AddToxicJson(strings.NewReader(toxic)); err != nil {
					t.Errorf("add toxic %s: %v", toxic, err)
				}
			}
			time.AfterFunc(d, func() {
				defer close(over)
				for _, name := range names {
					if err := fp.proxy.Toxics.RemoveToxic(context.Background(), name); err != nil {
						t.Errorf("remove toxic %s: %v", name, err)
					}
				}
			})
			return
		}
		close(over)
	}()
	t.Cleanup(func() {
		cancel()
		<-over
	})
}
