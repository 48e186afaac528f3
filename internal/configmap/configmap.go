// Package configmap captures the kube-proxy ConfigMap, computes the desired
// data from the user's input, and writes it only when the data differs.
package configmap

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"

	yamlv3 "go.yaml.in/yaml/v3"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/yaml"

	"github.com/kube-proxy-sync/kube-proxy-sync/internal/kpconfig"
	"github.com/kube-proxy-sync/kube-proxy-sync/internal/kube"
	"github.com/kube-proxy-sync/kube-proxy-sync/internal/yamledit"
)

const (
	// ConfigKey holds the KubeProxyConfiguration.
	ConfigKey = "config.conf"
	// KubeconfigKey holds the kubeconfig kube-proxy talks to the API with.
	KubeconfigKey = "kubeconfig.conf"
	// FieldManager is the name our writes are recorded under.
	FieldManager = "kube-proxy-sync"
)

// Snapshot is what we know about the ConfigMap at one moment.
type Snapshot struct {
	ResourceVersion string
	Hash            string
	Data            map[string]string
	BinaryData      map[string][]byte
}

// NewSnapshot records a ConfigMap.
func NewSnapshot(cm *corev1.ConfigMap) Snapshot {
	return Snapshot{
		ResourceVersion: cm.ResourceVersion,
		Hash:            Hash(cm.Data, cm.BinaryData),
		Data:            cm.Data,
		BinaryData:      cm.BinaryData,
	}
}

// Spec is the user's desired configuration.
type Spec struct {
	// Server, when set, replaces the server of every cluster in kubeconfig.conf.
	Server string
	// Settings are KubeProxyConfiguration fields to set in config.conf.
	Settings []kpconfig.Setting
	// Manifest, when set, is a whole ConfigMap whose data is applied.
	Manifest *corev1.ConfigMap
}

// ValidateServer checks a desired API server URL. It refuses user info
// (credentials in the URL), and http unless allowInsecure: over http
// kube-proxy would send its service-account token in clear text. No error
// repeats the URL's user info.
func ValidateServer(server string, allowInsecure bool) error {
	shown := RedactURL(server)
	u, err := url.Parse(server)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || u.Path != "" && u.Path != "/" || u.Opaque != "" {
		return fmt.Errorf("server %q: want a URL like https://10.0.0.1:6443 (scheme, host, optional port, no path)", shown)
	}
	if u.User != nil {
		return fmt.Errorf("server %q: has user info (user:password@): credentials in the URL are refused, kube-proxy authenticates with its kubeconfig's user; give the URL without them", shown)
	}
	if p := u.Port(); p != "" {
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
			return fmt.Errorf("server %q: port must be 1-65535", shown)
		}
	}
	if u.Scheme == "http" && !allowInsecure {
		return fmt.Errorf("server %q: over http kube-proxy would send its service-account token in clear text; use https, or pass --allow-insecure-server (module arg allow_insecure_server) if you mean it", shown)
	}
	return nil
}

// InsecureClusters lists the clusters of a kubeconfig that turn off TLS
// verification (insecure-skip-tls-verify: true), sorted; none when the
// text is not a kubeconfig (validation says so elsewhere).
func InsecureClusters(kubeconfig string) []string {
	cfg, err := clientcmd.Load([]byte(kubeconfig))
	if err != nil {
		return nil
	}
	var out []string
	for name, c := range cfg.Clusters {
		if c != nil && c.InsecureSkipTLSVerify {
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out
}

// RedactURL hides a URL's user info (https://user:password@host becomes
// https://REDACTED@host), also when the text is not a valid URL (no
// scheme, bad escapes), so that an error can show what was given.
func RedactURL(s string) string {
	rest, prefix := s, ""
	if i := strings.Index(s, "://"); i >= 0 {
		prefix, rest = s[:i+3], s[i+3:]
	}
	// up to the last @, not the authority's end: a password may hold a
	// /, ? or # that ends the authority for a URL parser (hiding a path's
	// @ too costs nothing)
	if i := strings.LastIndex(rest, "@"); i >= 0 {
		return prefix + redacted + rest[i:]
	}
	return s
}

// MaxSize is the most a ConfigMap holds (the API server's limit on its
// data), and so the most a manifest is read of.
const MaxSize = 1 << 20

// ReadFileMax reads a file of at most max bytes; a larger one (or a device
// that never ends) is an error that says why (limit), after reading no
// more than max+1 bytes.
func ReadFileMax(path string, max int64, limit string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	raw, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, err
	}
	if int64(len(raw)) > max {
		return nil, fmt.Errorf("%s is larger than %d MiB, %s", path, max>>20, limit)
	}
	return raw, nil
}

// LoadManifest reads a ConfigMap manifest and checks it names the object we
// manage and holds only what the run writes: data.
func LoadManifest(path, namespace, name string) (*corev1.ConfigMap, error) {
	raw, err := ReadFileMax(path, MaxSize, "the most a ConfigMap holds")
	if err != nil {
		return nil, fmt.Errorf("read manifest: %w", err)
	}
	var cm corev1.ConfigMap
	if err := yaml.UnmarshalStrict(raw, &cm); err != nil {
		return nil, fmt.Errorf("manifest %s is not a valid ConfigMap: %w", path, err)
	}
	if cm.Kind != "ConfigMap" || cm.APIVersion != "v1" {
		return nil, fmt.Errorf("manifest %s is %s %s, want apiVersion v1, kind ConfigMap", path, cm.APIVersion, cm.Kind)
	}
	if cm.Name != name || (cm.Namespace != "" && cm.Namespace != namespace) {
		return nil, fmt.Errorf("manifest %s is ConfigMap %s/%s, want %s/%s (check --namespace/--configmap)", path, cm.Namespace, cm.Name, namespace, name)
	}
	if len(cm.BinaryData) > 0 {
		keys := make([]string, 0, len(cm.BinaryData))
		for k := range cm.BinaryData {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		return nil, fmt.Errorf("manifest %s has binaryData (%s): kube-proxy reads no binaryData and kube-proxy-sync writes none; put the keys under data, or leave them out", path, strings.Join(keys, ", "))
	}
	if len(cm.Data) == 0 {
		return nil, fmt.Errorf("manifest %s has no data", path)
	}
	return &cm, nil
}

// Desired computes the data the ConfigMap should hold, and the keys that
// differ from current ("config.conf:mode", "kubeconfig.conf:clusters[0].cluster.server").
// It does no I/O; with an empty result list the data is current.
func Desired(current map[string]string, spec Spec) (map[string]string, []string, error) {
	data := make(map[string]string, len(current))
	for k, v := range current {
		data[k] = v
	}
	var changed []string
	if spec.Manifest != nil {
		for k, v := range spec.Manifest.Data {
			if cur, ok := data[k]; !ok || cur != v {
				if k == ConfigKey {
					// a field no kube-proxy has is refused here, unless
					// the live config.conf has it already
					if err := kpconfig.CheckAuthored(v, cur); err != nil {
						return nil, nil, fmt.Errorf("manifest: %w", err)
					}
				}
				changed = append(changed, k)
				data[k] = v
			}
		}
	}
	if len(spec.Settings) > 0 {
		text, ok := data[ConfigKey]
		if !ok {
			return nil, nil, fmt.Errorf("configmap has no %q key to apply settings to", ConfigKey)
		}
		out, paths, err := kpconfig.Set(text, spec.Settings)
		if err != nil {
			return nil, nil, err
		}
		data[ConfigKey] = out
		for _, p := range paths {
			changed = append(changed, ConfigKey+":"+p)
		}
	} else if text, ok := data[ConfigKey]; ok {
		if err := kpconfig.Decode(text); err != nil {
			return nil, nil, err
		}
	}
	if spec.Server != "" {
		text, ok := data[KubeconfigKey]
		if !ok {
			return nil, nil, fmt.Errorf("configmap has no %q key to set the server in", KubeconfigKey)
		}
		out, paths, err := setServer(text, spec.Server)
		if err != nil {
			return nil, nil, err
		}
		data[KubeconfigKey] = out
		for _, p := range paths {
			changed = append(changed, KubeconfigKey+":"+p)
		}
	}
	// kubeadm's own kubeconfig.conf whose server is already the one set
	// (kubeadm wrote it there: kubespray's upgrade patch), against
	// kubeadm's rendering with that server set: the two differ only in how
	// setServer lays the text out, which is no change either
	if spec.Server != "" {
		if cur, ok := current[KubeconfigKey]; ok && cur != data[KubeconfigKey] && sameYAML(cur, data[KubeconfigKey]) {
			data[KubeconfigKey] = cur
		}
	}
	// a key one step changed and a later one set back (a manifest's
	// server, then --server) is no change
	kept := changed[:0]
	for _, c := range changed {
		k, _, _ := strings.Cut(c, ":")
		if cur, ok := current[k]; !ok || cur != data[k] {
			kept = append(kept, c)
		}
	}
	sort.Strings(kept)
	return data, dedupe(kept), nil // never nil: facts print [] not null
}

func setServer(text, server string) (string, []string, error) {
	if _, err := clientcmd.Load([]byte(text)); err != nil {
		return "", nil, fmt.Errorf("%s is not a valid kubeconfig: %w", KubeconfigKey, err)
	}
	doc, err := yamledit.Parse(text)
	if err != nil {
		return "", nil, fmt.Errorf("%s: %w", KubeconfigKey, err)
	}
	clusters := yamledit.Lookup(doc.Root(), "clusters")
	if clusters == nil || len(clusters.Content) == 0 {
		return "", nil, fmt.Errorf("%s has no clusters to set the server of", KubeconfigKey)
	}
	var changed []string
	for i, item := range clusters.Content {
		c := yamledit.Lookup(item, "cluster")
		if c == nil {
			return "", nil, fmt.Errorf("%s: clusters[%d] has no cluster", KubeconfigKey, i)
		}
		did, err := yamledit.Set(c, []string{"server"}, yamledit.Str(server))
		if err != nil {
			return "", nil, fmt.Errorf("%s: clusters[%d]: %w", KubeconfigKey, i, err)
		}
		if did {
			changed = append(changed, fmt.Sprintf("clusters[%d].cluster.server", i))
		}
	}
	if len(changed) == 0 {
		return text, nil, nil
	}
	out, err := doc.String()
	if err != nil {
		return "", nil, err
	}
	return out, changed, nil
}

// sameYAML: a and b are one YAML document but for layout (indentation,
// quoting): both read and written again the way setServer writes.
func sameYAML(a, b string) bool {
	da, err := yamledit.Parse(a)
	if err != nil {
		return false
	}
	db, err := yamledit.Parse(b)
	if err != nil {
		return false
	}
	sa, errA := da.String()
	sb, errB := db.String()
	return errA == nil && errB == nil && sa == sb
}

func dedupe(sorted []string) []string {
	out := make([]string, 0, len(sorted))
	for i, s := range sorted {
		if i == 0 || s != sorted[i-1] {
			out = append(out, s)
		}
	}
	return out
}

// Client reads and writes one ConfigMap.
type Client struct {
	// ConfigMaps is the client of the ConfigMap's namespace.
	ConfigMaps kube.ConfigMaps
	Namespace  string
	Name       string
}

// Get captures the ConfigMap.
func (c Client) Get(ctx context.Context) (*corev1.ConfigMap, error) {
	cm, err := c.ConfigMaps.Get(ctx, c.Name, metav1.GetOptions{})
	if err != nil {
		return nil, c.request("get").Explain(err)
	}
	return cm, nil
}

// Update writes data with the captured resourceVersion as precondition, so a
// concurrent writer makes it fail with a conflict instead of being overwritten.
func (c Client) Update(ctx context.Context, cm *corev1.ConfigMap, data map[string]string) (*corev1.ConfigMap, error) {
	next := cm.DeepCopy()
	next.Data = data
	out, err := c.ConfigMaps.Update(ctx, next, metav1.UpdateOptions{FieldManager: FieldManager})
	if err != nil {
		return nil, c.request("update").Explain(err)
	}
	return out, nil
}

// request is verb on the ConfigMap, as its errors tell it (kube.Request.Explain).
func (c Client) request(verb string) kube.Request {
	return kube.Request{What: fmt.Sprintf("%s configmap %q", verb, c.Namespace+"/"+c.Name), Needs: verb + " on configmaps",
		NotFound: "not found: check --namespace/--configmap, or that kube-proxy is deployed (kubeadm creates it)"}
}

// secretKeys are the kubeconfig (and auth-provider) fields that hold
// credentials or key material.
var secretKeys = map[string]bool{
	"token": true, "client-key-data": true, "client-certificate-data": true,
	"certificate-authority-data": true, "password": true, "id-token": true,
	"refresh-token": true, "access-token": true, "client-secret": true,
	"idp-certificate-authority-data": true,
}

const redacted = "REDACTED"

// secretField matches `key: value` and `"key": "value"` anywhere in a line,
// for text that is not YAML; the value runs to the end of the line, or to
// the closing quote, comma or brace of a flow collection.
// urlUserInfo matches a URL's scheme and user info, up to the last @ of
// the URL (a password may hold a /, ? or #).
var urlUserInfo = regexp.MustCompile(`([A-Za-z][A-Za-z0-9+.-]*://)[^\s"']*@`)

var secretField = regexp.MustCompile(`(["']?(token|client-key-data|client-certificate-data|certificate-authority-data|password|id-token|refresh-token|access-token|client-secret|idp-certificate-authority-data)["']?\s*:\s*)("[^"]*"?|'[^']*'?|[^\s,}\]]+)`)

// Redact hides credentials in ConfigMap text (tokens, keys, certificates)
// so it can go into diffs, logs and the audit log. YAML (JSON included) is
// redacted by structure: the value of every credential field, at any depth,
// in every document, whatever its quoting or line breaks. Text without
// credentials comes back unchanged. Text that is not YAML is redacted
// field by field with a pattern, and every line indented below a
// credential field (a multi-line value) goes too.
//
// Comments are redacted too, with the pattern, in YAML as in other text:
// a commented-out credential is still a credential.
func Redact(text string) string {
	if out, ok := redactYAML(text); ok {
		return out
	}
	out, _ := redactLines(text)
	return out
}

// redactLines redacts text line by line with the pattern, and every line
// indented below a credential field; the indent is counted after any
// comment marks ("#   abc" below "# client-key-data: |" goes too). It
// reports whether it redacted anything.
func redactLines(text string) (string, bool) {
	lines := strings.Split(text, "\n")
	var inSecret, found bool
	var indent int
	for i, line := range lines {
		body := strings.TrimLeft(line, " \t#")
		lineIndent := len(line) - len(body)
		if inSecret && strings.TrimSpace(body) != "" && lineIndent > indent {
			lines[i] = line[:lineIndent] + redacted
			found = true
			continue
		}
		inSecret = false
		if urlUserInfo.MatchString(line) {
			line = urlUserInfo.ReplaceAllString(line, "${1}"+redacted+"@")
			lines[i], found = line, true
		}
		if secretField.MatchString(line) {
			lines[i] = secretField.ReplaceAllString(line, "${1}"+redacted)
			inSecret, indent, found = true, lineIndent, true
		}
	}
	return strings.Join(lines, "\n"), found
}

// redactYAML redacts every document of text; ok is false when text is not YAML.
func redactYAML(text string) (string, bool) {
	dec := yamlv3.NewDecoder(strings.NewReader(text))
	var docs []*yamlv3.Node
	found := false
	for {
		var doc yamlv3.Node
		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return "", false
		}
		found = redactNode(&doc) || found
		docs = append(docs, &doc)
	}
	if len(docs) == 0 {
		// only comments, or nothing: the decoder keeps no node for them
		out, _ := redactLines(text)
		return out, true
	}
	if !found {
		return text, true
	}
	var buf bytes.Buffer
	enc := yamlv3.NewEncoder(&buf)
	enc.SetIndent(2)
	for _, doc := range docs {
		if err := enc.Encode(doc); err != nil {
			return "", false
		}
	}
	if err := enc.Close(); err != nil {
		return "", false
	}
	return buf.String(), true
}

// redactNode replaces the value of every credential field under n, and
// the credentials in its comments, and reports whether it replaced any.
func redactNode(n *yamlv3.Node) bool {
	found := false
	for _, c := range []*string{&n.HeadComment, &n.LineComment, &n.FootComment} {
		if out, ok := redactLines(*c); ok {
			*c, found = out, true
		}
	}
	if n.Kind == yamlv3.MappingNode {
		for i := 0; i+1 < len(n.Content); i += 2 {
			if secretKeys[n.Content[i].Value] {
				n.Content[i+1] = &yamlv3.Node{Kind: yamlv3.ScalarNode, Tag: "!!str", Value: redacted}
				found = true
			}
		}
	}
	if n.Kind == yamlv3.ScalarNode && urlUserInfo.MatchString(n.Value) {
		n.Value, found = urlUserInfo.ReplaceAllString(n.Value, "${1}"+redacted+"@"), true
	}
	for _, c := range n.Content {
		found = redactNode(c) || found
	}
	return found
}

// RedactData redacts every value of a data map.
func RedactData(data map[string]string) map[string]string {
	out := make(map[string]string, len(data))
	for k, v := range data {
		out[k] = Redact(v)
	}
	return out
}
