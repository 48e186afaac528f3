package configmap

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/client-go/tools/clientcmd"
)

func TestRedactEveryStyle(t *testing.T) {
	const secret = "s3cr3t-value"
	cases := []struct {
		name string
		text string
		keep []string // must survive redaction
	}{
		{name: "block token", text: "users:\n- name: a\n  user:\n    token: " + secret + "\n    tokenFile: /var/run/token\n", keep: []string{"tokenFile: /var/run/token"}},
		{name: "client key data", text: "users:\n- name: a\n  user:\n    client-key-data: " + secret + "\n"},
		{name: "double-quoted key", text: "users:\n- user:\n    \"token\": \"" + secret + "\"\n"},
		{name: "single-quoted key", text: "users:\n- user:\n    'token': '" + secret + "'\n"},
		{name: "flow mapping", text: "users:\n- {name: a, user: {token: " + secret + "}}\n"},
		{name: "folded scalar", text: "users:\n- user:\n    token: >-\n      " + secret + "\n"},
		{name: "literal scalar over lines", text: "users:\n- user:\n    client-key-data: |\n      abc\n      " + secret + "\n"},
		{name: "JSON on one line", text: `{"users":[{"name":"a","user":{"token":"` + secret + `"}}]}`},
		{name: "second document", text: "kind: Config\n---\nusers:\n- user:\n    password: " + secret + "\n"},
		{name: "auth provider", text: "users:\n- user:\n    auth-provider:\n      config:\n        client-secret: " + secret + "\n        id-token: " + secret + "\n"},
		{name: "not YAML", text: "users: [\n  token: " + secret + "\n  {\"password\": \"" + secret + "\"}\n"},
		{name: "commented-out token", text: "users:\n- name: a\n  user:\n    # token: " + secret + "\n    tokenFile: /var/run/token\n", keep: []string{"tokenFile: /var/run/token", "# token: REDACTED"}},
		{name: "comment at the top", text: "# token: " + secret + "\napiVersion: v1\nkind: Config\n", keep: []string{"kind: Config"}},
		{name: "comment only", text: "# password: " + secret + "\n"},
		{name: "line comment", text: "users:\n- name: a # \"token\": \"" + secret + "\"\n  user:\n    tokenFile: /var/run/token\n", keep: []string{"tokenFile: /var/run/token"}},
		{name: "foot comment", text: "users:\n- name: a\n  user:\n    tokenFile: /var/run/token\n\n# client-secret: " + secret + "\n"},
		{name: "comment next to a live secret", text: "users:\n- user:\n    token: " + secret + " # id-token: " + secret + "\n"},
		{name: "commented-out block value", text: "users:\n- user:\n    tokenFile: /t\n    # client-key-data: |\n    #   abc\n    #   " + secret + "\n", keep: []string{"tokenFile: /t"}},
		{name: "user info in a server URL", text: "clusters:\n- cluster:\n    server: https://admin:" + secret + "@10.0.0.1:6443\n  name: a\n", keep: []string{"server: https://REDACTED@10.0.0.1:6443"}},
		{name: "user info in a URL in a comment", text: "clusters:\n- cluster:\n    # server: https://admin:" + secret + "@10.0.0.1:6443\n    server: https://10.0.0.1:6443\n  name: a\n", keep: []string{"server: https://10.0.0.1:6443"}},
		{name: "user info in a URL, not YAML", text: "server: [https://admin:" + secret + "@10.0.0.1:6443\n"},
		{name: "nothing secret", text: "# comment\nmode:   ipvs\nserver: https://10.0.0.1:6443\n", keep: []string{"# comment\nmode:   ipvs\nserver: https://10.0.0.1:6443\n"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			out := Redact(tc.text)
			assert.NotContains(t, out, secret)
			if strings.Contains(tc.text, secret) {
				assert.Contains(t, out, "REDACTED")
			}
			for _, k := range tc.keep {
				assert.Contains(t, out, k)
			}
		})
	}
}

// A redacted kubeconfig is still a kubeconfig: diffs stay readable.
func TestRedactKeepsKubeconfigValid(t *testing.T) {
	text := "apiVersion: v1\nkind: Config\nclusters:\n- cluster:\n    server: https://10.0.0.1:6443\n  name: default\nusers:\n- name: default\n  user:\n    token: abc\n    client-key-data: ZGVm\n"
	out := Redact(text)
	cfg, err := clientcmd.Load([]byte(out))
	require.NoError(t, err, out)
	assert.Equal(t, "https://10.0.0.1:6443", cfg.Clusters["default"].Server)
	assert.Equal(t, "REDACTED", cfg.AuthInfos["default"].Token)
	assert.Equal(t, Redact(out), out, "redacting twice changes nothing")
}
