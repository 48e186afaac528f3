package main

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestPackage(t *testing.T) {
	for sym, want := range map[string]string{
		"k8s.io/api/core/v1.(*Pod).Marshal":                                      "k8s.io/api/core/v1",
		"type:*k8s.io/api/core/v1.Pod":                                           "k8s.io/api/core/v1",
		"go:itab.*k8s.io/api/core/v1.Pod,k8s.io/apimachinery/pkg/runtime.Object": "k8s.io/api/core/v1",
		"type:.eq.k8s.io/api/apps/v1.DaemonSetSpec":                              "k8s.io/api/apps/v1",
		"gopkg.in/yaml%2ev3.(*parser).parse":                                     "gopkg.in/yaml.v3",
		"runtime.mallocgc":                                                       "runtime",
		"slices.SortFunc[go.shape.string]":                                       "slices",
		"github.com/kube-proxy-sync/kube-proxy-sync/internal/kube.(*resource[go.shape.*uint8,go.shape.*uint8]).Get": "github.com/kube-proxy-sync/kube-proxy-sync/internal/kube",
		"go:func.*": "(func metadata)",
		"type:struct { F uintptr; X0 *k8s.io/x.T }": "(anonymous types)",
	} {
		assert.Equal(t, want, Package(sym), sym)
	}
}
