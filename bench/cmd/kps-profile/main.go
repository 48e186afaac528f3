// Command kps-profile runs kube-proxy-sync in-process (app.Run, the same
// entry point cmd/kube-proxy-sync calls) with pprof profiles, to find where
// the binary's time and memory go. It is a tool for investigating a missed
// benchmark target, not part of the benchmark:
//
//	go run ./bench/cmd/kps-profile -out DIR -- --kubeconfig K --server URL --probe-path none
//
// It writes DIR/cpu.pprof, DIR/heap.pprof (in-use at the end, and every
// allocation: go tool pprof -sample_index=alloc_space) and prints the peak of
// the Go runtime's own memory (heap in use, memory obtained from the OS),
// sampled every 50ms, next to the process's peak RSS.
//
// It also writes DIR/requests.tsv, every HTTP request the run sent (retries
// included), with when it started and ended relative to the start of the
// run, its method and path, status and response size, and prints a summary:
// the requests per verb and resource, how long the run took until its
// restart PATCH, how long it kept going after its last watch event. The
// client is built here (the same kube.NewForConfig as the binary's) so that
// the recorder sits under the retrying transport; the run's own
// api_requests figure is therefore 0.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"k8s.io/utils/clock"

	"github.com/kube-proxy-sync/kube-proxy-sync/internal/app"
	"github.com/kube-proxy-sync/kube-proxy-sync/internal/kube"
)

func main() {
	out := flag.String("out", ".", "directory for cpu.pprof, heap.pprof and requests.tsv")
	flag.Parse()
	if err := os.MkdirAll(*out, 0o755); err != nil {
		fail(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	start := time.Now()
	rec := &recorder{start: start}
	client, err := newClient(flag.Args(), rec)
	if err != nil {
		fail(err)
	}

	cpu, err := os.Create(filepath.Join(*out, "cpu.pprof"))
	if err != nil {
		fail(err)
	}
	if err := pprof.StartCPUProfile(cpu); err != nil {
		fail(err)
	}
	var peakHeap, peakSys uint64
	done := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		t := time.NewTicker(50 * time.Millisecond)
		defer t.Stop()
		var m runtime.MemStats
		for {
			runtime.ReadMemStats(&m)
			peakHeap, peakSys = max(peakHeap, m.HeapInuse), max(peakSys, m.Sys)
			select {
			case <-done:
				return
			case <-t.C:
			}
		}
	}()

	code := app.Run(ctx, app.Streams{Out: os.Stdout, ErrOut: os.Stderr}, flag.Args(), app.Deps{Clock: clock.RealClock{}, Kube: client})
	end := time.Since(start)

	close(done)
	<-sampled
	pprof.StopCPUProfile()
	_ = cpu.Close()
	if heap, err := os.Create(filepath.Join(*out, "heap.pprof")); err == nil {
		_ = pprof.Lookup("allocs").WriteTo(heap, 0)
		_ = heap.Close()
	}
	if f, err := os.Create(filepath.Join(*out, "requests.tsv")); err == nil {
		rec.writeTSV(f)
		_ = f.Close()
	}
	rec.summary(os.Stderr, end)
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	fmt.Fprintf(os.Stderr, "kps-profile: exit %d after %.2fs; peak Go heap in use %.1f MB, peak Go runtime memory from the OS %.1f MB, peak RSS %.1f MB\n",
		code, end.Seconds(), float64(peakHeap)/1e6, float64(peakSys)/1e6, float64(ru.Maxrss)*1024/1e6)
	os.Exit(code)
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "kps-profile:", err)
	os.Exit(1)
}

// newClient is the binary's client for the --kubeconfig/--context of args
// (else KUBECONFIG), with the recorder under its retrying transport.
func newClient(args []string, rec *recorder) (*kube.Client, error) {
	var o kube.Options
	for i, a := range args {
		for _, flagName := range []string{"--kubeconfig", "--context"} {
			v, ok := "", false
			if a == flagName && i+1 < len(args) {
				v, ok = args[i+1], true
			} else if rest, found := strings.CutPrefix(a, flagName+"="); found {
				v, ok = rest, true
			}
			if ok && flagName == "--kubeconfig" {
				o.Kubeconfig = v
			} else if ok {
				o.Context = v
			}
		}
	}
	cfg, err := kube.LoadConfig(o)
	if err != nil {
		return nil, err
	}
	cfg.Wrap(rec.wrap)
	// the binary's defaults (internal/app): 5 retries, 20s per request
	o.Retries, o.RequestTimeout = 5, 20*time.Second
	return kube.NewForConfig(cfg, o)
}

type request struct {
	method, path, query string
	status              int
	bytes               int64
	start, end          time.Duration
	// last is when the last byte of a streamed (watch) body was read
	last time.Duration
}

// recorder notes every request that reaches the wire.
type recorder struct {
	start time.Time
	mu    sync.Mutex
	reqs  []*request
}

func (r *recorder) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripper(func(hr *http.Request) (*http.Response, error) {
		q := &request{method: hr.Method, path: hr.URL.Path, query: hr.URL.RawQuery, start: time.Since(r.start)}
		r.mu.Lock()
		r.reqs = append(r.reqs, q)
		r.mu.Unlock()
		resp, err := rt.RoundTrip(hr)
		r.mu.Lock()
		defer r.mu.Unlock()
		q.end = time.Since(r.start)
		if err != nil {
			return nil, err
		}
		q.status = resp.StatusCode
		resp.Body = &countingBody{ReadCloser: resp.Body, r: r, q: q}
		return resp, nil
	})
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

type countingBody struct {
	io.ReadCloser
	r *recorder
	q *request
}

func (b *countingBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if n > 0 {
		b.r.mu.Lock()
		b.q.bytes += int64(n)
		b.q.last = time.Since(b.r.start)
		b.r.mu.Unlock()
	}
	return n, err
}

// kind is "METHOD resource" (list and watch told apart), e.g. "GET pods (watch)".
func (q *request) kind() string {
	parts := strings.Split(strings.Trim(q.path, "/"), "/")
	res := q.path
	switch {
	case len(parts) >= 5 && parts[len(parts)-3] == "namespaces":
		res = parts[len(parts)-1] // .../namespaces/NS/RESOURCE
	case len(parts) >= 6 && parts[len(parts)-4] == "namespaces":
		res = parts[len(parts)-2] // .../namespaces/NS/RESOURCE/NAME
	case len(parts) >= 3 && (parts[0] == "api" || parts[0] == "apis"):
		res = strings.Join(parts[len(parts)-2:], "/")
		if parts[len(parts)-2] == "v1" || strings.HasPrefix(parts[len(parts)-2], "v1") {
			res = parts[len(parts)-1]
		}
	}
	k := q.method + " " + res
	if strings.Contains(q.query, "watch=true") {
		k += " (watch)"
	} else if q.method == http.MethodGet && strings.Contains(q.query, "limit=") {
		k += " (list page)"
	}
	return k
}

func (r *recorder) writeTSV(w io.Writer) {
	r.mu.Lock()
	defer r.mu.Unlock()
	fmt.Fprintln(w, "start_s\tend_s\tlast_byte_s\tmethod\tpath\tquery\tstatus\tbytes")
	for _, q := range r.reqs {
		fmt.Fprintf(w, "%.3f\t%.3f\t%.3f\t%s\t%s\t%s\t%d\t%d\n", q.start.Seconds(), q.end.Seconds(), q.last.Seconds(), q.method, q.path, q.query, q.status, q.bytes)
	}
}

// summary prints the requests per kind and the time before the restart
// PATCH and after the last watch byte.
func (r *recorder) summary(w io.Writer, end time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	type agg struct {
		n     int
		bytes int64
		busy  time.Duration
	}
	kinds := map[string]*agg{}
	var patch, lastWatch time.Duration
	for _, q := range r.reqs {
		a := kinds[q.kind()]
		if a == nil {
			a = &agg{}
			kinds[q.kind()] = a
		}
		a.n++
		a.bytes += q.bytes
		if !strings.Contains(q.query, "watch=true") {
			a.busy += q.end - q.start
		}
		if q.method == http.MethodPatch && strings.Contains(q.path, "/daemonsets/") && patch == 0 {
			patch = q.end
		}
		if strings.Contains(q.query, "watch=true") {
			lastWatch = max(lastWatch, q.last)
		}
	}
	names := make([]string, 0, len(kinds))
	for k := range kinds {
		names = append(names, k)
	}
	sort.Strings(names)
	fmt.Fprintf(w, "kps-profile: %d requests\n", len(r.reqs))
	for _, k := range names {
		a := kinds[k]
		fmt.Fprintf(w, "  %-45s %4d  %9d bytes  %7.3fs until headers\n", k, a.n, a.bytes, a.busy.Seconds())
	}
	if patch > 0 {
		fmt.Fprintf(w, "kps-profile: first DaemonSet PATCH answered at %.3fs\n", patch.Seconds())
	}
	if lastWatch > 0 {
		fmt.Fprintf(w, "kps-profile: last watch byte at %.3fs, run ended %.3fs later\n", lastWatch.Seconds(), (end - lastWatch).Seconds())
	}
}
