// Package kpvalidatetest holds the differential test's inputs and checks,
// shared by the modules under hack/difftest (one per kube-proxy minor, each
// importing that version's real kube-proxy code). It imports no kube-proxy
// code itself: the reference is passed in.
package kpvalidatetest

import (
	"fmt"
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/kube-proxy-sync/kube-proxy-sync/internal/kpvalidate"
)

// Reference is kube-proxy's own load, default and validate: err is nil
// when it would start with the config; lenient is whether it fell back to
// its lenient decoding, logging a warning (fields it does not have, keys
// given twice).
type Reference func(text []byte) (lenient bool, err error)

// Case is one config.conf to run through both.
type Case struct {
	Name string
	Text string
	// Reject and Lenient, when set, are what kube-proxy must answer (a
	// sanity check that the case means what its name says); otherwise only
	// agreement counts.
	Reject  *bool
	Lenient *bool
}

// RunCases runs every case at 1.minor through kpvalidate and the reference:
// both must accept or both reject.
func RunCases(t *testing.T, minor int, ref Reference) {
	cases := Cases(minor)
	t.Logf("%d cases at 1.%d", len(cases), minor)
	for _, c := range cases {
		t.Run(c.Name, func(t *testing.T) {
			lenient, refErr := Compare(t, minor, c.Text, ref)
			if c.Reject != nil && (refErr != nil) != *c.Reject {
				t.Errorf("kube-proxy 1.%d: rejected=%t, the case expects rejected=%t (%v)\n%s", minor, refErr != nil, *c.Reject, refErr, c.Text)
			}
			if c.Lenient != nil && lenient != *c.Lenient {
				t.Errorf("kube-proxy 1.%d: lenient decoding=%t, the case expects %t\n%s", minor, lenient, *c.Lenient, c.Text)
			}
		})
	}
}

// Compare runs text through both and fails t when they disagree: one
// accepts what the other refuses, or kube-proxy falls back to its lenient
// decoding where kpvalidate has no warning (or the other way round). It
// returns the reference's answer.
func Compare(t testing.TB, minor int, text string, ref Reference) (lenient bool, refErr error) {
	t.Helper()
	lenient, refErr = ref([]byte(text))
	warns, ourErr := kpvalidate.Validate(text, minor)
	if (refErr == nil) != (ourErr == nil) {
		t.Errorf("disagreement at 1.%d\nkube-proxy: %v\nkpvalidate: %v\nconfig.conf:\n%s", minor, refErr, ourErr, text)
	}
	if lenient != (len(warns) > 0) {
		t.Errorf("disagreement at 1.%d on the lenient fallback\nkube-proxy decoded leniently: %t (%v)\nkpvalidate warnings: %q (%v)\nconfig.conf:\n%s", minor, lenient, refErr, warns.Strings(), ourErr, text)
	}
	return lenient, refErr
}

// CheckFields compares kpvalidate's field table at 1.minor with the real
// KubeProxyConfiguration type of that version, and checks that every field
// of the real type says in which proxy modes a change has an effect
// (kpvalidate.Effect), so that no field is left unclassified.
func CheckFields(t *testing.T, minor int, typ reflect.Type) {
	real := map[string]string{}
	walk(typ, "", real)
	ours := map[string]string{}
	for _, f := range kpvalidate.Fields(minor) {
		k := string(f.Kind)
		if f.Pointer {
			k = "*" + k
		}
		ours[f.Path] = k
		if f.Modes(minor) == "" {
			t.Errorf("field %s at 1.%d: internal/kpvalidate's table does not say in which proxy modes a change has an effect (set In)", f.Path, minor)
		}
	}
	var paths []string
	for p := range real {
		paths = append(paths, p)
	}
	for p := range ours {
		if _, ok := real[p]; !ok {
			paths = append(paths, p)
		}
	}
	sort.Strings(paths)
	for _, p := range paths {
		if real[p] != ours[p] {
			t.Errorf("field %s at 1.%d: k8s.io/kube-proxy has %q, internal/kpvalidate's table has %q", p, minor, real[p], ours[p])
		}
	}
}

func walk(t reflect.Type, prefix string, out map[string]string) {
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		name := strings.Split(f.Tag.Get("json"), ",")[0]
		if name == "-" {
			continue
		}
		if f.Anonymous && name == "" {
			if f.Type.Name() == "TypeMeta" {
				continue // apiVersion and kind
			}
			walk(f.Type, prefix, out)
			continue
		}
		path := name
		if prefix != "" {
			path = prefix + "." + name
		}
		ft, ptr := f.Type, ""
		if ft.Kind() == reflect.Ptr {
			ft, ptr = ft.Elem(), "*"
		}
		if k := kindOf(ft); k != "" {
			out[path] = ptr + k
			continue
		}
		if ft.Kind() == reflect.Struct {
			walk(ft, path, out)
			continue
		}
		out[path] = "unsupported " + ft.String()
	}
}

func kindOf(t reflect.Type) string {
	switch t.Name() {
	case "Duration":
		if t.Kind() == reflect.Struct {
			return string(kpvalidate.Duration)
		}
	case "TimeOrMetaDuration":
		return string(kpvalidate.TimeOrDuration)
	case "QuantityValue":
		return string(kpvalidate.Quantity)
	}
	switch t.Kind() {
	case reflect.Bool:
		return string(kpvalidate.Bool)
	case reflect.Int32:
		return string(kpvalidate.Int32)
	case reflect.Uint32:
		return string(kpvalidate.Uint32)
	case reflect.Float32:
		return string(kpvalidate.Float32)
	case reflect.String:
		return string(kpvalidate.String)
	case reflect.Map:
		if t.Key().Kind() == reflect.String && t.Elem().Kind() == reflect.Bool {
			return string(kpvalidate.BoolMap)
		}
	case reflect.Slice:
		switch t.Elem().Kind() {
		case reflect.String:
			return string(kpvalidate.Strings)
		case reflect.Struct:
			return string(kpvalidate.Objects)
		}
	}
	return ""
}

func rejectWant(b bool) *bool { return &b }

// render builds a config.conf from a base and dotted-path settings whose
// values are YAML flow text ("30s", "[a, b]", "{X: true}", "null").
func render(settings [][2]string) string {
	type node struct {
		keys  []string
		kids  map[string]*node
		value string
	}
	root := &node{kids: map[string]*node{}}
	for _, s := range settings {
		cur := root
		parts := strings.Split(s[0], ".")
		for i, p := range parts {
			next, ok := cur.kids[p]
			if !ok {
				next = &node{kids: map[string]*node{}}
				cur.kids[p] = next
				cur.keys = append(cur.keys, p)
			}
			if i == len(parts)-1 {
				next.value = s[1]
				next.kids = map[string]*node{}
				next.keys = nil
			}
			cur = next
		}
	}
	var b strings.Builder
	var emit func(n *node, indent string)
	emit = func(n *node, indent string) {
		for _, k := range n.keys {
			kid := n.kids[k]
			if len(kid.keys) == 0 {
				fmt.Fprintf(&b, "%s%s: %s\n", indent, k, kid.value)
				continue
			}
			fmt.Fprintf(&b, "%s%s:\n", indent, k)
			emit(kid, indent+"  ")
		}
	}
	emit(root, "")
	return b.String()
}

const header = "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\n"

// doc is a config.conf with apiVersion, kind and the settings.
func doc(settings ...[2]string) string {
	return header + render(settings)
}

func kv(path, value string) [2]string { return [2]string{path, value} }
