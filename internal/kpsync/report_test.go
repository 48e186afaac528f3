package kpsync

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"

	"github.com/kube-proxy-sync/kube-proxy-sync/internal/audit"
	"github.com/kube-proxy-sync/kube-proxy-sync/internal/audit/audittest"
	"github.com/kube-proxy-sync/kube-proxy-sync/internal/configmap"
)

// An audit log the run cannot write to fails the run before its first
// write to the cluster: a record is written and fsynced first, so a full
// disk is found while the ConfigMap, the DaemonSet and the Lease are as
// they were, for a restarting change and for one with no effect (which
// restarts nothing, and so writes no intent record).
func TestUnwritableAuditLogFailsBeforeTheFirstWrite(t *testing.T) {
	for _, path := range []struct {
		name string
		make func(t *testing.T) string
	}{
		{"/dev/full", func(*testing.T) string { return "/dev/full" }},
		{"symlink to /dev/full", func(t *testing.T) string {
			p := filepath.Join(t.TempDir(), "audit.jsonl")
			require.NoError(t, os.Symlink("/dev/full", p))
			return p
		}},
		{"regular file on a full disk", func(t *testing.T) string {
			p := filepath.Join(t.TempDir(), "audit.jsonl")
			audittest.FillToLimit(t, p) // no write can grow it
			return p
		}},
	} {
		for _, change := range []struct {
			name string
			o    Options
		}{
			{"restarting change", Options{Spec: configmap.Spec{Server: "https://10.0.0.1:6443"}}},
			{"no-effect change", set("ipvs.scheduler", "lc")},
		} {
			t.Run(path.name+"/"+change.name, func(t *testing.T) {
				f := newFixture(t, onCopy(seedConfigMap(), seedDaemonSet("registry.k8s.io/kube-proxy:v1.33.6"))...)
				f.audit = path.make(t)
				res, err := f.run(t, change.o)
				require.Error(t, err)
				assert.Contains(t, err.Error(), "audit log")
				assert.False(t, res.Changed)
				for _, a := range f.client.Actions() {
					switch a.GetVerb() {
					case "get", "list", "watch":
					case "create":
						assert.Equal(t, "selfsubjectaccessreviews", a.GetResource().Resource, "no write, not even the Lease or an Event")
					default:
						t.Errorf("%s %s before the audit record was on disk", a.GetVerb(), a.GetResource().Resource)
					}
				}
				assert.Equal(t, seedConfigMap().Data, f.configMap(t).Data)
				assert.Equal(t, seedDaemonSet("registry.k8s.io/kube-proxy:v1.33.6").Annotations, f.daemonSet(t).Annotations)
				assert.Empty(t, f.daemonSet(t).Spec.Template.Annotations)
			})
		}
	}
}

// Every run that writes has a record on disk before its first write: a
// no-effect change (no restart, so no intent) has its plan and outcome.
func TestNoRestartChangeIsAudited(t *testing.T) {
	f := newFixture(t, onCopy(seedConfigMap(), seedDaemonSet("registry.k8s.io/kube-proxy:v1.33.6"))...)
	res, err := f.run(t, set("ipvs.scheduler", "lc"))
	require.NoError(t, err)
	require.True(t, res.Facts.ConfigMapChanged)
	require.False(t, res.Facts.Restarted)
	lines := readAudit(t, f.audit)
	require.Len(t, lines, 2)
	assert.Equal(t, audit.PhasePlan, lines[0].Phase)
	assert.Equal(t, []string{"config.conf:ipvs.scheduler"}, lines[0].ChangedKeys)
	assert.Equal(t, map[string]string{"config.conf:ipvs.scheduler": "no-effect"}, lines[0].ChangedKeysEffect)
	assert.False(t, lines[0].Restart)
	assert.Equal(t, "100", lines[0].ResourceVersionBefore)
	assert.Equal(t, audit.PhaseOutcome, lines[1].Phase)
	assert.Equal(t, "succeeded", lines[1].Outcome)
	assert.Equal(t, lines[0].AuditID, lines[1].AuditID)
}

// The audit log says what kind of run it was, and names the image and the
// ConfigMap the pod template ran before it and after it.
func TestAuditNamesTheImageTheConfigMapAndTheKind(t *testing.T) {
	f := newRollingFixture(t, 3)
	f.podController(t, func(node, gen string) *corev1.Pod { return kubeProxyPod(node, gen, true) })
	res, err := f.run(t, Options{Image: imageAfter, Strategy: StrategyCanary, CanaryNodes: 1, RollbackOnFailure: true, Timeout: 10 * time.Second})
	require.NoError(t, err)
	require.True(t, res.Facts.Restarted)
	lines := readAudit(t, f.audit)
	require.NotEmpty(t, lines)
	out := lines[len(lines)-1]
	assert.Equal(t, audit.PhaseOutcome, out.Phase)
	assert.Equal(t, "image", out.Kind)
	assert.Equal(t, imageBefore, out.ImageBefore)
	assert.Equal(t, imageAfter, out.ImageAfter)
	assert.Equal(t, "kube-proxy", out.ConfigMapBefore, "kubeadm's layout")
	assert.Equal(t, res.Facts.ConfigMapName, out.ConfigMapAfter)
	assert.NotEqual(t, out.ConfigMapBefore, out.ConfigMapAfter, "the restart moved the template onto a copy")
	for _, r := range lines {
		assert.Equal(t, "image", r.Kind, "the %s record", r.Phase)
		assert.Equal(t, imageAfter, r.ImageAfter, "the %s record", r.Phase)
		assert.Equal(t, out.ConfigMapAfter, r.ConfigMapAfter, "the %s record", r.Phase)
	}

	// an image-only change records no earlier config to go back to: the
	// undo is refused, and audited as an undo
	f.clock.Step(time.Second)
	_, err = f.run(t, Options{Undo: true, Strategy: StrategyCanary, CanaryNodes: 1, RollbackOnFailure: true, Timeout: 10 * time.Second})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "names no earlier config")
	lines = readAudit(t, f.audit)
	assert.Equal(t, "undo", lines[len(lines)-1].Kind, "%v", err)
}
