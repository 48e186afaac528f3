package kpsync

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/version"

	"github.com/kube-proxy-sync/kube-proxy-sync/internal/configmap"
	"github.com/kube-proxy-sync/kube-proxy-sync/internal/kpvalidate"
	"github.com/kube-proxy-sync/kube-proxy-sync/internal/kube"
	"github.com/kube-proxy-sync/kube-proxy-sync/internal/probe"
	"github.com/kube-proxy-sync/kube-proxy-sync/internal/rollout"
)

// Judge the transition, not the request. A run that restarts kube-proxy
// first works out, from the cluster, what every kube-proxy of the
// DaemonSet runs now (its pod: the image it runs and the ConfigMap it
// mounts) and what it runs after the run (the template's image and the
// config the run leaves it mounting). The guards judge that move, whatever
// caused it: a flag, an inventory value, another writer of the record, an
// earlier run's owed restart.
//
// A pod that mounts the record (kubeadm's layout) runs the data the record
// held when it started. When the record was written since, and nothing in
// the cluster says which data that was (the DaemonSet's stamp and the copy
// of the stamped data), the pod's config is unknown: the guards take it as
// the riskiest case, any mode the running kube-proxy has.

// transition is the move the run makes every kube-proxy make.
type transition struct {
	// fromVersion is the version of the kube-proxy the fleet runs (""
	// unknown); fromModes the modes its nodes run, each with its nodes
	// (sorted); unknown the nodes whose config the cluster does not tell
	fromVersion string
	fromModes   map[string][]string
	unknown     []string
	// observed: the pods were read; false when the run moves nothing,
	// or the DaemonSet has no pod yet (then fromModes holds the mode of
	// what the template mounts, for no node)
	observed bool
	// toVersion, to and toText: the kube-proxy version, mode and
	// config.conf the fleet runs after the run
	toVersion, to, toText string
	// moves: the run restarts kube-proxy, or leaves a change its pods
	// start on later (--restart never: an owed restart, a reboot)
	moves bool
}

// minorOf is the minor of a version, -1 when unknown.
func minorOf(v string) int {
	pv, err := version.ParseGeneric(v)
	if err != nil || pv.Major() != 1 {
		return -1
	}
	return int(pv.Minor())
}

// modes are the modes the fleet runs now, the riskiest case for the nodes
// whose config is unknown: every mode kube-proxy of the running version
// has.
func (t transition) modes() []string {
	seen := map[string]bool{}
	for m := range t.fromModes {
		seen[m] = true
	}
	if len(t.unknown) > 0 {
		seen[kpvalidate.ModeIPTables], seen[kpvalidate.ModeIPVS] = true, true
		if m := minorOf(t.fromVersion); m < 0 || m >= 29 {
			seen[kpvalidate.ModeNFTables] = true
		}
	}
	out := make([]string, 0, len(seen))
	for m := range seen {
		out = append(out, m)
	}
	sort.Strings(out)
	return out
}

// movesMode: some node's kube-proxy runs, or may run, another mode than
// the one it runs after the run.
func (t transition) movesMode() bool {
	for _, m := range t.modes() {
		if m != t.to {
			return true
		}
	}
	return false
}

// from names the mode the fleet moves from: the one mode its nodes run,
// else "unknown" (some node's config is unknown) or the modes joined.
func (t transition) from() string {
	if len(t.unknown) > 0 {
		return "unknown"
	}
	ms := make([]string, 0, len(t.fromModes))
	for m := range t.fromModes {
		ms = append(ms, m)
	}
	sort.Strings(ms)
	return strings.Join(ms, "+")
}

// describe says which nodes run what, for a refusal or a warning.
func (t transition) describe() string {
	var parts []string
	for _, m := range t.modes() {
		if nodes := t.fromModes[m]; len(nodes) > 0 {
			parts = append(parts, fmt.Sprintf("%s on %s", m, someOf(nodes)))
		}
	}
	if len(t.unknown) > 0 {
		parts = append(parts, fmt.Sprintf("unknown on %s (their pods started before the last write of the record they mount)", someOf(t.unknown)))
	}
	return strings.Join(parts, "; ")
}

// observeTransition works out the run's transition from the plan and, when
// the run moves kube-proxy, from the DaemonSet's pods: one LIST of
// them, and one GET per copy they mount that the plan does not hold, and
// only where a pod may run other data than it mounts. A run that moves
// nothing reads nothing more.
func observeTransition(ctx context.Context, e *env, p plan) (transition, error) {
	o := e.o
	t := transition{
		fromVersion: runningVersion(o, p),
		toVersion:   validationVersion(o, p.next(o.Container)),
		toText:      p.desired[configmap.ConfigKey],
		moves:       p.reason != "" || p.resume || len(p.keys) > 0,
		fromModes:   map[string][]string{},
	}
	t.to = modeAt(t.toText, t.toVersion)
	if t.moves && rolloutBehind(p.ds) {
		// another writer's image change (kubectl set image), or an earlier
		// run's, that not every pod runs yet: the nodes still on an older
		// image move from it
		v, err := oldestPodVersion(ctx, e, p, t.fromVersion)
		if err != nil {
			return t, err
		}
		t.fromVersion = v
	}
	running, err := runningConfig(ctx, e, p)
	if err != nil {
		return t, err
	}
	lastWrite := lastWriteOf(p.record)
	// pods run what they mount unless they mount the record (kubeadm's
	// layout) and it was written since the DaemonSet was made: a copy is
	// immutable, and a rollout in progress is a resumed canary's, judged
	// from its older pods (planMigration)
	if !t.moves || p.volume == "" || p.mounted != o.ConfigMap || !lastWrite.After(p.ds.CreationTimestamp.Time) {
		t.fromModes[modeAt(running, t.fromVersion)] = nil
		return t, nil
	}
	texts := map[string]string{p.base.Name: p.before.Data[configmap.ConfigKey]}
	if p.mounted != "" {
		texts[p.mounted] = running
	}
	known := func(name string) (string, bool, error) {
		if text, ok := texts[name]; ok {
			return text, true, nil
		}
		cm, err := e.copies.Get(ctx, name)
		if apierrors.IsNotFound(err) {
			return "", false, nil
		}
		if err != nil {
			return "", false, fmt.Errorf("read configmap %s/%s, which a pod of daemonset %s/%s mounts, for the config it runs: %w", o.Namespace, name, o.Namespace, o.DaemonSet, err)
		}
		texts[name] = cm.Data[configmap.ConfigKey]
		return texts[name], true, nil
	}
	recordText, recordKnown, err := stampedRecord(ctx, e, p, known)
	if err != nil {
		return t, err
	}
	sel, err := metav1.LabelSelectorAsSelector(p.ds.Spec.Selector)
	if err != nil || p.ds.Spec.Selector == nil {
		t.fromModes[modeAt(running, t.fromVersion)] = nil
		return t, nil
	}
	err = kube.Pager(func(ctx context.Context, lo metav1.ListOptions) (runtime.Object, error) {
		lo.LabelSelector = sel.String()
		return e.d.Kube.Pods(o.Namespace).List(ctx, lo)
	}).EachListItem(ctx, metav1.ListOptions{}, func(obj runtime.Object) error {
		pod, ok := obj.(*corev1.Pod)
		if !ok {
			return nil
		}
		ref := metav1.GetControllerOf(pod)
		if ref == nil || ref.UID != p.ds.UID || pod.Spec.NodeName == "" {
			return nil
		}
		node := pod.Spec.NodeName
		name := ""
		for _, v := range pod.Spec.Volumes {
			if v.Name == p.volume && v.ConfigMap != nil {
				name = v.ConfigMap.Name
			}
		}
		var text string
		var ok2 bool
		switch {
		case name == "":
			return nil
		case name == o.ConfigMap && !startedAfter(pod, o.Container, lastWrite):
			text, ok2 = recordText, recordKnown
		case name == o.ConfigMap:
			text, ok2 = p.record.Data[configmap.ConfigKey], true
		default:
			var err error
			if text, ok2, err = known(name); err != nil {
				return err
			}
		}
		t.observed = true
		if !ok2 {
			t.unknown = append(t.unknown, node)
			return nil
		}
		v := t.fromVersion
		if c := podImage(pod, o.Container); c != "" && (p.image != "" || o.KubeProxyVersion == "") {
			v = ""
			if pv, err := probe.ImageVersion(c); err == nil {
				v = pv.String()
			}
		}
		m := modeAt(text, v)
		t.fromModes[m] = append(t.fromModes[m], node)
		return nil
	})
	if err != nil {
		return t, fmt.Errorf("list the pods of daemonset %s/%s, for what each node's kube-proxy runs: %w (the kubeconfig user needs list on pods)", o.Namespace, o.DaemonSet, err)
	}
	if !t.observed {
		t.fromModes[modeAt(running, t.fromVersion)] = nil
	}
	sort.Strings(t.unknown)
	for m := range t.fromModes {
		sort.Strings(t.fromModes[m])
	}
	return t, nil
}

// rolloutBehind: the DaemonSet's controller has not yet seen its
// template, or some of its pods run an older one.
func rolloutBehind(ds *appsv1.DaemonSet) bool {
	st := ds.Status
	return st.ObservedGeneration < ds.Generation || st.UpdatedNumberScheduled < st.DesiredNumberScheduled
}

// oldestPodVersion is the oldest kube-proxy version a pod of the DaemonSet
// runs, given the template's (""). "" when a pod runs an image whose
// version its tag does not tell: unknown, judged as the riskiest.
func oldestPodVersion(ctx context.Context, e *env, p plan, template string) (string, error) {
	o := e.o
	sel, err := metav1.LabelSelectorAsSelector(p.ds.Spec.Selector)
	if err != nil || p.ds.Spec.Selector == nil {
		return template, nil
	}
	oldest := template
	err = kube.Pager(func(ctx context.Context, lo metav1.ListOptions) (runtime.Object, error) {
		lo.LabelSelector = sel.String()
		return e.d.Kube.Pods(o.Namespace).List(ctx, lo)
	}).EachListItem(ctx, metav1.ListOptions{}, func(obj runtime.Object) error {
		pod, ok := obj.(*corev1.Pod)
		if !ok || oldest == "" {
			return nil
		}
		if ref := metav1.GetControllerOf(pod); ref == nil || ref.UID != p.ds.UID {
			return nil
		}
		image := podImage(pod, o.Container)
		if image == "" {
			return nil
		}
		v, err := probe.ImageVersion(image)
		if err != nil {
			oldest = ""
			return nil
		}
		if old, err := version.ParseGeneric(oldest); err == nil && v.LessThan(old) {
			oldest = v.String()
		}
		return nil
	})
	if err != nil {
		return "", fmt.Errorf("list the pods of daemonset %s/%s, whose rollout is not finished, for the versions they run: %w (the kubeconfig user needs list on pods)", o.Namespace, o.DaemonSet, err)
	}
	return oldest, nil
}

// stampedRecord is the config a pod that mounts the record and started
// before its last write runs, as far as the cluster tells: the DaemonSet's
// stamp names the data its pods run; the record's own data when that is
// it, the copy of it when one is there. ok false: unknown.
func stampedRecord(ctx context.Context, e *env, p plan, known func(string) (string, bool, error)) (string, bool, error) {
	stamp := p.ds.Annotations[rollout.HashAnnotation]
	if len(stamp) < configmap.CopyHashLen || !rollout.Runs(p.ds, stamp) {
		return "", false, nil
	}
	if stamp == configmap.Hash(p.record.Data, p.record.BinaryData) {
		return p.record.Data[configmap.ConfigKey], true, nil
	}
	return known(configmap.CopyName(e.o.ConfigMap, stamp))
}

// lastWriteOf is when the ConfigMap's config.conf was last written, as
// the API server records it: its creation, or the latest time of a field
// manager that owns data.config.conf (or whose fields are not recorded). A
// key is owned by the manager that last changed it, and that manager's
// time is at least the change's, so no later time means no later change:
// a write of another key (kubespray's server in kubeconfig.conf) leaves
// the config the pods run known.
func lastWriteOf(cm *corev1.ConfigMap) time.Time {
	at := cm.CreationTimestamp.Time
	for _, f := range cm.ManagedFields {
		if f.Time == nil || !f.Time.After(at) {
			continue
		}
		if f.FieldsV1 == nil || ownsConfig(f.FieldsV1.Raw) {
			at = f.Time.Time
		}
	}
	return at
}

// ownsConfig: a managedFields entry's fields include data.config.conf (or
// cannot be read).
func ownsConfig(raw []byte) bool {
	var fields struct {
		Data map[string]json.RawMessage `json:"f:data"`
	}
	if err := json.Unmarshal(raw, &fields); err != nil {
		return true
	}
	_, ok := fields.Data["f:"+configmap.ConfigKey]
	return ok
}

// startedAfter: the pod's container read its mounted config after at. A
// pod made at or after at mounts the data written then; a container that
// restarted in an older pod reads its volume as the kubelet last synced
// it, which may lag the write by up to a minute or so.
func startedAfter(pod *corev1.Pod, container string, at time.Time) bool {
	if !pod.CreationTimestamp.Time.Before(at) {
		return true
	}
	for _, s := range pod.Status.ContainerStatuses {
		if s.Name == container && s.State.Running != nil && s.State.Running.StartedAt.Time.After(at.Add(2*time.Minute)) {
			return true
		}
	}
	return false
}

// podImage is the image the pod's container runs ("" when it has none of
// that name).
func podImage(pod *corev1.Pod, container string) string {
	for _, c := range pod.Spec.Containers {
		if c.Name == container {
			return c.Image
		}
	}
	return ""
}

// judge runs every guard on the transition: whether kube-proxy starts in
// its mode at its version, and whether every node's kernel runs it. The
// migration's own checks (cleanup, canary, health) are planMigration's,
// on the same transition.
func (t transition) judge(ctx context.Context, e *env, p plan) error {
	if !t.moves || t.toText == "" || targetsWindows(p) {
		return nil
	}
	if err := t.starts(e, p.image == ""); err != nil {
		return err
	}
	if t.to == kpvalidate.ModeNFTables && t.needsKernel() {
		return preflightNFTables(ctx, e, p, t.from())
	}
	return nil
}

// starts refuses a mode the kube-proxy after the run does not start in:
// ipvs past its end (KEP-5495), whatever put ipvs there or moved the
// version.
func (t transition) starts(e *env, warn bool) error {
	o := e.o
	if t.to != kpvalidate.ModeIPVS {
		return nil
	}
	to := minorOf(t.toVersion)
	if to < 0 {
		return nil // unknown: the upgrade guard refuses an image of unknown version in ipvs mode
	}
	_, gates, err := kpvalidate.ModeSettings(t.toText, to)
	if err != nil {
		return nil // the validation refuses what does not decode
	}
	if err := ipvsStarts(to, gates); err != nil {
		return fmt.Errorf("configmap %s/%s: kube-proxy %s in ipvs mode refused: %w; move the fleet to nftables first (kube-proxy-sync --set mode=nftables; kubespray: kube_proxy_mode: nftables); nothing was written",
			o.Namespace, o.ConfigMap, t.toVersion, err)
	}
	if warn && to >= IPVSDeprecatedMinor {
		// with an image, the upgrade guard says it
		e.warn(fmt.Sprintf("configmap %s/%s: kube-proxy 1.%d runs ipvs mode, deprecated since 1.%d: the KubeProxyIPVS feature gate is off by default from 1.%d and locked off from 1.%d, when kube-proxy in ipvs mode no longer starts; move to nftables before then (--set mode=nftables)",
			o.Namespace, o.ConfigMap, to, IPVSDeprecatedMinor, IPVSOffMinor, IPVSLockedMinor))
	}
	return nil
}

// needsKernel: the move puts some node's kube-proxy into nftables mode
// (from another mode, or an unknown one), or one that runs it onto a
// version that refuses an old kernel (from 1.31) from one that did not
// or an unknown one.
func (t transition) needsKernel() bool {
	if t.movesMode() {
		return true
	}
	from, to := minorOf(t.fromVersion), minorOf(t.toVersion)
	return (to < 0 || to >= nftablesKernelMinor) && (from < 0 || from < nftablesKernelMinor)
}

// nftablesKernelMinor is the first kube-proxy minor that does not start
// in nftables mode on a kernel older than nftablesKernel.
const nftablesKernelMinor = 31
