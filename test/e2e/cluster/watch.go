//go:build e2e

package cluster

import (
	"context"
	"sync"
	"testing"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
)

// Follow opens a watch with open (which may list or read first and start
// the watch at that resourceVersion) and hands fn, in a goroutine, every
// object of type T the watch delivers, with the event's type, until the
// watch ends or the returned stop is called (at the test's cleanup at the
// latest). open and fn run under a context that stop cancels; stop returns
// once fn is done.
func Follow[T runtime.Object](t testing.TB, open func(ctx context.Context) (watch.Interface, error), fn func(ctx context.Context, ev watch.EventType, obj T)) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	w, err := open(ctx)
	if err != nil {
		cancel()
		t.Fatalf("open the watch: %v", err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer w.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case ev, ok := <-w.ResultChan():
				if !ok {
					return
				}
				if obj, isT := ev.Object.(T); isT {
					fn(ctx, ev.Type, obj)
				}
			}
		}
	}()
	var once sync.Once
	stop = func() { once.Do(func() { cancel(); <-done }) }
	t.Cleanup(stop)
	return stop
}
