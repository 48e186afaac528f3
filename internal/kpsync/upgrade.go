package kpsync

import (
	"fmt"

	"k8s.io/apimachinery/pkg/util/version"

	"github.com/kube-proxy-sync/kube-proxy-sync/internal/configmap"
	"github.com/kube-proxy-sync/kube-proxy-sync/internal/kpconfig"
	"github.com/kube-proxy-sync/kube-proxy-sync/internal/kpvalidate"
	"github.com/kube-proxy-sync/kube-proxy-sync/internal/probe"
)

// An image change is an upgrade (or a downgrade) of kube-proxy, and a
// kube-proxy that does not start in the mode its config asks for does not
// fall back to another: it crash-loops. For the minors the validation
// knows (kpvalidate.Oldest to kpvalidate.Newest) the validation refuses
// such a config with kube-proxy's own rules, proven against its code by
// the differential test. For the minors after the newest, whose code does
// not exist yet, the modes follow the published plans:
//   - KEP-5495: the KubeProxyIPVS feature gate (1.37, on by default) is
//     off by default from 1.40 and locked off from 1.43; with it off,
//     kube-proxy in ipvs mode fails to start;
//   - KEP-5343: nftables is the default mode from 1.40 (iptables before).
//
// Both are checked here, before any write.
const (
	// IPVSOffMinor is the first minor whose KubeProxyIPVS gate is off by
	// default, IPVSLockedMinor the first where it cannot be turned on.
	IPVSOffMinor    = 40
	IPVSLockedMinor = 43
	// IPVSDeprecatedMinor is the minor that deprecated ipvs mode.
	IPVSDeprecatedMinor = 35
	// nftablesDefaultMinor is the first minor whose default mode (mode
	// unset) is nftables.
	nftablesDefaultMinor = 40
)

// defaultMode is the mode kube-proxy 1.minor on Linux runs with mode unset.
func defaultMode(minor int) string {
	if minor >= nftablesDefaultMinor {
		return kpvalidate.ModeNFTables
	}
	return kpvalidate.ModeIPTables
}

// upgradeGuard judges the config that kube-proxy of the new image
// (p.image) starts with: it refuses a mode that version does not start in,
// naming the migration to run first, and, when the config leaves the mode
// unset and the new version's default differs from the running one's,
// writes the running mode explicitly into the desired config (returned
// with the keys; nothing changes when the image does not).
func upgradeGuard(e *env, p plan) (map[string]string, []string, error) {
	o := e.o
	text, ok := p.desired[configmap.ConfigKey]
	if p.image == "" || !ok || targetsWindows(p) {
		return p.desired, p.keys, nil
	}
	from := -1 // unknown
	if v, err := probe.ImageVersion(p.imageBefore); err == nil && v.Major() == 1 {
		from = int(v.Minor())
	}
	next, err := version.ParseGeneric(validationVersion(o, p.next(o.Container)))
	if err != nil || next.Major() != 1 {
		// unknown: the validation says which rules it used; but ipvs
		// stops starting from 1.40, and a config without a mode runs
		// nftables from 1.40, whatever the validation knows
		set, _, err := modeSettings(text, kpvalidate.Newest)
		if err != nil {
			return p.desired, p.keys, nil // the validation refuses what does not decode
		}
		if set == kpvalidate.ModeIPVS {
			return nil, nil, fmt.Errorf("configmap %s/%s: image %s refused: its kube-proxy version is unknown (no version tag), and kube-proxy in ipvs mode does not start from 1.%d unless featureGates.KubeProxyIPVS is true, and from 1.%d not at all (KEP-5495): pass --kube-proxy-version with the image's version, or move the fleet to nftables first (--set mode=nftables); nothing was written",
				o.Namespace, o.ConfigMap, p.image, IPVSOffMinor, IPVSLockedMinor)
		}
		if set != "" {
			return p.desired, p.keys, nil
		}
		if from < 0 {
			return nil, nil, fmt.Errorf("configmap %s/%s: config.conf sets no mode, and neither the version of image %s nor that of the running image %s is known, so whether the upgrade moves the fleet from %s to %s (the default from 1.%d) is too: pass --kube-proxy-version with the new image's version, or set the mode the fleet runs explicitly first (--set mode=iptables); nothing was written",
				o.Namespace, o.ConfigMap, p.image, p.imageBefore, defaultMode(kpvalidate.Oldest), defaultMode(nftablesDefaultMinor), nftablesDefaultMinor)
		}
		return keepMode(e, p, text, from, fmt.Sprintf("the version of image %s is unknown (no version tag), and kube-proxy defaults to %s from 1.%d", p.image, defaultMode(nftablesDefaultMinor), nftablesDefaultMinor))
	}
	to := int(next.Minor())
	set, gates, err := modeSettings(text, to)
	if err != nil {
		return p.desired, p.keys, nil // the validation refuses what does not decode
	}
	obj := fmt.Sprintf("configmap %s/%s", o.Namespace, o.ConfigMap)
	mode := set
	if mode == "" {
		mode = defaultMode(to)
	}
	if mode == kpvalidate.ModeIPVS {
		if err := ipvsStarts(to, gates); err != nil {
			return nil, nil, fmt.Errorf("%s: image %s (kube-proxy 1.%d) refused: %w; move the fleet to nftables first, with the image it runs now (kube-proxy-sync --set mode=nftables; kubespray: kube_proxy_mode: nftables), then upgrade; nothing was written",
				obj, p.image, to, err)
		}
		if to >= IPVSDeprecatedMinor {
			e.warn(fmt.Sprintf("%s: kube-proxy 1.%d runs ipvs mode, deprecated since 1.%d: the KubeProxyIPVS feature gate is off by default from 1.%d and locked off from 1.%d, when kube-proxy in ipvs mode no longer starts; move to nftables before then (--set mode=nftables)",
				obj, to, IPVSDeprecatedMinor, IPVSOffMinor, IPVSLockedMinor))
		}
	}
	if set != "" {
		return p.desired, p.keys, nil
	}
	if from < 0 {
		if defaultMode(to) != defaultMode(kpvalidate.Oldest) {
			return nil, nil, fmt.Errorf("%s: config.conf sets no mode, and kube-proxy 1.%d (image %s) defaults to %s where older ones ran %s; the version of the running image %s is unknown, so which mode the fleet runs is too: set the mode the fleet runs explicitly first (--set mode=iptables for kube-proxy 1.39 or older), then upgrade; nothing was written",
				obj, to, p.image, defaultMode(to), defaultMode(kpvalidate.Oldest), p.imageBefore)
		}
		return p.desired, p.keys, nil
	}
	if defaultMode(from) == defaultMode(to) {
		return p.desired, p.keys, nil
	}
	return keepMode(e, p, text, from, fmt.Sprintf("kube-proxy 1.%d defaults to %s", to, defaultMode(to)))
}

// keepMode writes the mode kube-proxy 1.from runs text in (its default:
// text sets none) into the desired config, so that an upgrade onto a
// version whose default differs (why) keeps the mode: the upgrade changes
// the binary, not the mode (a mode change is a migration of its own, see
// migration.go).
func keepMode(e *env, p plan, text string, from int, why string) (map[string]string, []string, error) {
	o := e.o
	obj := fmt.Sprintf("configmap %s/%s", o.Namespace, o.ConfigMap)
	running := defaultMode(from)
	written, _, err := kpconfig.Set(text, []kpconfig.Setting{{Path: "mode", Value: running}})
	if err != nil {
		return nil, nil, fmt.Errorf("%s: write mode %s into config.conf: %w", obj, running, err)
	}
	desired := make(map[string]string, len(p.desired))
	for k, v := range p.desired {
		desired[k] = v
	}
	desired[configmap.ConfigKey] = written
	e.warn(fmt.Sprintf("%s: config.conf sets no mode, and %s where 1.%d ran %s: mode: %s is written explicitly with the image, so the upgrade keeps the mode; change it later in a run of its own (a migration)",
		obj, why, from, running, running))
	keys := append(append([]string{}, p.keys...), configmap.ConfigKey+":mode")
	return desired, keys, nil
}

// ipvsStarts says why kube-proxy 1.minor does not start in ipvs mode with
// the feature gates gates (nil: it starts). Minors the validation knows
// are left to it.
func ipvsStarts(minor int, gates map[string]bool) error {
	switch {
	case minor <= kpvalidate.Newest:
		return nil
	case minor >= IPVSLockedMinor:
		return fmt.Errorf("kube-proxy in ipvs mode does not start from 1.%d: the KubeProxyIPVS feature gate is locked off (KEP-5495)", IPVSLockedMinor)
	case minor >= IPVSOffMinor && !gates["KubeProxyIPVS"]:
		return fmt.Errorf("kube-proxy in ipvs mode does not start from 1.%d unless featureGates.KubeProxyIPVS is true: the gate is off by default from 1.%d and locked off from 1.%d (KEP-5495)", IPVSOffMinor, IPVSOffMinor, IPVSLockedMinor)
	}
	return nil
}

// modeSettings reads config.conf's mode as kube-proxy 1.minor decodes it
// ("" when unset) and its feature gates (kpvalidate.ModeSettings, the one
// decoder).
func modeSettings(text string, minor int) (string, map[string]bool, error) {
	return kpvalidate.ModeSettings(text, minor)
}

// modeAt is the mode kube-proxy of version v (unknown: "") runs text in:
// its mode, else that minor's default; iptables, the default of every
// minor the validation knows, when v is unknown.
func modeAt(text, v string) string {
	minor := minorOf(v)
	if minor < 0 {
		minor = kpvalidate.Newest
	}
	set, _, err := modeSettings(text, minor)
	switch pv, verr := version.ParseGeneric(v); {
	case err == nil && set != "":
		return set
	case verr == nil && pv.Major() == 1:
		return defaultMode(int(pv.Minor()))
	}
	return kpvalidate.ModeIPTables
}

// runningVersion is the version of the kube-proxy the fleet runs: the
// running image's (--kube-proxy-version speaks of the new one when the
// image changes), else the one the validation uses.
func runningVersion(o Options, p plan) string {
	if p.image == "" {
		return validationVersion(o, p.ds)
	}
	if v, err := probe.ImageVersion(p.imageBefore); err == nil {
		return v.String()
	}
	return ""
}
