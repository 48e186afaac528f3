package kpvalidate

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	kjson "sigs.k8s.io/json"
	sigsyaml "sigs.k8s.io/yaml"
)

// APIVersion and Kind config.conf must declare.
const (
	APIVersion = "kubeproxy.config.k8s.io/v1alpha1"
	ConfigKind = "KubeProxyConfiguration"
)

// decode parses config.conf the way kube-proxy's strict decoder does: YAML
// to JSON, apiVersion and kind required, then every field known at 1.minor,
// of the right type, at most once.
func decode(text string, minor int) (*config, error) {
	data, err := sigsyaml.YAMLToJSON([]byte(text))
	if err != nil {
		return nil, fmt.Errorf("not YAML: %w", err)
	}
	var meta struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
	}
	if err := json.Unmarshal(data, &meta); err != nil {
		return nil, fmt.Errorf("not a YAML mapping with apiVersion and kind: %w", err)
	}
	switch {
	case meta.Kind == "":
		return nil, fmt.Errorf("kind is missing, want kind: %s", ConfigKind)
	case meta.Kind != ConfigKind:
		return nil, fmt.Errorf("kind %q, want %s", meta.Kind, ConfigKind)
	case meta.APIVersion == "":
		return nil, fmt.Errorf("apiVersion is missing, want apiVersion: %s", APIVersion)
	case meta.APIVersion != APIVersion:
		return nil, fmt.Errorf("apiVersion %q, want %s", meta.APIVersion, APIVersion)
	}
	var problems []string
	if _, err := sigsyaml.YAMLToJSONStrict([]byte(text)); err != nil {
		problems = append(problems, err.Error())
	}
	var cfg config
	strict, err := kjson.UnmarshalStrict(data, &cfg)
	if err != nil {
		return nil, fmt.Errorf("wrong type: %w", err)
	}
	for _, e := range strict {
		problems = append(problems, e.Error())
	}
	var raw map[string]any
	if err := json.Unmarshal(data, &raw); err != nil {
		return nil, fmt.Errorf("not a YAML mapping: %w", err)
	}
	problems = append(problems, unknownFields(raw, "", minor)...)
	if len(problems) > 0 {
		sort.Strings(problems)
		return nil, fmt.Errorf("%s", strings.Join(dedupe(problems), "; "))
	}
	return &cfg, nil
}

// unknownFields names the fields of obj (at prefix) that kube-proxy 1.minor
// does not have. The newer ones are caught here, the never-known ones by
// the strict decoder already; both are reported the same way.
func unknownFields(obj map[string]any, prefix string, minor int) []string {
	known := objectFields(prefix, minor)
	var out []string
	for k, v := range obj {
		path := k
		if prefix != "" {
			path = prefix + "." + k
		}
		if prefix == "" && (k == "apiVersion" || k == "kind") {
			continue
		}
		if !known[k] {
			if since := firstMinor(path); since > minor {
				out = append(out, fmt.Sprintf("unknown field %q: kube-proxy has it from 1.%d on, this is 1.%d", path, since, minor))
			}
			continue
		}
		if child, ok := v.(map[string]any); ok && isObject(path) {
			out = append(out, unknownFields(child, path, minor)...)
		}
	}
	return out
}

func dedupe(s []string) []string {
	var out []string
	for i, v := range s {
		if i == 0 || v != s[i-1] {
			out = append(out, v)
		}
	}
	return out
}

// firstMinor is the first minor that has path (a field or an object), 0 if none.
func firstMinor(path string) int {
	first := 0
	for _, f := range fields {
		if (f.Path == path || strings.HasPrefix(f.Path, path+".")) && (first == 0 || f.Since < first) {
			first = f.Since
		}
	}
	return first
}
