package lock

import (
	"context"
	"io"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
)

func newLease(client *fake.Clientset, clock *clocktesting.FakeClock, id string) *Lease {
	log := logrus.New()
	log.SetOutput(io.Discard)
	return &Lease{Leases: client.CoordinationV1().Leases("kube-system"), Namespace: "kube-system", Name: "kube-proxy-sync", Identity: id,
		Duration: 30 * time.Second, Poll: time.Millisecond, Clock: clock, Log: logrus.NewEntry(log)}
}

func holder(t *testing.T, client *fake.Clientset) string {
	l, err := client.CoordinationV1().Leases("kube-system").Get(context.Background(), "kube-proxy-sync", metav1.GetOptions{})
	require.NoError(t, err)
	return ptr.Deref(l.Spec.HolderIdentity, "")
}

func TestAcquireReleaseAndContention(t *testing.T) {
	client := fake.NewClientset()
	clock := clocktesting.NewFakeClock(time.Now())
	a, b := newLease(client, clock, "a"), newLease(client, clock, "b")

	releaseA, err := a.Acquire(context.Background(), time.Second)
	require.NoError(t, err)
	assert.Equal(t, "a", holder(t, client))

	_, err = b.Acquire(context.Background(), 20*time.Millisecond)
	require.ErrorIs(t, err, ErrLocked)
	assert.Contains(t, err.Error(), "held by a")

	releaseA()
	assert.Equal(t, "", holder(t, client))
	releaseB, err := b.Acquire(context.Background(), time.Second)
	require.NoError(t, err)
	assert.Equal(t, "b", holder(t, client))
	releaseB()
}

func TestExpiredLeaseIsTakenOver(t *testing.T) {
	clock := clocktesting.NewFakeClock(time.Now())
	stale := metav1.NewMicroTime(clock.Now().Add(-time.Minute))
	client := fake.NewClientset(&coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: "kube-proxy-sync", Namespace: "kube-system"},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("crashed"), LeaseDurationSeconds: ptr.To(int32(30)),
			AcquireTime: &stale, RenewTime: &stale},
	})
	release, err := newLease(client, clock, "b").Acquire(context.Background(), time.Second)
	require.NoError(t, err)
	assert.Equal(t, "b", holder(t, client))
	release()
}

func TestLiveLeaseIsNotTakenOver(t *testing.T) {
	clock := clocktesting.NewFakeClock(time.Now())
	fresh := metav1.NewMicroTime(clock.Now().Add(-10 * time.Second))
	client := fake.NewClientset(&coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: "kube-proxy-sync", Namespace: "kube-system"},
		Spec:       coordinationv1.LeaseSpec{HolderIdentity: ptr.To("alive"), LeaseDurationSeconds: ptr.To(int32(30)), RenewTime: &fresh},
	})
	_, err := newLease(client, clock, "b").Acquire(context.Background(), 20*time.Millisecond)
	require.ErrorIs(t, err, ErrLocked)
	assert.Equal(t, "alive", holder(t, client))
}

func TestRenewalKeepsTheLeaseFresh(t *testing.T) {
	client := fake.NewClientset()
	clock := clocktesting.NewFakeClock(time.Now())
	release, err := newLease(client, clock, "a").Acquire(context.Background(), time.Second)
	require.NoError(t, err)
	defer release()
	start := clock.Now()
	// step past a renewal period and wait (bounded) for the renewer to write
	require.Eventually(t, func() bool { return clock.HasWaiters() }, 5*time.Second, time.Millisecond)
	clock.Step(11 * time.Second)
	require.Eventually(t, func() bool {
		l, err := client.CoordinationV1().Leases("kube-system").Get(context.Background(), "kube-proxy-sync", metav1.GetOptions{})
		return err == nil && l.Spec.RenewTime.Time.After(start)
	}, 5*time.Second, time.Millisecond)
}
