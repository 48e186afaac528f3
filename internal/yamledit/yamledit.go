// Package yamledit changes single values inside a YAML document while keeping
// the rest of it (key order, comments) as it was, so that a one-field change
// in a ConfigMap shows as a one-line diff.
package yamledit

import (
	"bytes"
	"fmt"
	"reflect"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Doc is a parsed YAML document.
type Doc struct {
	root *yaml.Node
	// noFinalNewline: the input did not end in a newline, so neither does
	// the output (a ConfigMap value written as |- stays |-)
	noFinalNewline bool
}

// Parse reads one YAML document whose top level is a mapping.
func Parse(text string) (*Doc, error) {
	d, err := parse(text)
	if err != nil {
		return nil, err
	}
	d.noFinalNewline = !strings.HasSuffix(text, "\n")
	return d, nil
}

func parse(text string) (*Doc, error) {
	var n yaml.Node
	if err := yaml.Unmarshal([]byte(text), &n); err != nil {
		return nil, err
	}
	if n.Kind != yaml.DocumentNode || len(n.Content) != 1 || n.Content[0].Kind != yaml.MappingNode {
		return nil, fmt.Errorf("not a YAML mapping")
	}
	return &Doc{root: n.Content[0]}, nil
}

// Root is the top-level mapping.
func (d *Doc) Root() *yaml.Node { return d.root }

// String renders the document with two-space indentation.
func (d *Doc) String() (string, error) {
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(d.root); err != nil {
		return "", err
	}
	if err := enc.Close(); err != nil {
		return "", err
	}
	if d.noFinalNewline {
		return strings.TrimSuffix(buf.String(), "\n"), nil
	}
	return buf.String(), nil
}

// Lookup returns the value node under the mapping key path, or nil. A key
// given twice names its last value, the one Kubernetes' YAML decoding (and
// so kube-proxy) keeps.
func Lookup(m *yaml.Node, path ...string) *yaml.Node {
	cur := m
	for _, key := range path {
		if cur == nil || cur.Kind != yaml.MappingNode {
			return nil
		}
		var next *yaml.Node
		if i := lastKey(cur, key); i >= 0 {
			next = cur.Content[i+1]
		}
		cur = next
	}
	return cur
}

// lastKey is the index in m.Content of key's last occurrence, -1 if none.
func lastKey(m *yaml.Node, key string) int {
	idx := -1
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			idx = i
		}
	}
	return idx
}

// Set puts value at the mapping key path under m, creating missing mappings.
// Where a key is given twice it changes the last value (see Lookup).
// It reports whether the document changed: a value that decodes to the same
// data as the one already there (e.g. `false` and `"false"` are different,
// `15m` and `15m` are not) leaves the document untouched.
func Set(m *yaml.Node, path []string, value *yaml.Node) (bool, error) {
	cur := m
	for i, key := range path {
		if cur.Kind != yaml.MappingNode {
			return false, fmt.Errorf("%q is not a mapping", key)
		}
		idx := lastKey(cur, key)
		if idx >= 0 {
			idx++ // the value
		}
		last := i == len(path)-1
		if idx < 0 {
			next := value
			if !last {
				next = &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
			}
			cur.Content = append(cur.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: key}, next)
			if last {
				return true, nil
			}
			cur = next
			continue
		}
		if last {
			if Equal(cur.Content[idx], value) {
				return false, nil
			}
			cur.Content[idx] = value
			return true, nil
		}
		if cur.Content[idx].Kind != yaml.MappingNode {
			// null or empty: replace with a mapping we can descend into
			if cur.Content[idx].Tag == "!!null" {
				cur.Content[idx] = &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
			} else {
				return false, fmt.Errorf("%q is not a mapping", key)
			}
		}
		cur = cur.Content[idx]
	}
	return false, nil
}

// Equal reports whether two nodes decode to the same data.
func Equal(a, b *yaml.Node) bool {
	var av, bv interface{}
	if err := a.Decode(&av); err != nil {
		return false
	}
	if err := b.Decode(&bv); err != nil {
		return false
	}
	return reflect.DeepEqual(numbersAsFloats(av), numbersAsFloats(bv))
}

// numbersAsFloats makes every number a float64, so that 5 and !!float 5 (or
// 5.0) are equal: to kube-proxy's decoder, which goes through JSON, they are
// the same number. kubeadm writes a float32 field like clientConnection.qps
// as `qps: 5`.
func numbersAsFloats(v interface{}) interface{} {
	switch t := v.(type) {
	case int:
		return float64(t)
	case int64:
		return float64(t)
	case uint64:
		return float64(t)
	case map[string]interface{}:
		out := make(map[string]interface{}, len(t))
		for k, e := range t {
			out[k] = numbersAsFloats(e)
		}
		return out
	case map[interface{}]interface{}:
		out := make(map[interface{}]interface{}, len(t))
		for k, e := range t {
			out[k] = numbersAsFloats(e)
		}
		return out
	case []interface{}:
		out := make([]interface{}, len(t))
		for i, e := range t {
			out[i] = numbersAsFloats(e)
		}
		return out
	}
	return v
}

// Str is a plain string scalar.
func Str(s string) *yaml.Node {
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: s}
}
