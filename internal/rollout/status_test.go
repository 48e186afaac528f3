package rollout

import (
	"context"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	k8stesting "k8s.io/client-go/testing"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/kube-proxy-sync/kube-proxy-sync/internal/kube/kubefake"
	"github.com/kube-proxy-sync/kube-proxy-sync/internal/nodes"
)

// statusDS is the DaemonSet at resourceVersion rv, generation 2, with the
// given status: observed generation, desired, updated, available, ready.
func statusDS(rv string, observed int64, desired, updated, available, ready int32) *appsv1.DaemonSet {
	return &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: "kube-proxy", Namespace: "kube-system", ResourceVersion: rv, Generation: 2},
		Status: appsv1.DaemonSetStatus{ObservedGeneration: observed, DesiredNumberScheduled: desired,
			UpdatedNumberScheduled: updated, NumberAvailable: available, NumberReady: ready},
	}
}

func TestProgressMark(t *testing.T) {
	m := markOf(statusDS("1", 1, 10, 10, 10, 10)) // before the controller saw the restart
	steps := []struct {
		ds   *appsv1.DaemonSet
		want bool
	}{
		{statusDS("2", 2, 10, 0, 10, 10), true},  // the controller saw it
		{statusDS("3", 2, 10, 0, 9, 9), false},   // an old pod went
		{statusDS("4", 2, 10, 1, 9, 9), true},    // a new one is there
		{statusDS("5", 2, 10, 1, 10, 10), false}, // and Ready: back where it was
		{statusDS("6", 2, 10, 1, 9, 9), false},   // a pod flapping
		{statusDS("7", 2, 10, 1, 10, 10), false},
		{statusDS("8", 1, 10, 5, 10, 10), false}, // an older generation's status
		{statusDS("9", 2, 10, 2, 10, 10), true},
	}
	for i, s := range steps {
		assert.Equal(t, s.want, m.advance(s.ds), "step %d", i)
	}
}

// followFixture serves the DaemonSet watch from a fake watcher the test
// drives: Modify blocks until the follower took the event.
func followFixture(t *testing.T) (Client, *clocktesting.FakeClock, chan *watch.FakeWatcher) {
	t.Helper()
	cs, kc := kubefake.New()
	watches := make(chan *watch.FakeWatcher, 1)
	cs.PrependWatchReactor("daemonsets", func(k8stesting.Action) (bool, watch.Interface, error) {
		w := watch.NewFake()
		watches <- w
		return true, w, nil
	})
	clk := clocktesting.NewFakeClock(time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC))
	return Client{DaemonSets: kc.DaemonSets("kube-system"), Namespace: "kube-system", Name: "kube-proxy",
		Clock: clk, Log: logrus.NewEntry(logrus.New())}, clk, watches
}

type followed struct {
	complete bool
	err      error
}

// follow runs FollowStatus with a stall time of 10s (and an hour for the
// other timers); seen gets the resourceVersion of every status it is shown.
func follow(ctx context.Context, c Client, from *appsv1.DaemonSet, seen chan<- string) chan followed {
	return followWith(ctx, c, NewTimers(c.Clock, time.Hour, time.Hour, 10*time.Second), from, seen)
}

func followWith(ctx context.Context, c Client, timers *Timers, from *appsv1.DaemonSet, seen chan<- string) chan followed {
	out := make(chan followed, 1)
	go func() {
		defer timers.Stop()
		complete, err := c.FollowStatus(ctx, from, timers, func(ds *appsv1.DaemonSet, _ bool) {
			seen <- ds.ResourceVersion
		})
		out <- followed{complete, err}
	}()
	return out
}

func wait(t *testing.T, out chan followed) followed {
	t.Helper()
	select {
	case r := <-out:
		return r
	case <-time.After(10 * time.Second):
		t.Fatal("FollowStatus did not return")
		return followed{}
	}
}

func TestFollowStatusEndsWhenComplete(t *testing.T) {
	c, _, watches := followFixture(t)
	seen := make(chan string, 10)
	out := follow(context.Background(), c, statusDS("1", 1, 3, 3, 3, 3), seen)
	w := <-watches
	w.Modify(statusDS("2", 2, 3, 0, 3, 3))
	w.Modify(statusDS("3", 2, 3, 2, 2, 2))
	w.Modify(statusDS("4", 2, 3, 3, 3, 3))
	r := wait(t, out)
	require.NoError(t, r.err)
	assert.True(t, r.complete)
	close(seen)
	var got []string
	for rv := range seen {
		got = append(got, rv)
	}
	assert.Equal(t, []string{"2", "3", "4"}, got)
}

// The stall time runs from the last progress; a status that moves without
// progress (a pod flapping) does not restart it. A status shown is seen
// only while the follower still follows.
func TestFollowStatusGivesUpWhenNothingMoves(t *testing.T) {
	c, clk, watches := followFixture(t)
	seen := make(chan string)
	out := follow(context.Background(), c, statusDS("1", 1, 3, 3, 3, 3), seen)
	w := <-watches
	show := func(ds *appsv1.DaemonSet) {
		t.Helper()
		go w.Modify(ds)
		select {
		case rv := <-seen:
			assert.Equal(t, ds.ResourceVersion, rv)
		case r := <-out:
			t.Fatalf("returned %+v before status %s", r, ds.ResourceVersion)
		}
	}
	show(statusDS("2", 2, 3, 1, 2, 2)) // progress
	show(statusDS("3", 2, 3, 1, 1, 1)) // none: a new pod went unready
	clk.Step(5 * time.Second)
	show(statusDS("4", 2, 3, 2, 2, 2)) // progress: the stall time starts again
	show(statusDS("5", 2, 3, 2, 1, 1)) // no progress: the stall time runs from "4"
	clk.Step(6 * time.Second)
	// 11s after the first progress, 6s after the last: still following
	show(statusDS("6", 2, 3, 2, 2, 2)) // back where it was: no progress
	clk.Step(4 * time.Second)          // 10s after the last progress
	r := wait(t, out)
	require.NoError(t, r.err)
	assert.False(t, r.complete, "stalled, not complete")
}

func TestFollowStatusAlreadyComplete(t *testing.T) {
	c, _, watches := followFixture(t)
	ds := statusDS("1", 2, 3, 3, 3, 3)
	r := wait(t, follow(context.Background(), c, ds, make(chan string)))
	require.NoError(t, r.err)
	assert.True(t, r.complete)
	assert.Empty(t, watches, "no watch")
}

func TestFollowStatusDaemonSetDeleted(t *testing.T) {
	c, _, watches := followFixture(t)
	out := follow(context.Background(), c, statusDS("1", 1, 3, 3, 3, 3), make(chan string))
	(<-watches).Delete(statusDS("2", 2, 3, 0, 3, 3))
	r := wait(t, out)
	assert.ErrorIs(t, r.err, ErrDeleted)
}

func TestFollowStatusInterrupted(t *testing.T) {
	c, _, watches := followFixture(t)
	ctx, cancel := context.WithCancel(context.Background())
	out := follow(ctx, c, statusDS("1", 1, 3, 3, 3, 3), make(chan string))
	<-watches
	cancel()
	r := wait(t, out)
	assert.ErrorIs(t, r.err, context.Canceled)
}

// Following the status, no progress for the progress deadline ends the
// wait with ErrNoProgress, whatever the stall time.
func TestFollowStatusEndsAtTheProgressDeadline(t *testing.T) {
	c, clk, watches := followFixture(t)
	seen := make(chan string)
	out := followWith(context.Background(), c, NewTimers(c.Clock, 30*time.Second, time.Hour, time.Hour), statusDS("1", 1, 3, 3, 3, 3), seen)
	w := <-watches
	show := func(ds *appsv1.DaemonSet) {
		t.Helper()
		go w.Modify(ds)
		select {
		case <-seen:
		case r := <-out:
			t.Fatalf("returned %+v before status %s", r, ds.ResourceVersion)
		}
	}
	show(statusDS("2", 2, 3, 1, 2, 2)) // progress
	clk.Step(20 * time.Second)
	show(statusDS("3", 2, 3, 2, 2, 2)) // progress 20s later: the deadline starts again
	clk.Step(20 * time.Second)
	show(statusDS("4", 2, 3, 2, 1, 1)) // no progress; 20s after the last, still following
	clk.Step(10 * time.Second)
	r := wait(t, out)
	assert.ErrorIs(t, r.err, ErrNoProgress)
	assert.False(t, r.complete)
}

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
