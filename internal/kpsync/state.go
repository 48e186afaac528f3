package kpsync

import (
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/kube-proxy-sync/kube-proxy-sync/internal/configmap"
	"github.com/kube-proxy-sync/kube-proxy-sync/internal/rollout"
)

// plan is everything one capture tells us, and what the run decides from it.
type plan struct {
	// record is the record ConfigMap (--configmap), base the ConfigMap
	// whose data the fleet runs (the record, or the copy the template
	// mounts when the record lags behind it, see base), before its snapshot
	record *corev1.ConfigMap
	base   *corev1.ConfigMap
	ds     *appsv1.DaemonSet
	before configmap.Snapshot
	// volume is the template's volume of the config, mounted the
	// ConfigMap it names before the run ("" when it mounts neither the
	// record nor a copy), copy the copy this run points it at
	volume, mounted, copy string
	// recordLags: the record does not hold the data the fleet runs
	recordLags bool
	// heals: the copy the template mounts is to be made anew (mounted.go)
	heals bool
	// previous is the copy of the data the fleet runs before this run
	// (see keepPrevious), recorded by the restart that moves the template
	previous string
	desired  map[string]string
	keys     []string
	// deferred are keys changed with no effect, not written while the
	// template mounts the record (nil: none deferred)
	deferred []string
	// target is the hash the data will have once written, the hash the
	// restart stamps; targetCopy the name of its copy
	target, targetCopy string
	// effects: each changed key's effect on the running kube-proxies;
	// noEffect: none has any and the pods run the data before the change,
	// so the change is written without a restart (see effect.go)
	effects  map[string]string
	noEffect bool
	probe    probePlan
	// reason and adopt: what the DaemonSet needs given target
	reason string
	adopt  bool
	// resume: an earlier canary stopped half-way, and this run may finish it
	resume bool
	// image is the container image the restart sets ("" : unchanged),
	// imageBefore the one the template runs
	image, imageBefore string
	// template is kubeadm's pod template with the live one's own fields
	// (rollout.OwnTemplate), templateChanged whether taking it changes the
	// DaemonSet's (--template kubeadm; false without it)
	template        *corev1.PodTemplateSpec
	templateChanged bool
	// access is kubeadm's ServiceAccount and RBAC objects to write
	// (--template kubeadm), see access.go
	access []accessWrite
	// migration is the plan of a proxy-mode change (nil: none), decided
	// once modeDecided
	migration   *Migration
	modeDecided bool
	// roll is how the rollout goes: as asked, tightened for a proxy-mode
	// change (see planMigration)
	roll rollSettings
	// tr is the move from what every kube-proxy runs now to what it runs
	// after the run, which every guard judges (see transition.go)
	tr transition
}

// rollSettings are the options the rollout follows, which a proxy-mode
// change tightens: canary first, each node's kube-proxy checked.
type rollSettings struct {
	strategy    string
	canaryNodes int
	conn        ConnectivityOptions
	// ownPort: the traffic check goes through the run's own Service, on
	// kube-proxy's healthz port (0: none, see probeservice.go)
	ownPort int32
}

// rollAsked are the rollout's settings as the options ask them.
func rollAsked(o Options) rollSettings {
	return rollSettings{strategy: o.Strategy, canaryNodes: o.CanaryNodes, conn: o.Connectivity}
}

// next is the DaemonSet as the restart leaves its template: kubeadm's
// (--template kubeadm) when that changes it, and its image: the
// kube-proxy version the new pods run, whose rules validate the config
// and choose the probe.
func (p plan) next(container string) *appsv1.DaemonSet {
	ds := p.ds
	if p.templateChanged {
		ds = ds.DeepCopy()
		ds.Spec.Template = *p.template.DeepCopy()
	}
	return withImage(ds, container, p.image)
}

// writes reports whether the run has anything to write.
func (p plan) writes() bool {
	_, saved := p.ds.Annotations[rollout.StrategyAnnotation]
	return len(p.keys) > 0 || len(p.access) > 0 || p.reason != "" || p.adopt || p.probe.changes() || (saved && !rollout.CanaryLeftover(p.ds)) || p.resume || p.recordLags || p.heals
}

// decide says whether and why to restart, given what the DaemonSet holds
// now for the data its pods should run with: runs, its pods run that data
// (restarted for it, or running it as well); stamped, it carries a stamp
// at all. noEffect: the change has no effect on the running kube-proxies,
// which run the data before it. mountsTarget: the template mounts the copy
// of that data already (after `kubectl rollout undo`, say): the DaemonSet
// controller rolls it, and the DaemonSet is stamped for it without a
// restart.
func decide(policy string, configChanged, runs, stamped, noEffect, mountsTarget bool) (reason string, adopt bool) {
	switch {
	case policy == RestartAlways:
		return ReasonForced, false
	case runs:
		// pods were already restarted for exactly this data (maybe by a
		// concurrent run that won the race), or run it as well: never
		// twice for one change
		return "", false
	case configChanged && noEffect:
		return "", false // the caller records that the pods run it as well
	case mountsTarget:
		return "", true
	case configChanged:
		return ReasonConfigChanged, false
	case stamped:
		return ReasonPending, false
	}
	return "", true
}

// imageChange is the image the restart sets when the container runs
// current: --image when that is another one, else "".
func imageChange(o Options, current string) string {
	if o.Image == "" || o.Undo || current == o.Image {
		return ""
	}
	return o.Image
}

// withImage is ds with the container's image replaced by image (ds itself
// when image is "").
func withImage(ds *appsv1.DaemonSet, container, image string) *appsv1.DaemonSet {
	if image == "" {
		return ds
	}
	out := ds.DeepCopy()
	for i := range out.Spec.Template.Spec.Containers {
		if out.Spec.Template.Spec.Containers[i].Name == container {
			out.Spec.Template.Spec.Containers[i].Image = image
		}
	}
	return out
}

// rolling is the rollout phase of a run: what the restart hands it (the
// fleet as observed before the restart PATCH, the DaemonSet as that PATCH
// left it, what it did to the DaemonSet's updateStrategy, the
// connectivity checker), and the wait, the strategy's bookkeeping, the
// verify and the rollback on it.
type rolling struct {
	e        *env
	fleet    *rollout.Fleet
	strategy string
	// canaryNodes: how many nodes a canary restarts first
	canaryNodes int
	// templateBefore, when the restart PATCH took kubeadm's pod template
	// whole, is the template it replaced, which a rollback puts back whole
	templateBefore *corev1.PodTemplateSpec
	// ds is the DaemonSet as the restart PATCH left it (nil: a canary an
	// earlier run left, resumed): a rolling update is followed through
	// its status from there
	ds *appsv1.DaemonSet
	// resumed: the template is an earlier run's (a canary left over),
	// never rolled back by this one; restarted: this run's restart PATCH
	// put the template in place
	resumed, restarted bool
	// strategyChanged: the DaemonSet's own updateStrategy is saved in its
	// annotation and changed (OnDelete, or a raised maxUnavailable), to be
	// put back however the rollout ends
	strategyChanged bool
	// raisedFor is how many stuck nodes the raised maxUnavailable covers
	raisedFor int
	// conn checks each node after its restart (nil: no check)
	conn *connectivity
	// out is the rollout phase's part of the result, as far as it got
	out rollOutcome
}

// pods is the fleet to roll, nil when there is nothing to roll.
func (rl *rolling) pods() *rollout.Fleet {
	if rl == nil {
		return nil
	}
	return rl.fleet
}

type probePlan struct {
	container string
	version   string
	path      string
	// probe is the readiness probe to set, nil when the current one is right
	// or the probe is not managed.
	probe *corev1.Probe
	// liveness replaces a liveness probe on /healthz, which from 1.28 on
	// fails on nodes being deleted (and would get kube-proxy killed there).
	liveness *corev1.Probe
	// healthPath and port: kube-proxy's health endpoint for its version,
	// whether or not the probe is managed
	healthPath string
	port       int
	// host is the address kube-proxy's health endpoint binds ("": any)
	host string
}

// changes reports whether a probe is to be replaced.
