package app

import (
	"fmt"
	"io"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"

	"github.com/kube-proxy-sync/kube-proxy-sync/internal/configmap"
	"github.com/kube-proxy-sync/kube-proxy-sync/internal/kpconfig"
	"github.com/kube-proxy-sync/kube-proxy-sync/internal/kpsync"
	"github.com/kube-proxy-sync/kube-proxy-sync/internal/kubeadm"
	"github.com/kube-proxy-sync/kube-proxy-sync/internal/nodes"
	"github.com/kube-proxy-sync/kube-proxy-sync/internal/pools"
	"github.com/kube-proxy-sync/kube-proxy-sync/internal/probe"
	"github.com/kube-proxy-sync/kube-proxy-sync/internal/rollout"
	"github.com/kube-proxy-sync/kube-proxy-sync/internal/verify"
)

// Adding an option: a field below, a row in OptionTable (an int or a
// duration with its Range, which Validate enforces), its use (Validate,
// syncOptions), then `go run ./hack/gen-options` rewrites the module docs,
// the role's argument specs, defaults and pass-through, and the README's flag
// table from the row. `make verify` fails until it has.

// ImageFromKubeadm is the --image value that takes the image kubeadm
// renders from --kubeadm-config.
const ImageFromKubeadm = "kubeadm"

// TemplateFromKubeadm is the --template value that takes the pod template
// kubeadm renders from --kubeadm-config.
const TemplateFromKubeadm = "kubeadm"

// DefaultTrafficImage is kubeadm 1.34's pause image, which the kubelet
// keeps on every node.
const DefaultTrafficImage = "registry.k8s.io/pause:3.10.1"

// Options are everything a run can be told, from flags or an Ansible args file.
type Options struct {
	Kubeconfig string
	Context    string
	Namespace  string
	ConfigMap  string
	DaemonSet  string
	Container  string
	Server     string
	// AllowInsecureServer: an http --server is accepted
	AllowInsecureServer bool
	Set                 []string
	Pools               []string
	PoolSet             []string
	Split               string
	SplitNodes          string
	Merge               string
	Manifest            string
	KubeadmConfig       string
	Kubeadm             string
	ProbePath           string
	KubeProxyVersion    string
	Image               string
	Template            string
	Restart             string
	Timeout             time.Duration
	RequestTimeout      time.Duration
	Retries             int
	Check               bool
	Diff                bool
	AuditLog            string
	Output              string
	DetailedExitCode    bool
	LogLevel            string
	LogFormat           string
	ShowVersion         bool
	LockTimeout         time.Duration
	Strategy            string
	CanaryNodes         int
	ConfigHistory       int
	Undo                bool
	ZoneLabel           string
	BatchSize           string
	Verify              bool
	VerifyEndpoints     int
	VerifyHealth        string
	VerifyHealthWait    time.Duration
	VerifyTraffic       string
	VerifyTrafficImg    string
	VerifyTrafficPaths  string
	VerifyTrafficPodImg string
	VerifyTrafficWait   time.Duration
	RollbackOnFailure   bool
	NoRollback          bool
	ProgressDeadline    time.Duration
	NotReadyTolerance   time.Duration
	SkipUnschedulable   bool

	// filled by Complete
	settings []kpconfig.Setting
	spec     configmap.Spec
	// image is the image the container should run: Image, or kubeadm's
	image string
	// template is the pod template kubeadm renders (--template kubeadm)
	template *corev1.PodTemplateSpec
	// access is kube-proxy's ServiceAccount and RBAC kubeadm renders with it
	access kubeadm.Access
	// pools are the --pool DaemonSets, with their --pool-set values
	pools []pool
	// poolResults is what became of each pool, for the result
	poolResults []poolResult
	// poolMove is what a --split or --merge did, for the result
	poolMove *pools.Outcome
	module   bool
	// stdin is the command's standard input, which --kubeadm-config - reads
	// (nil for the module, which has none)
	stdin io.Reader
}

// Option is one row of the option table: everything the flag, the Ansible
// module, the role and the docs say about one option.
type Option struct {
	Flag    string // the command-line flag, without the dashes
	Short   string // its one-letter shorthand, or ""
	Metavar string // what the flag's value is, for the README (URL, FILE), or ""
	Arg     string // the Ansible module's argument, or "" when the module has none
	Role    string // the role variable passed as Arg, or "" when the role does not pass it
	Since   string // the release the option appeared in (version_added)

	// Default is the binary's default: a string, bool, int or
	// time.Duration, as the field's type; nil for the zero value.
	Default any
	// DefaultText says in the README what a zero default means ("none",
	// "from the image tag"), in the markup of Help.
	DefaultText string
	// Choices are the values Validate accepts, when they are a fixed set.
	Choices []string
	// Help is the one text of the flag's usage, the module's and the
	// role's description and the README's row (with the Range added:
	// Description), in Ansible's markup:
	// O(arg) and O(arg=value) name an option by its module argument (or
	// its flag, with underscores, when it has none), V(value) a value,
	// C(text) code, RV(key) a return value. A blank line starts a
	// paragraph (a list item of the module's description).
	Help string
	// See names the README section that says more, for the README's row.
	See string
	// Range bounds an int or a duration: Validate refuses a value outside
	// it, and Description says it (nil: no bounds beyond the type's).
	Range *Range

	// RoleDefault is the variable's value in the role's defaults/main.yml,
	// as YAML: "" (empty) and null keep the binary's default, which the
	// role does not pass.
	RoleDefault string
	// RolePass is what the role's tasks/main.yml passes as Arg, when not
	// the rule for RoleDefault (null: omitted when null; a bool: | bool;
	// "": omitted when empty; else as it is).
	RolePass string
	// RoleDefaultText says in the role's README what a templated
	// RoleDefault is, in the markup of Help.
	RoleDefaultText string
	// RoleType is the type in argument_specs.yml, when not the module's.
	RoleType string
	// RoleNote is what the role's argument spec says besides Help.
	RoleNote string

	field func(*Options) any            // a pointer to the option's field
	parse func(o *Options, v any) error // the module argument, when not by the field's type
}

// OptionTable is every option, in the order the docs list them.
func OptionTable() []Option {
	return []Option{
		{
			Flag: "kubeconfig", Arg: "kubeconfig", Role: "kpsync_kubeconfig", Since: "1.0.0",
			DefaultText: "C($KUBECONFIG), C(~/.kube/config), in-cluster",
			Help:        "Path to the kubeconfig; empty uses C($KUBECONFIG), C(~/.kube/config), or the in-cluster config.",
			RoleDefault: "/etc/kubernetes/admin.conf",
			RoleType:    "path",
			RoleNote:    "The role needs one: kubeadm's C(/etc/kubernetes/admin.conf) by default, on the host that runs the module.",
			field:       func(o *Options) any { return &o.Kubeconfig },
		},
		{
			Flag: "context", Arg: "context", Role: "kpsync_context", Since: "1.0.0",
			DefaultText: "the current context",
			Help:        "Kubeconfig context to use; empty uses the current context.",
			RoleDefault: `""`,
			field:       func(o *Options) any { return &o.Context },
		},
		{
			Flag: "namespace", Short: "n", Arg: "namespace", Role: "kpsync_namespace", Since: "1.0.0",
			Default:     "kube-system",
			Help:        "Namespace of the kube-proxy ConfigMap and DaemonSet.",
			RoleDefault: "kube-system",
			field:       func(o *Options) any { return &o.Namespace },
		},
		{
			Flag: "configmap", Arg: "configmap", Role: "kpsync_configmap", Since: "1.0.0",
			Default:     "kube-proxy",
			Help:        "Name of kube-proxy's ConfigMap.",
			RoleDefault: "kube-proxy",
			field:       func(o *Options) any { return &o.ConfigMap },
		},
		{
			Flag: "daemonset", Arg: "daemonset", Role: "kpsync_daemonset", Since: "1.0.0",
			Default:     "kube-proxy",
			Help:        "Name of kube-proxy's DaemonSet.",
			RoleDefault: "kube-proxy",
			field:       func(o *Options) any { return &o.DaemonSet },
		},
		{
			Flag: "container", Arg: "container", Role: "kpsync_container", Since: "1.0.0",
			Default:     "kube-proxy",
			Help:        "Name of the kube-proxy container in the DaemonSet.",
			RoleDefault: `""`,
			field:       func(o *Options) any { return &o.Container },
		},
		{
			Flag: "server", Metavar: "URL", Arg: "server", Role: "kpsync_server", Since: "1.0.0",
			Help: "API server URL to set as the C(server) of every cluster in the C(kubeconfig.conf) key of the ConfigMap " +
				"(what kubespray's sed task does), for example V(https://10.0.0.1:6443); empty leaves it as it is.\n\n" +
				"https only: V(http://) is refused unless O(allow_insecure_server) (kube-proxy would send its service-account token " +
				"in clear text); user info (V(user:password@)) is always refused and never shown. A C(kubeconfig.conf) with " +
				"C(insecure-skip-tls-verify: true) (live, or from O(manifest)) runs with a warning.",
			RoleDefault: `""`,
			field:       func(o *Options) any { return &o.Server },
		},
		{
			Flag: "allow-insecure-server", Arg: "allow_insecure_server", Role: "kpsync_allow_insecure_server", Since: "1.0.0",
			Help: "Accept an V(http://) O(server). Over http kube-proxy sends its service-account token in clear text, so an http " +
				"O(server) is refused unless this is set.",
			RoleDefault: "false",
			field:       func(o *Options) any { return &o.AllowInsecureServer },
		},
		{
			Flag: "set", Metavar: "path=value", Arg: "set", Role: "kpsync_settings", Since: "1.0.0",
			Help: "KubeProxyConfiguration fields to set in the C(config.conf) key, by dotted path: " +
				"C(--set mode=ipvs --set ipvs.strictARP=true) on the command line (repeatable), " +
				`C({"mode": "ipvs", "ipvs.strictARP": true, "featureGates.SomeGate": true}) as the module's argument.` + "\n\n" +
				"Values are strings, numbers, booleans, or lists of strings (for list fields such as C(nodePortAddresses); " +
				"comma-separated on the command line). Fields not named keep their values; the whole resulting file must pass " +
				"kube-proxy's own validation before any write.",
			See:         "Validation",
			RoleDefault: "{}",
			RolePass:    "{{ kpsync_settings | default(omit, true) }}",
			RoleNote:    "Empty changes no setting.",
			field:       func(o *Options) any { return &o.Set },
			parse:       setArg,
		},
		{
			Flag: "pool", Metavar: "NAME", Arg: "pools", Role: "kpsync_pools", Since: "1.0.0",
			Help: "Another kube-proxy DaemonSet in O(namespace), a pool with a config of its own: each run syncs O(daemonset) first, " +
				"then each pool in the order given, one at a time, each with its own copies, canary, checks and rollback. " +
				"A pool's config is the ConfigMap of its own name (made from O(configmap)'s data when missing), with O(set), " +
				"O(server), O(manifest) or O(kubeadm_config), then its own values on top (C(--pool-set) on the command line); its pod template mounts it " +
				"(or its copies), never O(configmap), which stays the config of O(daemonset), kubeadm's. Every pool is planned " +
				"before the first write, and one that would be refused (a proxy mode its nodes' kernels cannot run) refuses the " +
				"run with nothing changed; a pool that fails stops the run there, leaving the pools after it untouched. " +
				"RV(pools) reports each.\n\n" +
				"On the command line repeatable; as the module's argument a dict of pool names to their own values (run in the order of their names), " +
				`C({"kube-proxy-rhel8": {"mode": "iptables"}, "kube-proxy-gpu": {}}) (see O(set)). ` +
				"Not with O(template).",
			See:         "Pools",
			RoleDefault: "{}",
			RolePass:    "{{ kpsync_pools | default(omit, true) }}",
			RoleNote:    "Empty runs O(daemonset) alone.",
			field:       func(o *Options) any { return &o.Pools },
			parse:       poolsArg,
		},
		{
			Flag: "pool-set", Metavar: "NAME:path=value", Since: "1.0.0",
			Help: "A KubeProxyConfiguration field set for one pool (O(pools)) only, after O(set): " +
				"C(--pool-set kube-proxy-rhel8:mode=iptables) (repeatable). The module takes them in O(pools).",
			See:   "Pools",
			field: func(o *Options) any { return &o.PoolSet },
		},
		{
			Flag: "split", Metavar: "NAME", Arg: "split", Role: "kpsync_split", Since: "1.0.0",
			Help: "Create pool NAME from the nodes O(split_nodes) selects: they leave O(daemonset) for a DaemonSet NAME of their own " +
				"(O(daemonset)'s template on those nodes, its config a copy of the one they run, the ConfigMap NAME), one node at a time, " +
				"each node's new kube-proxy Ready before the next node moves, never two on one node. A node moves by its label " +
				"C(kube-proxy-sync.io/pool); O(daemonset) keeps off labelled nodes by a required node affinity, which the first split " +
				"adds through a rollout of its own (canary, checks and rollback as any). A node whose new kube-proxy is not Ready " +
				"within O(progress_deadline) goes back, and the nodes after it stay. A split into a pool that exists is refused while " +
				"the pool runs another proxy mode or image than O(daemonset). Needs patch on nodes, create on DaemonSets. " +
				"Then give the pool its own values with O(pools). Not with the options that change a config.",
			See:         "Pools",
			RoleDefault: `""`,
			field:       func(o *Options) any { return &o.Split },
		},
		{
			Flag: "split-nodes", Metavar: "SELECTOR", Arg: "split_nodes", Role: "kpsync_split_nodes", Since: "1.0.0",
			Help:        "With O(split), a label selector of the nodes that make the pool, such as C(node.kubernetes.io/os-image=rhel8).",
			See:         "Pools",
			RoleDefault: `""`,
			field:       func(o *Options) any { return &o.SplitNodes },
		},
		{
			Flag: "merge", Metavar: "NAME", Arg: "merge", Role: "kpsync_merge", Since: "1.0.0",
			Help: "Merge pool NAME back into O(daemonset): its nodes go back one at a time, as O(split) moves them, then its DaemonSet " +
				"(with its copies) and its ConfigMap are deleted. Refused while the pool runs another proxy mode or image than O(daemonset) " +
				"(move it first with O(pools), with that move's checks); other settings of the pool's own are named in a warning. " +
				"Needs patch on nodes, delete on DaemonSets.",
			See:         "Pools",
			RoleDefault: `""`,
			field:       func(o *Options) any { return &o.Merge },
		},
		{
			Flag: "manifest", Metavar: "FILE", Arg: "manifest", Role: "kpsync_manifest", Since: "1.0.0",
			Help: "Path of a ConfigMap manifest whose data keys are written over the live ones, with an update carrying the " +
				"resourceVersion read (field manager C(kube-proxy-sync)), like O(set); keys it leaves out stay as they are.\n\n" +
				"Its C(config.conf) is validated the same way; C(binaryData) and files over 1 MiB are refused.",
			RoleDefault: `""`,
			field:       func(o *Options) any { return &o.Manifest },
		},
		{
			Flag: "kubeadm-config", Metavar: "FILE", Arg: "kubeadm_config", Role: "kpsync_kubeadm_config", Since: "1.0.0",
			Help: "Path of a kubeadm configuration file (kubespray's C(/etc/kubernetes/kubeadm-config.yaml), say). " +
				"kube-proxy's ConfigMap as C(kubeadm init phase addon kube-proxy --config FILE --print-manifest) renders it " +
				"from this file (with the host's O(kubeadm); it needs no cluster) is applied like O(manifest), so every " +
				"KubeProxyConfiguration setting and default the file means reaches kube-proxy, with no mapping. kubeadm always " +
				"renders C(kube-system/kube-proxy); its data goes to the ConfigMap O(namespace)/O(configmap) names.\n\n" +
				"O(server) then sets the server (a key set back to what it was is no change). Not with O(manifest).\n\n" +
				"On the command line, C(-) reads the configuration from standard input and hands it to kubeadm as " +
				"C(/dev/stdin): a configuration that holds a join token or certificate key never touches a disk " +
				"(kubespray's opt-in pipes its rendered template in). The module has no standard input.",
			RoleDefault: `""`,
			// the file the role rendered from kpsync_kubeadm_config_template, else this one (vars/main.yml)
			RolePass: "{{ _kpsync_kubeadm_config | default(omit, true) }}",
			RoleNote: "Not with C(kpsync_kubeadm_config_template).",
			field:    func(o *Options) any { return &o.KubeadmConfig },
		},
		{
			Flag: "kubeadm", Arg: "kubeadm", Role: "kpsync_kubeadm", Since: "1.0.0",
			Default:     "kubeadm",
			Help:        "The kubeadm binary O(kubeadm_config) runs, a path or a name looked up in C(PATH).",
			RoleDefault: `""`,
			field:       func(o *Options) any { return &o.Kubeadm },
		},
		{
			Flag: "probe-path", Arg: "probe_path", Role: "kpsync_probe_path", Since: "1.0.0",
			Default: probe.Auto, Choices: probe.Modes,
			Help: "Readiness probe path of the kube-proxy container. V(auto) picks V(/livez) for kube-proxy 1.28 and newer and " +
				"V(/healthz) before; V(none) leaves the probe alone.\n\n" +
				"A probe change rolls the DaemonSet, so it is a restart of its own.",
			RoleDefault: "auto",
			field:       func(o *Options) any { return &o.ProbePath },
		},
		{
			Flag: "kube-proxy-version", Arg: "kube_proxy_version", Role: "kpsync_kube_proxy_version", Since: "1.0.0",
			DefaultText: "from the image tag",
			Help: "kube-proxy version that O(probe_path=auto) and the validation assume; empty reads it from the DaemonSet's " +
				"image tag, never from the API server's version. When the tag is not a version, O(probe_path=auto) leaves the " +
				"probes alone and the newest validation rules apply.",
			RoleDefault: `""`,
			field:       func(o *Options) any { return &o.KubeProxyVersion },
		},
		{
			Flag: "image", Metavar: "IMAGE", Arg: "image", Role: "kpsync_image", Since: "1.0.0",
			Help: "Image the kube-proxy container should run. Another image than the live one is rolled like a config change " +
				"(canary or zonal, crash-loop detection and rollback, O(verify_health)), in the same template change as the " +
				"config and the probe, whose path and validation rules follow the new image's version. V(" + ImageFromKubeadm + ") " +
				"takes the image that O(kubeadm_config) renders (its C(kubernetesVersion) and C(imageRepository): an upgrade). " +
				"Empty leaves the image alone.\n\n" +
				"An image change restarts every pod: refused with O(restart=never), and not with O(undo).",
			RoleDefault: `""`,
			field:       func(o *Options) any { return &o.Image },
		},
		{
			Flag: "template", Metavar: "SOURCE", Arg: "template", Role: "kpsync_template", Since: "1.0.0",
			Help: "V(" + TemplateFromKubeadm + ") takes the DaemonSet's whole pod template as O(kubeadm_config) renders it " +
				"(C(kubeadm init phase addon kube-proxy --print-manifest)): what a new kubeadm changes in it across minors " +
				"(arguments, volumes, security context) reaches the DaemonSet, as kubeadm's own addon phase would write it, " +
				"in the same rollout as the image and the config, with the canary, checks and rollback of any change. " +
				"kube-proxy-sync keeps its own fields: the probes, the ConfigMap the config volume mounts (the copy), " +
				"C(restartedAt); the image is kubeadm's unless O(image) names another. Other writers' changes to the " +
				"template are replaced, as kubeadm replaces them. The API server judges whether the template changes " +
				"(a dry run), so fields it fills in are no change. kube-proxy's ServiceAccount and RBAC (the rest of kubeadm's " +
				"addon) come with it: each missing or different one is server-side applied as kubeadm renders it, in " +
				"kubeadm's namespace, before the restart (RV(access_changed)). Empty leaves the template alone.\n\n" +
				"Needs O(kubeadm_config); not with O(undo); a template change restarts every pod, refused with O(restart=never).",
			RoleDefault: `""`,
			field:       func(o *Options) any { return &o.Template },
		},
		{
			Flag: "restart", Arg: "restart", Role: "kpsync_restart", Since: "1.0.0",
			Default: kpsync.RestartAuto, Choices: []string{kpsync.RestartAuto, kpsync.RestartAlways, kpsync.RestartNever},
			Help: "Restart policy: V(auto) restarts only when the data changed or an earlier run left a restart owed; " +
				"V(always) restarts on every run; V(never) writes the data and leaves the restart owed to a later V(auto) run.\n\n" +
				"With V(auto) or V(never), a change with no effect on any running kube-proxy (every key V(no-effect) in " +
				"RV(changed_keys_effect), such as C(ipvs.*) while the mode is iptables) is written and owes no restart; the " +
				"DaemonSet records that its pods run the new data as well, and the next restart for any other reason picks it up.",
			See:         "Which changes need a restart",
			RoleDefault: kpsync.RestartAuto,
			field:       func(o *Options) any { return &o.Restart },
		},
		{
			Flag: "progress-deadline", Arg: "progress_deadline", Role: "kpsync_progress_deadline", Since: "1.0.0",
			DefaultText: "derived",
			Help: "Fail, and roll back (O(rollback_on_failure)), when no node finished for this long; by default derived " +
				"from the pod: 2 × (its termination grace period + minReadySeconds + readiness probe " +
				"initialDelay + period × (success + failure threshold) + timeout) + 1m, at least 2m (2m for kubeadm's DaemonSet).",
			Range:       between(0, 24*time.Hour),
			RoleDefault: `""`,
			field:       func(o *Options) any { return &o.ProgressDeadline },
		},
		{
			Flag: "timeout", Arg: "timeout", Role: "kpsync_timeout", Since: "1.0.0",
			DefaultText: "none",
			Help: "Optional bound on the whole rollout; none by default. Reaching it fails the run but rolls nothing back. " +
				"With O(split) or O(merge), no node starts to move past it (the one moving arrives, or goes back); the same run again goes on.",
			Range:       between(0, 24*time.Hour),
			RoleDefault: `""`,
			field:       func(o *Options) any { return &o.Timeout },
		},
		{
			Flag: "request-timeout", Arg: "request_timeout", Role: "kpsync_request_timeout", Since: "1.0.0",
			Default:     20 * time.Second,
			Help:        "Timeout of one API request attempt (watches are not cut).",
			Range:       above(0, 10*time.Minute),
			RoleDefault: `""`,
			field:       func(o *Options) any { return &o.RequestTimeout },
		},
		{
			Flag: "retries", Arg: "retries", Role: "kpsync_retries", Since: "1.0.0",
			Default: 5,
			Help: "Retries of an API request after a connection error, 429 or 5xx (not 501), with jittered backoff, honouring " +
				"C(Retry-After).",
			Range:       between(0, 20),
			RoleDefault: "null",
			field:       func(o *Options) any { return &o.Retries },
		},
		{
			Flag: "check", Since: "1.0.0",
			Help:  "Dry run: the real run minus its writes, with its decisions and its refusals (the access it needs included); RV(changed) and C(--detailed-exitcode) say whether the real run would write or restart anything.",
			field: func(o *Options) any { return &o.Check },
		},
		{
			Flag: "diff", Since: "1.0.0",
			Help:  "Show the ConfigMap data before and after (credentials redacted).",
			field: func(o *Options) any { return &o.Diff },
		},
		{
			Flag: "audit-log", Metavar: "FILE", Arg: "audit_log", Role: "kpsync_audit_log", Since: "1.0.0",
			Help: "Append JSON lines to this file for each run that changed or failed (mode 0600, fsynced; a missing directory is " +
				"created, mode 0700): the plan before the first write, the intent before the restart, the outcome after.\n\n" +
				"A symbolic link, anything but a regular file (a FIFO, a device) and a file more open than 0600 are refused " +
				"(chmod it; the run never changes a mode it did not set).",
			RoleDefault: "/var/log/kube-proxy-sync/audit.log",
			RolePass:    "{{ kpsync_audit_log | default(omit, true) }}",
			RoleNote:    "Empty disables it.",
			field:       func(o *Options) any { return &o.AuditLog },
		},
		{
			Flag: "output", Short: "o", Since: "1.0.0",
			Default: "text", Choices: []string{"text", "json"},
			Help:  "Result format on stdout: V(text) or V(json) (the same object Ansible gets).",
			field: func(o *Options) any { return &o.Output },
		},
		{
			Flag: "strategy", Arg: "strategy", Role: "kpsync_strategy", Since: "1.0.0",
			Default: kpsync.StrategyRolling, Choices: []string{kpsync.StrategyRolling, kpsync.StrategyCanary, kpsync.StrategyZonal},
			Help: "Rollout strategy: V(rolling) lets the DaemonSet controller replace the pods within its C(maxUnavailable); " +
				"V(canary) restarts O(canary_nodes) nodes first, then batches of O(batch_size); V(zonal) does the canary zone by " +
				"zone (nodes grouped by O(zone_label), one zone at a time, each zone's canary nodes first).",
			See:         "Large clusters",
			RoleDefault: `""`,
			field:       func(o *Options) any { return &o.Strategy },
		},
		{
			Flag: "canary-nodes", Arg: "canary_nodes", Role: "kpsync_canary_nodes", Since: "1.0.0",
			Default: 1,
			Help: "With O(strategy=canary), how many live nodes restart first; with O(strategy=zonal), how many of " +
				"each zone (at most the batch size).",
			Range:       between(0, 10000),
			RoleDefault: "null",
			field:       func(o *Options) any { return &o.CanaryNodes },
		},
		{
			Flag: "batch-size", Arg: "batch_size", Role: "kpsync_batch_size", Since: "1.0.0",
			DefaultText: "the DaemonSet's maxUnavailable",
			Help: "With O(strategy=canary), nodes restarted at once after the canary, as a number (V(5)) or a percentage of the " +
				"live nodes (V(10%)). Empty uses the DaemonSet's C(maxUnavailable).",
			RoleDefault: `""`,
			RolePass:    "{{ kpsync_batch_size | string | default(omit, true) }}",
			field:       func(o *Options) any { return &o.BatchSize },
			parse:       batch,
		},
		{
			Flag: "zone-label", Arg: "zone_label", Role: "kpsync_zone_label", Since: "1.0.0",
			Default:     rollout.DefaultZoneLabel,
			Help:        "With O(strategy=zonal), the node label whose value is the node's zone; nodes without it form a last group.",
			RoleDefault: `""`,
			field:       func(o *Options) any { return &o.ZoneLabel },
		},
		{
			Flag: "undo", Arg: "undo", Role: "kpsync_undo", Since: "1.0.0",
			Help: "Restore the config the fleet ran before the last change (named on the DaemonSet by " +
				"C(kube-proxy-sync.io/previous-config)) through the same rollout as a change; strategy, crash-loop detection and " +
				"rollback, and O(verify_health) apply. In check mode (with diff), shows what it would restore. It keeps the " +
				"image, so it refuses, nothing written, where that config ran with another image than the one the template " +
				"runs (a change that moved the image too, as an upgrade with new settings) or with one its " +
				"ControllerRevisions no longer show: C(kubectl rollout undo) puts back config and image together.\n\n" +
				"Not with O(set), O(server), O(manifest) or O(kubeadm_config).",
			RoleDefault: "false",
			field:       func(o *Options) any { return &o.Undo },
		},
		{
			Flag: "config-history", Arg: "config_history", Role: "kpsync_config_history", Since: "1.0.0",
			Default: kpsync.DefaultHistory,
			Help: "How many copies of the config (C(kube-proxy-<hash>), the ConfigMaps the pod template mounts) to keep besides " +
				"those in use, for rollbacks and C(kubectl rollout undo). A copy that a revision of the DaemonSet " +
				"(its ControllerRevisions, up to its revisionHistoryLimit) mounts is in use.",
			Range:       between(1, 100),
			See:         "The config travels with the template",
			RoleDefault: "null",
			field:       func(o *Options) any { return &o.ConfigHistory },
		},
		{
			Flag: "verify-health", Arg: "verify_health", Role: "kpsync_verify_health", Since: "1.0.0",
			Default: verify.Off, Choices: verify.Modes,
			Help: "Connectivity check before and after each node's restart: V(off); V(auto) asks kube-proxy's C(/healthz) on " +
				"each node through the API server's node proxy before the restart, and after it must see a sync since the " +
				"restart (nodes unreachable before are reported, not checked); V(required) as V(auto), but every live node must " +
				"answer before.\n\n" +
				"Needs get on C(nodes/proxy). A node that fails stops its canary or zone and fails the rollout.",
			See:         "Large clusters",
			RoleDefault: `""`,
			field:       func(o *Options) any { return &o.VerifyHealth },
		},
		{
			Flag: "verify-health-timeout", Arg: "verify_health_timeout", Role: "kpsync_verify_health_timeout", Since: "1.0.0",
			Default:     time.Minute,
			Help:        "With O(verify_health), how long a restarted kube-proxy has to show a sync.",
			Range:       above(0, time.Hour),
			RoleDefault: `""`,
			field:       func(o *Options) any { return &o.VerifyHealthWait },
		},
		{
			Flag: "verify-traffic", Metavar: "NS/NAME", Arg: "verify_traffic", Role: "kpsync_verify_traffic", Since: "1.0.0",
			Help: "With O(verify_health), NAMESPACE/NAME of a Service with ready endpoints; after each node's restart " +
				"short-lived probe pods on that node open TCP connections to it along O(verify_traffic_paths) (by default to " +
				"its ClusterIP from the node itself; needs create and delete on pods, get on that Service).\n\n" +
				"A proxy-mode change checks traffic when none is named: through a Service of the run's own, " +
				"C(kube-proxy-sync-probe) (NodePort, selecting kube-proxy's pods on their healthz port, each node's own through " +
				"the Local traffic policies), created before the first write and deleted when the run ends (a killed run's by " +
				"the next that migrates), along the node, pod and nodeport paths; needs create, get and delete on services. " +
				"V(none) turns every traffic check off, a proxy-mode change's included.",
			RoleDefault: `""`,
			field:       func(o *Options) any { return &o.VerifyTraffic },
		},
		{
			Flag: "verify-traffic-image", Arg: "verify_traffic_image", Role: "kpsync_verify_traffic_image", Since: "1.0.0",
			Default: DefaultTrafficImage,
			Help: "With O(verify_traffic), the image of the probe pod (it only sleeps: the kubelet's own TCP probe makes the " +
				"connection); use one every node has, like the kubelet's pause image.",
			RoleDefault: `""`,
			field:       func(o *Options) any { return &o.VerifyTrafficImg },
		},
		{
			Flag: "verify-traffic-paths", Metavar: "PATH,...", Arg: "verify_traffic_paths", Role: "kpsync_verify_traffic_paths", Since: "1.0.0",
			DefaultText: "node; a proxy-mode change's own check: node,pod,nodeport (pod left out, with a warning, when kube-proxy's image cannot connect)",
			Help: "With O(verify_traffic), where each node's connections to the Service start, comma-separated: V(node), its " +
				"ClusterIP from the node itself (the host's OUTPUT hook); V(pod), its ClusterIP from a pod on the node, in the pod " +
				"network (the PREROUTING hook; needs O(verify_traffic_pod_image)); V(nodeport), its NodePort on the node's " +
				"InternalIP, from the node (the Service must have a node port). One probe pod per path and node, all paths at once.\n\n" +
				"A proxy-mode change reprograms all three: check V(node,pod,nodeport) when changing it.",
			See:         "Changing the proxy mode",
			RoleDefault: `""`,
			field:       func(o *Options) any { return &o.VerifyTrafficPaths },
		},
		{
			Flag: "verify-traffic-pod-image", Arg: "verify_traffic_pod_image", Role: "kpsync_verify_traffic_pod_image", Since: "1.0.0",
			DefaultText: "none; a proxy-mode change's own check: the image kube-proxy runs before the change",
			Help: "With the V(pod) path of O(verify_traffic_paths), the image of the pod that connects from the pod network: it runs " +
				"C(/bin/sh) and connects with C(bash) (its C(/dev/tcp)) or C(nc), so it must have C(sh) and one of them, and be on " +
				"every node already (nothing is pulled from a registry you do not have). The pause image and upstream's " +
				"distroless kube-proxy image have neither; a CNI's agent image usually has bash.",
			RoleDefault: `""`,
			field:       func(o *Options) any { return &o.VerifyTrafficPodImg },
		},
		{
			Flag: "verify-traffic-timeout", Arg: "verify_traffic_timeout", Role: "kpsync_verify_traffic_timeout", Since: "1.0.0",
			Default:     30 * time.Second,
			Help:        "With O(verify_traffic), how long the connection may take to succeed on one node.",
			Range:       above(0, time.Hour),
			RoleDefault: `""`,
			field:       func(o *Options) any { return &o.VerifyTrafficWait },
		},
		{
			Flag: "verify", Arg: "verify", Role: "kpsync_verify", Since: "1.0.0",
			Help: "After the rollout, check afresh that every live node whose kube-proxy was Ready before is Ready on the new " +
				"template.",
			RoleDefault: "null",
			field:       func(o *Options) any { return &o.Verify },
		},
		{
			Flag: "verify-endpoints", Metavar: "N", Arg: "verify_endpoints", Role: "kpsync_verify_endpoints", Since: "1.0.0",
			Help: "With O(verify), also ask kube-proxy's health endpoint on this many live nodes through the API server's node " +
				"proxy (needs get on C(nodes/proxy)).",
			Range:       between(0, 1000),
			RoleDefault: "null",
			field:       func(o *Options) any { return &o.VerifyEndpoints },
		},
		{
			Flag: "rollback-on-failure", Arg: "rollback_on_failure", Role: "kpsync_rollback_on_failure", Since: "1.0.0",
			Default: true,
			Help: "When the new template fails (a pod that cannot run, the progress deadline, O(verify)), restore the pod " +
				"template captured before, which points back at the ConfigMap it mounted; the run still fails. An interrupt or " +
				"O(timeout) never rolls back.",
			See:         "The config travels with the template",
			RoleDefault: "null",
			field:       func(o *Options) any { return &o.RollbackOnFailure },
		},
		{
			Flag: "no-rollback", Arg: "no_rollback", Role: "kpsync_no_rollback", Since: "1.0.0",
			Help:        "Leave a failed rollout as it is (the same as O(rollback_on_failure=false)).",
			RoleDefault: "false",
			field:       func(o *Options) any { return &o.NoRollback },
		},
		{
			Flag: "not-ready-tolerance", Arg: "not_ready_tolerance", Role: "kpsync_not_ready_tolerance", Since: "1.0.0",
			Default:     nodes.DefaultPolicy.NotReadyTolerance,
			Help:        "A node NotReady for longer than this counts as going away; its pod neither blocks nor fails the rollout.",
			Range:       between(0, 7*24*time.Hour),
			RoleDefault: `""`,
			field:       func(o *Options) any { return &o.NotReadyTolerance },
		},
		{
			Flag: "skip-unschedulable", Arg: "skip_unschedulable", Role: "kpsync_skip_unschedulable", Since: "1.0.0",
			Help:        "Treat cordoned nodes as going away too.",
			RoleDefault: "null",
			field:       func(o *Options) any { return &o.SkipUnschedulable },
		},
		{
			Flag: "lock-timeout", Arg: "lock_timeout", Role: "kpsync_lock_timeout", Since: "1.0.0",
			Default: 5 * time.Minute,
			Help: "How long to wait for another run's Lease (C(kube-proxy-sync) in O(namespace)) before failing with " +
				"C(locked).",
			Range:       between(0, 24*time.Hour),
			RoleDefault: `""`,
			field:       func(o *Options) any { return &o.LockTimeout },
		},
		{
			Flag: "detailed-exitcode", Since: "1.0.0",
			Help:  "Exit 0 when nothing changed, 2 when something changed (with C(--check): the real run would write or restart), 1 on error.",
			field: func(o *Options) any { return &o.DetailedExitCode },
		},
		{
			Flag: "log-level", Arg: "log_level", Role: "kpsync_log_level", Since: "1.0.0",
			Default: "info", Choices: []string{"trace", "debug", "info", "warn", "warning", "error"},
			Help:        "Log level on stderr: V(debug), V(info), V(warn), V(error).",
			RoleDefault: "info",
			field:       func(o *Options) any { return &o.LogLevel },
		},
		{
			Flag: "log-format", Since: "1.0.0",
			Default: "text", Choices: []string{"text", "json"},
			Help:  "Log format on stderr: V(text) or V(json).",
			field: func(o *Options) any { return &o.LogFormat },
		},
		{
			Flag: "version", Since: "1.0.0",
			Help:  "Print the version and exit.",
			field: func(o *Options) any { return &o.ShowVersion },
		},
	}
}

// NewOptions returns the defaults.
func NewOptions() *Options {
	o := &Options{}
	for _, opt := range OptionTable() {
		if opt.Default == nil {
			continue
		}
		switch p := opt.field(o).(type) {
		case *string:
			*p = opt.Default.(string)
		case *bool:
			*p = opt.Default.(bool)
		case *int:
			*p = opt.Default.(int)
		case *time.Duration:
			*p = opt.Default.(time.Duration)
		default:
			panic(fmt.Sprintf("option --%s: a default for a %T", opt.Flag, p))
		}
	}
	return o
}

// AddFlags binds the options to a flag set.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	for _, opt := range OptionTable() {
		if opt.Flag == "" {
			continue
		}
		usage := opt.Usage()
		switch p := opt.field(o).(type) {
		case *string:
			fs.StringVarP(p, opt.Flag, opt.Short, *p, usage)
		case *bool:
			fs.BoolVarP(p, opt.Flag, opt.Short, *p, usage)
		case *int:
			fs.IntVarP(p, opt.Flag, opt.Short, *p, usage)
		case *time.Duration:
			fs.DurationVarP(p, opt.Flag, opt.Short, *p, usage)
		case *[]string:
			fs.StringArrayVarP(p, opt.Flag, opt.Short, *p, usage)
		default:
			panic(fmt.Sprintf("option --%s: a flag for a %T", opt.Flag, p))
		}
	}
}

// Name is how Help refers to the option: its module argument, else its
// flag with underscores.
func (opt Option) Name() string {
	if opt.Arg != "" {
		return opt.Arg
	}
	return strings.ReplaceAll(opt.Flag, "-", "_")
}

// Kind is the type of the option's value: string, bool, int, duration, or
// list (--set's repeated path=value, a dict for the module).
func (opt Option) Kind() string {
	if opt.field == nil {
		return ""
	}
	switch opt.field(&Options{}).(type) {
	case *string:
		return "string"
	case *bool:
		return "bool"
	case *int:
		return "int"
	case *time.Duration:
		return "duration"
	case *[]string:
		return "list"
	}
	return ""
}

// AnsibleType is the module argument's type in Ansible's terms: a duration
// is a string (a Go duration, or a number of seconds), --set a dict.
func (opt Option) AnsibleType() string {
	switch opt.Kind() {
	case "string", "duration":
		return "str"
	case "list":
		return "dict"
	}
	return opt.Kind()
}

// DefaultString is the binary's default as the docs write it: "" for an
// empty string and a zero duration (none), 5m rather than 5m0s.
func (opt Option) DefaultString() string {
	switch d := opt.Default.(type) {
	case nil:
		switch opt.Kind() {
		case "bool":
			return "false"
		case "int":
			return "0"
		}
		return ""
	case string:
		return d
	case bool:
		return strconv.FormatBool(d)
	case int:
		return strconv.Itoa(d)
	case time.Duration:
		return shortDuration(d)
	}
	return fmt.Sprint(opt.Default)
}

// shortDuration writes 5m and 1h, not 5m0s and 1h0m0s.
func shortDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// Range is the values an int or a duration option takes: from Min to Max,
// both included, unless AboveMin (Min itself is refused too).
type Range struct {
	Min, Max any // of the option's type: int or time.Duration
	AboveMin bool
}

// between is the range from lo to hi, both included.
func between[T int | time.Duration](lo, hi T) *Range { return &Range{Min: lo, Max: hi} }

// above is the range of more than lo and at most hi.
func above[T int | time.Duration](lo, hi T) *Range {
	return &Range{Min: lo, Max: hi, AboveMin: true}
}

// Description is Help and what Help does not say itself: the range, in the
// same markup. Every text of the option (its usage, the module's and the
// role's docs, the README's row) is written from it.
func (opt Option) Description() string {
	if opt.Range == nil {
		return opt.Help
	}
	if opt.Range.AboveMin {
		return opt.Help + " More than " + opt.rangeText() + "."
	}
	return opt.Help + " From " + opt.rangeText() + "."
}

// rangeText says the range in Help's markup: "V(0) (none) to V(24h)" (a
// zero Min says what it means, as the default's text does), or "V(0) and
// at most V(10m)" after "more than".
func (opt Option) rangeText() string {
	r := opt.Range
	lo, hi := valueText(r.Min), valueText(r.Max)
	if r.AboveMin {
		return "V(" + lo + ") and at most V(" + hi + ")"
	}
	text := "V(" + lo + ")"
	if opt.Default == nil && opt.DefaultText != "" && reflect.ValueOf(r.Min).IsZero() {
		text += " (" + opt.DefaultText + ")"
	}
	return text + " to V(" + hi + ")"
}

// valueText is a value as the docs write it: 5m rather than 5m0s, 0
// rather than 0s.
func valueText(v any) string {
	if d, ok := v.(time.Duration); ok {
		if d == 0 {
			return "0"
		}
		return shortDuration(d)
	}
	return fmt.Sprint(v)
}

// checkRange refuses a value of the option's field outside its Range.
func (opt Option) checkRange(o *Options) error {
	r := opt.Range
	if r == nil {
		return nil
	}
	var value any
	var below, over, atMin bool
	switch p := opt.field(o).(type) {
	case *int:
		value, below, over, atMin = *p, *p < r.Min.(int), *p > r.Max.(int), *p == r.Min.(int)
	case *time.Duration:
		value, below, over, atMin = *p, *p < r.Min.(time.Duration), *p > r.Max.(time.Duration), *p == r.Min.(time.Duration)
	default:
		return fmt.Errorf("option --%s: a range for a %T", opt.Flag, p)
	}
	if !below && !over && !(atMin && r.AboveMin) {
		return nil
	}
	want := opt.rangeText()
	if r.AboveMin {
		want = "more than " + want
	}
	text, err := RenderHelp(want, func(name, _ string) (string, error) {
		return "", fmt.Errorf("a range names no option (%s)", name)
	}, func(_, text string) string { return text })
	if err != nil {
		return fmt.Errorf("option --%s: %w", opt.Flag, err)
	}
	return fmt.Errorf("--%s %v: want %s", opt.Flag, value, text)
}

// Usage is Help as the flag's usage: plain text, lower case, no final full
// stop; pflag adds the default.
func (opt Option) Usage() string {
	text, err := RenderHelp(opt.Description(), func(name, value string) (string, error) {
		ref, ok := optionByName(name)
		if !ok || ref.Flag == "" {
			return "", fmt.Errorf("no flag %q", name)
		}
		switch {
		case value == "":
			return "--" + ref.Flag, nil
		case ref.Kind() == "bool":
			return "--" + ref.Flag + "=" + value, nil
		}
		return "--" + ref.Flag + " " + value, nil
	}, func(_, text string) string { return text })
	if err != nil {
		panic(fmt.Sprintf("option --%s: %v", opt.Flag, err)) // TestOptionTable renders every row
	}
	return Sentence(strings.ReplaceAll(text, "\n\n", " "))
}

// optionByName finds an option by its Name.
func optionByName(name string) (Option, bool) {
	for _, opt := range OptionTable() {
		if opt.Name() == name {
			return opt, true
		}
	}
	return Option{}, false
}
