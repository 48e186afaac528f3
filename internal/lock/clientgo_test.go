package lock

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/utils/clock"
)

// The lease is the record client-go's LeaseLock keeps, so a run and a
// client-go leader elector on the same Lease exclude each other. (Only this
// test links leaderelection; the binary cannot afford it.)
func TestExcludesClientGoLeaderElection(t *testing.T) {
	client := newClient()
	elector := func(ctx context.Context, leading chan<- struct{}) {
		leaderelection.RunOrDie(ctx, leaderelection.LeaderElectionConfig{
			Lock: &resourcelock.LeaseLock{
				LeaseMeta:  metav1.ObjectMeta{Name: name, Namespace: ns},
				Client:     client.CoordinationV1(),
				LockConfig: resourcelock.ResourceLockConfig{Identity: "client-go"},
			},
			LeaseDuration: 5 * time.Second, RenewDeadline: 2 * time.Second, RetryPeriod: 100 * time.Millisecond,
			ReleaseOnCancel: true,
			Callbacks: leaderelection.LeaderCallbacks{
				OnStartedLeading: func(context.Context) { close(leading) },
				OnStoppedLeading: func() {},
			},
		})
	}
	run := newLease(client, nil, "run")
	// renewals 25 times per lease duration: a loaded test machine must
	// stall for five seconds to make the run lose it (a 2-second lease
	// flaked once on a busy 2-core machine)
	run.Clock, run.Duration, run.RenewEvery, run.Poll = clock.RealClock{}, 5*time.Second, 200*time.Millisecond, 100*time.Millisecond

	// client-go leads: the run waits, then gives up
	ctx, stop := context.WithCancel(context.Background())
	leading, stopped := make(chan struct{}), make(chan struct{})
	go func() { elector(ctx, leading); close(stopped) }()
	select {
	case <-leading:
	case <-time.After(10 * time.Second):
		t.Fatal("client-go's elector did not take a free lease")
	}
	_, _, err := run.Acquire(context.Background(), 1500*time.Millisecond)
	require.ErrorIs(t, err, ErrLocked)
	assert.Contains(t, err.Error(), "held by client-go")

	// client-go releases on cancel: the run takes the lease at once
	stop()
	<-stopped
	held, release, err := run.Acquire(context.Background(), 0)
	require.NoError(t, err)
	assert.Equal(t, "run", holder(t, client))

	// the run leads: client-go's elector does not, until the run releases
	ctx, stop = context.WithCancel(context.Background())
	defer stop()
	leading = make(chan struct{})
	go elector(ctx, leading)
	select {
	case <-leading:
		t.Fatal("client-go's elector took a lease the run holds and renews")
	case <-time.After(6 * time.Second): // longer than the lease duration
	}
	require.NoError(t, context.Cause(held), "the run lost its lease")
	release()
	select {
	case <-leading:
	case <-time.After(10 * time.Second):
		t.Fatal("client-go's elector did not take the released lease")
	}
}
