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
