package rollout

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	k8stesting "k8s.io/client-go/testing"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/kube-proxy-sync/kube-proxy-sync/internal/kube/kubefake"
	"github.com/kube-proxy-sync/kube-proxy-sync/internal/nodes"
)

// Progress starts every timer again; the recheck falls due once per
// period without progress.
func TestTimersRunFromTheLastProgress(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC))
	tm := NewTimers(clk, 30*time.Second, 15*time.Second, 10*time.Second)
	defer tm.Stop()
	assert.False(t, tm.stalled())
	clk.Step(10 * time.Second)
	assert.True(t, tm.stalled(), "10s without progress")
	assert.False(t, tm.recheckDue())
	tm.Progress()
	assert.False(t, tm.stalled(), "progress starts the stall time again")
	clk.Step(15 * time.Second)
	assert.True(t, tm.recheckDue(), "15s without progress")
	assert.False(t, tm.recheckDue(), "once per period")
	clk.Step(10 * time.Second)
	assert.False(t, tm.recheckDue(), "10s after the last recheck")
	assert.False(t, tm.Overdue(), "25s since the last progress")
	clk.Step(5 * time.Second)
	assert.True(t, tm.recheckDue(), "15s after the last recheck")
	assert.True(t, tm.Overdue(), "30s since the last progress")
	tm.Progress()
	assert.False(t, tm.Overdue())
}

// A node finishing during Track is progress: the deadline runs from it.
func TestTrackDeadlineRunsFromTheLastNodeFinished(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC))
	cs, kc := kubefake.New()
	w := watch.NewFake()
	cs.PrependWatchReactor("pods", func(k8stesting.Action) (bool, watch.Interface, error) { return true, w, nil })
	c := Client{Pods: kc.Pods("kube-system"), Namespace: "kube-system", Name: "kube-proxy", Clock: clk}
	f := newFleet(nil, pod("a1", "node-a", "1", true), pod("b1", "node-b", "1", true))
	f.SetGeneration(2)
	f.resourceVersion = "1"
	timers := NewTimers(clk, 30*time.Second, time.Hour, time.Hour)
	defer timers.Stop()
	stepped := make(chan struct{}, 1)
	out := make(chan error, 1)
	go func() {
		out <- c.Track(context.Background(), f, nodes.Policy{}, timers, func() (bool, error) {
			stepped <- struct{}{}
			return false, nil
		})
	}()
	next := func(when string) {
		t.Helper()
		select {
		case <-stepped:
		case err := <-out:
			t.Fatalf("%s: Track ended: %v", when, err)
		}
	}
	next("before the watch")
	clk.Step(20 * time.Second)
	next("the tick at 20s")
	a1, a2 := pod("a1", "node-a", "1", true), pod("a2", "node-a", "2", true)
	a1.ResourceVersion, a2.ResourceVersion = "2", "3"
	w.Delete(runtime.Object(a1)) // node-a's pod replaced at 20s
	next("node-a's old pod gone")
	w.Add(runtime.Object(a2))
	next("node-a finished")
	require.Equal(t, 1, f.PendingCount())
	clk.Step(20 * time.Second)
	next("the tick at 40s, 20s after node-a") // the deadline would have ended it here
	clk.Step(10 * time.Second)
	select {
	case err := <-out:
		assert.ErrorIs(t, err, ErrNoProgress, "30s after node-a")
	case <-stepped:
		t.Fatal("still waiting 30s after the last node finished")
	case <-time.After(10 * time.Second):
		t.Fatal("Track did not end")
	}
}
