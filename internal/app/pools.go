package app

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/kube-proxy-sync/kube-proxy-sync/internal/configmap"
	"github.com/kube-proxy-sync/kube-proxy-sync/internal/kpconfig"
	"github.com/kube-proxy-sync/kube-proxy-sync/internal/kpsync"
	"github.com/kube-proxy-sync/kube-proxy-sync/internal/kube"
	"github.com/kube-proxy-sync/kube-proxy-sync/internal/pools"
	"github.com/kube-proxy-sync/kube-proxy-sync/internal/verify"
)

// Pools (--pool): more kube-proxy DaemonSets than kubeadm's, each with a
// config of its own. A pool is exactly the one-DaemonSet run of kpsync,
// with its own record: the ConfigMap of the pool's name, whose copies
// (NAME-<hash>) its template mounts and its DaemonSet owns. So no pool's
// life (its deletion, a `kubectl replace --force`, its history's
// collection) reaches another pool's config or undo target, and
// --configmap (kubeadm's kube-system/kube-proxy) keeps one meaning: the
// config of --daemonset, kubeadm's DaemonSet, which no pool writes.
//
// The loop lives here, not in kpsync: each pool is one kpsync run, under
// the Lease like any run, one after the other, --daemonset first.

// PoolOfLabel on a pool's record names the ConfigMap it was made from.
const PoolOfLabel = pools.PoolOfLabel

// pool is one DaemonSet the run syncs: --daemonset (the base) or a --pool.
type pool struct {
	name string // the DaemonSet
	// settings are its own values, after the shared ones
	settings []kpconfig.Setting
}

// poolRun is what became of one pool.
type poolRun struct {
	pool
	res *kpsync.Result
	err error
}

// poolResult is one pool's entry in the result's pools.
type poolResult struct {
	// DaemonSet is the pool's DaemonSet.
	DaemonSet string `json:"daemonset"`
	// ConfigMap is the pool's record, the ConfigMap of its name.
	ConfigMap string `json:"configmap"`
	// Changed: the run wrote something of the pool or restarted its pods (check mode: would).
	Changed bool `json:"changed"`
	// Failed: the pool's run failed; the pools after it were not run.
	Failed bool `json:"failed"`
	// Msg says what the run did to the pool, or its error.
	Msg string `json:"msg"`
	// Restarted: the pool's pods were restarted.
	Restarted bool `json:"restarted"`
	// RestartReason is why the pool was restarted, as the top-level restart_reason.
	RestartReason string `json:"restart_reason"`
	// ChangedKeys are the keys of the pool's config that changed.
	ChangedKeys []string `json:"changed_keys"`
	// ConfigMapName is the ConfigMap the pool's template mounts after the run.
	ConfigMapName string `json:"configmap_name"`
	// RolledBack: the pool's failed rollout was rolled back.
	RolledBack bool `json:"rolled_back"`
	// APIRequests counts the HTTP requests of the pool's run; the
	// top-level api_requests counts the whole run's, the plan of every
	// pool before the first write included.
	APIRequests int64 `json:"api_requests"`
	// Migration is the pool's proxy-mode change, as the top-level
	// migration (its canary nodes, strategy and checks).
	Migration *kpsync.Migration `json:"migration,omitempty"`
	// Connectivity is the pool's traffic check, as the top-level connectivity.
	Connectivity *verify.Report `json:"connectivity,omitempty"`
}

// completePools parses --pool-set into each pool's settings.
func (o *Options) completePools() error {
	o.pools = o.pools[:0]
	for _, name := range o.Pools {
		o.pools = append(o.pools, pool{name: name})
	}
	for _, ps := range o.PoolSet {
		name, set, ok := strings.Cut(ps, ":")
		i := slices.IndexFunc(o.pools, func(p pool) bool { return p.name == name })
		if !ok || name == "" {
			return fmt.Errorf("--pool-set %q: want NAME:path=value, NAME one of --pool", ps)
		}
		if i < 0 {
			return fmt.Errorf("--pool-set %q: %s is not a --pool of this run (pools: %s)", ps, name, strings.Join(o.Pools, ", "))
		}
		st, err := kpconfig.ParseSetting(set)
		if err != nil {
			return fmt.Errorf("--pool-set %q: %w", ps, err)
		}
		o.pools[i].settings = append(o.pools[i].settings, st)
	}
	return nil
}

// validatePools refuses pools that are not DaemonSets of their own.
func (o *Options) validatePools() error {
	if len(o.Pools) == 0 {
		return nil
	}
	if o.Template != "" {
		return fmt.Errorf("--pool with --template: kubeadm's pod template is its own DaemonSet's (--daemonset); run the pools without --template")
	}
	for i, name := range o.Pools {
		switch {
		case len(validation.IsDNS1123Subdomain(name)) > 0:
			return fmt.Errorf("--pool %q: %s", name, strings.Join(validation.IsDNS1123Subdomain(name), "; "))
		case name == o.DaemonSet || name == o.ConfigMap:
			return fmt.Errorf("--pool %q: that is --daemonset or --configmap, the base every pool is made from; name another DaemonSet", name)
		case configmap.IsCopyName(o.ConfigMap, name):
			return fmt.Errorf("--pool %q: a name of a copy of configmap %s (its name, a dash and ten hex digits); a pool's config takes its name, so name the DaemonSet otherwise", name, o.ConfigMap)
		case slices.Contains(o.Pools[:i], name):
			return fmt.Errorf("--pool %q is named twice", name)
		}
	}
	for _, p := range o.pools {
		for _, s := range p.settings {
			if _, err := s.Validate(); err != nil {
				return fmt.Errorf("--pool-set for %s: %w", p.name, err)
			}
		}
	}
	return nil
}

// poolOptions is the kpsync run of pool p: the base's options, on the
// pool's DaemonSet and record, with its own values after the shared ones.
func (o *Options) poolOptions(p pool) kpsync.Options {
	so := o.syncOptions()
	if p.name == o.DaemonSet {
		return so
	}
	so.DaemonSet, so.ConfigMap = p.name, p.name
	so.Spec.Settings = append(slices.Clone(o.spec.Settings), p.settings...)
	return so
}

// runPools syncs --daemonset, then each pool, and stops at the first that
// fails. Before any write every pool is planned (a check-mode run each):
// one that would be refused refuses the run, nothing changed.
func runPools(ctx context.Context, o *Options, d kpsync.Deps) ([]poolRun, []string, error) {
	all := append([]pool{{name: o.DaemonSet}}, o.pools...)
	if err := preflightPools(ctx, o, d); err != nil {
		return nil, nil, err
	}
	warnings, err := strays(ctx, o, d)
	if err != nil {
		return nil, warnings, err
	}
	if !o.Check {
		quiet := d
		quiet.Log = quietLog(d.Log)
		for _, p := range all {
			so := o.poolOptions(p)
			so.Check, so.Diff = true, false
			if _, err := kpsync.New(so, withPoolRecord(ctx, quiet, o, p)).Run(ctx); err != nil {
				return nil, warnings, fmt.Errorf("pool %s (daemonset %s/%s), planned before any write: %w; no pool was changed: %s",
					p.name, o.Namespace, p.name, err, poolByPool(o, p))
			}
		}
	}
	var runs []poolRun
	for _, p := range all {
		pd := d
		pd.Log = d.Log.WithField("pool", p.name)
		if d.Requests != nil {
			// each pool's own requests; the run's total is d's
			start := d.Requests()
			pd.Requests = func() int64 { return d.Requests() - start }
		}
		if p.name != o.DaemonSet {
			if o.Check {
				pd = withPoolRecord(ctx, pd, o, p)
			} else if err := ensurePoolRecord(ctx, pd, o, p); err != nil {
				runs = append(runs, poolRun{pool: p, err: err})
				return runs, warnings, poolError(o, p, all, err)
			}
		}
		res, err := kpsync.New(o.poolOptions(p), pd).Run(ctx)
		runs = append(runs, poolRun{pool: p, res: res, err: err})
		if err != nil {
			return runs, warnings, poolError(o, p, all, err)
		}
	}
	return runs, warnings, nil
}

// strays refuses a run while pool nodes run two kube-proxies (kubeadm's
// DaemonSet no longer keeps off them), and warns of pool nodes whose
// pool's DaemonSet is gone (see pools.Strays).
func strays(ctx context.Context, o *Options, d kpsync.Deps) ([]string, error) {
	base, err := d.Kube.DaemonSets(o.Namespace).Get(ctx, o.DaemonSet, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("read daemonset %s/%s: %w; nothing was changed", o.Namespace, o.DaemonSet, err)
	}
	twice, orphans, err := pools.Strays(ctx, d.Kube, o.Namespace, base)
	if err != nil {
		return nil, fmt.Errorf("%w; nothing was changed", err)
	}
	warnings := pools.StrayWarnings(o.Namespace, o.DaemonSet, nil, orphans)
	for _, w := range warnings {
		d.Log.Warn(w)
	}
	if len(twice) > 0 {
		return warnings, fmt.Errorf("%s; nothing was changed", pools.StrayWarnings(o.Namespace, o.DaemonSet, twice, nil)[0])
	}
	return warnings, nil
}

// poolByPool says how the pools that can make the move go without p,
// which cannot.
func poolByPool(o *Options, p pool) string {
	if p.name == o.DaemonSet {
		return fmt.Sprintf("to move the pools without daemonset %s, hold it where it is with --set (a proxy mode: --set mode=MODE it runs) and give each pool its move with --pool-set NAME:path=value", p.name)
	}
	return fmt.Sprintf("to move the others without it, hold it where it is with --pool-set %s:path=value (a proxy mode: --pool-set %s:mode=MODE it runs), or leave out --pool %s; move it once the refusal above is resolved", p.name, p.name, p.name)
}

// poolError is a pool's failure, naming the pools not run after it.
func poolError(o *Options, p pool, all []pool, err error) error {
	i := slices.IndexFunc(all, func(q pool) bool { return q.name == p.name })
	var after []string
	for _, q := range all[i+1:] {
		after = append(after, q.name)
	}
	left := "it was the last"
	if len(after) > 0 {
		left = "not run, left as they were: " + strings.Join(after, ", ")
	}
	return fmt.Errorf("pool %s (daemonset %s/%s): %w; the pools after it: %s", p.name, o.Namespace, p.name, err, left)
}

// preflightPools refuses, before anything is written, a pool whose
// template mounts the base's config (--configmap or one of its copies),
// which a pool never writes: the pool would run the base's config
// whatever its own values.
func preflightPools(ctx context.Context, o *Options, d kpsync.Deps) error {
	for _, p := range o.pools {
		ds, err := d.Kube.DaemonSets(o.Namespace).Get(ctx, p.name, metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("--pool %s: read daemonset %s/%s: %w; nothing was changed", p.name, o.Namespace, p.name, err)
		}
		var own bool
		for _, c := range ds.Spec.Template.Spec.Containers {
			if c.Name != o.Container {
				continue
			}
			for _, m := range c.VolumeMounts {
				for _, v := range ds.Spec.Template.Spec.Volumes {
					if v.Name != m.Name || v.ConfigMap == nil {
						continue
					}
					switch name := v.ConfigMap.Name; {
					case name == o.ConfigMap || configmap.IsCopyName(o.ConfigMap, name):
						return fmt.Errorf("--pool %s: daemonset %s/%s mounts configmap %s, the config of daemonset %s: a pool runs a config of its own, configmap %s/%s (made from %s's data when missing); nothing was changed: point its volume %s at it (`kubectl set volume` or a patch of the template), then run again",
							p.name, o.Namespace, p.name, name, o.DaemonSet, o.Namespace, p.name, o.ConfigMap, v.Name)
					case name == p.name || configmap.IsCopyName(p.name, name):
						own = true
					}
				}
			}
		}
		if !own {
			return fmt.Errorf("--pool %s: container %s of daemonset %s/%s mounts no configmap %s (or a copy of it), the pool's own config; nothing was changed: mount it as kubeadm's DaemonSet mounts kube-proxy, then run again",
				p.name, o.Container, o.Namespace, p.name, p.name)
		}
	}
	return nil
}

// ensurePoolRecord makes the pool's record from the base's when it is
// missing: the config the pool starts from.
func ensurePoolRecord(ctx context.Context, d kpsync.Deps, o *Options, p pool) error {
	cms := d.Kube.ConfigMaps(o.Namespace)
	_, err := cms.Get(ctx, p.name, metav1.GetOptions{})
	if !apierrors.IsNotFound(err) {
		return err
	}
	cm, err := poolRecordFrom(ctx, cms, o, p)
	if err != nil {
		return err
	}
	_, err = cms.Create(ctx, cm, metav1.CreateOptions{FieldManager: configmap.FieldManager})
	if err == nil {
		d.Log.Infof("configmap %s/%s made from configmap %s/%s: the config pool %s starts from", o.Namespace, p.name, o.Namespace, o.ConfigMap, p.name)
	}
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	return err
}

// poolRecordFrom is the record of pool p as a run makes it when missing:
// the base record's data, labelled with the base's name.
func poolRecordFrom(ctx context.Context, cms kube.ConfigMaps, o *Options, p pool) (*corev1.ConfigMap, error) {
	base, err := cms.Get(ctx, o.ConfigMap, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("configmap %s/%s does not exist, and it is made from configmap %s/%s, which cannot be read: %w", o.Namespace, p.name, o.Namespace, o.ConfigMap, err)
	}
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: p.name, Namespace: o.Namespace,
			Labels: map[string]string{PoolOfLabel: o.ConfigMap, configmap.ManagedByLabel: configmap.FieldManager}},
		Data: base.Data, BinaryData: base.BinaryData,
	}, nil
}

// withPoolRecord is d whose client reads pool p's record, while it is
// missing, as a real run would make it (ensurePoolRecord): check mode
// and the plan before any write judge the pool from there.
func withPoolRecord(ctx context.Context, d kpsync.Deps, o *Options, p pool) kpsync.Deps {
	d.Kube = standInRecord{Interface: d.Kube, ns: o.Namespace, build: func() (*corev1.ConfigMap, error) {
		return poolRecordFrom(ctx, d.Kube.ConfigMaps(o.Namespace), o, p)
	}, name: p.name}
	return d
}

// standInRecord answers a Get of the ConfigMap name, when it is missing,
// with the ConfigMap that the func build returns.
type standInRecord struct {
	kube.Interface
	ns, name string
	build    func() (*corev1.ConfigMap, error)
}

func (s standInRecord) ConfigMaps(ns string) kube.ConfigMaps {
	cms := s.Interface.ConfigMaps(ns)
	if ns != s.ns {
		return cms
	}
	return standInConfigMaps{ConfigMaps: cms, s: s}
}

type standInConfigMaps struct {
	kube.ConfigMaps
	s standInRecord
}

func (c standInConfigMaps) Get(ctx context.Context, name string, opts metav1.GetOptions) (*corev1.ConfigMap, error) {
	cm, err := c.ConfigMaps.Get(ctx, name, opts)
	if name == c.s.name && apierrors.IsNotFound(err) {
		return c.s.build()
	}
	return cm, err
}

// quietLog is log, at warnings and above only: the plan of every pool
// before the first write repeats what each pool's run then logs.
func quietLog(log *logrus.Entry) *logrus.Entry {
	l := logrus.New()
	l.SetOutput(io.Discard)
	if log != nil && log.Logger != nil {
		l.SetOutput(log.Logger.Out)
		l.SetFormatter(log.Logger.Formatter)
	}
	l.SetLevel(logrus.WarnLevel)
	return logrus.NewEntry(l).WithField("plan", "before any write")
}

// poolResults is the result's pools, one per pool run.
func poolResults(o *Options, runs []poolRun) []poolResult {
	var out []poolResult
	for _, r := range runs {
		pr := poolResult{DaemonSet: r.name, ConfigMap: r.name, Failed: r.err != nil, ChangedKeys: []string{}}
		if r.name == o.DaemonSet {
			pr.ConfigMap = o.ConfigMap
		}
		if r.res != nil {
			f := r.res.Facts
			pr.Changed, pr.Msg = r.res.Changed, r.res.Msg
			pr.Restarted, pr.RestartReason, pr.ConfigMapName, pr.RolledBack = f.Restarted, f.RestartReason, f.ConfigMapName, f.RolledBack
			pr.APIRequests = f.APIRequests
			pr.Migration, pr.Connectivity = f.Migration, f.Connectivity
			if f.ChangedKeys != nil {
				pr.ChangedKeys = f.ChangedKeys
			}
		}
		if r.err != nil {
			pr.Msg = r.err.Error()
		}
		out = append(out, pr)
	}
	return out
}

// poolsOutcome is the run's result over its pools: the base's facts
// (--daemonset's, the top-level keys as without pools), changed when any
// pool changed, the warnings of all, and each pool in o.poolResults.
func poolsOutcome(o *Options, runs []poolRun, warnings []string, requests func() int64) *kpsync.Result {
	o.poolResults = poolResults(o, runs)
	if len(runs) == 0 || runs[0].res == nil {
		if len(warnings) == 0 {
			return nil
		}
		return &kpsync.Result{Warnings: warnings, Facts: kpsync.Facts{CheckMode: o.Check, ChangedKeys: []string{}, ChangedKeysEffect: map[string]string{}, AccessChanged: []string{}}}
	}
	res := *runs[0].res
	res.Warnings = append(slices.Clone(warnings), res.Warnings...)
	if requests != nil {
		res.Facts.APIRequests = requests()
	}
	for _, r := range runs[1:] {
		if r.res == nil {
			continue
		}
		res.Changed = res.Changed || r.res.Changed
		for _, w := range r.res.Warnings {
			res.Warnings = append(res.Warnings, "pool "+r.name+": "+w)
		}
	}
	if len(runs) > 1 {
		var changed []string
		for _, r := range runs {
			if r.res != nil && r.res.Changed {
				changed = append(changed, r.name)
			}
		}
		res.Msg = fmt.Sprintf("%s. Pools changed: %s of %d.", strings.TrimSuffix(res.Msg, "."), orNone(changed), len(runs))
	}
	return &res
}

func orNone(names []string) string {
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ", ")
}
