package kpvalidate

import "sort"

// Gate is what kube-proxy of one minor does with a feature gate in its
// featureGates: its default, and whether it accepts true and false (a gate
// locked to its default accepts only that).
type Gate struct {
	Default bool `json:"default"`
	True    bool `json:"true"`
	False   bool `json:"false"`
}

// GateAt returns feature gate name at 1.minor, false when that kube-proxy
// does not know it.
func GateAt(minor int, name string) (Gate, bool) {
	s, ok := gateTable[name]
	i := minor - gateTableOldest
	if !ok || i < 0 || i >= len(s) || s[i] == '-' {
		return Gate{}, false
	}
	b := s[i] - '0'
	return Gate{Default: b&1 != 0, True: b&2 != 0, False: b&4 != 0}, true
}

// GateNames lists the feature gates kube-proxy 1.minor knows, sorted.
func GateNames(minor int) []string {
	var out []string
	for name := range gateTable {
		if _, ok := GateAt(minor, name); ok {
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out
}

// Stages of a feature gate at one minor, as AllAlpha and AllBeta see them.
const (
	StageAlpha = "ALPHA"
	StageBeta  = "BETA"
	StageOther = "" // GA, deprecated, or unknown at that minor
)

// gateStages: for each feature gate a validation rule reads, its stage per
// minor from 1.gateTableOldest ('a' alpha, 'b' beta, '-' anything else).
// AllAlpha=x and AllBeta=x set every alpha or beta gate not set by name to
// x (component-base's featuregate), so a rule reading one of these gates
// sees them. hack/difftest checks every entry against kube-proxy's own gate
// at each minor (TestGateStages); a rule that reads another gate must add
// it here.
var gateStages = map[string]string{
	"KubeProxyIPVS":       "-----------",
	"LoggingAlphaOptions": "aaaaaaaaaaa",
	"LoggingBetaOptions":  "bbbbbbbbbbb",
	"NFTablesProxyMode":   "--aabb-----",
}

// StageAt is gate's stage at 1.minor for AllAlpha and AllBeta, and whether
// the gate is one gateStages tracks.
func StageAt(minor int, gate string) (string, bool) {
	s, ok := gateStages[gate]
	i := minor - gateTableOldest
	if !ok || i < 0 || i >= len(s) {
		return StageOther, ok
	}
	switch s[i] {
	case 'a':
		return StageAlpha, true
	case 'b':
		return StageBeta, true
	}
	return StageOther, true
}

// StagedGates lists the gates gateStages tracks, sorted.
func StagedGates() []string {
	out := make([]string, 0, len(gateStages))
	for name := range gateStages {
		out = append(out, name)
	}
	sort.Strings(out)
	return out
}
