package kpsync

import (
	"context"
	"slices"
	"time"

	"github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"

	"github.com/kube-proxy-sync/kube-proxy-sync/internal/audit"
	"github.com/kube-proxy-sync/kube-proxy-sync/internal/configmap"
	"github.com/kube-proxy-sync/kube-proxy-sync/internal/kube"
	"github.com/kube-proxy-sync/kube-proxy-sync/internal/kubeadm"
	"github.com/kube-proxy-sync/kube-proxy-sync/internal/nodes"
	"github.com/kube-proxy-sync/kube-proxy-sync/internal/rollout"
	"github.com/kube-proxy-sync/kube-proxy-sync/internal/verify"
)

// Restart policies.
const (
	RestartAuto   = "auto"
	RestartAlways = "always"
	RestartNever  = "never"
)

// Rollout strategies.
const (
	StrategyRolling = "rolling"
	StrategyCanary  = "canary"
)

// LeaseName is the coordination.k8s.io Lease that serialises runs.
const LeaseName = "kube-proxy-sync"

// Options is what the user asked for, already validated.
type Options struct {
	Namespace string
	ConfigMap string
	DaemonSet string
	Container string
	// Image, when set, is the image the container should run (kubeadm's
	// rendering of an upgrade): a different one is a template change,
	// rolled like a config change, and rolled back with it.
	Image string
	// Template, when set, is the pod template kubeadm renders (--template
	// kubeadm): a DaemonSet whose template differs from it (the API server
	// judges, see rollout.Client.TemplateDiffers) takes it whole, with
	// kube-proxy-sync's own fields (rollout.OwnTemplate), in the restart.
	Template *corev1.PodTemplateSpec
	// TemplateFrom says in the summary what Template is ("": kubeadm's).
	TemplateFrom string
	// Access, with Template, is kube-proxy's ServiceAccount and RBAC as
	// kubeadm renders them: those missing or different are applied
	// before the restart (access.go).
	Access           kubeadm.Access
	Spec             configmap.Spec
	ProbePath        string
	KubeProxyVersion string
	Restart          string
	// Timeout bounds the whole rollout (0: none); reaching it rolls nothing back.
	Timeout time.Duration
	// ProgressDeadline fails the rollout when no node finished for this
	// long (0: derived from the pod's timings, see ProgressDeadline).
	ProgressDeadline time.Duration
	Check            bool
	Diff             bool
	LockTimeout      time.Duration
	Nodes            nodes.Policy
	Strategy         string
	CanaryNodes      int
	// ZoneLabel, with the canary strategy, makes it zonal: nodes grouped
	// by this label's value, restarted one zone at a time.
	ZoneLabel string
	// BatchSize is "N" or "P%" of the live nodes; empty means the
	// DaemonSet's own maxUnavailable.
	BatchSize string
	Verify    bool
	// VerifyEndpoints is how many live nodes --verify also asks for kube-proxy's
	// health endpoint through the API server's node proxy (0: none).
	VerifyEndpoints int
	// RollbackOnFailure (the default; --no-rollback turns it off) restores
	// the ConfigMap data and the pod template when the new template fails.
	RollbackOnFailure bool
	// Connectivity: checks of each node's kube-proxy before and after its restart.
	Connectivity ConnectivityOptions
	// History is how many copies of the config are kept besides those in
	// use (0: DefaultHistory).
	History int
	// Undo restores the config the fleet ran before the last change
	// (rollout.PreviousConfigAnnotation) instead of applying Spec.
	Undo bool
}

// Deps are passed in, so tests can use a fake clientset (kubefake) and clock.
type Deps struct {
	Kube     kube.Interface
	Clock    clock.WithTicker
	Log      *logrus.Entry
	Audit    audit.Log
	Server   string
	Requests func() int64
	// Step, when set, is called at each step boundary (StepConfigMapWritten,
	// StepDaemonSetPatched, StepWaiting, StepCanaryDone, StepRecordWrite);
	// crash tests block there and kill the process.
	Step func(ctx context.Context, step string)
	// NodeProxy builds the prober of kube-proxy's /healthz on a port, for
	// --verify-health.
	NodeProxy func(port int) (verify.Prober, error)
}

// Step boundaries passed to Deps.Step.
const (
	StepConfigMapWritten = "after-configmap-write"
	StepDaemonSetPatched = "after-daemonset-patch"
	StepWaiting          = "during-wait"
	// StepCanaryDone: the canary nodes run a Ready kube-proxy of the new
	// template and no other node's pod was deleted yet (canary strategy)
	StepCanaryDone = "after-canary"
	// StepRecordWrite: the rollout is done, the record not written yet
	StepRecordWrite = "before-record-write"
)

// env is what the phases of a run are built from, as kind's actions are
// from their ActionContext: the options as asked, the clients of the
// objects the run is about, the clock, the log, the audit log and the
// warnings. It holds no outcome: each phase returns its part of the
// result, and run merges them. What a phase decides for the later ones
// (the rollout's settings a proxy-mode change tightens, say) travels in
// the plan, never in here.
type env struct {
	o      Options
	d      Deps
	cms    configmap.Client
	copies configmap.Copies
	dss    rollout.Client
	// warns collects the run's warnings (logged once each)
	warns *warnings
	// healed are the copies the template mounts that the run made anew
	// (check mode: would), a write of the run kept, as the warnings are,
	// across the plan made twice (see mounted.go)
	healed []string
	// locked: the run holds the Lease (set before the plan under it); a
	// heal writes only then
	locked  bool
	auditID string
	// nodes: the nodes as the plan observed them (see observed.go)
	nodes *observedNodes
}

func newEnv(o Options, d Deps, id string) *env {
	return &env{
		o:      o,
		d:      d,
		cms:    configmap.Client{ConfigMaps: d.Kube.ConfigMaps(o.Namespace), Namespace: o.Namespace, Name: o.ConfigMap},
		copies: configmap.Copies{ConfigMaps: d.Kube.ConfigMaps(o.Namespace), Namespace: o.Namespace, Record: o.ConfigMap},
		dss: rollout.Client{DaemonSets: d.Kube.DaemonSets(o.Namespace), Revisions: d.Kube.ControllerRevisions(o.Namespace), Pods: d.Kube.Pods(o.Namespace), Nodes: d.Kube.Nodes(),
			Namespace: o.Namespace, Name: o.DaemonSet, Clock: d.Clock, Log: d.Log},
		warns:   &warnings{log: d.Log},
		auditID: id,
		nodes:   &observedNodes{api: d.Kube.Nodes()},
	}
}

func (e *env) step(ctx context.Context, name string) {
	if e.d.Step != nil {
		e.d.Step(ctx, name)
	}
}

func (e *env) warn(msg string) { e.warns.add(msg) }

// event records an Event on the DaemonSet; a failure is logged.
func (e *env) event(ctx context.Context, typ, reason, msg string) {
	o := e.o
	now := metav1.NewTime(e.d.Clock.Now())
	ev := &corev1.Event{
		ObjectMeta: metav1.ObjectMeta{GenerateName: o.DaemonSet + ".", Namespace: o.Namespace},
		InvolvedObject: corev1.ObjectReference{
			APIVersion: "apps/v1", Kind: "DaemonSet", Namespace: o.Namespace, Name: o.DaemonSet,
		},
		Reason: reason, Message: msg, Type: typ, Count: 1,
		FirstTimestamp: now, LastTimestamp: now,
		Source:              corev1.EventSource{Component: "kube-proxy-sync"},
		ReportingController: "kube-proxy-sync",
		ReportingInstance:   "kube-proxy-sync",
	}
	// a context of its own: the run's may be the one that just ran out
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if _, err := e.d.Kube.Events(o.Namespace).Create(ctx, ev, metav1.CreateOptions{}); err != nil {
		e.d.Log.Warnf("record event %s on daemonset %s/%s: %v", reason, o.Namespace, o.DaemonSet, err)
	}
}

// warnings are the run's warnings: each logged once and kept for the
// result (the plan may be made twice).
type warnings struct {
	log  *logrus.Entry
	msgs []string
}

func (w *warnings) add(msg string) {
	if slices.Contains(w.msgs, msg) {
		return
	}
	w.log.Warn(msg)
	w.msgs = append(w.msgs, msg)
}

// list is the warnings so far, nil when none.
func (w *warnings) list() []string { return slices.Clone(w.msgs) }

// ConnectivityOptions turn on the checks before and after each node's restart.
type ConnectivityOptions struct {
	// Health is verify.Off, verify.Auto or verify.Required.
	Health string
	// HealthTimeout: how long a restarted kube-proxy has to show a sync.
	HealthTimeout time.Duration
	// Traffic is "namespace/name" of a Service to connect to from each
	// node after its restart ("": none, but a proxy-mode change brings
	// its own, see probeservice.go; TrafficNone: none at all).
	Traffic      string
	TrafficImage string
	// TrafficPaths are verify.PathNode, PathPod, PathNodePort (none: node);
	// TrafficPodImage runs the pod path's connection.
	TrafficPaths    []string
	TrafficPodImage string
	TrafficTimeout  time.Duration
	// podImageOptional: TrafficPodImage is kube-proxy's own image, taken
	// by the run, not asked: if it cannot connect, the pod path is left
	// out with a warning instead of failing the run (see baseline)
	podImageOptional bool
	// serviceMade: when the run's own Service was made (zero: not the
	// run's own); the pod path's try before any restart waits until that
	// node's kube-proxy has synced since, so that its connection never
	// leaves the node unrouted (see baseline)
	serviceMade time.Time
}
