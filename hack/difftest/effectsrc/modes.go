package effectsrc

import "strings"

// Modes is a set of proxy modes: Linux's three and Windows' kernelspace.
type Modes uint8

// The proxy modes.
const (
	IPTables Modes = 1 << iota
	IPVS
	NFTables
	Kernelspace

	Linux = IPTables | IPVS | NFTables
	All   = Linux | Kernelspace
)

var modeNames = []struct {
	m    Modes
	name string
}{{IPTables, "iptables"}, {IPVS, "ipvs"}, {NFTables, "nftables"}, {Kernelspace, "kernelspace"}}

// ParseModes reads the mode column of internal/kpvalidate's table: "*" is
// every mode, "-" none, else a comma-separated list.
func ParseModes(s string) Modes {
	switch s {
	case "*":
		return All
	case "-", "":
		return 0
	}
	var out Modes
	for _, part := range strings.Split(s, ",") {
		out |= modeNamed(part)
	}
	return out
}

func modeNamed(name string) Modes {
	for _, n := range modeNames {
		if n.name == name {
			return n.m
		}
	}
	return 0
}

func (m Modes) String() string {
	if m == 0 {
		return "none"
	}
	var parts []string
	for _, n := range modeNames {
		if m&n.m != 0 {
			parts = append(parts, n.name)
		}
	}
	return strings.Join(parts, ",")
}
