// Package lock serialises runs with a coordination.k8s.io Lease, so two
// runs started at once never restart kube-proxy twice for one change.
//
// It is leader election with the rules of client-go's leaderelection and
// LeaseLock, on the same Lease record (holderIdentity, leaseDurationSeconds,
// acquireTime, renewTime, leaseTransitions), so a client-go elector and a
// run exclude each other:
//   - a lease held by another counts as expired only when this process has
//     seen its record unchanged for leaseDurationSeconds on its own clock,
//     never by comparing the holder's renewTime with the local clock (two
//     hosts with skewed clocks could both hold it);
//   - the holder renews; when it cannot renew within RenewDeadline (shorter
//     than the lease duration) it has lost the lease, and the context the
//     run works under is cancelled;
//   - release on cancel: the holder clears holderIdentity, so the next run
//     need not wait for expiry.
//
// client-go's leaderelection package itself is not imported: it links the
// whole clientset and its informers (every API group, about 21 MB of
// binary, measured), against a 20 MB budget for the whole tool.
package lock

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/sirupsen/logrus"
	coordinationv1 "k8s.io/api/coordination/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"

	"github.com/kube-proxy-sync/kube-proxy-sync/internal/kube"
)

// ErrLocked is returned when another run held the lease for the whole wait.
var ErrLocked = errors.New("locked")

// ErrLost is the cause of the held context's cancellation when the lease
// could not be renewed in time, or another holder took it.
var ErrLost = errors.New("lost the lease")

// Lease is one named lease.
type Lease struct {
	// Leases is the client of the lease's namespace.
	Leases    kube.Leases
	Namespace string
	Name      string
	Identity  string
	// Duration is how long a lease lasts without renewal, as observed by
	// the runs waiting for it.
	Duration time.Duration
	// RenewDeadline is how long the holder keeps trying to renew before it
	// gives the lease up (shorter than Duration, so it stops before anyone
	// else may take over). Default: 2/3 of Duration.
	RenewDeadline time.Duration
	// RenewEvery is how often the holder renews. Default: 1/3 of Duration.
	RenewEvery time.Duration
	// Poll is how often a waiting run looks at the lease again, and how
	// often a holder retries a failed renewal.
	Poll  time.Duration
	Clock clock.WithTicker
	Log   *logrus.Entry

	// observed is the lease as last read or written, and observedAt the
	// local time its record last changed.
	observed   *coordinationv1.Lease
	observedAt time.Time
}

// Acquire takes the lease, waiting at most wait for its holder to release it
// or let it expire, and keeps renewing it until release is called. The
// returned context is ctx, cancelled with cause ErrLost if the lease is
// lost: the caller does its work under it. release stops renewing and
// clears the holder; it is safe to call more than once.
func (l *Lease) Acquire(ctx context.Context, wait time.Duration) (held context.Context, release func(), err error) {
	l.defaults()
	holder := ""
	deadline := l.Clock.Now().Add(wait)
	for {
		ok, h, err := l.tryAcquireOrRenew(ctx)
		if err != nil {
			return nil, nil, fmt.Errorf("acquire lease %s/%s: %w", l.Namespace, l.Name, err)
		}
		if ok {
			break
		}
		if h != holder {
			l.Log.Infof("waiting for lease %s/%s held by %s (up to %s)", l.Namespace, l.Name, shown(h), wait)
			holder = h
		}
		// the wait is bounded here rather than by a deadline on ctx, so
		// that a request in flight is never cut short by it
		if !l.Clock.Now().Before(deadline) {
			return nil, nil, fmt.Errorf("%w: lease %s/%s is held by %s after waiting %s; another kube-proxy-sync run is active — retry later or raise --lock-timeout", ErrLocked, l.Namespace, l.Name, shown(holder), wait)
		}
		select {
		case <-ctx.Done():
			return nil, nil, fmt.Errorf("acquire lease %s/%s: %w", l.Namespace, l.Name, ctx.Err())
		case <-l.Clock.After(l.Poll):
		}
	}

	held, lose := context.WithCancelCause(ctx)
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		l.renew(held, stop, lose)
	}()
	released := false
	return held, func() {
		if released {
			return
		}
		released = true
		close(stop)
		<-done
		lose(context.Canceled)
		l.release()
	}, nil
}

func (l *Lease) defaults() {
	if l.RenewDeadline <= 0 {
		l.RenewDeadline = l.Duration * 2 / 3
	}
	if l.RenewEvery <= 0 {
		l.RenewEvery = l.Duration / 3
	}
}

// tryAcquireOrRenew takes the lease if it is free, ours, or expired by local
// observation. It reports the holder when it could not.
func (l *Lease) tryAcquireOrRenew(ctx context.Context) (bool, string, error) {
	now := l.Clock.Now()
	// the holder renews from what it last wrote: one request, not two;
	// a conflict means someone else wrote it, so read it again
	if l.observed != nil && holderOf(l.observed) == l.Identity {
		next := l.observed.DeepCopy()
		next.Spec.RenewTime = ptr.To(metav1.NewMicroTime(now))
		next.Spec.LeaseDurationSeconds = ptr.To(int32(l.Duration / time.Second))
		if out, err := l.Leases.Update(ctx, next, metav1.UpdateOptions{}); err == nil {
			l.observe(out, now)
			return true, l.Identity, nil
		} else if !apierrors.IsConflict(err) {
			return false, l.Identity, l.request().Explain(err)
		}
	}
	cur, err := l.Leases.Get(ctx, l.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		out, err := l.Leases.Create(ctx, &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: l.Name, Namespace: l.Namespace},
			Spec:       l.spec(now, now, 0),
		}, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			return false, "another run", nil // lost the race; look again
		}
		if err != nil {
			return false, "", l.request().Explain(err)
		}
		l.observe(out, now)
		return true, l.Identity, nil
	}
	if err != nil {
		return false, "", l.request().Explain(err)
	}
	if l.observed == nil || !apiequality.Semantic.DeepEqual(l.observed.Spec, cur.Spec) {
		l.observe(cur, now)
	}
	h := holderOf(cur)
	if h != "" && h != l.Identity {
		d := time.Duration(ptr.Deref(cur.Spec.LeaseDurationSeconds, int32(l.Duration/time.Second))) * time.Second
		if now.Before(l.observedAt.Add(d)) {
			return false, h, nil
		}
		l.Log.Warnf("taking over lease %s/%s from %s: not renewed for %s", l.Namespace, l.Name, shown(h), d)
	}
	acquired, transitions := now, ptr.Deref(cur.Spec.LeaseTransitions, 0)
	if h == l.Identity && cur.Spec.AcquireTime != nil {
		acquired = cur.Spec.AcquireTime.Time
	} else {
		transitions++
	}
	next := cur.DeepCopy()
	next.Spec = l.spec(acquired, now, transitions)
	out, err := l.Leases.Update(ctx, next, metav1.UpdateOptions{})
	if apierrors.IsConflict(err) {
		return false, h, nil // someone else wrote it first; look again
	}
	if err != nil {
		return false, h, l.request().Explain(err)
	}
	l.observe(out, now)
	return true, l.Identity, nil
}

func (l *Lease) observe(lease *coordinationv1.Lease, now time.Time) {
	l.observed, l.observedAt = lease, now
}

// maxShown caps how much of a holder identity is shown.
const maxShown = 128

// shown is a holder identity as it may be printed: it is whatever another
// client wrote in the Lease, and reaches stderr, the result and the audit
// log. Characters that are not printable (line breaks, terminal escapes,
// bidi overrides) are escaped as Go would quote them, and it is cut to
// maxShown bytes, saying how long it was.
func shown(holder string) string {
	var b strings.Builder
	for _, r := range holder {
		if unicode.IsPrint(r) && r != '\\' {
			b.WriteRune(r)
		} else {
			q := strconv.QuoteRune(r)
			b.WriteString(q[1 : len(q)-1])
		}
		if b.Len() > maxShown {
			return fmt.Sprintf("%s... (%d bytes in all)", b.String(), len(holder))
		}
	}
	return b.String()
}

func holderOf(lease *coordinationv1.Lease) string {
	return ptr.Deref(lease.Spec.HolderIdentity, "")
}

func (l *Lease) spec(acquired, renewed time.Time, transitions int32) coordinationv1.LeaseSpec {
	return coordinationv1.LeaseSpec{
		HolderIdentity:       ptr.To(l.Identity),
		LeaseDurationSeconds: ptr.To(int32(l.Duration / time.Second)),
		AcquireTime:          ptr.To(metav1.NewMicroTime(acquired)),
		RenewTime:            ptr.To(metav1.NewMicroTime(renewed)),
		LeaseTransitions:     ptr.To(transitions),
	}
}

// renew keeps the lease until stop is closed. When a renewal has not
// succeeded for RenewDeadline, or another holder took the lease, it cancels
// held with ErrLost.
func (l *Lease) renew(held context.Context, stop <-chan struct{}, lose context.CancelCauseFunc) {
	// renewals must not end with the run's context: release needs the
	// lease object they keep up to date, and ends them itself
	ctx, cancel := context.WithCancel(context.WithoutCancel(held))
	defer cancel()
	go func() {
		select {
		case <-stop:
		case <-held.Done():
		}
		cancel()
	}()
	renewed := l.Clock.Now()
	next := l.RenewEvery
	for {
		select {
		case <-ctx.Done():
			return
		case <-l.Clock.After(next):
		}
		ok, h, err := l.tryAcquireOrRenew(ctx)
		if ctx.Err() != nil {
			return
		}
		now := l.Clock.Now()
		switch {
		case ok:
			renewed, next = now, l.RenewEvery
			continue
		case h != "" && h != l.Identity && err == nil:
			l.Log.Errorf("lease %s/%s was taken over by %s: stopping this run", l.Namespace, l.Name, shown(h))
			lose(fmt.Errorf("%w %s/%s: taken over by %s", ErrLost, l.Namespace, l.Name, shown(h)))
			return
		case now.Sub(renewed) >= l.RenewDeadline:
			l.Log.Errorf("could not renew lease %s/%s for %s (%v): stopping this run", l.Namespace, l.Name, l.RenewDeadline, err)
			lose(fmt.Errorf("%w %s/%s: not renewed for %s: %v", ErrLost, l.Namespace, l.Name, l.RenewDeadline, err))
			return
		}
		l.Log.Warnf("renew lease %s/%s: %v (retrying until %s after the last renewal)", l.Namespace, l.Name, err, l.RenewDeadline)
		next = l.Poll
	}
}

// release clears the holder so the next run need not wait for expiry; the
// lease stays valid for a second only, as client-go's release does.
func (l *Lease) release() {
	if l.observed == nil || holderOf(l.observed) != l.Identity {
		return // lost it meanwhile: it is not ours to clear
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	now := metav1.NewMicroTime(l.Clock.Now())
	next := l.observed.DeepCopy()
	next.Spec.HolderIdentity = nil
	next.Spec.LeaseDurationSeconds = ptr.To(int32(1))
	next.Spec.RenewTime, next.Spec.AcquireTime = &now, &now
	out, err := l.Leases.Update(ctx, next, metav1.UpdateOptions{})
	if err != nil {
		l.Log.Warnf("release lease %s/%s: %v (it expires by itself after %s)", l.Namespace, l.Name, err, l.Duration)
		return
	}
	l.observe(out, now.Time)
}

// request is any request on the lease, as its errors tell it
// (kube.Request.Explain): the error names the request, a 403 every verb a
// run needs on the lease.
func (l *Lease) request() kube.Request {
	return kube.Request{Needs: fmt.Sprintf("get, create and update on leases.coordination.k8s.io %q", l.Name)}
}
