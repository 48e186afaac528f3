package kpvalidate

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
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

// Warning is a part of config.conf that kube-proxy loads past instead of
// refusing. kube-proxy (cmd/kube-proxy/app, loadConfig, every supported
// minor) decodes its config file strictly first; when that fails only
// because of unknown or duplicate fields, it decodes the file again
// leniently (kubeproxy.config.k8s.io/v1alpha1 is the only version it has),
// logs "Using lenient decoding as strict decoding failed" and runs with the
// result: an unknown field is dropped, a duplicate key keeps its last value.
type Warning struct {
	// Path is the dotted path of the field ("nftables", "ipvs.strictArp"),
	// or the key given twice.
	Path string
	// Duplicate: the key is given twice (Line says where), the last value
	// counts. Otherwise the field is unknown to this minor.
	Duplicate bool
	Line      int
	// Detail is the YAML parser's message when it is not a plain duplicate.
	Detail string
	// Since is the first supported minor that has the field, 0 if none.
	Since int
	// Minor is the kube-proxy minor that loads the file.
	Minor int
}

func (w Warning) String() string {
	if w.Detail != "" {
		return fmt.Sprintf("config.conf: %s: kube-proxy 1.%d loads it leniently", w.Detail, w.Minor)
	}
	if w.Duplicate {
		where := ""
		if w.Line > 0 {
			where = fmt.Sprintf(" (line %d)", w.Line)
		}
		return fmt.Sprintf("config.conf: key %q is given twice%s: kube-proxy 1.%d uses the last value", w.Path, where, w.Minor)
	}
	if w.Since > w.Minor {
		return fmt.Sprintf("config.conf: field %q is ignored by kube-proxy 1.%d (kube-proxy has it from 1.%d on)", w.Path, w.Minor, w.Since)
	}
	return fmt.Sprintf("config.conf: unknown field %q is ignored by kube-proxy 1.%d (no kube-proxy from 1.%d to 1.%d has it%s)", w.Path, w.Minor, Oldest, Newest, Suggest(w.Path))
}

// Unknown reports whether no supported kube-proxy minor has the field.
func (w Warning) Unknown() bool { return !w.Duplicate && w.Since == 0 }

// Warnings are what kube-proxy would log while loading one config.conf.
type Warnings []Warning

// Strings renders each warning.
func (ws Warnings) Strings() []string {
	out := make([]string, len(ws))
	for i, w := range ws {
		out[i] = w.String()
	}
	return out
}

// decode loads config.conf the way kube-proxy 1.minor does: YAML to JSON,
// apiVersion and kind required, every field it has of the right type. A
// field it does not have, or a key given twice, is a Warning and not an
// error (its lenient fallback); a value of the wrong type for a field it
// has, or a file that is not a KubeProxyConfiguration, is an error.
func decode(text string, minor int) (*config, Warnings, error) {
	data, err := sigsyaml.YAMLToJSON([]byte(text))
	if err != nil {
		return nil, nil, fmt.Errorf("not YAML: %w", err)
	}
	var meta struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
	}
	if err := json.Unmarshal(data, &meta); err != nil {
		return nil, nil, fmt.Errorf("not a YAML mapping with apiVersion and kind: %w", err)
	}
	switch {
	case meta.Kind == "":
		return nil, nil, fmt.Errorf("kind is missing, want kind: %s", ConfigKind)
	case meta.Kind != ConfigKind:
		return nil, nil, fmt.Errorf("kind %q, want %s", meta.Kind, ConfigKind)
	case meta.APIVersion == "":
		return nil, nil, fmt.Errorf("apiVersion is missing, want apiVersion: %s", APIVersion)
	case meta.APIVersion != APIVersion:
		return nil, nil, fmt.Errorf("apiVersion %q, want %s", meta.APIVersion, APIVersion)
	}
	var warns Warnings
	if _, err := sigsyaml.YAMLToJSONStrict([]byte(text)); err != nil {
		warns = append(warns, duplicates(err, minor)...)
	}
	// The fields this minor does not have are dropped before the typed
	// decode, whatever their value: kube-proxy's decoder skips them without
	// looking at their type.
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber() // so re-encoding keeps every number as written
	var raw map[string]any
	if err := dec.Decode(&raw); err != nil {
		return nil, nil, fmt.Errorf("not a YAML mapping: %w", err)
	}
	warns = append(warns, prune(raw, minor)...)
	known, err := json.Marshal(raw)
	if err != nil {
		return nil, nil, fmt.Errorf("re-encode config.conf: %w", err)
	}
	var cfg config
	strict, err := kjson.UnmarshalStrict(known, &cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("wrong type: %w", err)
	}
	// what the field table does not describe (the objects of logging.vmodule)
	for _, e := range strict {
		var fe kjson.FieldError
		if errors.As(e, &fe) && strings.HasPrefix(e.Error(), "unknown field") {
			warns = append(warns, Warning{Path: fe.FieldPath(), Minor: minor})
			continue
		}
		return nil, nil, fmt.Errorf("%w", e)
	}
	sort.SliceStable(warns, func(i, j int) bool { return warns[i].Path < warns[j].Path })
	return &cfg, warns, nil
}

// prune deletes from obj the fields kube-proxy 1.minor does not have and
// returns them as warnings.
func prune(obj map[string]any, minor int) Warnings {
	var out Warnings
	known := map[string]map[string]bool{} // by object: its fields at 1.minor
	walk(obj, "", func(in map[string]any, prefix, k, path string) bool {
		if known[prefix] == nil {
			known[prefix] = objectFields(prefix, minor)
		}
		if !known[prefix][k] {
			out = append(out, Warning{Path: path, Since: firstMinor(path), Minor: minor})
			delete(in, k)
			return false
		}
		return isObject(path)
	})
	return out
}

// walk visits each field of obj, a decoded config.conf (prefix "") or the
// object at prefix in it, apiVersion and kind left out. visit gets the
// object that holds the field (it may delete k from it), that object's
// path, the field's key and its dotted path; walk goes into the field's
// value when visit returns true and the value is a mapping.
func walk(obj map[string]any, prefix string, visit func(in map[string]any, prefix, k, path string) (into bool)) {
	for k, v := range obj {
		if prefix == "" && (k == "apiVersion" || k == "kind") {
			continue
		}
		path := k
		if prefix != "" {
			path = prefix + "." + k
		}
		if !visit(obj, prefix, k, path) {
			continue
		}
		if child, ok := v.(map[string]any); ok {
			walk(child, path, visit)
		}
	}
}

// yaml's duplicate-key errors: `line 4: key "mode" already set in map`.
var duplicateKey = regexp.MustCompile(`line (\d+): key "((?:[^"\\]|\\.)*)" already set in map`)

func duplicates(err error, minor int) Warnings {
	var out Warnings
	for _, m := range duplicateKey.FindAllStringSubmatch(err.Error(), -1) {
		var line int
		_, _ = fmt.Sscan(m[1], &line)
		out = append(out, Warning{Path: m[2], Duplicate: true, Line: line, Minor: minor})
	}
	if len(out) == 0 {
		// not a duplicate: kube-proxy still only warns (the strict YAML
		// pass adds to the strict errors, it never fails the decode)
		out = append(out, Warning{Detail: err.Error(), Duplicate: true, Minor: minor})
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

// Suggest is a hint for an unknown field: "; field names are
// case-sensitive: did you mean ..." when a field or object of that name but
// for letter case exists, else "".
func Suggest(path string) string {
	for _, f := range fields {
		parts, want := strings.Split(f.Path, "."), strings.Split(path, ".")
		if len(want) > len(parts) {
			continue
		}
		cand := strings.Join(parts[:len(want)], ".")
		if strings.EqualFold(cand, path) && cand != path {
			return fmt.Sprintf("; field names are case-sensitive: did you mean %q?", cand)
		}
	}
	return ""
}
