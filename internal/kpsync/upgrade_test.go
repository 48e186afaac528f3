package kpsync

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kube-proxy-sync/kube-proxy-sync/internal/configmap"
	"github.com/kube-proxy-sync/kube-proxy-sync/internal/kpvalidate"
	"github.com/kube-proxy-sync/kube-proxy-sync/internal/rollout"
)

// upgradeFixture is a fleet running config (its data the record's, its
// template stamped for it) on image.
func upgradeFixture(t *testing.T, config, image string) *fixture {
	t.Helper()
	cm := seedConfigMap()
	cm.Data[configmap.ConfigKey] = config
	ds := seedDaemonSet(image)
	ds.Annotations[rollout.HashAnnotation] = configmap.Hash(cm.Data, nil)
	return newFixture(t, cm, ds)
}

func withMode(mode, extra string) string {
	text := strings.Replace(seedConfig, "mode: iptables\n", "", 1)
	if mode != "" {
		text += "mode: " + mode + "\n"
	}
	return text + extra
}

// An upgrade onto a kube-proxy that will not start in the running mode is
// refused before any write, and the error names the migration to run
// first: ipvs from 1.40 (gate off by default) unless the config turns the
// gate on, and from 1.43 (locked off) whatever it says.
func TestUpgradeOntoAMinorWhereIPVSDoesNotStartIsRefused(t *testing.T) {
	gateOn := "featureGates:\n  KubeProxyIPVS: true\n"
	cases := []struct {
		name, config, image string
		refused             bool
	}{
		{"ipvs onto 1.40", withMode("ipvs", ""), "registry.k8s.io/kube-proxy:v1.40.0", true},
		{"ipvs onto 1.41 with the gate on", withMode("ipvs", gateOn), "registry.k8s.io/kube-proxy:v1.41.2", false},
		{"ipvs onto 1.43 with the gate on", withMode("ipvs", gateOn), "registry.k8s.io/kube-proxy:v1.43.0", true},
		{"ipvs onto 1.39", withMode("ipvs", ""), "registry.k8s.io/kube-proxy:v1.39.1", false},
		{"nftables onto 1.43", withMode("nftables", ""), "registry.k8s.io/kube-proxy:v1.43.0", false},
		// the newest minor the validation knows: kube-proxy's own rules
		{"ipvs onto the newest known minor, gate off", withMode("ipvs", "featureGates:\n  KubeProxyIPVS: false\n"), "registry.k8s.io/kube-proxy:v1." + strconv.Itoa(kpvalidate.Newest) + ".0", true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := upgradeFixture(t, c.config, "registry.k8s.io/kube-proxy:v1.36.3")
			// a run that would write: only a refusal keeps it from writing
			res, err := f.run(t, Options{Image: c.image})
			if !c.refused {
				require.NoError(t, err)
				assert.Equal(t, c.image, rollout.ContainerImage(f.daemonSet(t), "kube-proxy"), "%s", res.Msg)
				return
			}
			require.Error(t, err)
			assert.Contains(t, err.Error(), "ipvs")
			if !strings.Contains(c.name, "newest") {
				assert.Contains(t, err.Error(), "--set mode=nftables", "names the migration to run first")
				assert.Contains(t, err.Error(), "nothing was written")
			}
			assert.Empty(t, f.writes())
		})
	}
}

// The same refusal in check mode: the preview says it too.
func TestUpgradeRefusalInCheckMode(t *testing.T) {
	f := upgradeFixture(t, withMode("ipvs", ""), "registry.k8s.io/kube-proxy:v1.39.0")
	_, err := f.run(t, Options{Image: "registry.k8s.io/kube-proxy:v1.40.1", Check: true})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "--set mode=nftables")
	assert.Equal(t, "registry.k8s.io/kube-proxy:v1.39.0", rollout.ContainerImage(f.daemonSet(t), "kube-proxy"))
}

// A config that sets no mode runs iptables up to 1.39 and nftables from
// 1.40: an upgrade across writes the running mode explicitly with the
// image, so the upgrade keeps the mode; within one default it writes
// nothing of the kind.
func TestUpgradeAcrossTheDefaultModeWritesTheModeExplicitly(t *testing.T) {
	f := upgradeFixture(t, withMode("", ""), "registry.k8s.io/kube-proxy:v1.39.4")
	res, err := f.run(t, Options{Image: "registry.k8s.io/kube-proxy:v1.40.0"})
	require.NoError(t, err)
	assert.Contains(t, res.Facts.ChangedKeys, "config.conf:mode")
	assert.True(t, res.Facts.ImageChanged)
	ds := f.daemonSet(t)
	_, mounted := configVolume(ds, "kube-proxy", "kube-proxy")
	cm, err := f.client.CoreV1().ConfigMaps("kube-system").Get(context.Background(), mounted, metav1.GetOptions{})
	require.NoError(t, err)
	mode, _, err := modeSettings(cm.Data[configmap.ConfigKey], 40)
	require.NoError(t, err)
	assert.Equal(t, "iptables", mode, "the ConfigMap the new template mounts (%s) sets the mode", mounted)
	assert.Equal(t, "registry.k8s.io/kube-proxy:v1.40.0", rollout.ContainerImage(ds, "kube-proxy"))
	assert.True(t, hasWarning(res, "mode: iptables is written explicitly"), "warnings: %v", res.Warnings)

	within := upgradeFixture(t, withMode("", ""), "registry.k8s.io/kube-proxy:v1.40.0")
	res, err = within.run(t, Options{Image: "registry.k8s.io/kube-proxy:v1.41.0"})
	require.NoError(t, err)
	assert.Empty(t, res.Facts.ChangedKeys)
}

// The version before is unknown and the config sets no mode: which mode
// the fleet runs is unknown too, so an upgrade onto 1.40 is refused.
func TestUpgradeAcrossTheDefaultFromAnUnknownVersionIsRefused(t *testing.T) {
	f := upgradeFixture(t, withMode("", ""), "registry.example/kube-proxy:latest")
	_, err := f.run(t, Options{Image: "registry.k8s.io/kube-proxy:v1.40.0"})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "--set mode=iptables")
	assert.Empty(t, f.writes())
}

func hasWarning(res *Result, part string) bool {
	for _, w := range res.Warnings {
		if strings.Contains(w, part) {
			return true
		}
	}
	return false
}

// An image whose version is unknown (a digest, a tag that is no version)
// is refused on an ipvs fleet: ipvs may not start in it.
func TestUpgradeOntoAnUnknownVersionInIPVSModeIsRefused(t *testing.T) {
	f := upgradeFixture(t, withMode("ipvs", ""), "registry.k8s.io/kube-proxy:v1.39.0")
	_, err := f.run(t, Options{Image: "registry.k8s.io/kube-proxy@sha256:" + strings.Repeat("0", 64)})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "pass --kube-proxy-version")
	assert.Empty(t, f.writes())
}

// An upgrade within the minors where ipvs still starts warns that it will
// not from 1.40.
func TestUpgradeInIPVSModeWarnsOfItsEnd(t *testing.T) {
	f := upgradeFixture(t, withMode("ipvs", ""), "registry.k8s.io/kube-proxy:v1.37.2")
	res, err := f.run(t, Options{Image: "registry.k8s.io/kube-proxy:v1.38.0", Check: true})
	require.NoError(t, err)
	assert.True(t, hasWarning(res, "deprecated since 1.35"), "warnings: %v", res.Warnings)
}

// From 1.40 a config without a mode runs nftables: setting iptables there
// is a migration, planned as one.
func TestUnsetModeFrom140IsNFTables(t *testing.T) {
	f := upgradeFixture(t, withMode("", ""), "registry.k8s.io/kube-proxy:v1.40.1")
	res, err := f.run(t, Options{Spec: setMode("iptables"), Check: true, Connectivity: noTraffic})
	require.NoError(t, err)
	m := res.Facts.Migration
	require.NotNil(t, m, "a migration: %s", res.Msg)
	assert.Equal(t, "nftables", m.From)
	assert.Equal(t, "iptables", m.To)
}
