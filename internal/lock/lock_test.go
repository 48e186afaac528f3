package lock

import (
	"context"
	"errors"
	"io"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	logtest "github.com/sirupsen/logrus/hooks/test"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
)

const ns, name = "kube-system", "kube-proxy-sync"

// newClient is a fake clientset that checks and moves resourceVersions on
// leases, as the API server does (the fake's tracker does neither).
func newClient(objs ...runtime.Object) *fake.Clientset {
	client := fake.NewClientset(objs...)
	gvr := coordinationv1.SchemeGroupVersion.WithResource("leases")
	var rv atomic.Int64
	rv.Store(100)
	write := func(a k8stesting.Action) (bool, runtime.Object, error) {
		l := a.(interface{ GetObject() runtime.Object }).GetObject().(*coordinationv1.Lease).DeepCopy()
		if a.GetVerb() == "update" {
			cur, err := client.Tracker().Get(gvr, a.GetNamespace(), l.Name)
			if err != nil {
				return true, nil, err
			}
			if l.ResourceVersion != cur.(*coordinationv1.Lease).ResourceVersion {
				return true, nil, apierrors.NewConflict(gvr.GroupResource(), l.Name, errors.New("the object has been modified"))
			}
		}
		l.ResourceVersion = strconv.FormatInt(rv.Add(1), 10)
		if a.GetVerb() == "create" {
			return true, l, client.Tracker().Create(gvr, l, a.GetNamespace())
		}
		return true, l, client.Tracker().Update(gvr, l, a.GetNamespace())
	}
	client.PrependReactor("create", "leases", write)
	client.PrependReactor("update", "leases", write)
	return client
}

func newLease(client *fake.Clientset, clock *clocktesting.FakeClock, id string) *Lease {
	log := logrus.New()
	log.SetOutput(io.Discard)
	return &Lease{Leases: client.CoordinationV1().Leases(ns), Namespace: ns, Name: name, Identity: id,
		Duration: 30 * time.Second, Poll: time.Second, Clock: clock, Log: logrus.NewEntry(log)}
}

func get(t *testing.T, client *fake.Clientset) *coordinationv1.Lease {
	t.Helper()
	l, err := client.CoordinationV1().Leases(ns).Get(context.Background(), name, metav1.GetOptions{})
	require.NoError(t, err)
	return l
}

func holder(t *testing.T, client *fake.Clientset) string {
	t.Helper()
	return ptr.Deref(get(t, client).Spec.HolderIdentity, "")
}

// drive moves the fake clock on by step each time something waits on it,
// calling each (if set) after every step, until the test ends.
func drive(t *testing.T, clock *clocktesting.FakeClock, step time.Duration, each func()) {
	t.Helper()
	done := make(chan struct{})
	t.Cleanup(func() { <-done })
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go func() {
		defer close(done)
		for {
			// wait (polling, until the test ends) for the code under
			// test to block on the clock, then move it on
			waiting := func(context.Context) (bool, error) { return clock.HasWaiters(), nil }
			if err := wait.PollUntilContextCancel(ctx, 100*time.Microsecond, true, waiting); err != nil {
				return
			}
			clock.Step(step)
			if each != nil {
				each()
			}
		}
	}()
}

func existing(holder string, renewed time.Time) *coordinationv1.Lease {
	t := metav1.NewMicroTime(renewed)
	return &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, ResourceVersion: "1"},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(holder), LeaseDurationSeconds: ptr.To(int32(30)),
			AcquireTime: &t, RenewTime: &t, LeaseTransitions: ptr.To(int32(3))},
	}
}

func TestAcquireReleaseAndContention(t *testing.T) {
	client := newClient()
	clock := clocktesting.NewFakeClock(time.Now())
	a, b := newLease(client, clock, "a"), newLease(client, clock, "b")

	_, releaseA, err := a.Acquire(context.Background(), time.Minute)
	require.NoError(t, err)
	assert.Equal(t, "a", holder(t, client))

	drive(t, clock, time.Second, nil)
	_, _, err = b.Acquire(context.Background(), 20*time.Second)
	require.ErrorIs(t, err, ErrLocked)
	assert.Contains(t, err.Error(), "held by a")
	assert.Equal(t, "a", holder(t, client), "a renewed while b waited")

	releaseA()
	assert.Equal(t, "", holder(t, client))
	assert.Equal(t, int32(1), ptr.Deref(get(t, client).Spec.LeaseDurationSeconds, 0), "a released lease is valid for a second only, as client-go's")
	_, releaseB, err := b.Acquire(context.Background(), time.Second)
	require.NoError(t, err)
	assert.Equal(t, "b", holder(t, client))
	releaseB()
	releaseB() // idempotent
}

// A lease whose renewTime is old by the local clock is not taken at once:
// the holder's clock may be behind. It is taken once this run has seen the
// record unchanged for the lease duration.
func TestExpiryIsByLocalObservation(t *testing.T) {
	clock := clocktesting.NewFakeClock(time.Now())
	client := newClient(existing("crashed", clock.Now().Add(-time.Hour)))
	start := clock.Now()
	drive(t, clock, time.Second, nil)
	_, release, err := newLease(client, clock, "b").Acquire(context.Background(), time.Minute)
	require.NoError(t, err)
	defer release()
	assert.GreaterOrEqual(t, clock.Since(start), 30*time.Second, "taken before the lease duration was observed")
	l := get(t, client)
	assert.Equal(t, "b", ptr.Deref(l.Spec.HolderIdentity, ""))
	assert.Equal(t, int32(4), ptr.Deref(l.Spec.LeaseTransitions, 0))
}

// A holder that keeps renewing keeps the lease, whatever its renewTime
// says: here its clock is an hour behind ours.
func TestRenewingHolderKeepsTheLeaseDespiteSkew(t *testing.T) {
	clock := clocktesting.NewFakeClock(time.Now())
	client := newClient(existing("alive", clock.Now().Add(-time.Hour)))
	renewals := 0
	drive(t, clock, time.Second, func() {
		renewals++
		if renewals%10 == 0 { // "alive" renews every 10s of our time
			l := get(t, client)
			l.Spec.RenewTime = ptr.To(metav1.NewMicroTime(clock.Now().Add(-time.Hour)))
			_, err := client.CoordinationV1().Leases(ns).Update(context.Background(), l, metav1.UpdateOptions{})
			assert.NoError(t, err)
		}
	})
	_, _, err := newLease(client, clock, "b").Acquire(context.Background(), 2*time.Minute)
	require.ErrorIs(t, err, ErrLocked)
	assert.Equal(t, "alive", holder(t, client))
}

func TestRenewalIsOneUpdate(t *testing.T) {
	client := newClient()
	clock := clocktesting.NewFakeClock(time.Now())
	_, release, err := newLease(client, clock, "a").Acquire(context.Background(), time.Second)
	require.NoError(t, err)
	defer release()
	client.ClearActions()
	start := clock.Now()
	require.Eventually(t, clock.HasWaiters, 5*time.Second, time.Millisecond)
	clock.Step(10 * time.Second)
	require.Eventually(t, func() bool {
		l, err := client.Tracker().Get(coordinationv1.SchemeGroupVersion.WithResource("leases"), ns, name)
		return err == nil && l.(*coordinationv1.Lease).Spec.RenewTime.After(start)
	}, 5*time.Second, time.Millisecond)
	var verbs []string
	for _, a := range client.Actions() {
		verbs = append(verbs, a.GetVerb())
	}
	assert.Equal(t, []string{"update"}, verbs)
}

// A holder that cannot renew within RenewDeadline cancels its run, before
// the lease duration has passed (when another may take over).
func TestFailedRenewalCancelsTheRun(t *testing.T) {
	client := newClient()
	clock := clocktesting.NewFakeClock(time.Now())
	held, release, err := newLease(client, clock, "a").Acquire(context.Background(), time.Second)
	require.NoError(t, err)
	defer release()
	acquired := clock.Now()
	client.PrependReactor("*", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, errors.New("connection refused")
	})
	drive(t, clock, time.Second, nil)
	select {
	case <-held.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the run was not cancelled")
	}
	require.ErrorIs(t, context.Cause(held), ErrLost)
	assert.Contains(t, context.Cause(held).Error(), "connection refused")
	lost := clock.Since(acquired)
	assert.GreaterOrEqual(t, lost, 20*time.Second)
	assert.Less(t, lost, 30*time.Second, "still running when others may take over")
}

func TestTakenOverLeaseCancelsTheRun(t *testing.T) {
	client := newClient()
	clock := clocktesting.NewFakeClock(time.Now())
	held, release, err := newLease(client, clock, "a").Acquire(context.Background(), time.Second)
	require.NoError(t, err)
	defer release()
	l := get(t, client)
	l.Spec.HolderIdentity = ptr.To("b")
	_, err = client.CoordinationV1().Leases(ns).Update(context.Background(), l, metav1.UpdateOptions{})
	require.NoError(t, err)
	drive(t, clock, time.Second, nil)
	select {
	case <-held.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the run was not cancelled")
	}
	require.ErrorIs(t, context.Cause(held), ErrLost)
	assert.Contains(t, context.Cause(held).Error(), "taken over by b")
	release()
	assert.Equal(t, "b", holder(t, client), "a must not clear a lease it lost")
}

func TestCancelledRunReleases(t *testing.T) {
	client := newClient()
	clock := clocktesting.NewFakeClock(time.Now())
	ctx, cancel := context.WithCancel(context.Background())
	held, release, err := newLease(client, clock, "a").Acquire(ctx, time.Second)
	require.NoError(t, err)
	cancel()
	<-held.Done()
	release()
	assert.Equal(t, "", holder(t, client))
}

// A holder identity is whatever another client wrote: before it reaches
// the log (stderr) or an error (the result, the audit log), control
// characters, line breaks and bidi overrides are escaped and its length is
// capped, so it can neither forge a log line nor flood the output.
func TestHostileHolderIsShownSafely(t *testing.T) {
	hostile := "evil\n" + `time="2026-01-01" level=info msg="restart done"` + "\r\x1b[2K\u202egnp.exe\x00" + strings.Repeat("A", 100000)
	clock := clocktesting.NewFakeClock(time.Now())
	client := newClient(existing(hostile, clock.Now()))
	l := newLease(client, clock, "me")
	hook := logtest.NewLocal(l.Log.Logger)
	_, _, err := l.Acquire(context.Background(), 0)
	require.ErrorIs(t, err, ErrLocked)
	assert.Equal(t, hostile, holder(t, client), "the lease itself is not ours to change")
	var logged []string
	for _, e := range hook.AllEntries() {
		logged = append(logged, e.Message)
	}
	for name, text := range map[string]string{"error": err.Error(), "log": strings.Join(logged, "|")} {
		require.Contains(t, text, "held by evil", name)
		for _, bad := range []string{"\n" + `time="2026-01-01"`, "\r", "\x1b", "\u202e", "\x00"} {
			assert.NotContains(t, text, bad, name)
		}
		assert.Contains(t, text, `evil\ntime=`, "%s: a newline is shown escaped", name)
		assert.Less(t, len(text), 1000, "%s: the holder is capped", name)
		assert.Contains(t, text, "bytes in all", name)
	}
}
