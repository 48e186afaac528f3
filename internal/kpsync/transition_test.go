package kpsync

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kube-proxy-sync/kube-proxy-sync/internal/configmap"
	"github.com/kube-proxy-sync/kube-proxy-sync/internal/kpconfig"
	"github.com/kube-proxy-sync/kube-proxy-sync/internal/rollout"
)

// Every guard judges the move each kube-proxy makes, whichever flag,
// other writer or earlier run causes it. These tests take the roads that
// reach a move without the flag that usually causes it.

// fleetOn is a rolled-out fleet of n nodes running config (the record's
// data, the template stamped for it) on image.
func fleetOn(t *testing.T, n int, image, config string) *rollingFixture {
	t.Helper()
	f := newRollingFixture(t, n)
	ctx := context.Background()
	cm, err := f.client.CoreV1().ConfigMaps("kube-system").Get(ctx, "kube-proxy", metav1.GetOptions{})
	require.NoError(t, err)
	cm.Data[configmap.ConfigKey] = config
	_, err = f.client.CoreV1().ConfigMaps("kube-system").Update(ctx, cm, metav1.UpdateOptions{})
	require.NoError(t, err)
	ds := f.daemonSet(t)
	ds.Spec.Template.Spec.Containers[0].Image = image
	ds.Annotations[rollout.HashAnnotation] = configmap.Hash(cm.Data, nil)
	_, err = f.client.AppsV1().DaemonSets("kube-system").Update(ctx, ds, metav1.UpdateOptions{})
	require.NoError(t, err)
	return f
}

// An image upgrade of an nftables fleet onto 1.31, the first kube-proxy
// that does not start in nftables mode below kernel 5.13, checks every
// node's kernel as a move into nftables does; within 1.30, or from 1.31
// on, it does not. The boundary is 5.13.0: 5.12.19 is refused.
func TestTransitionImageUpgradeIntoTheKernelRuleChecksTheKernels(t *testing.T) {
	cases := []struct {
		name, from, to, kernel string
		refused                bool
	}{
		{"1.30 to 1.31, kernel 5.10", "v1.30.4", "v1.31.2", "5.10.0-32-amd64", true},
		{"1.30 to 1.31, kernel 5.12.19", "v1.30.4", "v1.31.2", "5.12.19", true},
		{"1.30 to 1.31, kernel 5.13.0", "v1.30.4", "v1.31.2", "5.13.0", false},
		{"1.30 to 1.30, kernel 5.10", "v1.30.4", "v1.30.9", "5.10.0-32-amd64", false},
		{"1.31 to 1.32, kernel 5.10 (it could not run before either)", "v1.31.2", "v1.32.1", "5.10.0-32-amd64", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			// a refusal in check mode and in the real run; a run that goes
			// ahead, in check mode only (the fake rolls nothing out)
			for _, check := range []bool{true, false}[:map[bool]int{true: 2, false: 1}[c.refused]] {
				f := fleetOn(t, 2, "registry.k8s.io/kube-proxy:"+c.from, withMode("nftables", ""))
				f.setKernel(t, "node-0", "6.8.0-49-generic")
				f.setKernel(t, "node-1", c.kernel)
				_, err := f.run(t, Options{Image: "registry.k8s.io/kube-proxy:" + c.to, Check: check})
				if !c.refused {
					if err != nil {
						assert.NotContains(t, err.Error(), "kernel", "check=%v", check)
					}
					continue
				}
				require.Error(t, err, "check=%v", check)
				assert.Contains(t, err.Error(), "node-1 (kernel "+c.kernel+")", "check=%v", check)
				assert.NotContains(t, err.Error(), "node-0")
				assert.Contains(t, err.Error(), "nothing was written")
				assert.Empty(t, f.writes(), "check=%v", check)
			}
		})
	}
}

// ipvs mode is judged at the version the fleet runs after the run, not
// only with --image: --set mode=ipvs on a fleet already on 1.40 is refused
// (the gate off by default), on 1.42 with the gate on it is planned, and
// on 1.43 (locked off) it is refused whatever the gate.
func TestTransitionIPVSIsJudgedAtTheVersionTheFleetRuns(t *testing.T) {
	cases := []struct {
		name, image, gates string
		refused            bool
	}{
		{"1.40, gate unset", "v1.40.0", "", true},
		{"1.42, gate on", "v1.42.3", "featureGates:\n  KubeProxyIPVS: true\n", false},
		{"1.43, gate on", "v1.43.0", "featureGates:\n  KubeProxyIPVS: true\n", true},
		{"1.39, gate unset", "v1.39.4", "", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := fleetOn(t, 2, "registry.k8s.io/kube-proxy:"+c.image, withMode("iptables", c.gates))
			res, err := f.run(t, Options{Spec: setMode("ipvs"), Check: true, Connectivity: noTraffic})
			if !c.refused {
				require.NoError(t, err)
				require.NotNil(t, res.Facts.Migration, res.Msg)
				assert.Equal(t, "ipvs", res.Facts.Migration.To)
				// a move into ipvs from 1.35 on says it is deprecated, with
				// or without an image
				assert.True(t, hasWarning(res, "deprecated since 1.35"), "warnings: %v", res.Warnings)
				return
			}
			require.Error(t, err)
			assert.Contains(t, err.Error(), "in ipvs mode")
			assert.Contains(t, err.Error(), "--set mode=nftables")
			assert.Contains(t, err.Error(), "nothing was written")
			assert.Empty(t, f.writes())
		})
	}
}

// An image whose version is unknown (a digest, :latest) onto a config that
// sets no mode may be 1.40 or later, whose default is nftables: the
// running mode is written explicitly, so the fleet does not move to
// nftables past every check; with the running version unknown too, the
// run is refused.
func TestTransitionUnknownImageVersionKeepsTheMode(t *testing.T) {
	for _, image := range []string{"registry.k8s.io/kube-proxy@sha256:" + strings.Repeat("0", 64), "registry.k8s.io/kube-proxy:latest"} {
		t.Run(image, func(t *testing.T) {
			f := upgradeFixture(t, withMode("", ""), "registry.k8s.io/kube-proxy:v1.39.4")
			res, err := f.run(t, Options{Image: image})
			require.NoError(t, err)
			assert.Contains(t, res.Facts.ChangedKeys, "config.conf:mode")
			ds := f.daemonSet(t)
			_, mounted := configVolume(ds, "kube-proxy", "kube-proxy")
			cm, err := f.client.CoreV1().ConfigMaps("kube-system").Get(context.Background(), mounted, metav1.GetOptions{})
			require.NoError(t, err)
			assert.Contains(t, cm.Data[configmap.ConfigKey], "\nmode: iptables\n", "the ConfigMap the new template mounts (%s)", mounted)
			assert.Equal(t, image, rollout.ContainerImage(ds, "kube-proxy"))
			assert.True(t, hasWarning(res, "mode: iptables is written explicitly"), "warnings: %v", res.Warnings)
		})
	}
	f := upgradeFixture(t, withMode("", ""), "registry.example/kube-proxy:latest")
	_, err := f.run(t, Options{Image: "registry.k8s.io/kube-proxy:latest"})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "pass --kube-proxy-version")
	assert.Empty(t, f.writes())
}

// editedRecord is kubeadm's layout on an adopted fleet (the template
// mounts the record, stamped for the data its pods started on), whose
// record another hand then wrote to config: the pods started before that
// write, so what they run is not the record's data, and no copy of the
// stamped data is there to tell.
func editedRecord(t *testing.T, n int, config string) *rollingFixture {
	t.Helper()
	f := newRollingFixture(t, n)
	ctx := context.Background()
	made := metav1.NewTime(time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC))
	ds := f.daemonSet(t)
	ds.CreationTimestamp = made
	_, err := f.client.AppsV1().DaemonSets("kube-system").Update(ctx, ds, metav1.UpdateOptions{})
	require.NoError(t, err)
	for i := range n {
		pod, err := f.client.CoreV1().Pods("kube-system").Get(ctx, kubeProxyPod(nodeName(i), "1", true).Name, metav1.GetOptions{})
		require.NoError(t, err)
		pod.CreationTimestamp = made
		pod.Spec.Volumes = ds.Spec.Template.Spec.Volumes
		_, err = f.client.CoreV1().Pods("kube-system").Update(ctx, pod, metav1.UpdateOptions{})
		require.NoError(t, err)
	}
	cm, err := f.client.CoreV1().ConfigMaps("kube-system").Get(ctx, "kube-proxy", metav1.GetOptions{})
	require.NoError(t, err)
	cm.Data[configmap.ConfigKey] = config
	cm.CreationTimestamp = made
	// the fake records the write's time in managedFields, as the API
	// server does
	_, err = f.client.CoreV1().ConfigMaps("kube-system").Update(ctx, cm, metav1.UpdateOptions{})
	require.NoError(t, err)
	got, err := f.client.CoreV1().ConfigMaps("kube-system").Get(ctx, "kube-proxy", metav1.GetOptions{})
	require.NoError(t, err)
	require.True(t, lastWriteOf(got).After(made.Time), "the write is in the record's managedFields: %v", got.ManagedFields)
	return f
}

func nodeName(i int) string { return "node-" + strconv.Itoa(i) }

// The documented kubeadm way: edit the record to mode: nftables, then run
// with that mode. The pods run what they started on, which the cluster no
// longer tells: the move is judged as the riskiest case, a mode change
// into nftables, with the kernel check and the migration's canary and
// checks, as --set mode=nftables before the edit gets.
func TestTransitionEditedRecordIsJudgedAsAMigration(t *testing.T) {
	f := editedRecord(t, 3, replaceMode(seedConfig, "nftables"))
	f.setKernel(t, "node-2", "4.18.0-553.el8_10.x86_64")
	_, err := f.run(t, Options{Spec: setMode("nftables"), Check: true})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "node-2 (kernel 4.18.0-553.el8_10.x86_64)")
	assert.Contains(t, err.Error(), "nothing was written")
	assert.Empty(t, f.writes())

	f = editedRecord(t, 3, replaceMode(seedConfig, "nftables"))
	res, err := f.run(t, Options{Spec: setMode("nftables"), Check: true, Connectivity: noTraffic})
	require.NoError(t, err)
	m := res.Facts.Migration
	require.NotNil(t, m, "a migration: %s", res.Msg)
	assert.Equal(t, "unknown", m.From)
	assert.Equal(t, "nftables", m.To)
	assert.Equal(t, StrategyCanary, m.Strategy)
	assert.Equal(t, []string{"node-0"}, m.CanaryNodes)
	assert.True(t, hasWarning(res, "is not known"), "warnings: %v", res.Warnings)
}

// The same fleet whose pods started after the record's last write runs
// the record's data: nothing is unknown, and a run onto the mode they run
// is no migration.
func TestTransitionPodsNewerThanTheRecordRunItsData(t *testing.T) {
	f := editedRecord(t, 2, replaceMode(seedConfig, "nftables"))
	ctx := context.Background()
	later := metav1.NewTime(time.Now().Add(time.Minute))
	for i := range 2 {
		pod, err := f.client.CoreV1().Pods("kube-system").Get(ctx, kubeProxyPod(nodeName(i), "1", true).Name, metav1.GetOptions{})
		require.NoError(t, err)
		pod.CreationTimestamp = later
		_, err = f.client.CoreV1().Pods("kube-system").Update(ctx, pod, metav1.UpdateOptions{})
		require.NoError(t, err)
	}
	res, err := f.run(t, Options{Spec: setMode("nftables"), Check: true, Connectivity: noTraffic})
	require.NoError(t, err)
	assert.Nil(t, res.Facts.Migration, "no migration: the pods run nftables already (%s)", res.Msg)
}

// Observe once: a migration's plan reads the nodes once for its kernel
// check and its preview of the canary and the batches, however many nodes
// there are (the list is paged; each page is one request).
func TestTransitionMigrationListsTheNodesOnce(t *testing.T) {
	f := newRollingFixture(t, 4)
	f.setKernel(t, "node-0", "6.8.0-49-generic")
	_, err := f.run(t, Options{Spec: setMode("nftables"), Check: true, Connectivity: noTraffic})
	require.NoError(t, err)
	lists := 0
	for _, a := range f.client.Actions() {
		if a.GetVerb() == "list" && a.GetResource().Resource == "nodes" {
			lists++
		}
	}
	assert.Equal(t, 1, lists, "node LISTs of a migration's --check")
}

// Only a write of config.conf makes what a pod on the record runs
// unknown: a field manager that owns other keys only (kubespray's server
// in kubeconfig.conf) changed nothing kube-proxy's mode depends on.
func TestTransitionLastWriteIsTheConfigs(t *testing.T) {
	made := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	at := func(h int) *metav1.Time { v := metav1.NewTime(made.Add(time.Duration(h) * time.Hour)); return &v }
	fields := func(s string) *metav1.FieldsV1 { return &metav1.FieldsV1{Raw: []byte(s)} }
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{CreationTimestamp: metav1.NewTime(made), ManagedFields: []metav1.ManagedFieldsEntry{
		{Manager: "kubeadm", Time: at(1), FieldsV1: fields(`{"f:data":{".":{},"f:config.conf":{},"f:kubeconfig.conf":{}}}`)},
		{Manager: "kubectl-replace", Time: at(5), FieldsV1: fields(`{"f:data":{"f:kubeconfig.conf":{}}}`)},
		{Manager: "kubectl-label", Time: at(6), FieldsV1: fields(`{"f:metadata":{"f:labels":{"f:x":{}}}}`)},
	}}}
	assert.Equal(t, made.Add(time.Hour), lastWriteOf(cm), "the kubeconfig and the labels are not the config")
	cm.ManagedFields = append(cm.ManagedFields, metav1.ManagedFieldsEntry{Manager: "kubectl-edit", Time: at(3), FieldsV1: fields(`{"f:data":{"f:config.conf":{}}}`)})
	assert.Equal(t, made.Add(3*time.Hour), lastWriteOf(cm))
	cm.ManagedFields = append(cm.ManagedFields, metav1.ManagedFieldsEntry{Manager: "old-client", Time: at(4)})
	assert.Equal(t, made.Add(4*time.Hour), lastWriteOf(cm), "fields not recorded: taken as the config's")
}

// --restart never writes the change and restarts nothing: the pods start
// on it later (an owed restart, a reboot), so the move is judged all the
// same: a move into nftables on an old kernel is refused.
func TestTransitionRestartNeverIsJudgedAsTheMoveItLeaves(t *testing.T) {
	f := newRollingFixture(t, 2)
	f.setKernel(t, "node-1", "4.18.0-553.el8_10.x86_64")
	_, err := f.run(t, Options{Spec: setMode("nftables"), Restart: RestartNever})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "node-1 (kernel 4.18.0-553.el8_10.x86_64)")
	assert.Empty(t, f.writes())
}

// Another writer's image change that not every pod runs yet (kubectl set
// image on a DaemonSet whose rollout has not finished) is judged from the
// pods: a settings change on an nftables fleet whose template already names
// 1.31 while its pods still run 1.30 moves those nodes onto 1.31, so it
// checks their kernels. Once every pod runs 1.31 it does not.
func TestTransitionAnotherWritersImageIsJudgedFromThePods(t *testing.T) {
	for _, behind := range []bool{true, false} {
		f := fleetOn(t, 2, "registry.k8s.io/kube-proxy:v1.31.2", withMode("nftables", ""))
		f.setKernel(t, "node-0", "6.8.0-49-generic")
		f.setKernel(t, "node-1", "5.10.0-32-amd64")
		ctx := context.Background()
		ds := f.daemonSet(t)
		if behind {
			// the template moved, the controller replaced no pod yet
			ds.Status.UpdatedNumberScheduled = 0
			_, err := f.client.AppsV1().DaemonSets("kube-system").UpdateStatus(ctx, ds, metav1.UpdateOptions{})
			require.NoError(t, err)
		}
		for i := range 2 {
			pods := f.client.CoreV1().Pods("kube-system")
			pod, err := pods.Get(ctx, "kube-proxy-"+nodeName(i)+"-1", metav1.GetOptions{})
			require.NoError(t, err)
			image := "registry.k8s.io/kube-proxy:v1.31.2"
			if behind {
				image = "registry.k8s.io/kube-proxy:v1.30.4"
			}
			pod.Spec.Containers = []corev1.Container{{Name: "kube-proxy", Image: image}}
			_, err = pods.Update(ctx, pod, metav1.UpdateOptions{})
			require.NoError(t, err)
		}
		_, err := f.run(t, Options{Check: true, Spec: configmap.Spec{Settings: []kpconfig.Setting{{Path: "conntrack.maxPerCore", Value: "65536"}}}})
		if !behind {
			if err != nil {
				assert.NotContains(t, err.Error(), "kernel")
			}
			continue
		}
		require.Error(t, err)
		assert.Contains(t, err.Error(), "node-1 (kernel 5.10.0-32-amd64)")
		assert.Contains(t, err.Error(), "nothing was written")
		assert.Empty(t, f.writes())
	}
}
