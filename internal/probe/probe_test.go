package probe

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

func TestImageVersion(t *testing.T) {
	const digest = "sha256:1111111111111111111111111111111111111111111111111111111111111111"
	cases := []struct {
		image string
		want  string // "" means an error: the caller falls back
		path  string
	}{
		{"registry.k8s.io/kube-proxy:v1.33.1", "1.33.1", Livez},
		{"registry.k8s.io/kube-proxy:v1.28.0", "1.28.0", Livez},
		{"registry.k8s.io/kube-proxy:v1.27.16", "1.27.16", Healthz},
		{"602401143452.dkr.ecr.us-west-2.amazonaws.com/eks/kube-proxy:v1.27.16-eksbuild.1", "1.27.16", Healthz},
		{"registry.k8s.io/kube-proxy:v1.30.0@" + digest, "1.30.0", Livez},
		{"localhost:5000/kube-proxy:v1.29.2", "1.29.2", Livez},
		{"kube-proxy:1.26.3", "1.26.3", Healthz},
		{"registry.k8s.io/kube-proxy@" + digest, "", ""},
		{"localhost:5000/kube-proxy", "", ""},
		{"registry.k8s.io/kube-proxy:latest", "", ""},
		{"registry.k8s.io/kube-proxy", "", ""},
	}
	for _, tc := range cases {
		t.Run(tc.image, func(t *testing.T) {
			v, err := ImageVersion(tc.image)
			if tc.want == "" {
				assert.Error(t, err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, v.String())
			assert.Equal(t, tc.path, PathFor(v))
		})
	}
}

func TestDesiredKeepsTimingAndReplacesHandler(t *testing.T) {
	cur := &corev1.Probe{
		ProbeHandler:  corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(10256)}},
		PeriodSeconds: 7, FailureThreshold: 9,
	}
	p := Desired(cur, Livez, 10256, "")
	assert.Nil(t, p.TCPSocket)
	require.NotNil(t, p.HTTPGet)
	assert.Equal(t, Livez, p.HTTPGet.Path)
	assert.Equal(t, int32(7), p.PeriodSeconds)
	assert.Equal(t, int32(9), p.FailureThreshold)
	assert.NotNil(t, cur.TCPSocket, "the current probe is not modified")
	assert.True(t, Matches(p, Livez, 10256, ""))
	assert.False(t, Matches(p, Healthz, 10256, ""))
	assert.False(t, Matches(p, Livez, 10257, ""))
	assert.False(t, Matches(nil, Livez, 10256, ""))
}
