package sync

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	"github.com/kube-proxy-sync/kube-proxy-sync/internal/configmap"
	"github.com/kube-proxy-sync/kube-proxy-sync/internal/rollout"
)

// recheckEvery: with no progress for this long, pending nodes are looked at
// again in case they started going away.
const recheckEvery = 15 * time.Second

// roll waits for the restart to reach every live node. With the rolling
// strategy the DaemonSet controller replaces the pods within its
// maxUnavailable; with canary we delete them ourselves: the canary nodes
// first, then the rest, never more than the batch size at once.
func (s *Syncer) roll(ctx context.Context, p plan, fleet *rollout.Fleet) error {
	ctx, cancel := context.WithTimeout(ctx, s.o.Timeout)
	defer cancel()
	r := &s.res.Facts.Rollout
	r.Strategy = s.o.Strategy
	start := s.d.Clock.Now()
	var lastLog time.Time
	midway := true
	progress := func() {
		if u := fleet.Unavailable(); u > r.MaxUnavailable {
			r.MaxUnavailable = u
		}
		if s.d.Clock.Since(lastLog) >= 2*time.Second || fleet.PendingCount() == 0 {
			st := fleet.Status()
			s.d.Log.Infof("rollout of daemonset %s/%s: updated %d/%d, available %d/%d, %d node(s) skipped",
				s.o.Namespace, s.o.DaemonSet, st.Updated, st.Desired, st.Available, st.Desired, len(fleet.Skipped))
			lastLog = s.d.Clock.Now()
			if midway && st.Updated > 0 && fleet.PendingCount() > 0 {
				midway = false
				s.step(ctx, StepWaiting)
			}
		}
	}
	s.step(ctx, StepDaemonSetPatched)

	var step func() (bool, error)
	if s.o.Strategy == StrategyCanary {
		defer s.finishCanary(ctx)
		c, err := s.newCanary(ctx, p.ds, fleet)
		if err != nil {
			return err
		}
		r.CanaryNodes = c.canary
		step = func() (bool, error) {
			progress()
			if err := s.checkDone(ctx, fleet); err != nil {
				return false, err
			}
			return c.step(ctx)
		}
	} else {
		step = func() (bool, error) {
			progress()
			if err := s.checkDone(ctx, fleet); err != nil {
				return false, err
			}
			return fleet.PendingCount() == 0, nil
		}
	}
	err := s.dss.Track(ctx, fleet, s.o.Nodes, recheckEvery, step)
	s.fillRollout(fleet, start)
	if err == nil && s.o.Verify {
		err = s.verify(ctx, p, fleet)
	}
	return err
}

func (s *Syncer) fillRollout(fleet *rollout.Fleet, start time.Time) {
	r := &s.res.Facts.Rollout
	st := fleet.Status()
	r.Desired, r.Updated, r.Available, r.SkippedNodes = st.Desired, st.Updated, st.Available, st.SkippedNodes
	r.Duration = s.d.Clock.Since(start).Seconds()
}

// verify looks at the pods afresh (not through the watch): every live node
// whose pod was Ready before the restart must have a Ready pod of the new
// template now.
func (s *Syncer) verify(ctx context.Context, p plan, before *rollout.Fleet) error {
	now, err := s.dss.Observe(ctx, p.ds, before.Skipped)
	if err != nil {
		return fmt.Errorf("verify: %w", err)
	}
	now.SetGeneration(before.Generation)
	unreadyBefore := map[string]bool{}
	for _, n := range s.res.Facts.Rollout.UnreadyBefore {
		unreadyBefore[n] = true
	}
	var bad []string
	for _, n := range before.Live() {
		if _, skipped := now.Skipped[n]; !skipped && !unreadyBefore[n] && !now.Done(n) {
			bad = append(bad, n)
		}
	}
	if len(bad) > 0 {
		return fmt.Errorf("verify: kube-proxy was Ready before the restart but is not Ready on the new template on %d node(s): %v", len(bad), bad)
	}
	s.d.Log.Infof("verified: every live node that was Ready before runs a Ready kube-proxy of the new template")
	return s.verifyEndpoints(ctx, now, p.probe.healthPath, p.probe.port)
}

// verifyEndpoints asks kube-proxy's health endpoint on a sample of live nodes
// through the API server's node proxy (GET /api/v1/nodes/NODE:PORT/proxy/PATH).
func (s *Syncer) verifyEndpoints(ctx context.Context, fleet *rollout.Fleet, path string, port int) error {
	if s.o.VerifyEndpoints <= 0 {
		return nil
	}
	var failed []string
	checked := 0
	for _, n := range fleet.Live() {
		if checked == s.o.VerifyEndpoints {
			break
		}
		if !fleet.Done(n) {
			continue
		}
		checked++
		_, err := s.d.Kube.GetRaw(ctx, fmt.Sprintf("/api/v1/nodes/%s:%d/proxy/%s", n, port, strings.TrimPrefix(path, "/")))
		if err != nil {
			failed = append(failed, fmt.Sprintf("%s (%v)", n, err))
		}
	}
	if len(failed) > 0 {
		return fmt.Errorf("verify: kube-proxy's %s on port %d did not answer OK through the API server's node proxy on: %s (the kubeconfig user needs get on nodes/proxy)", path, port, strings.Join(failed, "; "))
	}
	s.d.Log.Infof("verified: kube-proxy's %s answers OK on %d sampled node(s)", path, checked)
	return nil
}

// canaryStrategy adds the switch to OnDelete to the restart PATCH, keeping
// the original strategy in an annotation so that it is restored even if this
// run dies.
func canaryStrategy(ch *rollout.Change, ds *appsv1.DaemonSet) error {
	if saved := ds.Annotations[rollout.StrategyAnnotation]; saved != "" {
		ch.SaveStrategy = saved // a leftover of an interrupted canary: keep the real original
	} else {
		b, err := json.Marshal(ds.Spec.UpdateStrategy)
		if err != nil {
			return err
		}
		ch.SaveStrategy = string(b)
	}
	ch.Strategy = &appsv1.DaemonSetUpdateStrategy{Type: appsv1.OnDeleteDaemonSetStrategyType}
	return nil
}

// restoreStrategy puts back the updateStrategy an earlier canary saved. The
// DaemonSet controller then finishes that rollout on its own.
func (s *Syncer) restoreStrategy(ctx context.Context, ds *appsv1.DaemonSet) (*appsv1.DaemonSet, error) {
	saved := ds.Annotations[rollout.StrategyAnnotation]
	if saved == "" {
		return ds, nil
	}
	var orig appsv1.DaemonSetUpdateStrategy
	if err := json.Unmarshal([]byte(saved), &orig); err != nil {
		return nil, fmt.Errorf("daemonset %s/%s annotation %s is not an updateStrategy: %w; fix it by hand", s.o.Namespace, s.o.DaemonSet, rollout.StrategyAnnotation, err)
	}
	s.d.Log.Infof("restoring the updateStrategy (%s) of daemonset %s/%s saved by an interrupted canary rollout", orig.Type, s.o.Namespace, s.o.DaemonSet)
	return s.dss.Apply(ctx, rollout.Change{Strategy: &orig, ClearStrategy: true})
}

// finishCanary restores the strategy after a canary, also when it failed or
// was interrupted.
func (s *Syncer) finishCanary(ctx context.Context) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	err := retry.OnError(retry.DefaultBackoff, func(error) bool { return true }, func() error {
		ds, err := s.dss.Get(ctx)
		if err != nil {
			return err
		}
		_, err = s.restoreStrategy(ctx, ds)
		return err
	})
	if err != nil {
		s.d.Log.Errorf("restore updateStrategy of daemonset %s/%s: %v; the next run restores it", s.o.Namespace, s.o.DaemonSet, err)
	}
}

type canary struct {
	s        *Syncer
	fleet    *rollout.Fleet
	canary   []string
	queue    []string
	batch    int
	inflight map[string]bool
	deleted  map[string]bool
	canaryOK bool
	// zones, with --strategy zonal, schedules the deletions instead
	zones *rollout.Zonal
}

func (s *Syncer) newCanary(ctx context.Context, ds *appsv1.DaemonSet, fleet *rollout.Fleet) (*canary, error) {
	live := fleet.Live()
	batch, err := batchSize(s.o.BatchSize, ds, len(live))
	if err != nil {
		return nil, err
	}
	unready := map[string]bool{}
	for _, n := range fleet.UnreadyLive() {
		unready[n] = true
	}
	c := &canary{s: s, fleet: fleet, batch: batch, inflight: map[string]bool{}, deleted: map[string]bool{}}
	// canary nodes are healthy ones, so a failure there is the new config's
	for _, n := range live {
		if len(c.canary) < s.o.CanaryNodes && !unready[n] {
			c.canary = append(c.canary, n)
		} else {
			c.queue = append(c.queue, n)
		}
	}
	if s.o.ZoneLabel != "" {
		return c, c.zonal(ctx, unready)
	}
	s.d.Log.Infof("canary rollout: %d canary node(s) %v, then batches of at most %d over %d live node(s)", len(c.canary), c.canary, batch, len(live))
	return c, nil
}

// batchSize resolves --batch-size (N or P% of the live nodes), defaulting
// to the DaemonSet's maxUnavailable.
func batchSize(flag string, ds *appsv1.DaemonSet, live int) (int, error) {
	v := intstr.FromInt32(1)
	if ru := ds.Spec.UpdateStrategy.RollingUpdate; ru != nil && ru.MaxUnavailable != nil {
		v = *ru.MaxUnavailable
	}
	if flag != "" {
		v = intstr.Parse(flag)
	}
	n, err := intstr.GetScaledValueFromIntOrPercent(&v, live, true)
	if err != nil {
		return 0, fmt.Errorf("batch size %q: %w", v.String(), err)
	}
	return max(n, 1), nil
}

// step deletes old pods: all canary nodes first; once they are Ready on the
// new template, the rest, keeping at most batch nodes in flight.
func (c *canary) step(ctx context.Context) (bool, error) {
	if c.zones != nil {
		return c.stepZonal(ctx)
	}
	for n := range c.inflight {
		if c.fleet.Done(n) {
			delete(c.inflight, n)
		}
	}
	if !c.canaryOK {
		pending := 0
		for _, n := range c.canary {
			if !c.fleet.Done(n) {
				pending++
				if err := c.replace(ctx, n); err != nil {
					return false, err
				}
			}
		}
		if pending > 0 {
			return false, nil
		}
		c.canaryOK = true
		c.s.d.Log.Infof("canary nodes %v run a Ready kube-proxy of the new template; continuing in batches of %d", c.canary, c.batch)
	}
	for len(c.inflight) < c.batch && len(c.queue) > 0 {
		n := c.queue[0]
		c.queue = c.queue[1:]
		if _, skipped := c.fleet.Skipped[n]; skipped || c.fleet.Done(n) {
			continue
		}
		if err := c.replace(ctx, n); err != nil {
			return false, err
		}
	}
	return len(c.queue) == 0 && c.fleet.PendingCount() == 0, nil
}

// replace deletes the old pod on a node, once; the DaemonSet controller
// creates its successor from the new template.
func (c *canary) replace(ctx context.Context, node string) error {
	c.inflight[node] = true
	if c.deleted[node] {
		return nil
	}
	uid, pod, ok := c.fleet.OldPod(node)
	if !ok {
		return nil
	}
	c.deleted[node] = true
	err := c.s.d.Kube.Pods(c.s.o.Namespace).Delete(ctx, pod, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: ptr.To(uid)}})
	if err != nil && !isGone(err) {
		return fmt.Errorf("delete kube-proxy pod %s on node %s: %w", pod, node, err)
	}
	return nil
}

// isGone: the pod is already gone, or is not the one we meant to delete.
func isGone(err error) bool {
	return apierrors.IsNotFound(err) || apierrors.IsConflict(err)
}

// rollback restores the ConfigMap data captured before the change and rolls
// the pods once more; the run still fails, saying why.
func (s *Syncer) rollback(ctx context.Context, p plan, cause error) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	f := &s.res.Facts
	s.d.Log.Warnf("rolling back: %v", cause)
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cm, err := s.cms.Get(ctx)
		if err != nil {
			return err
		}
		if configmap.Hash(cm.Data, cm.BinaryData) == p.before.Hash {
			return nil
		}
		_, err = s.cms.Update(ctx, cm, p.before.Data)
		return err
	})
	if err != nil {
		return fmt.Errorf("%w; rollback failed too: restoring configmap %s/%s: %v", cause, s.o.Namespace, s.o.ConfigMap, err)
	}
	// the DaemonSet controller writes status all the while: retry on conflict
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		ds, err := s.dss.Get(ctx)
		if err != nil {
			return err
		}
		now := s.d.Clock.Now()
		ch := rollout.Change{ResourceVersion: ds.ResourceVersion, Hash: p.before.Hash, RestartAt: &now, Container: p.probe.container}
		if p.probe.probe != nil {
			old := containerProbe(p.ds, p.probe.container)
			ch.Probe, ch.RemoveProbe = old, old == nil
		}
		if saved := ds.Annotations[rollout.StrategyAnnotation]; saved != "" {
			var orig appsv1.DaemonSetUpdateStrategy
			if json.Unmarshal([]byte(saved), &orig) == nil {
				ch.Strategy, ch.ClearStrategy = &orig, true
			}
		}
		_, err = s.dss.Apply(ctx, ch)
		return err
	})
	if err != nil {
		return fmt.Errorf("%w; rollback failed too: configmap restored but restarting daemonset: %v", cause, err)
	}
	f.RolledBack, f.RollbackReason = true, cause.Error()
	s.event(ctx, "Warning", "RolledBack", fmt.Sprintf("restored configmap %s/%s and restarted kube-proxy: %v (audit id %s)", s.o.Namespace, s.o.ConfigMap, cause, f.AuditID))
	return fmt.Errorf("rolled back (configmap data restored, kube-proxy restarted once more): %w", cause)
}
