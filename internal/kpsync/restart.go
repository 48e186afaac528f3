package kpsync

import (
	"context"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/client-go/util/retry"

	"github.com/kube-proxy-sync/kube-proxy-sync/internal/nodes"
	"github.com/kube-proxy-sync/kube-proxy-sync/internal/rollout"
)

// restarter is the restart phase: it decides and sends the one PATCH
// that restarts kube-proxy (or finds a canary an earlier run left to
// resume) and hands the rollout phase what it needs. intent writes the
// audit record of a restart about to be sent, with the facts so far.
type restarter struct {
	e      *env
	intent func(restartOutcome) error
}

// restart decides and sends the one PATCH (the hash of the data the pods
// are to run, p.target; restart, probe, and for a canary the switch to
// OnDelete), or, restarting nothing, finds a canary an earlier run left
// half-way. Its outcome holds the DaemonSet as last read or written; when
// pods are to roll, it returns what the rollout needs: the fleet as
// observed just before the PATCH, and what the PATCH did. configChanged:
// the data the pods are to run is not what they run.
func (rs restarter) restart(ctx context.Context, p plan, configChanged bool) (*rolling, restartOutcome, error) {
	rl, out, err := rs.patch(ctx, p, configChanged)
	if err != nil || rl != nil {
		return rl, out, err
	}
	if rl, out.resume, err = rs.leftover(ctx, p); err != nil {
		return nil, out, err
	}
	if rl == nil {
		idle := rollout.StatusOf(p.ds)
		idle.SkippedNodes, idle.UnreadyBefore = []nodes.Skipped{}, []string{}
		out.idle = &idle
		return nil, out, nil
	}
	if out.resume.restarted {
		// old pods to delete: a restart, audited as one
		err = rs.intent(out)
	}
	return rl, out, err
}

// patch decides and sends the one PATCH; see restart.
func (rs restarter) patch(ctx context.Context, p plan, configChanged bool) (*rolling, restartOutcome, error) {
	e, o := rs.e, rs.e.o
	hash := p.target
	out := restartOutcome{ds: p.ds}
	if ctx.Err() != nil {
		// interrupted, or the lease was lost: never restart then (the
		// restart is owed, and the next run does it)
		return nil, out, context.Cause(ctx)
	}
	rl := &rolling{e: e, strategy: p.roll.strategy, canaryNodes: p.roll.canaryNodes}
	var sent *rollout.Change       // the restart PATCH last sent
	var observed *appsv1.DaemonSet // the DaemonSet the fleet was listed for
	first := true
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if !first {
			// another writer moved the DaemonSet (maybe another run restarted it): decide again
			latest, err := e.dss.Get(ctx)
			if err != nil {
				return err
			}
			out.ds = latest
			if sent != nil && sent.AppliedTo(latest) {
				// our own PATCH: applied, but its response was lost and the
				// transport's repeat got the conflict (writes are under the
				// lease, so no other run wrote this restartedAt and hash)
				e.d.Log.Infof("daemonset %s/%s already has this run's restart (restartedAt %s): its response was lost", o.Namespace, o.DaemonSet, sent.RestartedAt())
				if sent.SaveStrategy != "" {
					rl.strategyChanged = true // its raise or OnDelete is in too
				}
				out.restarted = true
				return nil
			}
			if p.probe, err = probeFor(e, withImage(latest, o.Container, imageChange(o, rollout.ContainerImage(latest, o.Container))), p.probe.port, p.probe.host); err != nil {
				return err
			}
		}
		first = false
		ds := out.ds
		ch, reason, adopted := rs.patchFor(p, ds, hash, configChanged, &out)
		if o.Restart == RestartNever && reason != "" && p.copy != "" && ds.Annotations[rollout.PendingConfigAnnotation] != p.copy && !o.Check {
			// the config is in its copy, which no pod mounts: the restart
			// onto it is owed, and the DaemonSet says so for the next run
			patched, err := e.dss.Apply(ctx, rollout.Change{ResourceVersion: ds.ResourceVersion, Pending: p.copy})
			if err == nil {
				out.ds = patched
			}
			return err
		}
		if ch.Hash == "" || o.Check {
			out.adopted = adopted && o.Check // what a real run would write
			return nil
		}
		if ch.Restarts() {
			var err error
			if observed, err = rs.readyToRestart(ctx, p, ds, &ch, rl, observed, &out); err != nil {
				return err
			}
			sent = &ch
		}
		patched, err := e.dss.Apply(ctx, ch)
		if err != nil {
			return err
		}
		if ch.Restarts() && rollout.TemplateGeneration(patched) < ch.TemplateGeneration {
			if ch.SaveStrategy != "" {
				rl.finishStrategy(ctx)
			}
			return fmt.Errorf("daemonset %s/%s: the restart PATCH left its pod template as it was (template generation still %d), so no pod is replaced; something (an admission webhook or policy?) dropped the change from it (%s %q, or the probe): the restart stays owed (the stamped %s holds only once the template moves), fix that and run again",
				o.Namespace, o.DaemonSet, rollout.TemplateGeneration(patched), rollout.RestartedAtAnnotation, ch.RestartedAt(), rollout.HashAnnotation)
		}
		if ch.SaveStrategy != "" { // saved only once the PATCH is in
			rl.strategyChanged = true
		}
		out.ds = patched
		out.restarted, out.adopted = ch.Restarts(), adopted
		if ch.ConfigMap != "" {
			out.configMapName, out.previousConfigMap = ch.ConfigMap, p.mounted
		}
		if adopted {
			e.d.Log.Infof("adopted daemonset %s/%s: stamped %s, no restart", o.Namespace, o.DaemonSet, rollout.HashAnnotation)
		}
		return nil
	})
	if err != nil || !out.restarted {
		return nil, out, err
	}
	gen := rollout.TemplateGeneration(out.ds)
	rl.fleet.SetGeneration(gen)
	rl.ds = out.ds
	rl.restarted = true
	return rl, out, nil
}

// readyToRestart makes the restart PATCH ch ready to send on ds: the
// fleet observed before it, the connectivity baseline, the rollout's
// updateStrategy, the intent in the audit log, the template generation it
// moves to. observed is the DaemonSet the fleet was listed for, returned
// as it is then: a conflict is most often the DaemonSet controller writing
// status, and the pods listed for the same spec still hold (the watch
// replays everything since that list), while listing 5000 nodes and pods
// again would take long enough for the next status write to conflict too.
func (rs restarter) readyToRestart(ctx context.Context, p plan, ds *appsv1.DaemonSet, ch *rollout.Change, rl *rolling, observed *appsv1.DaemonSet, out *restartOutcome) (*appsv1.DaemonSet, error) {
	var err error
	if rl.fleet == nil || observed.UID != ds.UID || observed.Generation != ds.Generation {
		var seen observation
		if rl.fleet, seen, err = observe(ctx, rs.e, ds, false); err != nil {
			return observed, err
		}
		observed = ds
		out.observed, out.skipped, out.unreadyBefore = true, seen.skipped, seen.unreadyBefore
		rl.out.rollout.SkippedNodes, rl.out.rollout.UnreadyBefore = seen.skipped, seen.unreadyBefore
	}
	if rl.conn == nil {
		if rl.conn, err = baseline(ctx, rs.e, p.roll.conn, rl.fleet.Live(), p.probe.port); err != nil {
			return observed, err
		}
	}
	if err := rl.strategyFor(ch, ds); err != nil {
		return observed, err
	}
	if err := rs.intent(*out); err != nil {
		return observed, err
	}
	// the PATCH carries the resourceVersion ds was read at: the template
	// generation it moves to is known, and the hash holds only once the
	// template has reached it
	ch.TemplateGeneration = rollout.TemplateGeneration(ds) + 1
	rl.conn.markRestart(rs.e.d.Clock.Now())
	return observed, nil
}

// patchFor decides the one PATCH on ds as read: the hash it stamps, the
// restart, the probe, the image, and the template's volume pointed at the
// copy of the config; out says so. adopted: it stamps the hash on pods
// that run it already, restarting none.
func (rs restarter) patchFor(p plan, ds *appsv1.DaemonSet, hash string, configChanged bool, out *restartOutcome) (ch rollout.Change, reason string, adopted bool) {
	o := rs.e.o
	// what the template holds now: its image, the ConfigMap its config
	// volume mounts, whether its pods run the data with this hash
	current, mounted, running := rollout.ContainerImage(ds, o.Container), rollout.ConfigVolumeOf(ds, p.volume), rollout.RunsMounted(ds, p.volume, o.ConfigMap, hash)
	_, stamped := ds.Annotations[rollout.HashAnnotation]
	mountsTarget := p.volume != "" && mounted == p.targetCopy
	reason, adopt := decide(o.Restart, configChanged, running, stamped, p.noEffect, mountsTarget)
	image := imageChange(o, current)
	if reason == "" && image != "" {
		reason = ReasonImageChanged
	}
	out.decided = true
	out.required, out.reason = reason != "", reason
	ch = rollout.Change{ResourceVersion: ds.ResourceVersion, Container: p.probe.container}
	if o.Restart != RestartNever {
		if reason != "" || adopt || p.probe.changes() {
			ch.Hash = hash
		}
		if reason != "" {
			at := rollout.NextRestartAt(ds, rs.e.d.Clock.Now())
			ch.RestartAt = &at
		}
		ch.Probe, ch.LivenessProbe, ch.Image = p.probe.probe, p.probe.liveness, image
		if (reason != "" || ch.Probe != nil || ch.LivenessProbe != nil) && p.copy != "" && mounted != p.copy {
			ch.ConfigVolume, ch.ConfigMap, ch.Previous = p.volume, p.copy, p.previous
		}
	}
	out.probeChanged = ch.Probe != nil || ch.LivenessProbe != nil
	out.imageBefore, out.imageChanged = current, image != ""
	out.image = out.imageBefore
	if image != "" && o.Restart != RestartNever {
		out.image = image
	}
	if !out.required && out.probeChanged {
		out.required, out.reason = true, ReasonProbeChanged
	}
	if !out.required && p.noEffect && configChanged {
		out.reason = ReasonNoEffect
	}
	return ch, reason, adopt && ch.Hash != "" && !ch.Restarts()
}

// leftover finds an earlier canary rollout that stopped half-way on this
// template (when this run restarts nothing itself) and hands the rollout
// phase what finishes it (nil: nothing to roll).
func (rs restarter) leftover(ctx context.Context, p plan) (*rolling, resumeOutcome, error) {
	e, o := rs.e, rs.e.o
	var out resumeOutcome
	switch {
	case !rollout.CanaryLeftover(p.ds):
		return nil, out, nil
	case o.Check || o.Restart == RestartNever:
		// an earlier canary stopped half-way: its old pods are a restart
		// owed, and --restart never deletes no pod (check mode: would resume)
		e.d.Log.Infof("daemonset %s/%s is on OnDelete from a canary rollout that did not finish: not resumed (--restart %s, check mode %t), the restart of its remaining old pods is owed", o.Namespace, o.DaemonSet, o.Restart, o.Check)
		out.owed = true
		// check mode says what a real run would do: resume, a change
		out.wouldChange = o.Check && o.Restart != RestartNever
		return nil, out, nil
	}
	// an earlier canary stopped half-way on this template: finish it
	e.d.Log.Infof("daemonset %s/%s is on OnDelete from a canary rollout that did not finish: resuming it", o.Namespace, o.DaemonSet)
	fleet, seen, err := observe(ctx, e, p.ds, true)
	if err != nil {
		return nil, out, err
	}
	out.observed, out.skipped, out.unreadyBefore = true, seen.skipped, seen.unreadyBefore
	// old pods to delete: a restart, reported and audited as one
	out.restarted = fleet.PendingCount() > 0
	rl := &rolling{e: e, fleet: fleet, strategy: StrategyCanary, canaryNodes: p.roll.canaryNodes, resumed: true}
	rl.out.rollout.SkippedNodes, rl.out.rollout.UnreadyBefore = seen.skipped, seen.unreadyBefore
	// the checks asked, or a resumed migration's own (see planMigration):
	// each node finishing from here on is checked
	if rl.conn, err = baseline(ctx, e, p.roll.conn, fleet.Live(), p.probe.port); err != nil {
		return nil, out, err
	}
	return rl, out, nil
}

// observation is what observe saw of the nodes before the restart.
type observation struct {
	skipped       []nodes.Skipped
	unreadyBefore []string
}

// observe surveys the nodes and lists the pods, before the restart. Live
// nodes whose pod is not Ready are left out of the wait (resuming a
// canary: only those whose pod is of an older template).
func observe(ctx context.Context, e *env, ds *appsv1.DaemonSet, resume bool) (*rollout.Fleet, observation, error) {
	o := e.o
	var seen observation
	// the node survey and the pod list are independent: both before the
	// restart, side by side (at 5000 nodes each is ten LIST pages)
	var skipped map[string]string
	var live []string
	var surveyErr error
	surveyed := make(chan struct{})
	go func() {
		defer close(surveyed)
		skipped, live, surveyErr = nodes.Survey(ctx, e.d.Kube.Nodes(), e.d.Clock.Now(), o.Nodes, &ds.Spec.Template.Spec)
	}()
	fleet, err := e.dss.Observe(ctx, ds, map[string]string{})
	<-surveyed
	if surveyErr != nil {
		return nil, seen, surveyErr
	}
	if err != nil {
		return nil, seen, err
	}
	for n, reason := range skipped {
		fleet.Skip(n, reason)
	}
	seen.skipped, seen.unreadyBefore = nodes.SkippedList(skipped), fleet.UnreadyLive()
	if resume {
		seen.unreadyBefore = []string{}
		for _, n := range fleet.UnreadyLive() {
			if _, _, old := fleet.OldPod(n); old {
				seen.unreadyBefore = append(seen.unreadyBefore, n)
			}
		}
	}
	fleet.Exempt(seen.unreadyBefore)
	if len(seen.unreadyBefore) > 0 {
		e.d.Log.Infof("%d live node(s) had no Ready kube-proxy before the restart: left out of the wait and of the batches: %v", len(seen.unreadyBefore), seen.unreadyBefore)
	}
	// live nodes the DaemonSet belongs on but that have no pod of it: when
	// a canary resumes, an earlier run may have deleted theirs, and the
	// rollout is not done before they run one of the new template
	switch missing := fleet.Missing(live); {
	case len(missing) == 0:
	case resume:
		fleet.Expect(missing)
		e.d.Log.Infof("%d live node(s) have no kube-proxy pod (an earlier run may have deleted theirs): waiting for the DaemonSet controller to create them: %v", len(missing), missing)
	default:
		e.warn(fmt.Sprintf("%d live node(s) have no kube-proxy pod of daemonset %s/%s before the restart: %v; the restart does not wait for them, the DaemonSet controller creates theirs (see its events if it does not)", len(missing), o.Namespace, o.DaemonSet, missing))
	}
	if len(skipped) > 0 {
		e.d.Log.Infof("%d node(s) going away are skipped: %v", len(skipped), seen.skipped)
	}
	return fleet, seen, nil
}
