//go:build e2e

package realnode

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"

	"github.com/kube-proxy-sync/kube-proxy-sync/internal/rollout"
	"github.com/kube-proxy-sync/kube-proxy-sync/test/e2e/cluster"
)

// An upgrade's image through the safe rollout, on real kubelets: from
// kube-proxy 1.27 to 1.34 with --image, every node's pod replaced in one
// rollout that also moves the readiness probe to /livez (1.27 serves only
// /healthz); then an image that cannot run kube-proxy (the pause image,
// tagged as a kube-proxy patch release on every node) crash-loops the first
// node's pod, and the run rolls the template back to the image before: every
// other node kept its pod (UIDs), and every node ends Ready on 1.34.
func TestImageUpgradeIsRolledAndACrashLoopingOneRolledBack(t *testing.T) {
	e := connect(t)
	d := e.dockerOrSkip(t)
	good, bad := e.imageWithTag(t, "v1.34.4"), e.imageWithTag(t, "v1.34.99")

	e.setImage(t, e.imageWithTag(t, "v1.27.16"))
	before := e.podUIDs(t)
	r := e.sync(t, "--image", good)
	require.Equal(t, 0, r.code, "upgrade: %s", r)
	assert.Equal(t, true, r.field("image_changed"), "%s", r)
	assert.Equal(t, e.imageWithTag(t, "v1.27.16"), r.field("image_before"), "%s", r)
	assert.Equal(t, good, r.field("image"), "%s", r)
	assert.Equal(t, "image-changed", r.field("restart_reason"), "%s", r)
	assert.Equal(t, "v1.34.4", r.field("kube_proxy_version"), "%s", r)
	assert.Equal(t, "/livez", r.field("probe_path"), "the new version's probe, in the same rollout: %s", r)
	assert.Equal(t, "/livez", e.readinessPath(t))
	after := e.pods(t, ctxFor(t, rolloutTimeout))
	for n, uid := range before {
		p := after[n]
		assert.NotEqual(t, uid, p.UID, "node %s: replaced", n)
		assert.Equal(t, good, podImage(p), "node %s", n)
		assert.True(t, cluster.PodReady(&p), "node %s: Ready on 1.34 (the kubelet's /livez probe)", n)
	}

	// every node's containerd gets the bad image: pause under a kube-proxy tag
	for n := range before {
		d.tagImage(t, n, d.pauseImage(t, n), bad)
	}
	before = e.podUIDs(t)
	r = e.sync(t, "--image", bad, "--progress-deadline", "60s", "--timeout", "4m")
	require.Equal(t, 1, r.code, "the new image crash-loops: %s", r)
	assert.Equal(t, true, r.field("rolled_back"), "%s", r)
	assert.Equal(t, good, r.field("image"), "the image after the rollback: %s", r)
	assert.Equal(t, good, rollout.ContainerImage(e.daemonSet(t), name), "the template runs the image before again")
	e.waitRolledOut(t, ctxFor(t, rolloutTimeout))
	after = e.pods(t, ctxFor(t, rolloutTimeout))
	replaced := 0
	for n, uid := range before {
		p := after[n]
		if p.UID != uid {
			replaced++
		}
		assert.Equal(t, good, podImage(p), "node %s", n)
		assert.True(t, cluster.PodReady(&p), "node %s: Ready", n)
	}
	assert.Equal(t, 1, replaced, "only the first node the rollout reached lost its pod (maxUnavailable 1)")
}

func podImage(p corev1.Pod) string {
	for _, c := range p.Spec.Containers {
		if c.Name == name {
			return c.Image
		}
	}
	return ""
}

// pauseImage is the pause image in the node's containerd (the kubelet's
// sandbox image).
func (d docker) pauseImage(t *testing.T, node string) string {
	t.Helper()
	out, err := exec.Command("docker", "exec", node, "ctr", "-n", "k8s.io", "images", "list", "-q").CombinedOutput()
	require.NoError(t, err, "list the images of %s: %s", node, out)
	for _, ref := range strings.Fields(string(out)) {
		if strings.Contains(ref, "/pause:") {
			return ref
		}
	}
	t.Fatalf("no pause image on %s: %s", node, out)
	return ""
}

// tagImage tags the image from as to in the node's containerd, and removes
// the tag when the test ends.
func (d docker) tagImage(t *testing.T, node, from, to string) {
	t.Helper()
	out, err := exec.Command("docker", "exec", node, "ctr", "-n", "k8s.io", "images", "tag", "--force", from, to).CombinedOutput()
	require.NoError(t, err, "tag %s as %s on %s: %s", from, to, node, out)
	t.Cleanup(func() {
		out, err := exec.Command("docker", "exec", node, "ctr", "-n", "k8s.io", "images", "rm", to).CombinedOutput()
		assert.NoError(t, err, "remove the tag %s on %s: %s", to, node, out)
	})
}
