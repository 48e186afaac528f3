// Package kpconfig edits kube-proxy's KubeProxyConfiguration (the
// "config.conf" key of the kube-proxy ConfigMap) by dotted field path, and
// checks every path and value against kube-proxy's field table
// (internal/kpvalidate) before anything is written.
package kpconfig

import (
	"encoding/json"
	"fmt"
	"net"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/kube-proxy-sync/kube-proxy-sync/internal/kpvalidate"
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

var proxyModes = []string{"", "iptables", "ipvs", "nftables", "kernelspace"}

// Validate checks a setting's path and value against the KubeProxyConfiguration
// field table and returns the YAML node it sets. The whole resulting
// config.conf is checked against the kube-proxy version in use later
// (kpvalidate.Validate).
func (s Setting) Validate() (*yaml.Node, error) {
	f, err := leaf(s.Path)
	if err != nil {
		return nil, err
	}
	kind := f.Kind
	if kind == kpvalidate.BoolMap && s.Path != f.Path {
		kind = kpvalidate.Bool // featureGates.Name=true
	}
	n, err := valueNode(kind, s.Value)
	if err != nil {
		return nil, fmt.Errorf("setting %s=%q: %w", s.Path, s.Value, err)
	}
	if s.Path == "mode" && !slices.Contains(proxyModes, s.Value) {
		return nil, fmt.Errorf("setting mode=%q: unknown proxy mode, want one of %s", s.Value, strings.Join(proxyModes[1:], ", "))
	}
	return n, nil
}

// leaf finds the field a path sets, with an error that says what is wrong
// with a path that sets none.
func leaf(path string) (kpvalidate.Field, error) {
	if f, ok := kpvalidate.Lookup(path); ok {
		return f, nil
	}
	parts := strings.Split(path, ".")
	for i := 1; i < len(parts); i++ {
		prefix := strings.Join(parts[:i], ".")
		if f, ok := kpvalidate.Lookup(prefix); ok {
			if f.Kind == kpvalidate.Duration {
				return kpvalidate.Field{}, fmt.Errorf("setting %q: %q is a duration, not an object", path, prefix)
			}
			return kpvalidate.Field{}, fmt.Errorf("setting %q: %q is not an object", path, prefix)
		}
	}
	if hasFieldsUnder(path) {
		return kpvalidate.Field{}, fmt.Errorf("setting %q: is an object; set its fields one by one, e.g. %s.<field>=value", path, path)
	}
	parent, name := "KubeProxyConfiguration", parts[len(parts)-1]
	if len(parts) > 1 {
		parent = strings.Join(parts[:len(parts)-1], ".")
	}
	return kpvalidate.Field{}, fmt.Errorf("setting %q: unknown field %q in %s (field names are case-sensitive, e.g. ipvs.strictARP)", path, name, parent)
}

func hasFieldsUnder(path string) bool {
	for _, f := range kpvalidate.Fields(kpvalidate.Newest) {
		if strings.HasPrefix(f.Path, path+".") {
			return true
		}
	}
	return false
}

func valueNode(k kpvalidate.Kind, v string) (*yaml.Node, error) {
	scalar := func(tag, value string) *yaml.Node {
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: tag, Value: value}
	}
	switch k {
	case kpvalidate.Duration, kpvalidate.TimeOrDuration:
		d, err := time.ParseDuration(v)
		if err != nil {
			return nil, fmt.Errorf("want a duration like 15m or 30s")
		}
		return scalar("!!str", d.String()), nil
	case kpvalidate.Bool:
		b, err := strconv.ParseBool(v)
		if err != nil {
			return nil, fmt.Errorf("want true or false")
		}
		return scalar("!!bool", strconv.FormatBool(b)), nil
	case kpvalidate.Int32:
		i, err := strconv.ParseInt(v, 10, 32)
		if err != nil {
			return nil, fmt.Errorf("want a whole number that fits int32")
		}
		return scalar("!!int", strconv.FormatInt(i, 10)), nil
	case kpvalidate.Uint32:
		u, err := strconv.ParseUint(v, 10, 32)
		if err != nil {
			return nil, fmt.Errorf("want a non-negative whole number that fits uint32")
		}
		return scalar("!!int", strconv.FormatUint(u, 10)), nil
	case kpvalidate.Float32:
		f, err := strconv.ParseFloat(v, 32)
		if err != nil {
			return nil, fmt.Errorf("want a number")
		}
		// a whole number as kubeadm writes it (qps: 5), not as !!float 5
		text := strconv.FormatFloat(f, 'g', -1, 32)
		if _, err := strconv.ParseInt(text, 10, 64); err == nil {
			return scalar("!!int", text), nil
		}
		return scalar("!!float", text), nil
	case kpvalidate.String, kpvalidate.Quantity:
		return scalar("!!str", v), nil
	case kpvalidate.BoolMap:
		return nil, fmt.Errorf("set one entry, e.g. featureGates.Name=true")
	case kpvalidate.Strings:
		seq := &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq"}
		for _, item := range strings.Split(v, ",") {
			if item = strings.TrimSpace(item); item != "" {
				seq.Content = append(seq.Content, scalar("!!str", item))
			}
		}
		return seq, nil
	}
	return nil, fmt.Errorf("fields of type %s cannot be set with --set; use --manifest", k)
}

// Set returns config.conf with the settings set, the paths that really
// changed (sorted), and an error if the text is not a KubeProxyConfiguration
// or the result would not be one. Unchanged input comes back byte for byte.
func Set(text string, settings []Setting) (string, []string, error) {
	doc, err := parse(text)
	if err != nil {
		return "", nil, err
	}
	orig, err := yamledit.Parse(text)
	if err != nil {
		return "", nil, err
	}
	var paths []string
	set := map[string]*yaml.Node{} // the value each path ends with
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
		set[s.Path] = node
	}
	out, err := doc.String()
	if err != nil {
		return "", nil, fmt.Errorf("render config.conf: %w", err)
	}
	// changed is judged on the end result as kube-proxy reads it, not step
	// by step: a path set twice (mode=ipvs, then mode=iptables) may end
	// where it started
	changed, err := readsAsSet(text, out, orig, paths, set)
	if err != nil {
		return "", nil, err
	}
	if len(changed) == 0 {
		return text, nil, nil
	}
	if err := Decode(out); err != nil {
		return "", nil, fmt.Errorf("config.conf after the settings is invalid: %w", err)
	}
	sort.Strings(changed)
	return out, changed, nil
}

// readsAsSet makes sure that kube-proxy reads the settings as set, and
// returns the paths whose value it reads changed. kube-proxy decodes
// config.conf through YAML to JSON (sigs.k8s.io/yaml), where an alias key
// (*k), a !!binary key or a << merge key is the same key given again, the
// last one winning, and an alias value (*v) shares its anchor's value;
// yamledit edits plain keys only. So a path is refused when the entry
// yamledit edits is not the one kube-proxy reads (their values differ
// before, or kube-proxy does not read the value set after), or when the
// edit changes what kube-proxy reads anywhere else.
func readsAsSet(before, after string, orig *yamledit.Doc, paths []string, set map[string]*yaml.Node) ([]string, error) {
	vb, err := kubeProxyView(before)
	if err != nil {
		return nil, fmt.Errorf("config.conf is not a valid KubeProxyConfiguration: %w", err)
	}
	va, err := kubeProxyView(after)
	if err != nil {
		return nil, fmt.Errorf("config.conf after the settings is invalid: %w", err)
	}
	var changed []string
	for _, p := range paths {
		parts := strings.Split(p, ".")
		edited := true
		if n := yamledit.Lookup(orig.Root(), parts...); n != nil {
			if v, err := nodeView(n); err == nil && !reflect.DeepEqual(v, vb[p]) {
				edited = false
			}
		}
		if want, err := nodeView(set[p]); err != nil || !reflect.DeepEqual(want, va[p]) {
			edited = false
		}
		if !edited {
			return nil, fmt.Errorf("setting %s: config.conf gives key %s as an alias (*k), a !!binary or a << merge key, and kube-proxy reads that one, which --set cannot edit; nothing was written: remove the other entry (e.g. with --manifest) and run again",
				p, givenAgain(before, parts))
		}
		if !reflect.DeepEqual(vb[p], va[p]) {
			changed = append(changed, p)
		}
	}
	for leaf := range union(vb, va) {
		if !under(leaf, paths) && !reflect.DeepEqual(vb[leaf], va[leaf]) {
			p := paths[0]
			for _, q := range paths {
				if !reflect.DeepEqual(vb[q], va[q]) {
					p = q
				}
			}
			return nil, fmt.Errorf("setting %s: would also change %s, which shares its value through a YAML anchor (&) and alias (*); nothing was written: write the two out separately (e.g. with --manifest) and run again", p, leaf)
		}
	}
	return changed, nil
}

// givenAgain names the key of parts that config.conf gives more than once,
// with the line kube-proxy's strict decoding reports for it.
func givenAgain(text string, parts []string) string {
	warns, _ := kpvalidate.Decode(text)
	for _, w := range warns {
		if w.Duplicate && w.Line > 0 && slices.Contains(parts, w.Path) {
			return fmt.Sprintf("%q again (line %d)", w.Path, w.Line)
		}
	}
	return fmt.Sprintf("%q again", parts[len(parts)-1])
}

// kubeProxyView is config.conf as kube-proxy reads it, flattened to the
// JSON of each leaf by dotted path.
func kubeProxyView(text string) (map[string]string, error) {
	js, err := sigsyaml.YAMLToJSON([]byte(text))
	if err != nil {
		return nil, err
	}
	var obj any
	if err := json.Unmarshal(js, &obj); err != nil {
		return nil, err
	}
	out := map[string]string{}
	flatten(obj, "", out)
	return out, nil
}

// nodeView is one value as kube-proxy reads it (the JSON of the value).
func nodeView(n *yaml.Node) (string, error) {
	b, err := yaml.Marshal(n)
	if err != nil {
		return "", err
	}
	js, err := sigsyaml.YAMLToJSON(b)
	if err != nil {
		return "", err
	}
	var v any
	if err := json.Unmarshal(js, &v); err != nil {
		return "", err
	}
	b, err = json.Marshal(v)
	return string(b), err
}

func flatten(v any, prefix string, out map[string]string) {
	if m, ok := v.(map[string]any); ok && len(m) > 0 {
		for k, e := range m {
			if prefix != "" {
				k = prefix + "." + k
			}
			flatten(e, k, out)
		}
		return
	}
	if prefix != "" {
		b, _ := json.Marshal(v)
		out[prefix] = string(b)
	}
}

func union(a, b map[string]string) map[string]bool {
	out := make(map[string]bool, len(a)+len(b))
	for k := range a {
		out[k] = true
	}
	for k := range b {
		out[k] = true
	}
	return out
}

// under reports whether leaf is one of paths, inside one, or holds one (a
// null ipvs before ipvs.strictARP=true).
func under(leaf string, paths []string) bool {
	for _, p := range paths {
		if leaf == p || strings.HasPrefix(leaf, p+".") || strings.HasPrefix(p, leaf+".") {
			return true
		}
	}
	return false
}

func parse(text string) (*yamledit.Doc, error) {
	if err := Decode(text); err != nil {
		return nil, err
	}
	return yamledit.Parse(text)
}

// Decode checks that config.conf loads as a KubeProxyConfiguration the way
// the newest supported kube-proxy loads it (apiVersion, kind, its fields of
// the right types). Unknown fields and keys given twice are no error here:
// kube-proxy only warns about them (kpvalidate.Warning), and a ConfigMap
// that has them is carried through as it is.
func Decode(text string) error {
	if _, err := kpvalidate.Decode(text); err != nil {
		return fmt.Errorf("config.conf is not a valid KubeProxyConfiguration: %w", err)
	}
	return nil
}

// CheckAuthored is Decode for a config.conf the user wrote (a --manifest),
// which also refuses a field no supported kube-proxy has: kube-proxy would
// drop it with a log line nobody reads, so it is a typo such as
// ipvs.strictArp. A field the live config.conf (live, "" if none) already
// has is carried through, not authored: kube-proxy's warning, no error.
// Fields only newer kube-proxy minors have, and keys given twice, are
// warnings too (the whole-file validation reports them).
func CheckAuthored(text, live string) error {
	warns, err := kpvalidate.Decode(text)
	if err != nil {
		return fmt.Errorf("config.conf is not a valid KubeProxyConfiguration: %w", err)
	}
	carried := map[string]bool{}
	if live != "" {
		liveWarns, _ := kpvalidate.Decode(live)
		for _, w := range liveWarns {
			carried[w.Path] = true
		}
	}
	var typos []string
	for _, w := range warns {
		if w.Unknown() && !carried[w.Path] {
			typos = append(typos, fmt.Sprintf("unknown field %q: no kube-proxy from 1.%d to 1.%d has it, so kube-proxy would ignore it%s",
				w.Path, kpvalidate.Oldest, kpvalidate.Newest, kpvalidate.Suggest(w.Path)))
		}
	}
	if len(typos) > 0 {
		return fmt.Errorf("config.conf: %s; nothing was written: fix the field name, or remove it", strings.Join(typos, "; "))
	}
	return nil
}

// HealthzEndpoint returns the port (and the host when it is a loopback
// address, which the kubelet must then be told to probe) of kube-proxy's
// health server as configured in config.conf.
func HealthzEndpoint(text string) (port int, host string, err error) {
	addr, err := kpvalidate.HealthzBindAddress(text)
	if err != nil {
		return 0, "", fmt.Errorf("config.conf is not a valid KubeProxyConfiguration: %w", err)
	}
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

// Difference is one leaf two configs set apart: its dotted path and each
// side's value as kube-proxy reads it (JSON; "" where the side leaves it
// out).
type Difference struct {
	Path, From, To string
}

// Differences lists, sorted by path, the leaves in which config.conf to
// differs from config.conf from, as written (key order, comments and
// quoting aside; defaults are not applied, so a value given on one side and
// left to its default on the other is named). An empty or null mode is
// kube-proxy's Linux default, iptables, on either side.
func Differences(from, to string) ([]Difference, error) {
	a, err := kubeProxyView(from)
	if err != nil {
		return nil, err
	}
	b, err := kubeProxyView(to)
	if err != nil {
		return nil, err
	}
	for _, v := range []map[string]string{a, b} {
		if m, ok := v["mode"]; !ok || m == `""` || m == "null" {
			v["mode"] = `"iptables"`
		}
	}
	var out []Difference
	for p := range union(a, b) {
		if a[p] != b[p] {
			out = append(out, Difference{Path: p, From: a[p], To: b[p]})
		}
	}
	slices.SortFunc(out, func(x, y Difference) int { return strings.Compare(x.Path, y.Path) })
	return out, nil
}
