//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/clock"

	"github.com/kube-proxy-sync/kube-proxy-sync/internal/app"
	"github.com/kube-proxy-sync/kube-proxy-sync/internal/configmap"
	"github.com/kube-proxy-sync/kube-proxy-sync/internal/rollout"
	"github.com/kube-proxy-sync/kube-proxy-sync/test/e2e/cluster"
)

// cliRun is one in-process run of the command with exactly the arguments
// given (runSync adds --kubeconfig, --output json and --timeout; these
// helpers add nothing).
type cliRun struct {
	result
	Stdout  string
	Elapsed time.Duration
}

// runCLI runs the command in-process and requires stdout to be exactly one
// JSON result, which is what Ansible and --output json consumers parse.
func runCLI(t *testing.T, args ...string) cliRun {
	t.Helper()
	return runCLIWithStdin(t, "", args...)
}

// runCLIWithStdin is runCLI with stdin on the command's standard input
// (what --kubeadm-config - reads).
func runCLIWithStdin(t *testing.T, stdin string, args ...string) cliRun {
	t.Helper()
	var out, errOut bytes.Buffer
	start := time.Now()
	code := app.Run(context.Background(), app.Streams{Out: &out, ErrOut: &errOut, In: strings.NewReader(stdin)}, args, app.Deps{Clock: clock.RealClock{}})
	r := cliRun{Stdout: out.String(), Elapsed: time.Since(start)}
	require.Equal(t, 1, strings.Count(strings.TrimSpace(out.String()), "\n")+1, "stdout must be one line of JSON: %q\nstderr: %s", out.String(), errOut.String())
	require.NoError(t, json.Unmarshal(out.Bytes(), &r.result), "stdout must be valid JSON: %q\nstderr: %s", out.String(), errOut.String())
	r.Code, r.Stderr = code, errOut.String()
	return r
}

// runModule runs the command as Ansible does a binary module: the only
// argument is the path of a file holding the module args.
func runModule(t *testing.T, argsFile []byte) cliRun {
	t.Helper()
	path := filepath.Join(t.TempDir(), "args")
	require.NoError(t, os.WriteFile(path, argsFile, 0o600))
	return runCLI(t, path)
}

// moduleArgsJSON renders module args as the JSON Ansible writes.
func moduleArgsJSON(t *testing.T, args map[string]any) []byte {
	t.Helper()
	b, err := json.Marshal(args)
	require.NoError(t, err)
	return b
}

// moduleArgsToFlags turns module args into the equivalent command line:
// {"request_timeout": "2s", "set": {"mode": "ipvs"}} becomes
// --request-timeout 2s --set mode=ipvs.
func moduleArgsToFlags(t *testing.T, args map[string]any) []string {
	t.Helper()
	keys := make([]string, 0, len(args))
	for k := range args {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var flags []string
	for _, k := range keys {
		flag := "--" + strings.ReplaceAll(k, "_", "-")
		switch v := args[k].(type) {
		case map[string]any:
			paths := make([]string, 0, len(v))
			for p := range v {
				paths = append(paths, p)
			}
			sort.Strings(paths)
			for _, p := range paths {
				flags = append(flags, flag, p+"="+scalarText(t, v[p]))
			}
		default:
			flags = append(flags, flag, scalarText(t, v))
		}
	}
	return flags
}

func scalarText(t *testing.T, v any) string {
	t.Helper()
	switch s := v.(type) {
	case string:
		return s
	default:
		b, err := json.Marshal(s)
		require.NoError(t, err)
		return string(b)
	}
}

// kubeconfigCopy writes a copy of the cluster's kubeconfig, changed by
// edit, to a temporary file and returns its path. The copy keeps the
// credentials and CA, so it is written 0600.
func kubeconfigCopy(t *testing.T, c *cluster.Cluster, edit func(cfg *clientcmdapi.Config, current *clientcmdapi.Context)) string {
	t.Helper()
	cfg, err := clientcmd.LoadFromFile(c.KubeconfigPath)
	require.NoError(t, err)
	current := cfg.Contexts[cfg.CurrentContext]
	require.NotNil(t, current, "kubeconfig %s has no current context", c.KubeconfigPath)
	if edit != nil {
		edit(cfg, current)
	}
	path := filepath.Join(t.TempDir(), "kubeconfig")
	require.NoError(t, clientcmd.WriteToFile(*cfg, path))
	require.NoError(t, os.Chmod(path, 0o600))
	return path
}

// clusterState is what "the cluster is untouched" compares: the ConfigMap's
// resourceVersion, the DaemonSet's generation, its annotations and labels
// (our config-hash stamp is a metadata write that does not bump the
// generation), and the copies of the ConfigMap (a change creates one
// before its restart). Not the DaemonSet's resourceVersion: its controller
// writes the status.
type clusterState struct {
	ConfigMapResourceVersion string
	DaemonSetGeneration      int64
	DaemonSetAnnotations     map[string]string
	DaemonSetLabels          map[string]string
	Copies                   []string
}

func stateOf(t *testing.T, c *cluster.Cluster) clusterState {
	t.Helper()
	cm, ds := c.ConfigMap(t), c.DaemonSet(t)
	copies := []string{}
	for name := range c.Copies(t) {
		copies = append(copies, name)
	}
	sort.Strings(copies)
	return clusterState{cm.ResourceVersion, ds.Generation, ds.Annotations, ds.Labels, copies}
}

func assertUntouched(t *testing.T, c *cluster.Cluster, before clusterState) bool {
	t.Helper()
	return assert.Equal(t, before, stateOf(t, c), "the cluster must be untouched: configmap resourceVersion, daemonset generation, annotations and labels, no copy of the configmap made")
}

// hashConsistent reports whether the DaemonSet's config-hash stamp equals
// the hash of the data of the ConfigMap its template mounts (the record,
// or the copy a restart pointed it at), i.e. no restart is owed.
func hashConsistent(t *testing.T, c *cluster.Cluster) bool {
	t.Helper()
	cm, ds := c.MountedConfigMap(t), c.DaemonSet(t)
	return ds.Annotations[rollout.HashAnnotation] == configmap.Hash(cm.Data, cm.BinaryData)
}

// copyWith returns the copy of the ConfigMap whose kubeconfig.conf names
// server, nil when there is none; two fail the test.
func copyWith(t *testing.T, c *cluster.Cluster, server string) *corev1.ConfigMap {
	t.Helper()
	var found *corev1.ConfigMap
	for _, cp := range c.Copies(t) {
		if strings.Contains(cp.Data["kubeconfig.conf"], server) {
			require.Nil(t, found, "two copies name %s: %s and %s", server, cp.Name, found)
			found = cp
		}
	}
	return found
}

// assertMountsCopy asserts that the DaemonSet's template mounts an
// immutable copy of the ConfigMap, named by its data, owned by the
// DaemonSet, and returns it.
func assertMountsCopy(t *testing.T, c *cluster.Cluster) *corev1.ConfigMap {
	t.Helper()
	ds := c.DaemonSet(t)
	name := cluster.MountedConfigMapName(ds)
	require.NotEqual(t, cluster.Name, name, "the template still mounts configmap %s itself", cluster.Name)
	cp := c.ConfigMapNamed(t, name)
	assert.Equal(t, configmap.CopyName(cluster.Name, configmap.Hash(cp.Data, cp.BinaryData)), cp.Name, "a copy is named by its data")
	assert.Equal(t, cluster.Name, cp.Labels[configmap.CopyOfLabel])
	assert.True(t, cp.Immutable != nil && *cp.Immutable, "copy %s is immutable", cp.Name)
	if assert.Len(t, cp.OwnerReferences, 1, "copy %s is owned by the DaemonSet", cp.Name) {
		assert.Equal(t, ds.UID, cp.OwnerReferences[0].UID, "copy %s is owned by the DaemonSet", cp.Name)
	}
	return cp
}

// assertRecordFollows asserts that the record (kube-system/kube-proxy,
// which kubeadm reads) holds the data of the ConfigMap the template
// mounts: what the fleet runs.
func assertRecordFollows(t *testing.T, c *cluster.Cluster) bool {
	t.Helper()
	return assert.Equal(t, c.MountedConfigMap(t).Data, c.ConfigMap(t).Data, "configmap %s holds the config the template mounts (%s)", cluster.Name, cluster.MountedConfigMapName(c.DaemonSet(t)))
}
