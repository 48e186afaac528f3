//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/yaml"

	"github.com/kube-proxy-sync/kube-proxy-sync/internal/rollout"
	"github.com/kube-proxy-sync/kube-proxy-sync/test/e2e/cluster"
)

// kubespray's upgrade (upgrade_cluster.yml) as it reaches kube-proxy: the real
// kubeadm rewrites the kube-proxy ConfigMap and DaemonSet exactly as
// `kubeadm init phase addon kube-proxy` does in kubespray's
// kubeadm-upgrade.yml (and as the addon phase of `kubeadm upgrade
// apply/node` does): the ConfigMap from the KubeProxyConfiguration of
// kubespray's kubeadm config, with `server:` set to its
// controlPlaneEndpoint, and the DaemonSet replaced whole by kubeadm's
// template with the new version's image. kwok's nodes carry out the
// DaemonSet controller's rollouts, which is what is counted here.
//
// Per case: kubeadm writes the objects of version 1 (what `kubeadm init`
// leaves); kube-proxy-sync runs in kubespray mode (what cluster.yml runs
// after kubeadm init); then the upgrade: kubeadm writes version 2, its
// rollout finishes (kubespray's kubeadm role runs in a later play), and
// kube-proxy-sync runs in kubespray mode again. A watch records every
// kube-proxy pod of every node across the upgrade: the rollouts are the most
// pods any node had, less its first.
//
// kubeadm's DaemonSet mounts the ConfigMap kube-proxy itself, also after
// kube-proxy-sync had pointed the template at a copy of the config: the
// run after the upgrade adopts that layout as it is when kubeadm's rollout
// started the pods on the config it wants (no extra rollout), and moves
// the template onto a copy only with a restart it makes anyway. Either
// way the ConfigMap kube-proxy holds the config the fleet runs.
func TestKubesprayUpgradeRollsKubeProxyOnce(t *testing.T) {
	c, kubeadm := kubeadmCluster(t)

	cases := []struct {
		name string
		// what kubespray renders as controlPlaneEndpoint, at install
		// and on the upgrade: kubeadm writes https://<it> as kube-proxy's server
		installEndpoint, upgradeEndpoint string
		installVersion, upgradeVersion   string
		// the server kubespray mode decides ("": leave it alone)
		server string
		// --probe-path ("": none)
		probe        string
		wantServer   string
		wantRollouts int
	}{
		{
			// kubeadm_config_api_fqdn (or loadbalancer_apiserver_localhost
			// false): kubespray leaves kubeadm's server alone, so does the tool
			name:            "kubeadm_config_api_fqdn: kubeadm's rollout only",
			installEndpoint: "api.kube-proxy-sync.test:7443", upgradeEndpoint: "api.kube-proxy-sync.test:7443",
			installVersion: "v1.33.7", upgradeVersion: "v1.34.4",
			wantServer: "https://api.kube-proxy-sync.test:7443", wantRollouts: 1,
		},
		{
			// an external load balancer: kubespray makes it kubeadm's
			// endpoint (kubeadm-setup.yml, "Set kubeadm_config_api_fqdn
			// define"), the same server its kube-proxy task and the tool write
			name:            "external load balancer: kubeadm's rollout only",
			installEndpoint: "lb.kube-proxy-sync.test:8443", upgradeEndpoint: "lb.kube-proxy-sync.test:8443",
			installVersion: "v1.33.7", upgradeVersion: "v1.34.4",
			server: "https://lb.kube-proxy-sync.test:8443", wantServer: "https://lb.kube-proxy-sync.test:8443", wantRollouts: 1,
		},
		{
			// kubespray's default (its localhost load balancer) with the
			// kube-proxy addon written once, by kubeadm, from a kubeadm
			// config whose endpoint is the server kubespray wants, so
			// kubeadm's rollout starts every pod on the right server and
			// the tool finds nothing to do (under the opt-in, patch 0004,
			// kubeadm writes nothing:
			// TestKubesprayUpgradeOptInRollsOnceThroughTheTool)
			name:            "local load balancer, kubespray's upgrade patched: kubeadm's rollout only",
			installEndpoint: "10.0.0.1:7443", upgradeEndpoint: "127.0.0.1:7443",
			installVersion: "v1.33.7", upgradeVersion: "v1.34.4",
			server: "https://127.0.0.1:7443", wantServer: "https://127.0.0.1:7443", wantRollouts: 1,
		},
		{
			// the same, upgrade_cluster.yml run again at the same version:
			// kubeadm's DaemonSet drops the restartedAt of the tool's
			// earlier restart, which is a rollout of its own
			name:            "local load balancer, patched, same version again: one rollout",
			installEndpoint: "10.0.0.1:7443", upgradeEndpoint: "127.0.0.1:7443",
			installVersion: "v1.34.4", upgradeVersion: "v1.34.4",
			server: "https://127.0.0.1:7443", wantServer: "https://127.0.0.1:7443", wantRollouts: 1,
		},
		{
			// kubespray's upgrade as it is: kubeadm puts its
			// controlPlaneEndpoint back into kube-proxy's kubeconfig, its
			// rollout starts every pod on it, and the tool must roll again
			// to put kubespray's server back (kubespray's own tasks
			// force-delete every pod instead: two restarts as well)
			name:            "local load balancer, kubespray's upgrade unpatched: two rollouts",
			installEndpoint: "10.0.0.1:7443", upgradeEndpoint: "10.0.0.1:7443",
			installVersion: "v1.33.7", upgradeVersion: "v1.34.4",
			server: "https://127.0.0.1:7443", wantServer: "https://127.0.0.1:7443", wantRollouts: 2,
		},
		{
			// the probe (--probe-path auto, the binary's default): kubeadm's
			// DaemonSet has none, so after every kubeadm write the tool
			// adds it back, a rollout of its own (under patch 0004 kubeadm
			// does not write kube-proxy in an upgrade)
			name:            "local load balancer, patched, probe opted in: two rollouts",
			installEndpoint: "10.0.0.1:7443", upgradeEndpoint: "127.0.0.1:7443",
			installVersion: "v1.33.7", upgradeVersion: "v1.34.4",
			server: "https://127.0.0.1:7443", probe: "auto", wantServer: "https://127.0.0.1:7443", wantRollouts: 2,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			probe := tc.probe
			if probe == "" {
				probe = "none"
			}
			c.Reset(t)
			// kubeadm init's kube-proxy
			runKubeadmProxyAddon(t, c, kubeadm, tc.installVersion, tc.installEndpoint)
			c.WaitRolloutComplete(t, 2*time.Minute)
			// cluster.yml: kubespray mode after kubeadm init, on kubespray's
			// kubeadm-config.yaml (its controlPlaneEndpoint is the install
			// one)
			r := runKubesprayMode(t, c, kubeadm, kubesprayKubeadmConfig(t, tc.installVersion, tc.installEndpoint), tc.server, probe)
			require.Equal(t, 0, r.Code, r.Msg+"\n"+r.Stderr)
			assert.Equal(t, probe != "none", r.ProbeChanged, "probe changed (probe_path %s)", probe)

			// the upgrade
			generation := rollout.TemplateGeneration(c.DaemonSet(t))
			history := watchPods(t, c)
			runKubeadmProxyAddon(t, c, kubeadm, tc.upgradeVersion, tc.upgradeEndpoint)
			ds := c.WaitRolloutComplete(t, 2*time.Minute)
			require.Equal(t, "registry.k8s.io/kube-proxy:"+tc.upgradeVersion, ds.Spec.Template.Spec.Containers[0].Image)
			upgraded := kubesprayKubeadmConfig(t, tc.upgradeVersion, tc.installEndpoint)
			r = runKubesprayMode(t, c, kubeadm, upgraded, tc.server, probe)
			require.Equal(t, 0, r.Code, r.Msg+"\n"+r.Stderr)
			assert.Equal(t, probe != "none", r.ProbeChanged, "probe changed after kubeadm's rewrite (probe_path %s)", probe)
			pods := history.Stop()

			rollouts := 0
			for _, n := range pods {
				rollouts = max(rollouts, n-1)
			}
			templates := rollout.TemplateGeneration(c.DaemonSet(t)) - generation
			mounted := cluster.MountedConfigMapName(c.DaemonSet(t))
			t.Logf("upgrade: %d rollout(s) (kube-proxy pods per node %v), %d template change(s); the second run: changed %v, restarted %v, adopted %v, keys %v; the template mounts %s",
				rollouts, pods, templates, r.Changed, r.Restarted, r.Adopted, r.ChangedKeys, mounted)
			assert.Equal(t, tc.wantRollouts, rollouts, "kube-proxy rollouts across kubeadm's rewrite and the run after it (pods per node: %v)", pods)
			assert.Equal(t, int64(tc.wantRollouts), templates, "pod template changes across the upgrade")
			assert.Equal(t, tc.wantRollouts > 1, r.Restarted, "the run after the upgrade restarted kube-proxy: %s", r.Msg)
			if tc.wantRollouts == 1 && probe == "none" {
				// what docs/kubespray.md promises an operator sees then
				assert.True(t, r.Changed, "changed: the tool stamps the DaemonSet kubeadm replaced")
				assert.True(t, r.Adopted, "adopted: kubeadm's rollout started on the data the tool wants")
				assert.Empty(t, r.ChangedKeys, "no key changed after a one-rollout upgrade")
			}

			if tc.wantRollouts > 1 {
				assertMountsCopy(t, c) // the restart moved the template onto a copy
			} else {
				assert.Equal(t, cluster.Name, mounted, "kubeadm's layout kept: moving it would be a rollout of its own")
			}
			// the settings from kubespray's variables are in the config the
			// pods read, and the server; and in the ConfigMap kubeadm reads
			assertKubespraySettings(t, c, c.MountedConfigMap(t).Data["config.conf"])
			assert.Equal(t, []string{tc.wantServer}, kubeconfigServers(t, c.MountedConfigMap(t).Data["kubeconfig.conf"]))
			assertRecordFollows(t, c)

			// a rerun writes nothing and restarts nothing
			uids, rv := c.PodUIDs(t), c.ConfigMap(t).ResourceVersion
			r = runKubesprayMode(t, c, kubeadm, upgraded, tc.server, probe)
			require.Equal(t, 0, r.Code, r.Msg+"\n"+r.Stderr)
			assert.False(t, r.Changed, "rerun: %s", r.Msg)
			assert.False(t, r.Restarted, "rerun: %s", r.Msg)
			assert.Equal(t, rv, c.ConfigMap(t).ResourceVersion, "rerun wrote the ConfigMap")
			cluster.AssertNoneReplaced(t, uids, c.PodUIDs(t))
		})
	}
}

// kubespray's upgrade with patch 0004 (docs/kubespray, kube_proxy_rollout_method:
// kube-proxy-sync): nothing of kubeadm writes kube-proxy during the
// upgrade (its addon phase is skipped in upgrade apply and upgrade node,
// kubespray's "Update kube-proxy configmap after upgrade" is skipped), and
// in the last control plane's turn the binary runs as 0004's task runs it:
// kubespray's kubeadm config for the new version on its standard input,
// --template kubeadm (kubeadm's whole pod template, its image with it), the
// canary strategy with health checks.
// Install as kubeadm init leaves it, then cluster.yml's run, then that one
// run: kube-proxy takes kubeadm's image for the new version and its config
// in one rollout, each pod replaced once, the canary node first, on
// kubespray's server, and a rerun does nothing.
func TestKubesprayUpgradeOptInRollsOnceThroughTheTool(t *testing.T) {
	c, kubeadm := kubeadmCluster(t)
	const endpoint, server = "10.0.0.1:7443", "https://127.0.0.1:7443"
	c.Reset(t)
	// kubeadm init's kube-proxy, then cluster.yml's run of the tool
	runKubeadmProxyAddon(t, c, kubeadm, "v1.33.7", endpoint)
	c.WaitRolloutComplete(t, 2*time.Minute)
	r := runKubesprayMode(t, c, kubeadm, kubesprayKubeadmConfig(t, "v1.33.7", endpoint), server, "none")
	require.Equal(t, 0, r.Code, r.Msg+"\n"+r.Stderr)
	c.WaitRolloutComplete(t, 2*time.Minute)
	require.Equal(t, "registry.k8s.io/kube-proxy:v1.33.7", c.DaemonSet(t).Spec.Template.Spec.Containers[0].Image)

	// the template an older kubeadm rendered: without the argument and
	// the environment variable this kubeadm's has (a rollout of its own,
	// before the upgrade's)
	olderKubeadm := `[{"op": "replace", "path": "/spec/template/spec/containers/0/command", "value": ["/usr/local/bin/kube-proxy", "--config=/var/lib/kube-proxy/config.conf"]},
		{"op": "remove", "path": "/spec/template/spec/containers/0/env"}]`
	ctx := context.Background()
	_, err := c.Client.AppsV1().DaemonSets(c.Namespace).Patch(ctx, cluster.Name, types.JSONPatchType, []byte(olderKubeadm), metav1.PatchOptions{})
	require.NoError(t, err)
	c.WaitRolloutComplete(t, 2*time.Minute)
	// and the access an older kubeadm gave: its Role let joining nodes
	// list ConfigMaps too, and this kubeadm's RoleBinding is not there
	rbac := c.Client.RbacV1()
	_, err = rbac.Roles(c.Namespace).Patch(ctx, "kube-proxy", types.JSONPatchType, []byte(`[{"op": "add", "path": "/rules/0/verbs/-", "value": "list"}]`), metav1.PatchOptions{})
	require.NoError(t, err)
	require.NoError(t, rbac.RoleBindings(c.Namespace).Delete(ctx, "kube-proxy", metav1.DeleteOptions{}))

	// the upgrade: no kubeadm write; the binary as 0004's task runs it
	generation := rollout.TemplateGeneration(c.DaemonSet(t))
	history := watchPods(t, c)
	states := followPods(t, c, func(map[string]bool) {})
	upgraded := kubesprayKubeadmConfig(t, "v1.34.4", endpoint)
	r = runKubesprayUpgrade(t, c, kubeadm, upgraded, server)
	require.Equal(t, 0, r.Code, r.Msg+"\n"+r.Stderr)
	c.WaitRolloutComplete(t, 2*time.Minute)
	pods := history.Stop()
	order, _ := states.Stop()
	t.Logf("upgrade: %s; kube-proxy pods per node %v, replaced in the order %v, strategy %s, canary %v",
		r.Msg, pods, order, r.facts().Rollout.Strategy, r.facts().Rollout.CanaryNodes)

	assert.True(t, r.Restarted, "restarted: %s", r.Msg)
	assert.True(t, r.ImageChanged, "image changed: %s", r.Msg)
	assert.Equal(t, "registry.k8s.io/kube-proxy:v1.33.7", r.ImageBefore)
	assert.Equal(t, "registry.k8s.io/kube-proxy:v1.34.4", r.Image)
	ds := c.DaemonSet(t)
	ctr := ds.Spec.Template.Spec.Containers[0]
	assert.Equal(t, "registry.k8s.io/kube-proxy:v1.34.4", ctr.Image)
	// kubeadm's pod template, in the same rollout, on the config's copy
	assert.True(t, r.facts().TemplateChanged, "template changed: %s", r.Msg)
	assert.Contains(t, ctr.Command, "--hostname-override=$(NODE_NAME)", "kubeadm's argument is back")
	if assert.Len(t, ctr.Env, 1, "kubeadm's environment is back") {
		assert.Equal(t, "NODE_NAME", ctr.Env[0].Name)
	}
	assertMountsCopy(t, c)
	// kubeadm's access, before the rollout
	assert.Equal(t, []string{"role " + c.Namespace + "/kube-proxy", "rolebinding " + c.Namespace + "/kube-proxy"}, r.facts().AccessChanged)
	role, err := rbac.Roles(c.Namespace).Get(ctx, "kube-proxy", metav1.GetOptions{})
	if assert.NoError(t, err) && assert.Len(t, role.Rules, 1) {
		assert.Equal(t, []string{"get"}, role.Rules[0].Verbs, "kubeadm's Role again")
	}
	rb, err := rbac.RoleBindings(c.Namespace).Get(ctx, "kube-proxy", metav1.GetOptions{})
	if assert.NoError(t, err, "kubeadm's RoleBinding made again") && assert.Len(t, rb.Subjects, 1) {
		assert.Equal(t, "system:bootstrappers:kubeadm:default-node-token", rb.Subjects[0].Name)
	}
	rollouts := 0
	for _, n := range pods {
		rollouts = max(rollouts, n-1)
	}
	assert.Equal(t, 1, rollouts, "kube-proxy rollouts in the upgrade (pods per node: %v)", pods)
	for node, n := range pods {
		assert.Equal(t, 2, n, "kube-proxy pods seen on %s: each replaced exactly once", node)
	}
	assert.Equal(t, int64(1), rollout.TemplateGeneration(c.DaemonSet(t))-generation, "pod template changes in the upgrade")
	assert.Equal(t, "canary", r.facts().Rollout.Strategy)
	if assert.Len(t, r.facts().Rollout.CanaryNodes, 1) && assert.NotEmpty(t, order) {
		assert.Equal(t, r.facts().Rollout.CanaryNodes[0], order[0], "the canary's pod is the first replaced (order %v)", order)
	}
	assertKubespraySettings(t, c, c.MountedConfigMap(t).Data["config.conf"])
	assert.Equal(t, []string{server}, kubeconfigServers(t, c.MountedConfigMap(t).Data["kubeconfig.conf"]))
	assertRecordFollows(t, c)

	// upgrade_cluster.yml again at the same version: nothing to do
	uids, rv := c.PodUIDs(t), c.ConfigMap(t).ResourceVersion
	r = runKubesprayUpgrade(t, c, kubeadm, upgraded, server)
	require.Equal(t, 0, r.Code, r.Msg+"\n"+r.Stderr)
	assert.False(t, r.Changed, "rerun: %s", r.Msg)
	assert.False(t, r.Restarted, "rerun: %s", r.Msg)
	assert.Equal(t, rv, c.ConfigMap(t).ResourceVersion, "rerun wrote the ConfigMap")
	cluster.AssertNoneReplaced(t, uids, c.PodUIDs(t))
}

// runKubesprayUpgrade runs the command as patch 0004's task does in an
// upgrade (docs/kubespray/0004-*.patch, kube-proxy-sync.yml): the kubeadm
// config on its standard input (--kubeadm-config -), the server, the pod
// template kubeadm renders (--template kubeadm, its image with it), and
// kube_proxy_sync_extra_args' default (canary, health checks where the
// nodes answer); the probe left alone and a bound on the run, as the
// test's other runs.
func runKubesprayUpgrade(t *testing.T, c *cluster.Cluster, kubeadm, kubeadmConfig, server string) cliRun {
	t.Helper()
	config, err := os.ReadFile(kubeadmConfig)
	require.NoError(t, err)
	return runCLIWithStdin(t, string(config),
		"--kubeconfig", c.KubeconfigPath, "--namespace", c.Namespace,
		"--kubeadm", kubeadm, "--kubeadm-config", "-", "--server", server,
		"--audit-log", filepath.Join(t.TempDir(), "audit.log"), "--output", "json",
		"--template", "kubeadm", "--strategy", "canary", "--verify-health", "auto",
		"--probe-path", "none", "--timeout", "3m")
}

// kubesprayProxyConfig is the KubeProxyConfiguration kubespray's
// kubeadm-config.v1beta4.yaml.j2 renders for the variables of
// test/e2e/testdata/kubespray.yml (byte for byte what its template
// makes of them, empty values and Python-style booleans included).
const kubesprayProxyConfig = `apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
bindAddress: "0.0.0.0"
clientConnection:
  acceptContentTypes: 
  burst: 10
  contentType: application/vnd.kubernetes.protobuf
  kubeconfig: 
  qps: 5
clusterCIDR: "10.233.64.0/18"
configSyncPeriod: 15m0s
conntrack:
  maxPerCore: 32768
  min: 131072
  tcpCloseWaitTimeout: 1h0m0s
  tcpEstablishedTimeout: 24h0m0s
enableProfiling: False
healthzBindAddress: "0.0.0.0:10256"
hostnameOverride: "kps-control-plane"
iptables:
  masqueradeAll: False
  masqueradeBit: 14
  minSyncPeriod: 1s
  syncPeriod: 30s
ipvs:
  excludeCIDRs: ['10.0.0.0/8']
  minSyncPeriod: 1s
  scheduler: lc
  syncPeriod: 30s
  strictARP: True
  tcpTimeout: 0s
  tcpFinTimeout: 0s
  udpTimeout: 0s
metricsBindAddress: "127.0.0.1:10249"
mode: ipvs
nodePortAddresses: [192.168.0.0/16]
oomScoreAdj: -999
portRange: 
featureGates:
  NFTablesProxyMode: true
`

// kubesprayExpected is kps_expected_settings of
// test/e2e/testdata/kubespray.yml: the config.conf values kubespray's
// variables there stand for.
func kubesprayExpected(t *testing.T, c *cluster.Cluster) map[string]any {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(c.RepoRoot, "test", "e2e", "testdata", "kubespray.yml"))
	require.NoError(t, err)
	var vars struct {
		Expected map[string]any `json:"kps_expected_settings"`
	}
	require.NoError(t, yaml.Unmarshal(raw, &vars))
	require.NotEmpty(t, vars.Expected, "kps_expected_settings in test/e2e/testdata/kubespray.yml")
	return vars.Expected
}

// runKubesprayMode runs the module with what patch 0004's task gives the
// command: kubespray's kubeadm config and kubeadm, its server decision;
// the probe path as the case says.
func runKubesprayMode(t *testing.T, c *cluster.Cluster, kubeadm, kubeadmConfig, server, probe string) cliRun {
	t.Helper()
	args := map[string]any{
		"kubeconfig":     c.KubeconfigPath,
		"namespace":      c.Namespace,
		"probe_path":     probe,
		"restart":        "auto",
		"kubeadm":        kubeadm,
		"kubeadm_config": kubeadmConfig,
		"timeout":        "3m",
	}
	if server != "" {
		args["server"] = server
	}
	return runModule(t, moduleArgsJSON(t, args))
}

// kubesprayKubeadmConfig writes a kubeadm config as kubespray renders it,
// at the given Kubernetes version and controlPlaneEndpoint, and returns
// its path.
func kubesprayKubeadmConfig(t *testing.T, version, endpoint string) string {
	t.Helper()
	config := fmt.Sprintf(`apiVersion: kubeadm.k8s.io/v1beta4
kind: InitConfiguration
localAPIEndpoint:
  advertiseAddress: 10.0.0.1
  bindPort: 7443
nodeRegistration:
  name: kps-control-plane
  criSocket: unix:///var/run/containerd/containerd.sock
---
apiVersion: kubeadm.k8s.io/v1beta4
kind: ClusterConfiguration
clusterName: cluster.local
kubernetesVersion: %s
controlPlaneEndpoint: %q
imageRepository: registry.k8s.io
networking:
  dnsDomain: cluster.local
  serviceSubnet: 10.233.0.0/18
  podSubnet: 10.233.64.0/18
---
%s`, version, endpoint, kubesprayProxyConfig)
	path := filepath.Join(t.TempDir(), "kubeadm-config.yaml")
	require.NoError(t, os.WriteFile(path, []byte(config), 0o600))
	return path
}

// runKubeadmProxyAddon runs `kubeadm init phase addon kube-proxy` with a
// kubeadm config as kubespray renders it, at the given Kubernetes version
// and controlPlaneEndpoint. kubeadm reads nothing from the cluster for this
// phase (its RBAC objects it creates itself); its environment is emptied so
// that no proxy variable of this machine lands in the DaemonSet.
func runKubeadmProxyAddon(t *testing.T, c *cluster.Cluster, kubeadm, version, endpoint string) {
	t.Helper()
	dir := t.TempDir()
	path := kubesprayKubeadmConfig(t, version, endpoint)
	cmd := exec.Command(kubeadm, "init", "phase", "addon", "kube-proxy", "--config", path, "--kubeconfig", c.KubeconfigPath)
	cmd.Env = []string{"HOME=" + dir}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	require.NoError(t, cmd.Run(), "kubeadm init phase addon kube-proxy (%s, %s): %s", version, endpoint, out.String())
}

// deleteKubeadmProxyRBAC deletes what kubeadm's kube-proxy addon creates
// besides the ConfigMap, the DaemonSet and the ServiceAccount (which the seed
// has too): its ClusterRoleBinding, Role and RoleBinding.
func deleteKubeadmProxyRBAC(t *testing.T, c *cluster.Cluster) {
	t.Helper()
	ctx := context.Background()
	rbac := c.Client.RbacV1()
	for what, err := range map[string]error{
		"clusterrolebinding kubeadm:node-proxier": rbac.ClusterRoleBindings().Delete(ctx, "kubeadm:node-proxier", metav1.DeleteOptions{}),
		"role kube-proxy":                         rbac.Roles(c.Namespace).Delete(ctx, "kube-proxy", metav1.DeleteOptions{}),
		"rolebinding kube-proxy":                  rbac.RoleBindings(c.Namespace).Delete(ctx, "kube-proxy", metav1.DeleteOptions{}),
	} {
		if err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("delete kubeadm's %s: %v", what, err)
		}
	}
}

// kubeadmBinary is the kubeadm that hack/build/tools.sh kind builds.
// kubeadmCluster connects to the local control plane and finds kubeadm;
// the test leaves the cluster as it found it, without kubeadm's
// kube-proxy RBAC.
func kubeadmCluster(t *testing.T) (*cluster.Cluster, string) {
	t.Helper()
	c := cluster.Connect(t)
	kubeadm := kubeadmBinary(t, c)
	t.Cleanup(func() {
		c.Reset(t)
		deleteKubeadmProxyRBAC(t, c)
	})
	return c, kubeadm
}

func kubeadmBinary(t *testing.T, c *cluster.Cluster) string {
	t.Helper()
	p := filepath.Join(c.RepoRoot, ".cache", "bin", "kubeadm")
	if fileExists(p) {
		return p
	}
	msg := "no kubeadm in .cache/bin: run hack/build/tools.sh kind, which builds it"
	if cluster.Required() {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}

// assertKubespraySettings asserts that config.conf holds every value of
// kubesprayExpected, compared as YAML values.
func assertKubespraySettings(t *testing.T, c *cluster.Cluster, configConf string) {
	t.Helper()
	var cfg map[string]any
	require.NoError(t, yaml.Unmarshal([]byte(configConf), &cfg))
	for path, want := range kubesprayExpected(t, c) {
		got, found := lookupPath(cfg, strings.Split(path, "."))
		if assert.True(t, found, "config.conf has no %s", path) {
			assert.Equal(t, want, got, "config.conf %s", path)
		}
	}
}

func lookupPath(m map[string]any, path []string) (any, bool) {
	v, ok := m[path[0]]
	if !ok || len(path) == 1 {
		return v, ok
	}
	sub, ok := v.(map[string]any)
	if !ok {
		return nil, false
	}
	return lookupPath(sub, path[1:])
}

// kubeconfigServers lists the cluster servers of kubeconfig.conf.
func kubeconfigServers(t *testing.T, kubeconfig string) []string {
	t.Helper()
	var cfg struct {
		Clusters []struct {
			Cluster struct {
				Server string `json:"server"`
			} `json:"cluster"`
		} `json:"clusters"`
	}
	require.NoError(t, yaml.Unmarshal([]byte(kubeconfig), &cfg))
	var servers []string
	for _, cl := range cfg.Clusters {
		servers = append(servers, cl.Cluster.Server)
	}
	return servers
}
