package kpsync

import (
	"fmt"
	"sort"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	"sigs.k8s.io/yaml"

	"github.com/kube-proxy-sync/kube-proxy-sync/internal/configmap"
	"github.com/kube-proxy-sync/kube-proxy-sync/internal/nodes"
	"github.com/kube-proxy-sync/kube-proxy-sync/internal/rollout"
	"github.com/kube-proxy-sync/kube-proxy-sync/internal/verify"
)

// Restart reasons reported in the facts.
const (
	ReasonConfigChanged = "config-changed"
	ReasonPending       = "pending"
	ReasonProbeChanged  = "probe-changed"
	// ReasonImageChanged: the container's image changes (--image, or the
	// image kubeadm renders), the config does not
	ReasonImageChanged = "image-changed"
	// ReasonTemplateChanged: kubeadm's pod template differs from the
	// DaemonSet's (--template kubeadm), the config and image do not
	ReasonTemplateChanged = "template-changed"
	ReasonForced          = "forced"
	// ReasonNoEffect: the config changed, but no changed key has an effect
	// on the running kube-proxies; not restarted (restart_required false).
	ReasonNoEffect = "no-effect"
)

// Facts are what later playbook tasks branch on: the module's return values
// (plugins/modules/*.yml documents them under RETURN).
// The names are a public contract: add, never rename.
// Each field's doc comment is its row in the README's result table
// (go run ./hack/gen-options writes it): start it with the field's name.
type Facts struct {
	// ConfigMapChanged: the data changed (or would, in check mode).
	ConfigMapChanged bool `json:"configmap_changed"`
	// ResourceVersionBefore is the ConfigMap's resourceVersion the first
	// capture saw.
	ResourceVersionBefore string `json:"resource_version_before"`
	// ResourceVersionAfter is the one the second capture saw.
	ResourceVersionAfter string `json:"resource_version_after"`
	// ResourceVersionChanged: the two captures saw different versions; a
	// bump with identical data restarts nothing.
	ResourceVersionChanged bool `json:"resource_version_changed"`
	// ChangedKeys are the data keys, and fields in them, whose value
	// changed, e.g. `["config.conf:mode", "kubeconfig.conf:clusters[0].cluster.server"]`.
	ChangedKeys []string `json:"changed_keys"`
	// ChangedKeysEffect is each changed key's effect on the running
	// kube-proxies, `restart` or `no-effect`, e.g.
	// `{"config.conf:ipvs.scheduler": "no-effect"}`.
	ChangedKeysEffect map[string]string `json:"changed_keys_effect"`
	// RestartRequired: kube-proxy needed a restart.
	RestartRequired bool `json:"restart_required"`
	// Restarted: this run restarted kube-proxy (rolled the DaemonSet).
	Restarted bool `json:"restarted"`
	// RestartReason is why: `config-changed`, `pending`, `probe-changed`,
	// `image-changed`, `template-changed`, `forced`, or empty; `no-effect` when the data
	// changed but no changed key has an effect (no restart).
	RestartReason string `json:"restart_reason"`
	// Adopted: the first run stamped the data hash on the DaemonSet, no
	// restart (a write: `changed` is true).
	Adopted bool `json:"adopted"`
	// ProbePath is the path of the readiness probe after the run: the one
	// decided, or the one it had when the probe is left alone.
	ProbePath string `json:"probe_path"`
	// ProbeChanged: the run changed the readiness probe (which rolls the
	// DaemonSet).
	ProbeChanged bool `json:"probe_changed"`
	// Image is the kube-proxy container's image after the run (in check
	// mode: would be; after a rollback: the one before).
	Image string `json:"image"`
	// ImageBefore is the image it ran before the run.
	ImageBefore string `json:"image_before"`
	// ImageChanged: the run changes the image (`--image`,
	// `--kubeadm-config`); `restart_reason` is `image-changed` when the
	// config did not change.
	ImageChanged bool `json:"image_changed"`
	// TemplateChanged: the run takes kubeadm's pod template
	// (`--template kubeadm`), which differs from the DaemonSet's beyond the
	// fields kube-proxy-sync sets; `restart_reason` is `template-changed`
	// when the config and image did not change.
	TemplateChanged bool `json:"template_changed"`
	// AccessChanged are kube-proxy's ServiceAccount and RBAC objects the
	// run applied as kubeadm renders them (`--template kubeadm`; in check
	// mode: would), e.g. `["role kube-system/kube-proxy"]`.
	AccessChanged []string `json:"access_changed"`
	// KubeProxyVersion is the kube-proxy version the run found or was
	// told: the new image's, when `--image` changes it.
	KubeProxyVersion string `json:"kube_proxy_version"`
	// Rollout is the rollout this run made and waited for.
	Rollout rollout.Status `json:"rollout"`
	// RolledBack: the run undid its change (see docs/failures.md).
	RolledBack bool `json:"rolled_back"`
	// RollbackReason is why it rolled back.
	RollbackReason string `json:"rollback_reason"`
	// CheckMode: a check-mode run (`--check`), which writes nothing.
	CheckMode bool `json:"check_mode"`
	// AuditID is the run's ID in the audit log and in the Events on the
	// DaemonSet.
	AuditID string `json:"audit_id"`
	// APIRequests counts the HTTP requests this run made, retries included.
	APIRequests int64 `json:"api_requests"`
	// ConfigMapName is the ConfigMap the pod template mounts after the run:
	// the record (kubeadm's layout, before the first change) or the
	// immutable copy of the config the fleet runs (kube-proxy-NNNNNNNNNN).
	ConfigMapName string `json:"configmap_name"`
	// PreviousConfigMap is the one it mounted before this run moved it,
	// empty when it did not: what a rollback, or `kubectl rollout undo`,
	// restores.
	PreviousConfigMap string `json:"previous_configmap"`
	// UndoConfigMap is the copy `--undo` restores (the config the fleet ran
	// before the last change), empty when none is recorded.
	UndoConfigMap string `json:"undo_configmap"`
	// RecordChanged: the record ConfigMap (`--configmap`, which kubeadm
	// reads) was written to the config the fleet runs.
	RecordChanged bool `json:"record_changed"`
	// DeferredKeys are keys changed with no effect on the running
	// kube-proxies while the template mounts the record itself: not
	// written (it is mounted); the next run that restarts carries them.
	DeferredKeys []string `json:"deferred_keys"`
	// Connectivity is what the checks before and after each node's
	// restart saw (`--verify-health`), absent when they were off.
	Connectivity *verify.Report `json:"connectivity,omitempty"`
	// Migration is the plan of a change of the proxy mode (migration.go;
	// docs/proxy-mode.md), absent when the mode stays.
	Migration *Migration `json:"migration,omitempty"`
}

// Diff is Ansible's diff: the ConfigMap data before and after, redacted.
type Diff struct {
	Before       string `json:"before"`
	After        string `json:"after"`
	BeforeHeader string `json:"before_header"`
	AfterHeader  string `json:"after_header"`
}

// Result is the outcome of one run, complete as far as the run got even when
// it failed.
type Result struct {
	Changed bool
	Msg     string
	Facts   Facts
	Diff    *Diff
	// Warnings are also logged; Ansible shows them as [WARNING] lines.
	Warnings []string

	// restored says what the run put back of an updateStrategy an earlier
	// run left saved ("": nothing), a write of this run
	restored string
	// wouldChange: check mode's plan has the real run write the DaemonSet
	// or restart pods, which the facts of a check-mode run do not show
	// (see decided)
	wouldChange bool
	// audited: the plan record is in the audit log, so an outcome follows
	// whatever the run then finds to do
	audited bool
	// mountedBefore is the ConfigMap the pod template mounted before the run
	mountedBefore string
}

// Each phase returns its part of the result, which run merges (each
// phase's merge is beside the phase: mergePlan in plan.go, and so on).

// applied is the apply phase's part of the result.
type applied struct {
	// name is the ConfigMap after was captured from
	name  string
	after configmap.Snapshot
	// configMapChanged: the data the pods are to run is not the data
	// before (check mode: would be); recordChanged: the record was written
	configMapChanged, recordChanged bool
	// rvAfter is the record's resourceVersion after ("": as before)
	rvAfter string
	// configMapName is the ConfigMap the template is to mount
	configMapName string
	// changedKeys, when the capture is not what the run validated (see
	// changedUnder)
	changedKeys []string
	// deferred: keys changed with no effect, not written while another
	// DaemonSet mounts the record (nil: none)
	deferred []string
}

// restartOutcome is the restart phase's part of the result.
type restartOutcome struct {
	// ds is the DaemonSet as last read or written
	ds *appsv1.DaemonSet
	// decided: the PATCH was decided (see patchFor), the fields below say
	// what it does
	decided                          bool
	required                         bool
	reason                           string
	restarted, adopted, probeChanged bool
	image, imageBefore               string
	imageChanged, templateChanged    bool
	// configMapName and previousConfigMap: the PATCH moved the template
	// from the one to the other
	configMapName, previousConfigMap string
	// observed: the fleet was observed before the PATCH
	observed      bool
	skipped       []nodes.Skipped
	unreadyBefore []string
	// resume: what a canary an earlier run left half-way adds
	resume resumeOutcome
	// idle is the rollout's status when nothing rolls (nil: it rolls)
	idle *rollout.Status
}

// restartedPods reports whether the restart phase restarted pods: with
// its own PATCH, or by resuming a canary an earlier run left half-way.
func (o restartOutcome) restartedPods() bool { return o.restarted || o.resume.restarted }

// resumeOutcome is what finding a canary an earlier run left half-way adds.
type resumeOutcome struct {
	// owed: a restart is owed (the leftover's old pods), reason pending
	// unless another is already given; restarted: this run resumes it
	owed, restarted bool
	observed        bool
	skipped         []nodes.Skipped
	unreadyBefore   []string
}

// rollOutcome is the rollout phase's part of the result.
type rollOutcome struct {
	rollout      rollout.Status
	connectivity *verify.Report
	// rolledBack: the template was restored; configMapName and
	// previousConfigMap then say what it mounts again and what it left
	rolledBack                       bool
	rollbackReason                   string
	configMapName, previousConfigMap string
	imageRestored                    bool
}

// settled is the settle phase's part of the result.
type settled struct {
	// configMapName is the ConfigMap the template mounts ("": the record)
	configMapName string
	recordChanged bool
	// rvAfter is the record's resourceVersion once written ("": not)
	rvAfter string
}

// Migration is the plan of a proxy-mode change (the result's migration).
type Migration struct {
	// From is the mode the fleet runs, To the mode of the new config.
	From string `json:"from"`
	To   string `json:"to"`
	// KubeProxyVersion is the kube-proxy whose start-up the plan relies on.
	KubeProxyVersion string `json:"kube_proxy_version"`
	// Strategy is how the run rolls it (canary, or zonal);
	// StrategyAsked what --strategy said.
	Strategy      string `json:"strategy"`
	StrategyAsked string `json:"strategy_asked"`
	// CanaryNodes restart first, a batch at a time when there are more of
	// them than BatchSize; Batches counts the rounds after the first one,
	// of at most BatchSize nodes each (zonal: each zone's canary, then the
	// rest of it, in the order of Zones). Check mode: the nodes a run
	// would pick now.
	CanaryNodes []string `json:"canary_nodes"`
	BatchSize   int      `json:"batch_size"`
	Batches     int      `json:"batches"`
	Zones       []string `json:"zones,omitempty"`
	// VerifyHealth and VerifyTraffic are the checks each migrated node
	// passes before the rollout goes on.
	VerifyHealth  string `json:"verify_health"`
	VerifyTraffic string `json:"verify_traffic"`
	// VerifyTrafficPaths are the paths the traffic check connects along.
	VerifyTrafficPaths []string `json:"verify_traffic_paths,omitempty"`
	// Cleanup says what removes the old mode's rules on each node.
	Cleanup string `json:"cleanup"`
	// Warnings: settings whose meaning changes in the new mode, and rules
	// that stay behind (also in the result's warnings).
	Warnings []string `json:"warnings"`
	// Resumed: an earlier run's canary rollout of this change stopped
	// half-way (killed, say), and this run finishes it with the
	// migration's checks; From is what its older pods run.
	Resumed bool `json:"resumed,omitempty"`
}

// Each phase's part of the result is merged as far as the phase got, so
// that a failed run reports what it did (the merges are beside the
// phases).

// decided takes what the plan the run goes on with says it changes.
//
// In check mode this is where the run says whether the real run would
// change anything: what the plan has it do to the DaemonSet, the one
// PATCH that restarts (a config change, --restart always, a restart owed,
// the image), stamps or sets the probe, none of which --restart never
// sends; the updateStrategy an earlier run left saved, put back under the
// lease; a canary left half-way, resumed. The ConfigMap's side is the
// apply and settle phases' own, which run in check mode and say what they
// would write (configmap_changed, record_changed).
func (r *Result) decided(e *env, p plan) {
	f := &r.Facts
	if e.o.Check {
		_, saved, _ := rollout.SavedStrategy(p.ds)
		patches := e.o.Restart != RestartNever && (p.reason != "" || p.adopt || p.probe.changes())
		r.wouldChange = patches || (saved && !rollout.CanaryLeftover(p.ds)) || p.resume || len(p.access) > 0
	}
	f.ChangedKeys, f.ProbePath, f.KubeProxyVersion = p.keys, p.probe.path, p.probe.version
	f.ChangedKeysEffect = p.effects
	r.Diff = diffOf(e, p.before.Data, p.desired, p.effects)
}

// diffOf is Ansible's diff of the data before and after (nil without --diff).
func diffOf(e *env, before, after, effects map[string]string) *Diff {
	if !e.o.Diff {
		return nil
	}
	render := func(data map[string]string) string {
		b, _ := yaml.Marshal(configmap.RedactData(data))
		return string(b)
	}
	name := fmt.Sprintf("configmap %s/%s data", e.o.Namespace, e.o.ConfigMap)
	d := &Diff{Before: render(before), After: render(after), BeforeHeader: name + " (before)", AfterHeader: name + " (after)"}
	if len(effects) > 0 {
		keys := make([]string, 0, len(effects))
		for k := range effects {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		var parts []string
		for _, k := range keys {
			parts = append(parts, k+": "+effects[k])
		}
		d.AfterHeader = fmt.Sprintf("%s (after; effect on the running kube-proxy: %s)", name, strings.Join(parts, ", "))
	}
	return d
}
