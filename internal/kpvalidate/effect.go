package kpvalidate

import (
	"encoding/json"
	"strings"

	sigsyaml "sigs.k8s.io/yaml"
)

// Effects of a changed field on a running kube-proxy.
const (
	EffectRestart  = "restart"
	EffectNoEffect = "no-effect"
)

// Target is a running kube-proxy a change is judged against.
type Target struct {
	// Minor is its version, 1.Minor (0: unknown, judged as any minor).
	Minor int
	// OS is "linux" or "windows" ("": unknown, judged as either).
	OS string
}

// Effect says, for every field that differs between two config.conf texts,
// whether kube-proxy must restart to apply it ("restart") or no kube-proxy
// among on reads it in the old or the new text's proxy mode ("no-effect"):
// ipvs.* while the mode is iptables, nftables.* while it is ipvs,
// winkernel.* on Linux, and so on. A field counts as no-effect only when no
// target reads it in either mode; with no target, any version on any OS.
// Keys are dotted paths (featureGates.Name for a gate); a text that does
// not decode gives {"config.conf": "restart"}.
func Effect(oldConf, newConf []byte, on ...Target) map[string]string {
	oldLeaves, oldMode, err1 := leaves(oldConf)
	newLeaves, newMode, err2 := leaves(newConf)
	if err1 != nil || err2 != nil {
		return map[string]string{"config.conf": EffectRestart}
	}
	if len(on) == 0 {
		on = []Target{{}}
	}
	out := map[string]string{}
	for p := range union(oldLeaves, newLeaves) {
		if oldLeaves[p] == newLeaves[p] {
			continue
		}
		out[p] = EffectNoEffect
		for _, t := range on {
			if reads(p, t, oldMode) || reads(p, t, newMode) {
				out[p] = EffectRestart
				break
			}
		}
	}
	return out
}

// reads reports whether the kube-proxy t, run with the config's mode
// (as written: "" is the OS's default), reads the field at path.
func reads(path string, t Target, mode string) bool {
	f, ok := Lookup(path)
	if !ok {
		return true // unknown to us: assume it matters
	}
	if t.Minor > 0 && f.Since > t.Minor {
		return false // newer than it: it drops the field when it loads the config (Load warns)
	}
	in := f.Modes(t.Minor)
	switch in {
	case inAll:
		return true
	case inNothing:
		return false
	}
	modes := []string{mode}
	if mode == "" {
		switch t.OS {
		case "linux":
			modes = []string{"iptables"}
		case "windows":
			modes = []string{"kernelspace"}
		default:
			modes = []string{"iptables", "kernelspace"}
		}
	}
	for _, m := range strings.Split(in, ",") {
		for _, want := range modes {
			if m == want || m == inAll {
				return true
			}
		}
	}
	return false
}

// leaves flattens config.conf into field path -> JSON value, and returns its
// proxy mode as written ("": the OS's default).
func leaves(text []byte) (map[string]string, string, error) {
	data, err := sigsyaml.YAMLToJSON(text)
	if err != nil {
		return nil, "", err
	}
	var obj map[string]any
	if err := json.Unmarshal(data, &obj); err != nil {
		return nil, "", err
	}
	out := map[string]string{}
	walk(obj, "", func(in map[string]any, _, k, path string) bool {
		if _, ok := in[k].(map[string]any); ok {
			if f, known := Lookup(path); isObject(path) || known && f.Kind == BoolMap {
				return true
			}
		}
		b, _ := json.Marshal(in[k])
		out[path] = string(b)
		return false
	})
	mode, _ := obj["mode"].(string)
	return out, mode, nil
}

func union(a, b map[string]string) map[string]bool {
	out := map[string]bool{}
	for k := range a {
		out[k] = true
	}
	for k := range b {
		out[k] = true
	}
	return out
}
