package kpsync

import (
	appsv1 "k8s.io/api/apps/v1"

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
	ReasonForced       = "forced"
	// ReasonNoEffect: the config changed, but no changed key has an effect
	// on the running kube-proxies; not restarted (restart_required false).
	ReasonNoEffect = "no-effect"
)

// Facts are what later playbook tasks branch on: the module's return values
// (plugins/modules/*.yml documents them under RETURN).
// The names are a public contract: add, never rename.
type Facts struct {
	ConfigMapChanged       bool     `json:"configmap_changed"`
	ResourceVersionBefore  string   `json:"resource_version_before"`
	ResourceVersionAfter   string   `json:"resource_version_after"`
	ResourceVersionChanged bool     `json:"resource_version_changed"`
	ChangedKeys            []string `json:"changed_keys"`
	// ChangedKeysEffect: each changed key's effect on the running
	// kube-proxies, "restart" or "no-effect".
	ChangedKeysEffect map[string]string `json:"changed_keys_effect"`
	RestartRequired   bool              `json:"restart_required"`
	Restarted         bool              `json:"restarted"`
	RestartReason     string            `json:"restart_reason"`
	// Adopted: stamped the data hash on a DaemonSet never seen before, no restart.
	Adopted      bool   `json:"adopted"`
	ProbePath    string `json:"probe_path"`
	ProbeChanged bool   `json:"probe_changed"`
	// Image is the kube-proxy container's image once the run is done (in
	// check mode: would be), ImageBefore the one it ran before the run;
	// ImageChanged: the run changes it (--image, --kubeadm-config)
	Image            string         `json:"image"`
	ImageBefore      string         `json:"image_before"`
	ImageChanged     bool           `json:"image_changed"`
	KubeProxyVersion string         `json:"kube_proxy_version"`
	Rollout          rollout.Status `json:"rollout"`
	RolledBack       bool           `json:"rolled_back"`
	RollbackReason   string         `json:"rollback_reason"`
	CheckMode        bool           `json:"check_mode"`
	AuditID          string         `json:"audit_id"`
	APIRequests      int64          `json:"api_requests"`
	// ConfigMapName is the ConfigMap the pod template mounts after the run:
	// the record (kubeadm's layout, before the first change) or the
	// immutable copy of the config the fleet runs (kube-proxy-NNNNNNNNNN).
	ConfigMapName string `json:"configmap_name"`
	// PreviousConfigMap is the one it mounted before this run moved it, ""
	// when it did not: what a rollback, or `kubectl rollout undo`, restores.
	PreviousConfigMap string `json:"previous_configmap"`
	// UndoConfigMap is the copy --undo restores (the config the fleet ran
	// before the last change), "" when none is recorded.
	UndoConfigMap string `json:"undo_configmap"`
	// RecordChanged: the record ConfigMap (--configmap, which kubeadm
	// reads) was written to the config the fleet runs.
	RecordChanged bool `json:"record_changed"`
	// DeferredKeys changed with no effect on the running kube-proxies while
	// the template mounts the record itself: not written (it is mounted),
	// the next run that restarts carries them.
	DeferredKeys []string `json:"deferred_keys"`
	// Connectivity is what the checks before and after each node's restart
	// saw (--verify-health), nil when they were off.
	Connectivity *verify.Report `json:"connectivity,omitempty"`
	// Migration is the plan of a change of the proxy mode (see
	// migration.go), nil when the mode stays.
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
	// wouldChange: check mode found a write a real run would make that
	// the facts do not show (a saved strategy to restore, a canary to resume)
	wouldChange bool
	// audited: the plan record is in the audit log, so an outcome follows
	// whatever the run then finds to do
	audited bool
	// mountedBefore is the ConfigMap the pod template mounted before the run
	mountedBefore string
}

// Each phase returns its part of the result (merged by run, see sync.go).

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
	imageChanged                     bool
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

// resumeOutcome is what finding a canary an earlier run left half-way adds.
type resumeOutcome struct {
	// owed: a restart is owed (the leftover's old pods), reason pending
	// unless another is already given; restarted: this run resumes it
	owed, restarted bool
	wouldChange     bool
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
}
