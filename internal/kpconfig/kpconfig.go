// Package kpconfig edits kube-proxy's KubeProxyConfiguration (the
// "config.conf" key of the kube-proxy ConfigMap) by dotted field path, and
// checks every path and value against the real k8s.io/kube-proxy types
// before anything is written.
package kpconfig

import (
	"fmt"
	"net"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubeproxyv1alpha1 "k8s.io/kube-proxy/config/v1alpha1"
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/kube-proxy-sync/kube-proxy-sync/internal/yamledit"
)

// Kind is the kind config.conf must declare.
const Kind = "KubeProxyConfiguration"

// DefaultHealthzPort is kube-proxy's health port when healthzBindAddress is unset.
const DefaultHealthzPort = 10256

// Setting is one `path=value` assignment, e.g. ipvs.strictARP=true.
type Setting struct {
	Path  string
	Value string
}

// ParseSetting parses "path=value".
func ParseSetting(s string) (Setting, error) {
	path, value, ok := strings.Cut(s, "=")
	path = strings.TrimSpace(path)
	if !ok || path == "" {
		return Setting{}, fmt.Errorf("setting %q: want path=value, e.g. ipvs.strictARP=true", s)
	}
	if slices.Contains(strings.Split(path, "."), "") {
		return Setting{}, fmt.Errorf("setting %q: empty field name in path %q", s, path)
	}
	return Setting{Path: path, Value: value}, nil
}

var (
	durationType = reflect.TypeOf(metav1.Duration{})
	configType   = reflect.TypeOf(kubeproxyv1alpha1.KubeProxyConfiguration{})
	proxyModes   = []string{"", "iptables", "ipvs", "nftables", "kernelspace"}
)

// Validate checks a setting's path and value against the KubeProxyConfiguration
// type and returns the YAML node it sets.
func (s Setting) Validate() (*yaml.Node, error) {
	t, err := leafType(s.Path)
	if err != nil {
		return nil, err
	}
	n, err := valueNode(t, s.Value)
	if err != nil {
		return nil, fmt.Errorf("setting %s=%q: %w", s.Path, s.Value, err)
	}
	if s.Path == "mode" && !slices.Contains(proxyModes, s.Value) {
		return nil, fmt.Errorf("setting mode=%q: unknown proxy mode, want one of %s", s.Value, strings.Join(proxyModes[1:], ", "))
	}
	return n, nil
}

// leafType walks the json field names of KubeProxyConfiguration.
func leafType(path string) (reflect.Type, error) {
	t := configType
	parts := strings.Split(path, ".")
	for i, p := range parts {
		for t.Kind() == reflect.Ptr {
			t = t.Elem()
		}
		switch {
		case t == durationType:
			return nil, fmt.Errorf("setting %q: %q is a duration, not an object", path, strings.Join(parts[:i], "."))
		case t.Kind() == reflect.Map && t.Key().Kind() == reflect.String:
			t = t.Elem()
			continue
		case t.Kind() != reflect.Struct:
			return nil, fmt.Errorf("setting %q: %q is not an object", path, strings.Join(parts[:i], "."))
		}
		f, ok := fieldByJSONName(t, p)
		if !ok {
			return nil, fmt.Errorf("setting %q: unknown field %q in %s (field names are case-sensitive, e.g. ipvs.strictARP)", path, p, t.Name())
		}
		t = f.Type
	}
	for t.Kind() == reflect.Ptr {
		t = t.Elem()
	}
	if t.Kind() == reflect.Struct && t != durationType || t.Kind() == reflect.Map {
		return nil, fmt.Errorf("setting %q: is an object; set its fields one by one, e.g. %s.<field>=value", path, path)
	}
	return t, nil
}

func fieldByJSONName(t reflect.Type, name string) (reflect.StructField, bool) {
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		tag := strings.Split(f.Tag.Get("json"), ",")[0]
		if tag == "" || tag == "-" {
			continue // inline TypeMeta: apiVersion and kind are not settings
		}
		if tag == name {
			return f, true
		}
	}
	return reflect.StructField{}, false
}

func valueNode(t reflect.Type, v string) (*yaml.Node, error) {
	scalar := func(tag, value string) *yaml.Node {
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: tag, Value: value}
	}
	switch {
	case t == durationType:
		d, err := time.ParseDuration(v)
		if err != nil {
			return nil, fmt.Errorf("want a duration like 15m or 30s")
		}
		return scalar("!!str", d.String()), nil
	case t.Kind() == reflect.Bool:
		b, err := strconv.ParseBool(v)
		if err != nil {
			return nil, fmt.Errorf("want true or false")
		}
		return scalar("!!bool", strconv.FormatBool(b)), nil
	case t.Kind() >= reflect.Int && t.Kind() <= reflect.Int64:
		i, err := strconv.ParseInt(v, 10, t.Bits())
		if err != nil {
			return nil, fmt.Errorf("want a whole number that fits %s", t.Kind())
		}
		return scalar("!!int", strconv.FormatInt(i, 10)), nil
	case t.Kind() >= reflect.Uint && t.Kind() <= reflect.Uint64:
		u, err := strconv.ParseUint(v, 10, t.Bits())
		if err != nil {
			return nil, fmt.Errorf("want a non-negative whole number that fits %s", t.Kind())
		}
		return scalar("!!int", strconv.FormatUint(u, 10)), nil
	case t.Kind() == reflect.Float32 || t.Kind() == reflect.Float64:
		f, err := strconv.ParseFloat(v, t.Bits())
		if err != nil {
			return nil, fmt.Errorf("want a number")
		}
		return scalar("!!float", strconv.FormatFloat(f, 'g', -1, t.Bits())), nil
	case t.Kind() == reflect.String:
		return scalar("!!str", v), nil
	case t.Kind() == reflect.Slice && t.Elem().Kind() == reflect.String:
		seq := &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq"}
		for _, item := range strings.Split(v, ",") {
			if item = strings.TrimSpace(item); item != "" {
				seq.Content = append(seq.Content, scalar("!!str", item))
			}
		}
		return seq, nil
	}
	return nil, fmt.Errorf("fields of type %s cannot be set with --set; use --manifest", t)
}

// Apply returns config.conf with the settings applied, the paths that really
// changed (sorted), and an error if the text is not a KubeProxyConfiguration
// or the result would not be one. Unchanged input comes back byte for byte.
func Apply(text string, settings []Setting) (string, []string, error) {
	doc, err := parse(text)
	if err != nil {
		return "", nil, err
	}
	orig, err := yamledit.Parse(text)
	if err != nil {
		return "", nil, err
	}
	var paths []string
	for _, s := range settings {
		node, err := s.Validate()
		if err != nil {
			return "", nil, err
		}
		if _, err := yamledit.Set(doc.Root(), strings.Split(s.Path, "."), node); err != nil {
			return "", nil, fmt.Errorf("setting %s: %w", s.Path, err)
		}
		if !slices.Contains(paths, s.Path) {
			paths = append(paths, s.Path)
		}
	}
	// changed is judged on the end result, not step by step: a path set
	// twice (mode=ipvs, then mode=iptables) may end where it started
	var changed []string
	for _, p := range paths {
		parts := strings.Split(p, ".")
		before, after := yamledit.Lookup(orig.Root(), parts...), yamledit.Lookup(doc.Root(), parts...)
		if before == nil || after == nil || !yamledit.Equal(before, after) {
			changed = append(changed, p)
		}
	}
	if len(changed) == 0 {
		return text, nil, nil
	}
	out, err := doc.String()
	if err != nil {
		return "", nil, fmt.Errorf("render config.conf: %w", err)
	}
	if _, err := Decode(out); err != nil {
		return "", nil, fmt.Errorf("config.conf after the settings is invalid: %w", err)
	}
	sort.Strings(changed)
	return out, changed, nil
}

func parse(text string) (*yamledit.Doc, error) {
	if _, err := Decode(text); err != nil {
		return nil, err
	}
	return yamledit.Parse(text)
}

// Decode strictly parses config.conf into the typed KubeProxyConfiguration.
func Decode(text string) (*kubeproxyv1alpha1.KubeProxyConfiguration, error) {
	var cfg kubeproxyv1alpha1.KubeProxyConfiguration
	if err := sigsyaml.UnmarshalStrict([]byte(text), &cfg); err != nil {
		return nil, fmt.Errorf("config.conf is not a valid KubeProxyConfiguration: %w", err)
	}
	if cfg.Kind != Kind {
		return nil, fmt.Errorf("config.conf has kind %q, want %s", cfg.Kind, Kind)
	}
	return &cfg, nil
}

// HealthzEndpoint returns the port (and the host when it is a loopback
// address, which the kubelet must then be told to probe) of kube-proxy's
// health server as configured in config.conf.
func HealthzEndpoint(text string) (port int, host string, err error) {
	cfg, err := Decode(text)
	if err != nil {
		return 0, "", err
	}
	addr := cfg.HealthzBindAddress
	if addr == "" {
		return DefaultHealthzPort, "", nil
	}
	h, p, err := net.SplitHostPort(addr)
	if err != nil {
		// an IP alone means the default port
		if ip := net.ParseIP(addr); ip != nil {
			h, p = addr, strconv.Itoa(DefaultHealthzPort)
		} else {
			return 0, "", fmt.Errorf("config.conf healthzBindAddress %q: want host:port", addr)
		}
	}
	port, err = strconv.Atoi(p)
	if err != nil || port <= 0 || port > 65535 {
		return 0, "", fmt.Errorf("config.conf healthzBindAddress %q: bad port", addr)
	}
	if ip := net.ParseIP(h); ip != nil && ip.IsLoopback() {
		host = h
	}
	return port, host, nil
}
