// Package rollout restarts the kube-proxy DaemonSet the way
// `kubectl rollout restart` does and waits for it like `kubectl rollout status`.
package rollout

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"k8s.io/client-go/util/retry"

	"github.com/sirupsen/logrus"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"

	"github.com/kube-proxy-sync/kube-proxy-sync/internal/configmap"
	"github.com/kube-proxy-sync/kube-proxy-sync/internal/kube"
	"github.com/kube-proxy-sync/kube-proxy-sync/internal/nodes"
)

const (
	// HashAnnotation on the DaemonSet's metadata records the ConfigMap data
	// hash its pods were last restarted for; a mismatch means a restart is owed.
	HashAnnotation = "kube-proxy-sync.io/config-hash"
	// NoEffectAnnotation on the DaemonSet's metadata, "<data hash>@<config
	// hash>", records ConfigMap data the pods were not restarted for because
	// no changed key has an effect on the running kube-proxies: pods
	// restarted for <config hash> run it as well. It holds only while
	// HashAnnotation is still <config hash>.
	NoEffectAnnotation = "kube-proxy-sync.io/no-effect-hash"
	// RestartGenerationAnnotation on the DaemonSet's metadata, written with
	// HashAnnotation by a restart, is the template generation that restart
	// moved the DaemonSet to. The hash holds only once the template
	// generation has reached it: a restart PATCH that left the template as
	// it was (so replaced no pod) leaves the restart owed.
	RestartGenerationAnnotation = "kube-proxy-sync.io/template-generation"
	// RestartedAtAnnotation is what `kubectl rollout restart` sets on the pod template.
	RestartedAtAnnotation = "kubectl.kubernetes.io/restartedAt"
	// PendingConfigAnnotation on the DaemonSet's metadata names the copy
	// of the config a run made but did not restart onto (--restart never):
	// the restart the next run owes, onto that config. The restart that
	// points the template at a copy drops it.
	PendingConfigAnnotation = "kube-proxy-sync.io/pending-config"
	// PreviousConfigAnnotation on the DaemonSet's metadata names the copy
	// of the config the fleet ran before the last restart moved the
	// template: what --undo restores. The restart that moves the template
	// writes it.
	PreviousConfigAnnotation = "kube-proxy-sync.io/previous-config"
	// StrategyAnnotation keeps the DaemonSet's own updateStrategy while a
	// canary rollout has it switched to OnDelete; any later run restores it.
	StrategyAnnotation = "kube-proxy-sync.io/original-update-strategy"
)

// Change is one PATCH of the DaemonSet: any of the hash stamp, the restart,
// and the readiness probe, together.
type Change struct {
	// ResourceVersion is the version the decision was made on; the PATCH
	// fails with a conflict if the DaemonSet moved since.
	ResourceVersion string
	// Hash is the data hash the pods are restarted for (HashAnnotation); it
	// drops NoEffect's record, which held for the previous hash.
	Hash string
	// NoEffect records data the pods run as well, see NoEffectAnnotation.
	NoEffect  string
	RestartAt *time.Time
	// TemplateGeneration, with Hash and a change that Restarts, is the
	// template generation the PATCH moves the DaemonSet to (the one it was
	// decided on, plus one), stamped in RestartGenerationAnnotation.
	TemplateGeneration int64
	// RestoreStamp puts HashAnnotation, NoEffectAnnotation and
	// RestartGenerationAnnotation back as Stamp read them (a rollback).
	RestoreStamp map[string]*string
	// RestoreRestartedAt puts the template's restartedAt back to a value
	// read before (a rollback); "" removes it.
	RestoreRestartedAt *string
	Container          string
	// ConfigVolume and ConfigMap point the template's volume ConfigVolume
	// at the ConfigMap ConfigMap (a copy of the record, see
	// configmap.NewCopy): the config travels with the template.
	ConfigVolume string
	ConfigMap    string
	// Pending records a config copy the pods owe a restart onto
	// (PendingConfigAnnotation); pointing the template at a copy drops it.
	Pending string
	// Previous, with ConfigMap, records the copy of the config the fleet
	// ran before (PreviousConfigAnnotation).
	Previous string
	Probe    *corev1.Probe
	// Image replaces the container's image (kubeadm's rendering of an
	// upgrade, or a rollback to the image before it).
	Image string
	// RemoveProbe drops the readiness probe (a rollback to a DaemonSet that had none).
	RemoveProbe bool
	// LivenessProbe replaces the container's liveness probe.
	LivenessProbe *corev1.Probe
	// Strategy replaces spec.updateStrategy; SaveStrategy/ClearStrategy
	// record or drop the original in StrategyAnnotation.
	Strategy      *appsv1.DaemonSetUpdateStrategy
	SaveStrategy  string
	ClearStrategy bool
	// Template, when set, replaces the whole pod template (kubeadm's, see
	// OwnTemplate), with the change's own template fields above set on it.
	Template *corev1.PodTemplateSpec
	// DryRun sends the PATCH as a dry run: the API server answers with
	// the DaemonSet as it would be, and writes nothing.
	DryRun bool
}

// Restarts reports whether the change makes the DaemonSet roll its pods.
func (c Change) Restarts() bool {
	return c.Template != nil || c.RestartAt != nil || c.RestoreRestartedAt != nil || c.Probe != nil || c.RemoveProbe || c.LivenessProbe != nil || c.ConfigMap != "" || c.Image != ""
}

// RestartedAt is the value the change gives the pod template's
// RestartedAtAnnotation, "" if it restarts nothing that way.
func (c Change) RestartedAt() string {
	if c.RestartAt == nil {
		return ""
	}
	return c.RestartAt.UTC().Format(time.RFC3339)
}

// AppliedTo reports whether ds already holds everything the change writes:
// after a PATCH whose response was lost (and whose repeat got a conflict),
// this tells the run's own write from none.
func (c Change) AppliedTo(ds *appsv1.DaemonSet) bool {
	if c.Hash != "" && ds.Annotations[HashAnnotation] != c.Hash {
		return false
	}
	if c.Hash != "" && c.TemplateGeneration > 0 && (ds.Annotations[RestartGenerationAnnotation] != strconv.FormatInt(c.TemplateGeneration, 10) || TemplateGeneration(ds) < c.TemplateGeneration) {
		return false
	}
	if at := c.RestartedAt(); at != "" && ds.Spec.Template.Annotations[RestartedAtAnnotation] != at {
		return false
	}
	if c.Strategy != nil && ds.Spec.UpdateStrategy.Type != c.Strategy.Type {
		return false
	}
	if c.ConfigMap != "" && ConfigVolumeOf(ds, c.ConfigVolume) != c.ConfigMap {
		return false
	}
	if c.Image != "" && ContainerImage(ds, c.Container) != c.Image {
		return false
	}
	if c.Probe != nil || c.RemoveProbe || c.LivenessProbe != nil {
		var probe, liveness *corev1.Probe
		for _, ctr := range ds.Spec.Template.Spec.Containers {
			if ctr.Name == c.Container {
				probe, liveness = ctr.ReadinessProbe, ctr.LivenessProbe
			}
		}
		if (c.Probe != nil || c.RemoveProbe) && (c.RemoveProbe != (probe == nil) || c.Probe != nil && !apiequality.Semantic.DeepEqual(c.Probe, probe)) {
			return false
		}
		if c.LivenessProbe != nil && !apiequality.Semantic.DeepEqual(c.LivenessProbe, liveness) {
			return false
		}
	}
	return true
}

// NoEffect is the NoEffectAnnotation value saying that pods restarted for
// the data hash base run the data hash as well.
func NoEffect(hash, base string) string { return hash + "@" + base }

// Runs reports whether the DaemonSet's pods run ConfigMap data with this
// hash: they were restarted for it, or for data that differs from it only
// in keys no running kube-proxy reads. A stamp whose restart did not move
// the template (see RestartGenerationAnnotation) does not hold.
func Runs(ds *appsv1.DaemonSet, hash string) bool {
	stamped, ok := ds.Annotations[HashAnnotation]
	if !ok {
		return false
	}
	if g, err := strconv.ParseInt(ds.Annotations[RestartGenerationAnnotation], 10, 64); err == nil && TemplateGeneration(ds) < g {
		return false
	}
	return stamped == hash || ds.Annotations[NoEffectAnnotation] == NoEffect(hash, stamped)
}

// RunsMounted reports whether the DaemonSet's pods run the data with this
// hash, judged from what its template mounts (volume, of the record or a
// copy of it): its stamp (Runs) is a hint, which holds only while the
// template mounts the copy of the stamped data. `kubectl rollout undo`
// points the template at another copy and leaves the stamp: then the stamp
// is stale, and the pods run what the template mounts. On kubeadm's layout
// (the template mounts the record) the stamp is all there is.
func RunsMounted(ds *appsv1.DaemonSet, volume, record, hash string) bool {
	if !Runs(ds, hash) {
		return false
	}
	mounted := ConfigVolumeOf(ds, volume)
	if volume == "" || mounted == record {
		return true
	}
	return mounted == configmap.CopyName(record, ds.Annotations[HashAnnotation])
}

// Stamp is what the DaemonSet says its pods run (HashAnnotation,
// NoEffectAnnotation, RestartGenerationAnnotation), nil where absent, for
// Change.RestoreStamp.
func Stamp(ds *appsv1.DaemonSet) map[string]*string {
	out := map[string]*string{}
	for _, k := range []string{HashAnnotation, NoEffectAnnotation, RestartGenerationAnnotation} {
		if v, ok := ds.Annotations[k]; ok {
			out[k] = &v
		} else {
			out[k] = nil
		}
	}
	return out
}

// NextRestartAt is the restartedAt a restart of ds at now gives its pod
// template: now, in kubectl's whole seconds, unless the template already
// carries that second or a later one (a restart in the same second as the
// previous, or another host's clock ahead); then one second past the
// template's. So every restart's template is new, never an earlier
// revision's, and the DaemonSet controller replaces the pods.
func NextRestartAt(ds *appsv1.DaemonSet, now time.Time) time.Time {
	at := now.UTC().Truncate(time.Second)
	if prev, err := time.Parse(time.RFC3339, ds.Spec.Template.Annotations[RestartedAtAnnotation]); err == nil && !prev.Before(at) {
		at = prev.UTC().Truncate(time.Second).Add(time.Second)
	}
	return at
}

// Patch renders the strategic merge patch.
func (c Change) Patch() ([]byte, error) {
	meta := map[string]interface{}{}
	if c.ResourceVersion != "" {
		meta["resourceVersion"] = c.ResourceVersion
	}
	annotations := map[string]interface{}{}
	if c.Hash != "" {
		annotations[HashAnnotation] = c.Hash
		annotations[NoEffectAnnotation] = nil
		annotations[RestartGenerationAnnotation] = nil
		if c.TemplateGeneration > 0 && c.Restarts() {
			annotations[RestartGenerationAnnotation] = strconv.FormatInt(c.TemplateGeneration, 10)
		}
	}
	for k, v := range c.RestoreStamp {
		if v == nil {
			annotations[k] = nil
		} else {
			annotations[k] = *v
		}
	}
	if c.NoEffect != "" {
		annotations[NoEffectAnnotation] = c.NoEffect
	}
	if c.ConfigMap != "" {
		annotations[PendingConfigAnnotation] = nil
	}
	if c.Pending != "" {
		annotations[PendingConfigAnnotation] = c.Pending
	}
	if c.Previous != "" {
		annotations[PreviousConfigAnnotation] = c.Previous
	}
	if c.SaveStrategy != "" {
		annotations[StrategyAnnotation] = c.SaveStrategy
	}
	if c.ClearStrategy {
		annotations[StrategyAnnotation] = nil
	}
	if len(annotations) > 0 {
		meta["annotations"] = annotations
	}
	patch := map[string]interface{}{"metadata": meta}
	spec := map[string]interface{}{}
	if c.Strategy != nil {
		// the whole strategy, so OnDelete leaves no rollingUpdate behind
		st := map[string]interface{}{"type": c.Strategy.Type, "rollingUpdate": nil}
		if c.Strategy.RollingUpdate != nil {
			ru, err := runtime.DefaultUnstructuredConverter.ToUnstructured(c.Strategy.RollingUpdate)
			if err != nil {
				return nil, err
			}
			st["rollingUpdate"] = ru
		}
		spec["updateStrategy"] = st
	}
	if c.Template != nil {
		// the whole template, replaced as kubeadm's addon phase replaces it
		tmpl, err := runtime.DefaultUnstructuredConverter.ToUnstructured(c.template())
		if err != nil {
			return nil, err
		}
		tmpl["$patch"] = "replace"
		spec["template"] = tmpl
		patch["spec"] = spec
		return json.Marshal(patch)
	}
	tmpl := map[string]interface{}{}
	switch {
	case c.RestartAt != nil:
		tmpl["metadata"] = map[string]interface{}{
			"annotations": map[string]interface{}{RestartedAtAnnotation: c.RestartedAt()},
		}
	case c.RestoreRestartedAt != nil && *c.RestoreRestartedAt == "":
		tmpl["metadata"] = map[string]interface{}{"annotations": map[string]interface{}{RestartedAtAnnotation: nil}}
	case c.RestoreRestartedAt != nil:
		tmpl["metadata"] = map[string]interface{}{"annotations": map[string]interface{}{RestartedAtAnnotation: *c.RestoreRestartedAt}}
	}
	container := map[string]interface{}{"name": c.Container}
	if c.Image != "" {
		container["image"] = c.Image
	}
	if c.RemoveProbe {
		container["readinessProbe"] = nil
	}
	if c.Probe != nil {
		probe, err := probePatch(c.Probe)
		if err != nil {
			return nil, err
		}
		container["readinessProbe"] = probe
	}
	if c.LivenessProbe != nil {
		probe, err := probePatch(c.LivenessProbe)
		if err != nil {
			return nil, err
		}
		container["livenessProbe"] = probe
	}
	podSpec := map[string]interface{}{}
	if len(container) > 1 {
		podSpec["containers"] = []interface{}{container}
	}
	if c.ConfigMap != "" {
		// volumes merge by name: only this volume's ConfigMap name changes
		podSpec["volumes"] = []interface{}{map[string]interface{}{
			"name": c.ConfigVolume, "configMap": map[string]interface{}{"name": c.ConfigMap},
		}}
	}
	if len(podSpec) > 0 {
		tmpl["spec"] = podSpec
	}
	if len(tmpl) > 0 {
		spec["template"] = tmpl
	}
	if len(spec) > 0 {
		patch["spec"] = spec
	}
	return json.Marshal(patch)
}

// probePatch renders a probe so that a strategic merge patch replaces the
// live one's handler instead of merging into it: every handler and every
// HTTP GET field the probe does not set is set to null, so no earlier
// exec, tcpSocket or grpc handler, host or header survives next to it.
// ($patch: replace would do too, but drops the probe when there was none.)
func probePatch(p *corev1.Probe) (map[string]interface{}, error) {
	probe, err := runtime.DefaultUnstructuredConverter.ToUnstructured(p)
	if err != nil {
		return nil, err
	}
	for _, handler := range []string{"exec", "httpGet", "tcpSocket", "grpc"} {
		if _, ok := probe[handler]; !ok {
			probe[handler] = nil
		}
	}
	if get, ok := probe["httpGet"].(map[string]interface{}); ok {
		for _, field := range []string{"host", "scheme", "httpHeaders"} {
			if _, ok := get[field]; !ok {
				get[field] = nil
			}
		}
	}
	return probe, nil
}

// Client patches and watches one DaemonSet. The clients are those of the
// DaemonSet's namespace.
type Client struct {
	DaemonSets kube.DaemonSets
	// Revisions are the DaemonSets' ControllerRevisions (RevisionConfigMaps)
	Revisions kube.ControllerRevisions
	Pods      kube.Pods
	Nodes     kube.NodeReader
	Namespace string
	Name      string
	Clock     clock.WithTicker
	Log       *logrus.Entry
}

// Get reads the DaemonSet.
func (c Client) Get(ctx context.Context) (*appsv1.DaemonSet, error) {
	ds, err := c.DaemonSets.Get(ctx, c.Name, metav1.GetOptions{})
	if err != nil {
		return nil, c.request("get").Explain(err)
	}
	return ds, nil
}

// ApplyFresh sends the change that build makes of the DaemonSet and, on a
// conflict (the controller writes status all the time), reads it again and
// asks build again (reread is then true). When build returns false nothing
// is sent. It returns the DaemonSet as last read or written.
func (c Client) ApplyFresh(ctx context.Context, ds *appsv1.DaemonSet, build func(ds *appsv1.DaemonSet, reread bool) (Change, bool)) (*appsv1.DaemonSet, error) {
	reread := false
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if reread {
			latest, err := c.Get(ctx)
			if err != nil {
				return err
			}
			ds = latest
		}
		ch, send := build(ds, reread)
		reread = true
		if !send {
			return nil
		}
		patched, err := c.Apply(ctx, ch)
		if err == nil {
			ds = patched
		}
		return err
	})
	return ds, err
}

// Apply sends the change as one PATCH.
func (c Client) Apply(ctx context.Context, ch Change) (*appsv1.DaemonSet, error) {
	body, err := ch.Patch()
	if err != nil {
		return nil, fmt.Errorf("render daemonset patch: %w", err)
	}
	opts := metav1.PatchOptions{FieldManager: "kube-proxy-sync"}
	if ch.DryRun {
		opts.DryRun = []string{metav1.DryRunAll}
	}
	ds, err := c.DaemonSets.Patch(ctx, c.Name, types.StrategicMergePatchType, body, opts)
	if err != nil {
		return nil, c.request("patch").Explain(err)
	}
	return ds, nil
}

// request is verb on the DaemonSet, as its errors tell it (kube.Request.Explain).
func (c Client) request(verb string) kube.Request {
	return kube.Request{What: fmt.Sprintf("%s daemonset %q", verb, c.Namespace+"/"+c.Name), Needs: verb + " on daemonsets",
		NotFound: "not found: check --namespace/--daemonset"}
}

// Status is where a rollout stands.
type Status struct {
	Desired   int32   `json:"desired"`
	Updated   int32   `json:"updated"`
	Available int32   `json:"available"`
	Duration  float64 `json:"duration_seconds"`
	// Strategy is how the pods were rolled: rolling (the DaemonSet
	// controller, within maxUnavailable) or canary (kube-proxy-sync deletes
	// pods itself, canary nodes first, then in batches).
	Strategy string `json:"strategy,omitempty"`
	// SkippedNodes are going away; their pods neither blocked nor failed the run.
	SkippedNodes []nodes.Skipped `json:"skipped_nodes"`
	// UnreadyBefore are live nodes whose pod was not Ready before the
	// restart: failures there are not the restart's doing.
	UnreadyBefore []string `json:"unready_before"`
	// CanaryNodes were restarted first.
	CanaryNodes []string `json:"canary_nodes,omitempty"`
	// Zones, with the zonal strategy: the zones in the order they were
	// restarted, one at a time.
	Zones []Zone `json:"zones,omitempty"`
	// MaxUnavailable is the most live nodes seen without a Ready pod at once.
	MaxUnavailable int `json:"max_unavailable_seen"`
}

// StatusOf reads a DaemonSet's rollout status.
func StatusOf(ds *appsv1.DaemonSet) Status {
	return Status{
		Desired:   ds.Status.DesiredNumberScheduled,
		Updated:   ds.Status.UpdatedNumberScheduled,
		Available: ds.Status.NumberAvailable,
	}
}

// TemplateGeneration is the generation new pods of ds are labelled with.
func TemplateGeneration(ds *appsv1.DaemonSet) int64 {
	if g, err := strconv.ParseInt(ds.Annotations[templateGenerationAnnotation], 10, 64); err == nil {
		return g
	}
	return ds.Generation
}
