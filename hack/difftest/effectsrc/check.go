package effectsrc

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/kube-proxy-sync/kube-proxy-sync/internal/kpvalidate"
)

// exception is a read of a field in modes its table entry leaves out, for
// something other than the proxy's behaviour.
type exception struct {
	// funcs the read is in (any of them)
	funcs []string
	// vias: for the whole configuration, what it is handed to (any of
	// them; none: not the whole configuration)
	vias []string
	// fields it covers (none: every field)
	fields []string
	// modes it allows beyond the table's (0: every mode)
	modes Modes
	why   string
}

// exceptions, each with the reason the read does not change what a running
// kube-proxy does to traffic. Check reports one that no minor uses
// (UnusedExceptions), so the list cannot outlive the code it excuses.
var exceptions = []exception{
	{funcs: []string{"(*Options).AddFlags", "(*Options).addOSFlags"},
		why: "registers the command-line flags, with the configuration's values at that point (kube-proxy's defaults: config.conf is loaded later) as the flags' defaults"},
	{funcs: []string{"(*Options).Validate"}, vias: []string{"validation.Validate"},
		why: "validation: a value it refuses stops kube-proxy at start-up; internal/kpvalidate refuses the same values before any write (the differential test), so a change Effect judges is a valid one"},
	{funcs: []string{"(*Options).writeConfigFile"}, vias: []string{"encoder.Encode"},
		why: "--write-config-to writes the configuration out and exits"},
	{funcs: []string{"(*Options).ApplyDefaults"}, vias: []string{"proxyconfigscheme.Scheme.ConvertToVersion"},
		why: "converts to v1alpha1 and back to apply kube-proxy's defaults: fills values in, acts on none"},
	{funcs: []string{"newProxyServer"}, vias: []string{"c.Set", "cz.Set", "v1alpha1conversion.Convert_config_KubeProxyConfiguration_To_v1alpha1_KubeProxyConfiguration"},
		why: "serves the configuration back on /configz (from 1.37 converted back to v1alpha1 first)"},
	{funcs: []string{"checkBadConfig", "checkBadIPConfig", "checkIPConfig", "badCIDRs"}, fields: []string{"ipvs.excludeCIDRs", "winkernel.sourceVip"},
		why: "the start-up check of IP families: for these fields it only adds to a warning newProxyServer logs (fatal only for the cluster's and the node's CIDRs)"},
	{funcs: []string{"(*ProxyServer).Run", "newProxyServer"}, fields: []string{"oomScoreAdj"}, modes: Kernelspace,
		why: "on Windows k8s.io/kubernetes/pkg/util/oom is the unsupported stub (oom_unsupported.go): ApplyOOMScoreAdj only returns an error kube-proxy logs (1.27's newProxyServer copies the field into ProxyServer for Run)"},
}

func (e exception) covers(r Read, path string, extra Modes) bool {
	if !slices.Contains(e.funcs, r.Func) || e.modes != 0 && extra&^e.modes != 0 {
		return false
	}
	if len(e.vias) > 0 || r.Via != "" {
		return slices.Contains(e.vias, r.Via)
	}
	if len(e.fields) == 0 {
		return true
	}
	return slices.Contains(e.fields, path)
}

// Report is the outcome of Check for one minor.
type Report struct {
	// Problems are the disagreements between the table and the source,
	// and reads the analysis could not classify.
	Problems []string
	// Reads counts the reads found; Restricted those of fields the table
	// says only some modes read.
	Reads, Restricted int
	// Uncertain counts the reads under a condition on the mode the
	// analysis could not evaluate (a problem for a field of some modes).
	Uncertain int
	// used marks the exceptions used.
	used map[int]bool
}

// Check holds the reads of kube-proxy 1.minor against the mode column of
// internal/kpvalidate's table: a field the table says only some modes read
// is read in no other mode (save the exceptions), and is read in each of
// them; a field no mode reads (inNothing) is not read at all.
func Check(minor int, res Result) Report {
	rep := Report{Reads: len(res.Reads), used: map[int]bool{}}
	fields := kpvalidate.Fields(minor)
	for _, u := range res.Unmapped {
		rep.Problems = append(rep.Problems, fmt.Sprintf("%s (%s) reads %s, which no v1alpha1 field converts into: cannot classify", u.Pos, u.Func, u.Internal))
	}
	for _, r := range res.Reads {
		if r.Uncertain != "" {
			rep.Uncertain++
		}
		known := r.Path == ""
		for _, f := range fields {
			known = known || covers(r.Path, f.Path)
		}
		if !known {
			rep.Problems = append(rep.Problems, fmt.Sprintf("%s (%s) reads %s, a field the table does not have at 1.%d", r.Pos, r.Func, r.Path, minor))
		}
	}
	for _, f := range fields {
		want := ParseModes(f.Modes(minor))
		if want == All {
			continue
		}
		var got Modes
		for _, r := range res.Reads {
			if !covers(r.Path, f.Path) {
				continue
			}
			rep.Restricted++
			extra := r.Modes &^ want
			if i, ok := excepted(r, f.Path, extra); ok {
				rep.used[i] = true
				if exceptions[i].modes != 0 {
					// a real read, of no effect in the extra modes only
					got |= r.Modes &^ extra
				}
				continue
			}
			if r.Uncertain != "" {
				rep.Problems = append(rep.Problems, fmt.Sprintf("%s: %s (%s) reads it under %q, a condition on the mode the analysis cannot evaluate: cannot classify", f.Path, r.Pos, r.Func, r.Uncertain))
				continue
			}
			got |= r.Modes
			if extra != 0 {
				what := r.Path
				if r.Via != "" {
					what = "the whole configuration, handed to " + r.Via + ","
				}
				rep.Problems = append(rep.Problems, fmt.Sprintf("%s: the table says %s reads it, but %s (%s) reads %s in mode %s", f.Path, describe(want), r.Pos, r.Func, what, extra))
			}
		}
		if missing := want &^ got; missing != 0 {
			rep.Problems = append(rep.Problems, fmt.Sprintf("%s: the table says mode %s reads it, but no read in that mode was found", f.Path, missing))
		}
	}
	sort.Strings(rep.Problems)
	return rep
}

func describe(m Modes) string {
	if m == 0 {
		return "no mode"
	}
	return "only mode " + m.String()
}

// covers reports whether a read of path (a field, an object, or "": the
// whole configuration) reads field.
func covers(path, field string) bool {
	return path == "" || path == field || strings.HasPrefix(field, path+".")
}

func excepted(r Read, path string, extra Modes) (int, bool) {
	for i, e := range exceptions {
		if e.covers(r, path, extra) {
			return i, true
		}
	}
	return 0, false
}

// UnusedExceptions lists the exceptions none of the reports used.
func UnusedExceptions(reps ...Report) []string {
	var out []string
	for i, e := range exceptions {
		used := false
		for _, r := range reps {
			used = used || r.used[i]
		}
		if !used {
			out = append(out, fmt.Sprintf("%v %v: %s", e.funcs, e.vias, e.why))
		}
	}
	return out
}
