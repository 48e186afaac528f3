package kpvalidate

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// AllAlpha and AllBeta set every alpha or beta gate not set by name
// (component-base's featuregate), so they reach the rules that read a gate:
// AllBeta=false turns LoggingBetaOptions off, and with it the json format.
func TestAllAlphaAllBeta(t *testing.T) {
	stage, ok := StageAt(37, "LoggingBetaOptions")
	assert.True(t, ok)
	assert.Equal(t, StageBeta, stage, "LoggingBetaOptions is a beta gate at 1.37")
	for body, reject := range map[string]bool{
		"featureGates: {AllBeta: false}\nlogging:\n  format: json\n":                           true,
		"featureGates: {AllBeta: false, LoggingBetaOptions: true}\nlogging:\n  format: json\n": false,
		"featureGates: {AllBeta: true}\nlogging:\n  format: json\n":                            false,
		"featureGates: {AllAlpha: false}\nlogging:\n  format: json\n":                          false,
	} {
		_, err := Validate(testHeader+body, 37)
		assert.Equal(t, reject, err != nil, "%s: %v", body, err)
	}
}
