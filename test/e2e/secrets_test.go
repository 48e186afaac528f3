//go:build e2e

package e2e

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kube-proxy-sync/kube-proxy-sync/test/e2e/cluster"
)

// A kubeconfig.conf that carries credentials (a token, a client key) must
// never show them: not on stdout (facts, msg, diff), not on stderr (even at
// debug level), not in the audit log, not in the Events. The kubeconfig is
// written in the styles people really use: block YAML, flow mappings,
// multi-line scalars, and JSON.
func TestSecretsNeverLeak(t *testing.T) {
	c := cluster.Connect(t)
	c.Reset(t)
	t.Cleanup(func() { c.Reset(t) })

	token := "kps-e2e-token-" + randomHex(t, 16)
	key := base64.StdEncoding.EncodeToString([]byte("-----BEGIN EC PRIVATE KEY-----\n" + randomHex(t, 48) + "\n-----END EC PRIVATE KEY-----\n"))
	token2 := "kps-e2e-token-" + randomHex(t, 16)
	key2 := base64.StdEncoding.EncodeToString([]byte(randomHex(t, 48)))
	secrets := []string{token, key, token2, key2}

	cases := []struct {
		name       string
		kubeconfig string
	}{
		{name: "block YAML", kubeconfig: `apiVersion: v1
kind: Config
clusters:
- cluster:
    certificate-authority: /var/run/secrets/kubernetes.io/serviceaccount/ca.crt
    server: https://127.0.0.1:6443
  name: default
contexts:
- context:
    cluster: default
    user: default
  name: default
current-context: default
users:
- name: default
  user:
    token: ` + token + `
    client-key-data: ` + key + `
- name: other
  user:
    "token": "` + token2 + `"
    'client-key-data': '` + key2 + `'
`},
		{name: "flow mappings and multi-line scalars", kubeconfig: `apiVersion: v1
kind: Config
clusters:
- {name: default, cluster: {server: "https://127.0.0.1:6443"}}
contexts:
- {name: default, context: {cluster: default, user: default}}
current-context: default
users:
- {name: default, user: {token: ` + token + `}}
- name: other
  user:
    token: >-
      ` + token2 + `
    client-key-data: |
      ` + key[:len(key)/2] + `
      ` + key[len(key)/2:] + `
    client-certificate-data: ` + key2 + `
`},
		{name: "JSON", kubeconfig: `{"apiVersion":"v1","kind":"Config","clusters":[{"name":"default","cluster":{"server":"https://127.0.0.1:6443"}}],` +
			`"contexts":[{"name":"default","context":{"cluster":"default","user":"default"}}],"current-context":"default",` +
			`"users":[{"name":"default","user":{"token":"` + token + `","client-key-data":"` + key + `"}},` +
			`{"name":"other","user":{"token":"` + token2 + `","client-key-data":"` + key2 + `"}}]}`},
	}
	// the secret strings, and the halves of the key split over two lines
	needles := append(append([]string{}, secrets...), key[:len(key)/2], key[len(key)/2:])

	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			// the template back on the ConfigMap, as kubeadm has it: while
			// it mounts a copy, the run reads the config from the copy, and
			// this case's kubeconfig would not be what it changes
			c.Reset(t)
			cm := c.ConfigMap(t)
			cm.Data["kubeconfig.conf"] = tc.kubeconfig
			_, err := c.Client.CoreV1().ConfigMaps(c.Namespace).Update(context.Background(), cm, metav1.UpdateOptions{})
			require.NoError(t, err)
			auditLog := filepath.Join(t.TempDir(), "audit.log")
			common := []string{"--kubeconfig", c.KubeconfigPath, "--output", "json", "--diff", "--audit-log", auditLog,
				"--log-level", "debug", "--probe-path", "none", "--timeout", "2m"}
			server := fmt.Sprintf("https://10.96.0.%d:6443", 30+i)

			check := runCLI(t, append(common, "--check", "--server", server)...)
			require.Equal(t, 0, check.Code, "msg: %s\nstderr: %s", check.Msg, check.Stderr)
			real := runCLI(t, append(common, "--server", server)...)
			require.Equal(t, 0, real.Code, "msg: %s\nstderr: %s", real.Msg, real.Stderr)
			require.True(t, real.facts().ConfigMapChanged, "the run must really have changed the kubeconfig")
			require.True(t, real.facts().Restarted)
			// the live objects do still hold the credentials: the check
			// below would be worthless if the run had dropped them
			for _, live := range []string{assertMountsCopy(t, c).Data["kubeconfig.conf"], c.ConfigMap(t).Data["kubeconfig.conf"]} {
				for _, s := range []string{token, token2, key2} {
					require.Contains(t, strings.Join(strings.Fields(live), ""), s, "the live kubeconfig.conf lost a credential")
				}
				require.Contains(t, live, server)
			}

			for _, r := range []cliRun{check, real} {
				require.NotNil(t, r.Diff, "--diff gives a diff")
				assert.Contains(t, r.Diff["after"], server, "the diff shows the change")
				assert.Contains(t, r.Diff["after"], "REDACTED", "the diff shows where a credential was")
			}

			audit, err := os.ReadFile(auditLog)
			require.NoError(t, err)
			require.NotEmpty(t, audit, "the change run writes the audit log")
			events, err := c.Client.CoreV1().Events(c.Namespace).List(context.Background(), metav1.ListOptions{})
			require.NoError(t, err)
			eventsJSON, err := json.Marshal(events)
			require.NoError(t, err)
			require.Contains(t, string(eventsJSON), real.facts().AuditID, "the run recorded its Events")

			places := map[string]string{
				"check stdout": check.Stdout, "check stderr": check.Stderr,
				"stdout": real.Stdout, "stderr": real.Stderr,
				"diff before": real.Diff["before"], "diff after": real.Diff["after"],
				"audit log": string(audit), "events": string(eventsJSON),
			}
			for where, text := range places {
				for _, s := range needles {
					assert.NotContains(t, text, s, "a credential leaked into the %s", where)
				}
			}
		})
	}
}

func randomHex(t *testing.T, n int) string {
	t.Helper()
	b := make([]byte, n)
	_, err := rand.Read(b)
	require.NoError(t, err)
	return hex.EncodeToString(b)
}
