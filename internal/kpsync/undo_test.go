package kpsync

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"

	"github.com/kube-proxy-sync/kube-proxy-sync/internal/rollout"
)

// ranBefore stores revision number of the DaemonSet's history, as the
// DaemonSet controller keeps a template the DaemonSet had: the template
// it has now, mounting configMap in its config volume and running image,
// labelled for the DaemonSet's selector.
func (f *fixture) ranBefore(t *testing.T, revision int64, configMap, image string) {
	t.Helper()
	ds := f.daemonSet(t)
	ds.Spec.Template.Spec.Volumes[0].ConfigMap.Name = configMap
	ds.Spec.Template.Spec.Containers[0].Image = image
	var labels map[string]string
	if ds.Spec.Selector != nil {
		labels = ds.Spec.Selector.MatchLabels
	}
	tmpl, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&ds.Spec.Template)
	require.NoError(t, err)
	tmpl["$patch"] = "replace"
	raw, err := json.Marshal(map[string]any{"spec": map[string]any{"template": tmpl}})
	require.NoError(t, err)
	cr := &appsv1.ControllerRevision{
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("kube-proxy-ran-%d", revision), Namespace: "kube-system", Labels: labels, OwnerReferences: []metav1.OwnerReference{{
			APIVersion: "apps/v1", Kind: "DaemonSet", Name: "kube-proxy", UID: dsUID, Controller: ptr.To(true),
		}}},
		Data:     runtime.RawExtension{Raw: raw},
		Revision: revision,
	}
	_, err = f.client.AppsV1().ControllerRevisions("kube-system").Create(context.Background(), cr, metav1.CreateOptions{})
	require.NoError(t, err)
}

// --undo judges the move it makes: from the config and image the fleet
// runs to the config before the last change with the image the template
// keeps. After one rollout that changed the image and the config together
// (an upgrade with a settings change) that pair is one the fleet never
// ran: refused before any write, naming both images, both ConfigMaps and
// the way back (`kubectl rollout undo`). Across kube-proxy 1.40, whose
// default mode is nftables, the old config (no mode) with the new image
// would switch iptables to nftables instead of going back.
func TestUndoRefusesAChangeThatMovedTheImageToo(t *testing.T) {
	noMode := seedConfigMap()
	noMode.Data["config.conf"] = strings.Replace(noMode.Data["config.conf"], "mode: iptables\n", "", 1)
	for _, tc := range []struct {
		name     string
		record   *corev1.ConfigMap
		before   func(t *testing.T, f *fixture) // the history up to the change, its revisions recorded
		from, to string
	}{
		{"from kubeadm's layout", seedConfigMap(), func(*testing.T, *fixture) {}, imageBefore, imageAfter},
		{"from a copy", seedConfigMap(), func(t *testing.T, f *fixture) {
			_, err := f.run(t, set("clusterCIDR", "10.60.0.0/16"))
			require.NoError(t, err)
			f.recordRevision(t, "kube-proxy-2", dsUID, 2)
			f.clock.Step(time.Second)
		}, imageBefore, imageAfter},
		{"across the 1.40 default mode", noMode, func(*testing.T, *fixture) {}, "registry.k8s.io/kube-proxy:v1.39.3", "registry.k8s.io/kube-proxy:v1.40.1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, tc.record, seedDaemonSet(tc.from))
			f.recordRevision(t, "kube-proxy-1", dsUID, 1) // the template kubeadm made
			tc.before(t, f)
			res, err := f.run(t, Options{Image: tc.to, Spec: set("clusterCIDR", "10.61.0.0/16").Spec})
			require.NoError(t, err)
			require.True(t, res.Facts.Restarted)
			f.recordRevision(t, "kube-proxy-3", dsUID, 3)
			ds := f.daemonSet(t)
			prev, mounted := ds.Annotations[rollout.PreviousConfigAnnotation], rollout.ConfigVolumeOf(ds, "kube-proxy")
			require.NotEmpty(t, prev)
			if tc.record == noMode {
				require.Contains(t, f.getConfigMap(t, mounted).Data["config.conf"], "mode: iptables", "the upgrade keeps the mode the fleet ran")
				require.NotContains(t, f.getConfigMap(t, prev).Data["config.conf"], "mode:", "the config before it names none: nftables on 1.40")
			}
			f.clock.Step(time.Second)

			_, err = f.run(t, Options{Undo: true})
			require.Error(t, err)
			msg := err.Error()
			assert.Contains(t, msg, "ran configmap kube-system/"+prev+" (the config before its last change) with "+tc.from)
			assert.Contains(t, msg, "runs configmap kube-system/"+mounted+" with "+tc.to+" now")
			assert.Contains(t, msg, "kubectl rollout undo daemonset/kube-proxy -n kube-system")
			assert.Contains(t, msg, "nothing was changed")
			assert.Empty(t, f.writes())
			now := f.daemonSet(t)
			assert.Equal(t, ds.Generation, now.Generation, "the template did not move")
			assert.Equal(t, mounted, rollout.ConfigVolumeOf(now, "kube-proxy"))
			assert.Equal(t, tc.to, rollout.ContainerImage(now, "kube-proxy"))
		})
	}
}

// A change of the config alone is undone as before: the config before it
// ran with the image the template keeps. So it is where an image rollout
// came before the change: the config ran with the new image last.
func TestUndoOfAConfigChangeAlone(t *testing.T) {
	for name, image := range map[string]string{
		"no image rollout":           "",
		"an image rollout before it": imageAfter,
	} {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t, seedConfigMap(), seedDaemonSet(imageBefore))
			f.recordRevision(t, "kube-proxy-1", dsUID, 1)
			runs := imageBefore
			if image != "" {
				_, err := f.run(t, Options{Image: image})
				require.NoError(t, err)
				f.recordRevision(t, "kube-proxy-2", dsUID, 2)
				f.clock.Step(time.Second)
				runs = image
			}
			res, err := f.run(t, set("clusterCIDR", "10.62.0.0/16"))
			require.NoError(t, err)
			require.True(t, res.Facts.Restarted)
			f.recordRevision(t, "kube-proxy-3", dsUID, 3)
			prev := f.daemonSet(t).Annotations[rollout.PreviousConfigAnnotation]
			require.NotEmpty(t, prev)
			f.clock.Step(time.Second)

			f.client.ClearActions()
			res, err = f.run(t, Options{Undo: true})
			require.NoError(t, err)
			assert.True(t, res.Facts.Restarted)
			lists := 0
			for _, a := range f.client.Actions() {
				if a.GetVerb() == "list" && a.GetResource().Resource == "controllerrevisions" {
					lists++
				}
			}
			// the history once per decision (the plan, the plan under the
			// Lease) and once for what the copies' pruning keeps
			assert.Equal(t, 3, lists, "ControllerRevision lists of the undo")
			now := f.daemonSet(t)
			assert.Equal(t, prev, rollout.ConfigVolumeOf(now, "kube-proxy"), "the config before the change")
			assert.Equal(t, runs, rollout.ContainerImage(now, "kube-proxy"), "with the image it ran")
			assert.NotContains(t, f.configMap(t).Data["config.conf"], "10.62.0.0/16")
		})
	}
}

// Where no revision mounting the config before the last change is left
// (the history pruned, revisionHistoryLimit), the image it ran with is
// unknown: refused as the riskiest case, before any write, with the way
// forward.
func TestUndoWithTheRevisionGoneIsRefused(t *testing.T) {
	f := newFixture(t, seedConfigMap(), seedDaemonSet(imageBefore))
	_, err := f.run(t, set("clusterCIDR", "10.63.0.0/16"))
	require.NoError(t, err)
	f.recordRevision(t, "kube-proxy-2", dsUID, 2) // the template now; its history pruned
	ds := f.daemonSet(t)
	prev := ds.Annotations[rollout.PreviousConfigAnnotation]
	require.NotEmpty(t, prev)
	f.clock.Step(time.Second)

	_, err = f.run(t, Options{Undo: true})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "no revision of daemonset kube-system/kube-proxy mounts configmap kube-system/"+prev)
	assert.Contains(t, err.Error(), "the image that config ran with is unknown")
	assert.Contains(t, err.Error(), "kubectl rollout undo daemonset/kube-proxy -n kube-system")
	assert.Contains(t, err.Error(), "nothing was changed")
	assert.Empty(t, f.writes())
	assert.Equal(t, ds.Generation, f.daemonSet(t).Generation, "the template did not move")
}
