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

// Effect says, for every field that differs between two config.conf texts,
// whether kube-proxy must restart to apply it ("restart") or no kube-proxy
// of either config's proxy mode reads it ("no-effect"): ipvs.* while the
// mode is iptables, nftables.* while it is ipvs, winkernel.* on Linux, and
// so on. A field counts as no-effect only when neither the old nor the new
// mode reads it. Keys are dotted paths (featureGates.Name for a gate); a
// text that does not decode gives {"config.conf": "restart"}.
func Effect(oldConf, newConf []byte) map[string]string {
	oldLeaves, oldMode, err1 := leaves(oldConf)
	newLeaves, newMode, err2 := leaves(newConf)
	if err1 != nil || err2 != nil {
		return map[string]string{"config.conf": EffectRestart}
	}
	out := map[string]string{}
	for p := range union(oldLeaves, newLeaves) {
		if oldLeaves[p] == newLeaves[p] {
			continue
		}
		out[p] = effectOf(p, oldMode, newMode)
	}
	return out
}

func effectOf(path, oldMode, newMode string) string {
	f, ok := Lookup(path)
	if !ok {
		return EffectRestart
	}
	switch f.In {
	case inAll:
		return EffectRestart
	case inNothing:
		return EffectNoEffect
	}
	for _, m := range strings.Split(f.In, ",") {
		if m == oldMode || m == newMode {
			return EffectRestart
		}
	}
	return EffectNoEffect
}

// leaves flattens config.conf into field path -> JSON value, and returns its
// proxy mode ("" means iptables on Linux).
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
	flatten(obj, "", out)
	mode, _ := obj["mode"].(string)
	if mode == "" {
		mode = "iptables"
	}
	return out, mode, nil
}

func flatten(obj map[string]any, prefix string, out map[string]string) {
	for k, v := range obj {
		path := k
		if prefix != "" {
			path = prefix + "." + k
		}
		if prefix == "" && (k == "apiVersion" || k == "kind") {
			continue
		}
		if child, ok := v.(map[string]any); ok {
			if f, known := Lookup(path); isObject(path) || known && f.Kind == BoolMap {
				flatten(child, path, out)
				continue
			}
		}
		b, _ := json.Marshal(v)
		out[path] = string(b)
	}
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
