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
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"syscall"
	"time"

	"k8s.io/utils/clock"

	"github.com/kube-proxy-sync/kube-proxy-sync/internal/app"
)

func main() {
	out := flag.String("out", ".", "directory for cpu.pprof and heap.pprof")
	flag.Parse()
	if err := os.MkdirAll(*out, 0o755); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	cpu, err := os.Create(filepath.Join(*out, "cpu.pprof"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if err := pprof.StartCPUProfile(cpu); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
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

	code := app.Run(ctx, app.Streams{Out: os.Stdout, ErrOut: os.Stderr}, flag.Args(), app.Deps{Clock: clock.RealClock{}})

	close(done)
	<-sampled
	pprof.StopCPUProfile()
	_ = cpu.Close()
	if heap, err := os.Create(filepath.Join(*out, "heap.pprof")); err == nil {
		_ = pprof.Lookup("allocs").WriteTo(heap, 0)
		_ = heap.Close()
	}
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	fmt.Fprintf(os.Stderr, "kps-profile: exit %d; peak Go heap in use %.1f MB, peak Go runtime memory from the OS %.1f MB, peak RSS %.1f MB\n",
		code, float64(peakHeap)/1e6, float64(peakSys)/1e6, float64(ru.Maxrss)*1024/1e6)
	os.Exit(code)
}
