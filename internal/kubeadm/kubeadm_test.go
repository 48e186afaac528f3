package kubeadm

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// what kubeadm 1.34 prints, cut down: the RBAC objects, the ConfigMap and
// the DaemonSet, as YAML documents
const printed = `---
apiVersion: v1
kind: ServiceAccount
metadata:
  name: kube-proxy
  namespace: kube-system
---
kind: ConfigMap
apiVersion: v1
metadata:
  name: kube-proxy
  namespace: kube-system
  labels:
    app: kube-proxy
data:
  kubeconfig.conf: |-
    apiVersion: v1
    kind: Config
  config.conf: |-
    apiVersion: kubeproxy.config.k8s.io/v1alpha1
    kind: KubeProxyConfiguration
    mode: ipvs
---
apiVersion: apps/v1
kind: DaemonSet
metadata:
  name: kube-proxy
  namespace: kube-system
spec:
  template:
    spec:
      containers:
      - command:
        - /usr/local/bin/kube-proxy
        image: registry.k8s.io/kube-proxy:v1.34.4
        name: kube-proxy
`

func TestImagePicksKubeProxys(t *testing.T) {
	image, err := Image([]byte(printed), "kube-system", "kube-proxy", "kube-proxy")
	require.NoError(t, err)
	assert.Equal(t, "registry.k8s.io/kube-proxy:v1.34.4", image)
	_, err = Image([]byte(printed), "kube-system", "kube-proxy", "other")
	require.Error(t, err)
	_, err = Image([]byte(printed), "kube-system", "other", "kube-proxy")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "printed no DaemonSet kube-system/other")
}

func TestConfigMapPicksKubeProxys(t *testing.T) {
	cm, err := ConfigMap([]byte(printed), "kube-system", "kube-proxy")
	require.NoError(t, err)
	assert.Contains(t, cm.Data["config.conf"], "mode: ipvs")
	assert.Contains(t, cm.Data, "kubeconfig.conf")

	_, err = ConfigMap([]byte(printed), "kube-system", "other")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "it printed: ServiceAccount kube-proxy, ConfigMap kube-proxy, DaemonSet kube-proxy")
}

// Render runs the binary with kubeadm's arguments; a failing kubeadm is an
// error carrying what it said.
func TestRenderRunsKubeadm(t *testing.T) {
	dir := t.TempDir()
	fake := filepath.Join(dir, "kubeadm")
	script := "#!/bin/sh\n" +
		"[ \"$*\" = \"init phase addon kube-proxy --config /etc/kubeadm.yaml --print-manifest\" ] || { echo \"unexpected arguments: $*\" >&2; exit 3; }\n" +
		"cat <<'END'\n" + printed + "END\n"
	require.NoError(t, os.WriteFile(fake, []byte(script), 0o755))
	r, err := Render(context.Background(), fake, "/etc/kubeadm.yaml", nil)
	require.NoError(t, err)
	assert.Contains(t, r.ConfigMap.Data["config.conf"], "mode: ipvs")
	assert.Equal(t, "registry.k8s.io/kube-proxy:v1.34.4", r.Image)

	_, err = Render(context.Background(), fake, "/other.yaml", nil)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "unexpected arguments")

	_, err = Render(context.Background(), filepath.Join(dir, "missing"), "/etc/kubeadm.yaml", nil)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "pass --kubeadm PATH")
}

// With Stdin, kubeadm reads the configuration from /dev/stdin, fed the
// data: nothing is written to a file.
func TestRenderFeedsStdin(t *testing.T) {
	dir := t.TempDir()
	fake := filepath.Join(dir, "kubeadm")
	// prints the manifests only when its --config is /dev/stdin and what it
	// reads there is the configuration given
	script := "#!/bin/sh\n" +
		"[ \"$*\" = \"init phase addon kube-proxy --config /dev/stdin --print-manifest\" ] || { echo \"unexpected arguments: $*\" >&2; exit 3; }\n" +
		"[ \"$(cat /dev/stdin)\" = \"kind: InitConfiguration\" ] || { echo 'stdin is not the configuration' >&2; exit 4; }\n" +
		"cat <<'END'\n" + printed + "END\n"
	require.NoError(t, os.WriteFile(fake, []byte(script), 0o755))
	r, err := Render(context.Background(), fake, Stdin, []byte("kind: InitConfiguration"))
	require.NoError(t, err)
	assert.Equal(t, "registry.k8s.io/kube-proxy:v1.34.4", r.Image)

	_, err = Render(context.Background(), fake, Stdin, []byte("kind: Other"))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "stdin is not the configuration")
	assert.Contains(t, err.Error(), "--config - (stdin)")
}
