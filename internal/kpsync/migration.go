package kpsync

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/version"

	"github.com/kube-proxy-sync/kube-proxy-sync/internal/configmap"
	"github.com/kube-proxy-sync/kube-proxy-sync/internal/kpvalidate"
	"github.com/kube-proxy-sync/kube-proxy-sync/internal/nodes"
	"github.com/kube-proxy-sync/kube-proxy-sync/internal/probe"
	"github.com/kube-proxy-sync/kube-proxy-sync/internal/rollout"
	"github.com/kube-proxy-sync/kube-proxy-sync/internal/verify"
)

// A change of kube-proxy's proxy mode is the riskiest change its config
// has: the old mode's rules must go, and Services must work through the
// new ones. So it is not rolled like any other change: the run goes canary
// first whatever --strategy says (zonal stays zonal, with a canary in each
// zone), checks each migrated node's kube-proxy (--verify-health,
// required when off: a node that cannot be checked stops it; auto skips
// such a node, which the operator must ask for; --verify-traffic if
// given) before its slot goes to another
// node, and refuses, before any write, a switch kube-proxy does not clean
// up after. All of it is decided with the plan, before the first write.

// planMigration finds a change of the proxy mode, refuses one kube-proxy
// does not switch cleanly, and says how the rollout goes for it: the
// settings it returns only ever tighten the ones asked (p.roll). It runs
// with every plan (twice for a run that writes: before and under the
// Lease), each time from the options as asked.
func planMigration(ctx context.Context, e *env, p plan) (*Migration, rollSettings, error) {
	o, roll := e.o, p.roll
	asked := o.Strategy
	if o.ZoneLabel != "" {
		asked = StrategyZonal
	}
	// a canary an earlier run left half-way is resumed as the migration it
	// may be: its old pods' config against the template's
	resumed := len(p.keys) == 0 && p.reason == ""
	if resumed && !p.resume {
		return nil, roll, nil
	}
	newText, ok := p.desired[configmap.ConfigKey]
	if !ok || targetsWindows(p) {
		return nil, roll, nil
	}
	// running is config.conf as the template mounts it: what a failed
	// canary or batch rolls back to
	running, err := runningConfig(ctx, e, p)
	if err != nil || running == "" {
		return nil, roll, err
	}
	if resumed {
		newText = running
		if running, err = oldPodsConfig(ctx, e, p); err != nil || running == "" {
			return nil, roll, err
		}
	}
	if _, err := kpvalidate.ModeOf(running); err != nil {
		return nil, roll, nil // the fleet's config does not decode: nothing to migrate from (validation judges the new one)
	}
	if _, err := kpvalidate.ModeOf(newText); err != nil {
		return nil, roll, err
	}
	// a mode left unset is the default of the version that runs it
	// (iptables, nftables from 1.40: see upgrade.go); what each node runs
	// now is the transition's (see transition.go), the riskiest case for
	// a node whose config is unknown
	from := modeAt(running, runningVersion(o, p))
	to := modeAt(newText, validationVersion(o, p.next(o.Container)))
	froms, back := []string{from}, from // back: the mode a rollback returns to
	if !resumed {
		if !p.tr.movesMode() {
			return nil, roll, nil
		}
		from, to = p.tr.from(), p.tr.to
		froms = slices.DeleteFunc(p.tr.modes(), func(m string) bool { return m == to })
		if len(p.tr.unknown) > 0 {
			e.warn(fmt.Sprintf("proxy mode %s -> %s: what kube-proxy runs on %d node(s) is not known (%s): taken as the riskiest case, a mode change from %s, with its canary and checks",
				from, to, len(p.tr.unknown), p.tr.describe(), strings.Join(froms, " or ")))
		}
	}
	if from == to {
		return nil, roll, nil
	}
	obj := fmt.Sprintf("configmap %s/%s", o.Namespace, o.ConfigMap)
	nft := to == kpvalidate.ModeNFTables || slices.Contains(froms, kpvalidate.ModeNFTables)
	m := &Migration{From: from, To: to, StrategyAsked: asked, CanaryNodes: []string{}, Warnings: []string{}, Resumed: resumed}
	minor, _ := kpvalidate.Rules(validationVersion(o, p.next(o.Container)))
	if v, verr := version.ParseGeneric(validationVersion(o, p.next(o.Container))); verr == nil && v.Major() == 1 {
		m.KubeProxyVersion = v.String()
	} else if nft {
		// between iptables and ipvs no version cleans up: the warning
		// holds whatever the version
		return nil, roll, fmt.Errorf("%s: mode %s -> %s: the kube-proxy version is unknown (the image of daemonset %s/%s has no version tag), and whether kube-proxy removes the old mode's rules depends on it: pass --kube-proxy-version; nothing was written",
			obj, from, to, o.Namespace, o.DaemonSet)
	}
	var cleanups []string
	for _, f := range froms {
		c, err := modeCleanup(minor, f, to, newText, running)
		if err != nil {
			return nil, roll, fmt.Errorf("%s: mode %s -> %s refused: %w; nothing was written", obj, f, to, err)
		}
		if !slices.Contains(cleanups, c) {
			cleanups = append(cleanups, c)
		}
	}
	m.Cleanup = strings.Join(cleanups, "; ")
	if to == kpvalidate.ModeNFTables {
		// the kernels are judged with the transition (transition.judge)
		countServices(ctx, e, from)
	}
	if p.image != "" && to == kpvalidate.ModeNFTables {
		// a failed canary or batch rolls the image back too: the kube-proxy
		// the fleet runs now must remove the nftables tables as well
		// the version of the image itself: --kube-proxy-version speaks of
		// the new one
		v, verr := probe.ImageVersion(p.imageBefore)
		if verr == nil && v.Major() != 1 {
			verr = fmt.Errorf("version %s", v)
		}
		if verr != nil {
			return nil, roll, fmt.Errorf("%s: mode %s -> %s together with image %s refused: a failed canary or batch rolls back to the image the fleet runs (%s), and its version is unknown, so whether it removes nftables' tables is too: change the image in a run of its own first, then the mode; nothing was written",
				obj, from, to, p.image, p.imageBefore)
		}
		if err := rollbackCleanup(int(v.Minor()), back, running); err != nil {
			return nil, roll, fmt.Errorf("%s: mode %s -> %s together with image %s refused: a failed canary or batch rolls back to the image the fleet runs (%s): %w; nothing was written",
				obj, from, to, p.image, p.imageBefore, err)
		}
	}
	for _, f := range froms {
		if !nft {
			known := minor
			if m.KubeProxyVersion == "" {
				known = 0
			}
			m.Warnings = append(m.Warnings, leftoverWarning(known, f, to))
		}
		notes, err := kpvalidate.ModeChangeNotes(newText, minor, f, to)
		if err != nil {
			return nil, roll, fmt.Errorf("%s: %w", obj, err)
		}
		m.Warnings = append(m.Warnings, notes...)
	}
	for _, w := range m.Warnings {
		e.warn(fmt.Sprintf("proxy mode %s -> %s: %s", from, to, w))
	}
	if nft && o.Restart != RestartNever && roll.conn.Traffic == "" {
		if roll, err = ownTraffic(e, p, roll); err != nil {
			return nil, roll, err
		}
	}
	m.Strategy, m.VerifyHealth, m.VerifyTraffic = asked, roll.conn.Health, roll.conn.Traffic
	if m.VerifyTraffic != "" && m.VerifyTraffic != TrafficNone {
		m.VerifyTrafficPaths = trafficPaths(roll.conn.TrafficPaths)
		switch {
		case roll.ownPort != 0 && len(m.VerifyTrafficPaths) < len(verify.AllPaths):
			// the operator named fewer paths than the run's own check takes
			left := slices.DeleteFunc(slices.Clone(verify.AllPaths), func(p string) bool { return slices.Contains(m.VerifyTrafficPaths, p) })
			w := fmt.Sprintf("--verify-traffic-paths %s leaves out %s, which the new mode reprograms as well: leave --verify-traffic-paths out to check node,pod,nodeport through the run's own Service",
				strings.Join(m.VerifyTrafficPaths, ","), strings.Join(left, ","))
			m.Warnings = append(m.Warnings, w)
			e.warn(fmt.Sprintf("proxy mode %s -> %s: %s", from, to, w))
		case len(m.VerifyTrafficPaths) < len(verify.AllPaths):
			w := fmt.Sprintf("--verify-traffic checks only the path(s) %s: the new mode reprograms the pod (PREROUTING) and NodePort paths as well; add --verify-traffic-paths %s",
				strings.Join(m.VerifyTrafficPaths, ","), strings.Join(verify.AllPaths, ","))
			m.Warnings = append(m.Warnings, w)
			e.warn(fmt.Sprintf("proxy mode %s -> %s: %s", from, to, w))
		}
	}
	if !nft {
		// not a switch kube-proxy cleans up after: rolled as asked, with
		// the warning (see leftoverWarning)
		return m, roll, nil
	}
	if o.Restart != RestartNever {
		// canary first whatever the strategy; zonal stays zonal
		roll.strategy, roll.canaryNodes = StrategyCanary, max(roll.canaryNodes, 1)
		if roll.conn.Health == "" || roll.conn.Health == verify.Off {
			// every node checked: one that cannot be stops the
			// migration, unless --verify-health auto accepts it
			roll.conn.Health = verify.Required
		}
		if roll.conn.HealthTimeout <= 0 {
			roll.conn.HealthTimeout = time.Minute
		}
	}
	m.Strategy = StrategyCanary
	if o.ZoneLabel != "" {
		m.Strategy = StrategyZonal
	}
	m.VerifyHealth = roll.conn.Health
	e.d.Log.Infof("proxy mode %s -> %s: %s rollout with %d canary node(s) first, each node's kube-proxy checked (--verify-health %s) before the rollout goes on (--strategy %s asked)",
		from, to, m.Strategy, roll.canaryNodes, m.VerifyHealth, asked)
	return m, roll, nil
}

// modeCleanup says what removes the old mode's rules when kube-proxy
// 1.minor starts in mode to with the config newText, or why nothing does
// (an error: the switch is refused). From 1.29 kube-proxy's start-up
// (platformCleanup in cmd/kube-proxy/app) removes the iptables and IPVS
// rules when it runs in nftables mode, and its nftables tables when it
// runs in iptables or ipvs mode, the latter up to 1.32 only with the
// NFTablesProxyMode feature gate on; between iptables and ipvs it removes
// nothing, in any version. A failed canary or batch is rolled back to the
// running config (runningText), so a switch to nftables up to 1.32 needs
// the gate on in that config too: the rolled-back kube-proxy must remove
// the nftables tables its nftables run made.
func modeCleanup(minor int, from, to, newText, runningText string) (string, error) {
	if from != kpvalidate.ModeNFTables && to != kpvalidate.ModeNFTables {
		return "none: kube-proxy removes neither mode's rules when switching between iptables and ipvs", nil
	}
	if minor < 29 {
		return "", fmt.Errorf("kube-proxy 1.%d has no nftables mode (from 1.29 on): upgrade kube-proxy first", minor)
	}
	if minor <= 32 {
		on, err := kpvalidate.GateEnabled(newText, minor, "NFTablesProxyMode")
		if err != nil {
			return "", err
		}
		if !on {
			return "", fmt.Errorf("kube-proxy 1.%d removes its nftables rules at start-up only with the NFTablesProxyMode feature gate on, and the new config turns it off (it is off by default before 1.31): keep featureGates.NFTablesProxyMode: true in the new config (it changes nothing in %s mode), or the nftables rules stay on every node", minor, to)
		}
		if to == kpvalidate.ModeNFTables {
			back, err := kpvalidate.GateEnabled(runningText, minor, "NFTablesProxyMode")
			if err != nil {
				return "", err
			}
			if !back {
				return "", fmt.Errorf("a failed canary or batch is rolled back to the running config, and kube-proxy 1.%d removes its nftables rules at start-up only with the NFTablesProxyMode feature gate on, which the running %s config leaves off (off by default before 1.31): first add featureGates.NFTablesProxyMode: true to the running config in a run of its own (it changes nothing in %s mode), then switch the mode, or a rolled-back node would keep the nftables rules beside the %s ones", minor, from, from, from)
			}
		}
	}
	if to == kpvalidate.ModeNFTables {
		return fmt.Sprintf("kube-proxy 1.%d removes the iptables and IPVS rules of kube-proxy when it starts in nftables mode", minor), nil
	}
	return fmt.Sprintf("kube-proxy 1.%d removes its nftables tables (ip and ip6 kube-proxy) when it starts in %s mode", minor, to), nil
}

// rollbackCleanup says why kube-proxy 1.minor, started again in mode from
// with runningText (a rollback after a failed switch to nftables that
// also changed the image), would leave the nftables tables of the new
// mode behind (nil: it removes them).
func rollbackCleanup(minor int, from, runningText string) error {
	if minor < 29 {
		return fmt.Errorf("kube-proxy 1.%d has no nftables mode and leaves nftables' tables on every node it comes back on: change the image in a run of its own first, then the mode", minor)
	}
	if minor <= 32 {
		on, err := kpvalidate.GateEnabled(runningText, minor, "NFTablesProxyMode")
		if err != nil {
			return err
		}
		if !on {
			return fmt.Errorf("kube-proxy 1.%d removes nftables' tables at start-up only with the NFTablesProxyMode feature gate on, which the running %s config leaves off (off by default before 1.31): change the image in a run of its own first, then the mode, or first add featureGates.NFTablesProxyMode: true to the running config", minor, from)
		}
	}
	return nil
}

// leftoverWarning says what a switch between iptables and ipvs leaves on
// every node: kube-proxy cleans up neither (minor 0: version unknown).
func leftoverWarning(minor int, from, to string) string {
	left := "its chains, among them KUBE-SVC-*, KUBE-SEP-* and the filter table's KUBE-SERVICES and KUBE-EXTERNAL-SERVICES, whose REJECT rules for Services without endpoints at the switch stay in force"
	if from == kpvalidate.ModeIPVS {
		left = "the kube-ipvs0 interface holding every Service IP, the IPVS virtual servers and kube-proxy's ipsets"
	}
	who := "kube-proxy"
	if minor > 0 {
		who = fmt.Sprintf("kube-proxy 1.%d", minor)
	}
	msg := fmt.Sprintf("%s does not remove the %s mode's rules when it starts in %s mode (no version does between iptables and ipvs), so these stay on every node until it reboots: %s", who, from, to, left)
	switch {
	case minor >= 29:
		msg += fmt.Sprintf("; a clean way is through nftables, in two runs (mode=nftables, then mode=%s): kube-proxy cleans up after both", to)
	case minor == 0:
		msg += fmt.Sprintf("; from kube-proxy 1.29 a clean way is through nftables, in two runs (mode=nftables, then mode=%s)", to)
	}
	return msg
}

// runningConfig is config.conf as the fleet runs it: the data the pods
// were restarted for, which is the plan's base unless a restart is owed
// onto a copy (then the template still mounts the older data).
func runningConfig(ctx context.Context, e *env, p plan) (string, error) {
	if p.mounted == "" || p.mounted == p.base.Name {
		return p.before.Data[configmap.ConfigKey], nil
	}
	if p.mounted == e.o.ConfigMap {
		return p.record.Data[configmap.ConfigKey], nil
	}
	if p.mounted == configmap.CopyName(e.o.ConfigMap, p.before.Hash) {
		// a copy is named by its data (Copies.Ensure refuses one that is
		// not): the template mounts the data the plan holds
		return p.before.Data[configmap.ConfigKey], nil
	}
	cm, err := e.copies.Get(ctx, p.mounted)
	if err != nil {
		return "", fmt.Errorf("read configmap %s/%s, which daemonset %s/%s mounts, for the proxy mode its pods run: %w", e.o.Namespace, p.mounted, e.o.Namespace, e.o.DaemonSet, err)
	}
	return cm.Data[configmap.ConfigKey], nil
}

// oldPodsConfig is the config that the pods of an older template than the
// DaemonSet's run, read from what the cluster holds: the ConfigMap their
// config volume mounts (of several, the first by name). "" when no such
// pod is left or they mount what the template mounts. A canary an earlier
// run left half-way (killed, say) migrated from it, and its resumption is
// checked as that migration.
func oldPodsConfig(ctx context.Context, e *env, p plan) (string, error) {
	o := e.o
	sel, err := metav1.LabelSelectorAsSelector(p.ds.Spec.Selector)
	if err != nil || p.volume == "" {
		return "", err
	}
	pods, err := e.d.Kube.Pods(o.Namespace).List(ctx, metav1.ListOptions{LabelSelector: sel.String()})
	if err != nil {
		return "", fmt.Errorf("list the pods of daemonset %s/%s, for the config its older pods run: %w", o.Namespace, o.DaemonSet, err)
	}
	var names []string
	for _, pod := range pods.Items {
		ref := metav1.GetControllerOf(&pod)
		if ref == nil || ref.UID != p.ds.UID || rollout.OfTemplate(&pod, p.ds) {
			continue
		}
		for _, v := range pod.Spec.Volumes {
			if v.Name == p.volume && v.ConfigMap != nil {
				names = append(names, v.ConfigMap.Name)
			}
		}
	}
	if len(names) == 0 {
		return "", nil
	}
	slices.Sort(names)
	switch names[0] {
	case p.mounted:
		return "", nil
	case o.ConfigMap:
		return p.record.Data[configmap.ConfigKey], nil
	}
	cm, err := e.copies.Get(ctx, names[0])
	if err != nil {
		return "", fmt.Errorf("read configmap %s/%s, which the older pods of daemonset %s/%s mount, for the proxy mode they run: %w", o.Namespace, names[0], o.Namespace, o.DaemonSet, err)
	}
	return cm.Data[configmap.ConfigKey], nil
}

// targetsWindows: the DaemonSet's pods run on Windows, which has one mode.
func targetsWindows(p plan) bool {
	spec := p.ds.Spec.Template.Spec
	return spec.NodeSelector[corev1.LabelOSStable] == "windows" || (spec.OS != nil && spec.OS.Name == corev1.Windows)
}

// previewMigration fills the migration's canary nodes and batches from
// the nodes and pods as they are now: the ones the canary would pick.
func (pl planner) previewMigration(ctx context.Context, p plan) error {
	e, o := pl.e, pl.e.o
	m := p.migration
	if m == nil || o.Restart == RestartNever || p.roll.strategy != StrategyCanary {
		return nil
	}
	skipped, _, err := nodes.Survey(ctx, e.nodes, e.d.Clock.Now(), o.Nodes, nil, nil)
	if err != nil {
		return err
	}
	var zoneOf map[string]string
	if o.ZoneLabel != "" {
		if zoneOf, err = nodes.Labels(ctx, e.nodes, o.ZoneLabel); err != nil {
			return err
		}
	}
	fleet, err := e.dss.Observe(ctx, p.ds, skipped)
	if err != nil {
		return err
	}
	unready := map[string]bool{}
	for _, n := range fleet.UnreadyLive() {
		unready[n] = true
	}
	live := fleet.Live()
	var todo []string
	for _, n := range live {
		if !unready[n] { // left out of the batches, as the rollout does
			todo = append(todo, n)
		}
	}
	if m.BatchSize, err = batchSize(o.BatchSize, p.ds, len(live)); err != nil {
		return err
	}
	rounds := func(n int) int { return (n + m.BatchSize - 1) / m.BatchSize }
	if o.ZoneLabel == "" {
		m.CanaryNodes = todo[:min(p.roll.canaryNodes, len(todo))]
		// canary nodes beyond the batch size go a batch at a time too
		m.Batches = rounds(len(m.CanaryNodes)) - 1 + rounds(len(todo)-len(m.CanaryNodes))
		return nil
	}
	z := rollout.NewZonal(todo, zoneOf, unready, p.roll.canaryNodes, m.BatchSize)
	m.CanaryNodes, m.Batches = append([]string{}, z.CanaryNodes()...), 0
	for i, zone := range z.Zones {
		m.Zones = append(m.Zones, zone.Name)
		if i > 0 && len(zone.Canary) > 0 {
			m.Batches++ // the zone's own canary
		}
		m.Batches += rounds(len(zone.Nodes) - len(zone.Canary))
	}
	return nil
}

// trafficPaths are the paths the traffic check takes (none asked: node).
func trafficPaths(asked []string) []string {
	if len(asked) == 0 {
		return []string{verify.PathNode}
	}
	return asked
}

// kube-proxy in nftables mode needs kernel 5.13 or later: from 1.31 it
// refuses to start on an older one (getNFTablesInterface in
// pkg/proxy/nftables, with NFTablesKubeProxyKernelVersion from
// pkg/util/kernel), because an older kernel implies an nft binary on the
// host that kube-proxy's rules can break (kubernetes#122743). Before 1.31
// it starts, with that risk. The check is skipped when its container sets
// KUBE_PROXY_NFTABLES_SKIP_KERNEL_VERSION_CHECK.
const (
	nftablesKernel        = "5.13"
	skipKernelCheckEnvVar = "KUBE_PROXY_NFTABLES_SKIP_KERNEL_VERSION_CHECK"
	// namedNodes is how many nodes an error names before "and N more"
	namedNodes = 10
)

// preflightNFTables refuses a move to nftables mode, before any write,
// while a node the DaemonSet runs on has a kernel older than kube-proxy
// runs that mode on (from the Node objects: status.nodeInfo.kernelVersion).
// A kernel version that does not parse is reported and not judged.
func preflightNFTables(ctx context.Context, e *env, p plan, from string) error {
	o := e.o
	if c, err := findContainer(p.ds, o.Container); err == nil {
		for _, v := range c.Env {
			if v.Name == skipKernelCheckEnvVar && v.Value != "" {
				e.warn(fmt.Sprintf("proxy mode %s -> nftables: container %s sets %s, so neither kube-proxy nor kube-proxy-sync checks the nodes' kernels (nftables mode needs %s or later)", from, o.Container, skipKernelCheckEnvVar, nftablesKernel))
				return nil
			}
		}
	}
	kernels, err := nodes.Kernels(ctx, e.nodes, &p.ds.Spec.Template.Spec)
	if err != nil {
		return fmt.Errorf("proxy mode %s -> nftables, checking every node can run it: %w; nothing was written", from, err)
	}
	least := version.MustParseGeneric(nftablesKernel)
	var old, unknown []string
	for name, k := range kernels {
		v, err := version.ParseGeneric(k)
		switch {
		case err != nil:
			unknown = append(unknown, fmt.Sprintf("%s (%q)", name, k))
		case v.LessThan(least):
			old = append(old, fmt.Sprintf("%s (kernel %s)", name, k))
		}
	}
	sort.Strings(old)
	sort.Strings(unknown)
	if len(unknown) > 0 {
		e.warn(fmt.Sprintf("proxy mode %s -> nftables: the kernel version of %d node(s) is not understood, so whether they can run nftables mode (kernel %s or later) is not checked: %s",
			from, len(unknown), nftablesKernel, someOf(unknown)))
	}
	if len(old) == 0 {
		return nil
	}
	return fmt.Errorf("proxy mode %s -> nftables refused: kube-proxy in nftables mode needs kernel %s or later (from 1.31 it does not start on an older one), and %d node(s) daemonset %s/%s runs on have an older kernel: %s; nothing was written. The DaemonSet gives every node the same config, so these nodes cannot stay in %s mode while the others move: upgrade their kernels, or keep them out of daemonset %s/%s (a node affinity) and give them a DaemonSet of their own on the %s config, then run again",
		from, nftablesKernel, len(old), o.Namespace, o.DaemonSet, someOf(old), from, o.Namespace, o.DaemonSet, from)
}

// someOf joins the first namedNodes items, and says how many more there are.
func someOf(items []string) string {
	if len(items) <= namedNodes {
		return strings.Join(items, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(items[:namedNodes], ", "), len(items)-namedNodes)
}

// manyServices is the Service count from which a full sync in nftables
// mode is measured in minutes: 13 minutes at 5,006 Services and 250,000
// endpoints (kubernetes#135639), 16 at 44,125 Services
// (kubernetes#139513, 1.36.1); the first sync of every migrated node is a
// full one.
const manyServices = 5000

// countServices warns, before a move to nftables, when the cluster holds
// enough Services that each node's first sync takes minutes: one LIST of
// one item, whose remaining count is the rest. It only warns: a count it
// cannot get (no list on services cluster-wide) is said and not judged.
func countServices(ctx context.Context, e *env, from string) {
	list, err := e.d.Kube.Services("").List(ctx, metav1.ListOptions{Limit: 1})
	if err != nil {
		e.warn(fmt.Sprintf("proxy mode %s -> nftables: the cluster's Services could not be counted (%v): each node's first full sync in nftables mode takes minutes from about %d Services (list on services cluster-wide, see roles/kpsync/files/rbac.yaml)", from, err, manyServices))
		return
	}
	n := int64(len(list.Items))
	if r := list.RemainingItemCount; r != nil {
		n += *r
	}
	e.d.Log.Infof("proxy mode %s -> nftables: the cluster holds %d Service(s)", from, n)
	if n >= manyServices {
		e.warn(fmt.Sprintf("proxy mode %s -> nftables: the cluster holds %d Services; at that scale kube-proxy's first full sync in nftables mode has been measured in minutes (13 min at 5,006 Services and 250,000 endpoints, kubernetes#135639; 16 min at 44,125 Services, kubernetes#139513), during which the node's new Services and endpoints wait: the canary's first sync (connectivity.first_sync) paces the nodes after it, and --verify-health-timeout must allow for it", from, n))
	}
}
