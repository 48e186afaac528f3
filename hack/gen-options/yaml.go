package main

import (
	"encoding/json"
	"fmt"
	"strings"

	"sigs.k8s.io/yaml"
)

// yamlText writes s as a YAML value that starts the line first (a key,
// "      description: ", or a list item, "        - ") and goes on, wrapped
// at width, on lines indented by cont. Plain when that reads back as s,
// else single-quoted.
func yamlText(first, cont, s string, width int) (string, error) {
	for _, v := range []string{s, "'" + strings.ReplaceAll(s, "'", "''") + "'"} {
		lines := wrap(v, width-len(first), width-len(cont))
		text := first + strings.Join(lines, "\n"+cont) + "\n"
		if readsBack(text, s) {
			return text, nil
		}
	}
	return "", fmt.Errorf("%q: no YAML scalar reads back as this text", s)
}

// yamlScalar writes a short string (a default, a choice) plain when it
// reads back as itself inside a flow sequence, else double-quoted.
func yamlScalar(s string) string {
	if s != "" && readsBack("["+s+"]", s) {
		return s
	}
	q, _ := json.Marshal(s) // JSON's strings are YAML's double-quoted ones
	return string(q)
}

// yamlList writes choices as a flow sequence.
func yamlList(items []string) string {
	quoted := make([]string, len(items))
	for i, item := range items {
		quoted[i] = yamlScalar(item)
	}
	return "[" + strings.Join(quoted, ", ") + "]"
}

// readsBack tells whether the YAML text, one key, one list item or a flow
// sequence of one, holds exactly the string want.
func readsBack(text, want string) bool {
	var v any
	if err := yaml.Unmarshal([]byte(text), &v); err != nil {
		return false
	}
	switch t := v.(type) {
	case map[string]any:
		if len(t) != 1 {
			return false
		}
		for _, x := range t {
			v = x
		}
	case []any:
		if len(t) != 1 {
			return false
		}
		v = t[0]
	default:
		return false
	}
	s, ok := v.(string)
	return ok && s == want
}
