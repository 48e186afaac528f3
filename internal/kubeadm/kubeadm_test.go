package kubeadm

import (
	"context"
	"os"
	"path/filepath"
	"strings"
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
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: kubeadm:node-proxier
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: system:node-proxier
subjects:
- kind: ServiceAccount
  name: kube-proxy
  namespace: kube-system
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata:
  name: kube-proxy
  namespace: kube-system
rules:
- apiGroups:
  - ""
  resourceNames:
  - kube-proxy
  resources:
  - configmaps
  verbs:
  - get
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: kube-proxy
  namespace: kube-system
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: Role
  name: kube-proxy
subjects:
- kind: Group
  name: system:bootstrappers:kubeadm:default-node-token
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
	assert.Contains(t, err.Error(), "it printed: ServiceAccount kube-proxy, ClusterRoleBinding kubeadm:node-proxier, Role kube-proxy, RoleBinding kube-proxy, ConfigMap kube-proxy, DaemonSet kube-proxy")
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
	require.NotNil(t, r.Template)
	assert.Equal(t, []string{"/usr/local/bin/kube-proxy"}, r.Template.Spec.Containers[0].Command, "the DaemonSet's pod template")
	// the rest of the addon: kube-proxy's access
	require.Len(t, r.Access.ServiceAccounts, 1)
	assert.Equal(t, "kube-proxy", r.Access.ServiceAccounts[0].Name)
	require.Len(t, r.Access.ClusterRoleBindings, 1)
	assert.Equal(t, "system:node-proxier", r.Access.ClusterRoleBindings[0].RoleRef.Name)
	require.Len(t, r.Access.Roles, 1)
	assert.Equal(t, []string{"kube-proxy"}, r.Access.Roles[0].Rules[0].ResourceNames)
	require.Len(t, r.Access.RoleBindings, 1)
	assert.Equal(t, "system:bootstrappers:kubeadm:default-node-token", r.Access.RoleBindings[0].Subjects[0].Name)

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

// A pod template field these API types do not know (a newer kubeadm's) is
// refused, not dropped: the template is taken whole. The image and the
// ConfigMap are still read.
func TestTemplateRefusesWhatItDoesNotKnow(t *testing.T) {
	newer := strings.Replace(printed, "      containers:\n", "      aFieldFromTheFuture: true\n      containers:\n", 1)
	require.NotEqual(t, printed, newer)
	_, err := Template([]byte(newer), "kube-system", "kube-proxy")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "aFieldFromTheFuture")
	image, err := Image([]byte(newer), "kube-system", "kube-proxy", "kube-proxy")
	require.NoError(t, err)
	assert.Equal(t, "registry.k8s.io/kube-proxy:v1.34.4", image)
	tmpl, err := Template([]byte(printed), "kube-system", "kube-proxy")
	require.NoError(t, err)
	assert.Equal(t, "kube-proxy", tmpl.Spec.Containers[0].Name)
}
