package kpsync

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"

	"github.com/kube-proxy-sync/kube-proxy-sync/internal/nodes"
	"github.com/kube-proxy-sync/kube-proxy-sync/internal/rollout"
	"github.com/kube-proxy-sync/kube-proxy-sync/internal/verify"
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
	decidedOn := p.ds              // the DaemonSet kubeadm's template was judged on
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
			if p.template != nil && rollout.TemplateGeneration(latest) != rollout.TemplateGeneration(decidedOn) {
				// another writer moved the template: kubeadm's is judged
				// again against it, with its fields (an image it set, a
				// probe), never put back as the plan read them
				if p.template, err = rollout.OwnTemplate(o.Template, latest, o.Container, p.volume); err != nil {
					return fmt.Errorf("--template: %w; nothing was restarted", err)
				}
				if p.templateChanged, err = e.dss.TemplateDiffers(ctx, latest, p.template); err != nil {
					return err
				}
				decidedOn = latest
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
	if out.templateChanged {
		// what a rollback puts back whole: the template this PATCH replaced
		rl.templateBefore = decidedOn.Spec.Template.DeepCopy()
	}
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
		var next *corev1.PodSpec
		if ch.Template != nil {
			// a new template may leave nodes (a split's affinity)
			next = &ch.Template.Spec
		}
		if rl.fleet, seen, err = observe(ctx, rs.e, ds, next, false); err != nil {
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
	if reason == "" && p.templateChanged {
		reason = ReasonTemplateChanged
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
		if reason != "" && p.templateChanged {
			// kubeadm's template, in the same template change
			ch.Template = p.template
		}
	}
	out.templateChanged = ch.Template != nil
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
		return nil, out, nil
	}
	// an earlier canary stopped half-way on this template: finish it
	e.d.Log.Infof("daemonset %s/%s is on OnDelete from a canary rollout that did not finish: resuming it", o.Namespace, o.DaemonSet)
	fleet, seen, err := observe(ctx, e, p.ds, nil, true)
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
// canary: only those whose pod is of an older template), and so are those
// next, the template the restart moves to, does not run on.
func observe(ctx context.Context, e *env, ds *appsv1.DaemonSet, next *corev1.PodSpec, resume bool) (*rollout.Fleet, observation, error) {
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
		skipped, live, surveyErr = nodes.Survey(ctx, e.d.Kube.Nodes(), e.d.Clock.Now(), o.Nodes, &ds.Spec.Template.Spec, next)
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
	seen.skipped, seen.unreadyBefore = fleet.SkippedNodes(), fleet.UnreadyLive()
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
		e.d.Log.Infof("%d node(s) skipped (going away, or off the new template): %v", len(skipped), seen.skipped)
	}
	return fleet, seen, nil
}

// baseline asks each live node's kube-proxy (live: the fleet's live
// nodes) before the restart (and
// resolves the traffic check's Service), so that the checks after it
// compare with how each node was.
func baseline(ctx context.Context, e *env, o ConnectivityOptions, live []string, port int) (*connectivity, error) {
	if o.Health == "" || o.Health == verify.Off {
		return nil, nil
	}
	if e.d.NodeProxy == nil {
		return nil, fmt.Errorf("--verify-health needs the node proxy client")
	}
	prober, err := e.d.NodeProxy(port)
	if err != nil {
		return nil, err
	}
	c := &verify.Checker{Prober: prober, Clock: e.d.Clock, Log: e.d.Log, Mode: o.Health,
		Interval: healthPollInterval, Timeout: o.HealthTimeout, Parallel: 8}
	if o.Traffic != "" && o.Traffic != TrafficNone {
		if c.Traffic, err = trafficTarget(ctx, e, o); err != nil {
			return nil, err
		}
		warning, err := c.Traffic.Cleanup(ctx, e.d.Clock)
		if warning != "" {
			e.warn(warning)
		}
		if err != nil {
			return nil, err
		}
	}
	if err := c.Baseline(ctx, live); err != nil {
		return nil, err
	}
	// the pod path is tried once before any restart, on the first live
	// node whose kube-proxy answered healthy
	tried := ""
	for _, n := range live {
		if c.HealthyBefore(n) {
			tried = n
			break
		}
	}
	if c.Traffic != nil && tried != "" && slices.Contains(c.Traffic.PathsChecked(), verify.PathPod) && !c.Traffic.Made.IsZero() {
		// the run's own Service is seconds old: a connection before that
		// node's kube-proxy has it in its rules would go out unrouted
		if err := c.WaitInRules(ctx, tried); err != nil {
			return nil, fmt.Errorf("--verify-traffic-paths pod, before its try on node %s: the run's own Service is in no rules of its kube-proxy yet: %w; nothing was restarted (the restart is owed to the next run)", tried, err)
		}
	}
	if c.Traffic != nil && tried != "" {
		warning, err := c.Traffic.Preflight(ctx, tried)
		if err != nil && o.podImageOptional && errors.Is(err, verify.ErrCannotRun) && ctx.Err() == nil {
			// kube-proxy's own image, taken rather than asked, cannot
			// connect: the other paths are checked without it
			c.Traffic.Paths = slices.DeleteFunc(slices.Clone(c.Traffic.Paths), func(p string) bool { return p == verify.PathPod })
			e.warn(fmt.Sprintf("the traffic check leaves out the pod path (PREROUTING): it connects from a pod running kube-proxy's own image (%s) by default, which cannot, tried once before any restart: %v; pass --verify-traffic-pod-image with an image on every node that has sh and bash or nc", o.TrafficPodImage, err))
			err = nil
		}
		if err != nil {
			return nil, fmt.Errorf("--verify-traffic-paths pod, tried once before any restart: %w; nothing was restarted (the restart is owed to the next run)", err)
		}
		if warning != "" {
			e.warn("--verify-traffic-paths pod, tried once before any restart: " + warning + ": the path fails already, so each node's check after its restart will fail too unless the restart mends it")
		}
	}
	conn := &connectivity{checker: c, unchecked: map[string]bool{}, first: true}
	for _, n := range live {
		if c.Wants(n) {
			conn.unchecked[n] = true
		}
	}
	e.d.Log.Infof("connectivity baseline: %d of %d live node(s) answered; each is checked after its restart", len(conn.unchecked), len(live))
	return conn, nil
}

// trafficTarget resolves --verify-traffic NAMESPACE/NAME to its ClusterIP
// and first TCP port.
func trafficTarget(ctx context.Context, e *env, o ConnectivityOptions) (*verify.Traffic, error) {
	ns, name, _ := strings.Cut(o.Traffic, "/")
	svc, err := e.d.Kube.Services(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("--verify-traffic: get service %s: %w (the kubeconfig user needs get on services there, see roles/kpsync/files/rbac.yaml)", o.Traffic, err)
	}
	ip := svc.Spec.ClusterIP
	if ip == "" || ip == corev1.ClusterIPNone {
		return nil, fmt.Errorf("--verify-traffic: service %s has no ClusterIP (headless?): pick a Service with a ClusterIP and ready endpoints", o.Traffic)
	}
	for _, p := range svc.Spec.Ports {
		if p.Protocol == "" || p.Protocol == corev1.ProtocolTCP {
			if p.NodePort == 0 && slices.Contains(o.TrafficPaths, verify.PathNodePort) {
				return nil, fmt.Errorf("--verify-traffic-paths nodeport: service %s (type %s) has no node port on its TCP port %d: pick a NodePort or LoadBalancer Service, or leave nodeport out", o.Traffic, svc.Spec.Type, p.Port)
			}
			return &verify.Traffic{Pods: e.d.Kube.Pods(e.o.Namespace), Namespace: e.o.Namespace, Image: o.TrafficImage,
				PodImage: o.TrafficPodImage, Paths: o.TrafficPaths, NodePort: p.NodePort, NodeIP: nodeIP(e, ip),
				Service: o.Traffic, Target: net.JoinHostPort(ip, strconv.Itoa(int(p.Port))), Timeout: o.TrafficTimeout,
				Made: o.serviceMade}, nil
		}
	}
	return nil, fmt.Errorf("--verify-traffic: service %s has no TCP port", o.Traffic)
}

// nodeIP returns a node's InternalIP of the ClusterIP's family (what
// kube-proxy takes as the node's primary IP, the NodePort address every
// mode serves by default).
func nodeIP(e *env, clusterIP string) func(ctx context.Context, node string) (string, error) {
	v6 := strings.Contains(clusterIP, ":")
	return func(ctx context.Context, node string) (string, error) {
		n, err := e.d.Kube.Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return "", fmt.Errorf("get node %s for its address: %w (the kubeconfig user needs get on nodes, see roles/kpsync/files/rbac.yaml)", node, err)
		}
		for _, a := range n.Status.Addresses {
			if a.Type == corev1.NodeInternalIP && strings.Contains(a.Address, ":") == v6 {
				return a.Address, nil
			}
		}
		return "", fmt.Errorf("node %s has no InternalIP of the Service's IP family to connect to its NodePort on: leave nodeport out of --verify-traffic-paths", node)
	}
}

func (r *Result) mergeRestart(o restartOutcome) {
	f := &r.Facts
	if o.decided {
		f.RestartRequired, f.RestartReason = o.required, o.reason
		f.Restarted, f.Adopted, f.ProbeChanged = o.restarted, o.adopted, o.probeChanged
		f.Image, f.ImageBefore, f.ImageChanged = o.image, o.imageBefore, o.imageChanged
		f.TemplateChanged = o.templateChanged
	}
	if o.configMapName != "" {
		f.ConfigMapName, f.PreviousConfigMap = o.configMapName, o.previousConfigMap
	}
	if o.observed {
		f.Rollout.SkippedNodes, f.Rollout.UnreadyBefore = o.skipped, o.unreadyBefore
	}
	r.mergeResume(o.resume)
	if o.idle != nil {
		f.Rollout = *o.idle
	}
}

func (r *Result) mergeResume(o resumeOutcome) {
	f := &r.Facts
	if o.owed && !f.RestartRequired {
		f.RestartRequired, f.RestartReason = true, ReasonPending
	}
	if o.restarted {
		f.RestartRequired, f.Restarted = true, true
		if f.RestartReason == "" {
			f.RestartReason = ReasonPending
		}
	}
	if o.observed {
		f.Rollout.SkippedNodes, f.Rollout.UnreadyBefore = o.skipped, o.unreadyBefore
	}
}
