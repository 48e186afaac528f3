// Package lock serialises runs with a coordination.k8s.io Lease, so two
// runs started at once never restart kube-proxy twice for one change. A
// holder that crashed stops renewing; its lease expires and is taken over.
package lock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sirupsen/logrus"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	waitpkg "k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"

	"github.com/kube-proxy-sync/kube-proxy-sync/internal/kube"
)

// ErrLocked is returned when another run held the lease for the whole wait.
var ErrLocked = errors.New("locked")

// Lease is one named lease.
type Lease struct {
	// Leases is the client of the lease's namespace.
	Leases    kube.Leases
	Namespace string
	Name      string
	Identity  string
	// Duration after the last renewal at which the lease counts as abandoned.
	Duration time.Duration
	// Poll is how often a waiting run looks at the lease again.
	Poll  time.Duration
	Clock clock.WithTicker
	Log   *logrus.Entry
}

// Acquire takes the lease, waiting at most wait for its holder to release it
// or let it expire, and keeps renewing it until release is called.
func (l *Lease) Acquire(ctx context.Context, wait time.Duration) (release func(), err error) {
	holder := ""
	// the wait is bounded here rather than by a deadline on ctx, so that a
	// request in flight is never cut short by it
	deadline := time.Now().Add(wait)
	err = waitpkg.PollUntilContextCancel(ctx, l.Poll, true, func(ctx context.Context) (bool, error) {
		ok, h, err := l.tryTake(ctx)
		if err != nil || ok {
			return ok, err
		}
		if h != holder {
			l.Log.Infof("waiting for lease %s/%s held by %s (up to %s)", l.Namespace, l.Name, h, wait)
			holder = h
		}
		if !time.Now().Before(deadline) {
			return false, fmt.Errorf("%w: lease %s/%s is held by %s after waiting %s; another kube-proxy-sync run is active — retry later or raise --lock-timeout", ErrLocked, l.Namespace, l.Name, holder, wait)
		}
		return false, nil
	})
	if errors.Is(err, ErrLocked) {
		return nil, err
	}
	if err != nil {
		return nil, fmt.Errorf("acquire lease %s/%s: %w", l.Namespace, l.Name, err)
	}
	renewCtx, stop := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan struct{})
	go func() {
		defer close(done)
		l.renew(renewCtx)
	}()
	return func() {
		stop()
		<-done
		l.release()
	}, nil
}

// tryTake takes the lease if it is free, expired or ours. It reports the
// holder when it could not.
func (l *Lease) tryTake(ctx context.Context) (bool, string, error) {
	leases := l.Leases
	now := metav1.NewMicroTime(l.Clock.Now())
	cur, err := leases.Get(ctx, l.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		_, err = leases.Create(ctx, &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: l.Name, Namespace: l.Namespace},
			Spec:       l.spec(now),
		}, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			return false, "another run", nil // lost the race; look again
		}
		return err == nil, "", l.explain(err)
	}
	if err != nil {
		return false, "", l.explain(err)
	}
	h := ptr.Deref(cur.Spec.HolderIdentity, "")
	if h != "" && h != l.Identity && !l.expired(cur) {
		return false, h, nil
	}
	if h != "" && h != l.Identity {
		l.Log.Warnf("taking over lease %s/%s from %s: not renewed for %s", l.Namespace, l.Name, h, l.Duration)
	}
	next := cur.DeepCopy()
	next.Spec = l.spec(now)
	next.Spec.LeaseTransitions = ptr.To(ptr.Deref(cur.Spec.LeaseTransitions, 0) + 1)
	_, err = leases.Update(ctx, next, metav1.UpdateOptions{})
	if apierrors.IsConflict(err) {
		return false, h, nil // someone else took it first
	}
	return err == nil, h, l.explain(err)
}

func (l *Lease) spec(now metav1.MicroTime) coordinationv1.LeaseSpec {
	return coordinationv1.LeaseSpec{
		HolderIdentity:       ptr.To(l.Identity),
		LeaseDurationSeconds: ptr.To(int32(l.Duration / time.Second)),
		AcquireTime:          &now,
		RenewTime:            &now,
	}
}

func (l *Lease) expired(cur *coordinationv1.Lease) bool {
	renewed := cur.Spec.RenewTime
	if renewed == nil {
		renewed = cur.Spec.AcquireTime
	}
	if renewed == nil {
		return true
	}
	d := time.Duration(ptr.Deref(cur.Spec.LeaseDurationSeconds, int32(l.Duration/time.Second))) * time.Second
	return l.Clock.Since(renewed.Time) > d
}

func (l *Lease) renew(ctx context.Context) {
	t := l.Clock.NewTicker(l.Duration / 3)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		}
		err := l.update(ctx, func(s *coordinationv1.LeaseSpec) bool {
			if ptr.Deref(s.HolderIdentity, "") != l.Identity {
				return false
			}
			s.RenewTime = ptr.To(metav1.NewMicroTime(l.Clock.Now()))
			return true
		})
		if err != nil && ctx.Err() == nil {
			l.Log.Warnf("renew lease %s/%s: %v", l.Namespace, l.Name, err)
		}
	}
}

// release clears the holder so the next run need not wait for expiry.
func (l *Lease) release() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := l.update(ctx, func(s *coordinationv1.LeaseSpec) bool {
		if ptr.Deref(s.HolderIdentity, "") != l.Identity {
			return false
		}
		s.HolderIdentity = nil
		return true
	})
	if err != nil {
		l.Log.Warnf("release lease %s/%s: %v (it expires by itself after %s)", l.Namespace, l.Name, err, l.Duration)
	}
}

func (l *Lease) update(ctx context.Context, mutate func(*coordinationv1.LeaseSpec) bool) error {
	leases := l.Leases
	cur, err := leases.Get(ctx, l.Name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	if !mutate(&cur.Spec) {
		return nil
	}
	_, err = leases.Update(ctx, cur, metav1.UpdateOptions{})
	return err
}

func (l *Lease) explain(err error) error {
	if apierrors.IsForbidden(err) {
		return fmt.Errorf("forbidden: the kubeconfig user needs get, create and update on leases.coordination.k8s.io %q (see roles/kube_proxy_sync/files/rbac.yaml): %w", l.Name, err)
	}
	return err
}
