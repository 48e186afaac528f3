package kpvalidate

import (
	"fmt"
	"sort"
	"strings"
)

// Proxy modes on Linux.
const (
	ModeIPTables = "iptables"
	ModeIPVS     = "ipvs"
	ModeNFTables = "nftables"
)

// ModeOf is the proxy mode kube-proxy on Linux runs config.conf in: its
// mode, or iptables when it sets none (the default of every supported minor).
func ModeOf(text string) (string, error) {
	c, _, err := decode(text, Newest)
	if err != nil {
		return "", err
	}
	if c.Mode == "" {
		return ModeIPTables, nil
	}
	return c.Mode, nil
}

// ModeSettings is config.conf's mode as kube-proxy 1.minor decodes it (""
// when it sets none, whatever the version's default) and the feature gates
// it sets: the one decoder the validation, the guards and the plan share,
// so a field kube-proxy drops (a key in the wrong case, say) is dropped
// here too. A minor past Newest is decoded as Newest.
func ModeSettings(text string, minor int) (string, map[string]bool, error) {
	c, _, err := decode(text, min(max(minor, Oldest), Newest))
	if err != nil {
		return "", nil, err
	}
	return c.Mode, c.FeatureGates, nil
}

// GateEnabled is the value kube-proxy 1.minor gives a feature gate with
// config.conf: its own setting, else AllAlpha's or AllBeta's for a gate of
// that stage, else the version's default.
func GateEnabled(text string, minor int, gate string) (bool, error) {
	c, _, err := decode(text, minor)
	if err != nil {
		return false, err
	}
	v := &validator{c: c, minor: minor}
	return v.enabled(gate), nil
}

// ModeChangeNotes names the settings of config.conf whose meaning changes
// when kube-proxy 1.minor runs it in mode to instead of mode from (both
// Linux modes): settings set to a value other than the zero one that only
// from reads (with the field to reads instead, where there is one), the
// default of nodePortAddresses where it differs between the two, and
// localhost NodePorts, which only iptables mode has. Each note is one
// sentence, for a warning.
func ModeChangeNotes(text string, minor int, from, to string) ([]string, error) {
	all, _, err := leaves([]byte(text))
	if err != nil {
		return nil, err
	}
	linux := Target{Minor: minor, OS: "linux"}
	var notes, stop []string
	paths := make([]string, 0, len(all))
	for p := range all {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	for _, p := range paths {
		if zeroJSON(all[p]) || p == "iptables.localhostNodePorts" {
			continue
		}
		if _, known := Lookup(p); !known || !reads(p, linux, from) || reads(p, linux, to) {
			continue
		}
		what := fmt.Sprintf("%s: %s", p, all[p])
		_, field, _ := strings.Cut(p, ".")
		if alt := to + "." + field; field != "" && alt != p {
			if f, ok := Lookup(alt); ok && f.Since <= minor && reads(alt, linux, to) {
				if v, set := all[alt]; (!set || zeroJSON(v)) && sameDefault[field] == all[p] {
					continue // the new mode's field defaults to the same (kubeadm writes minSyncPeriod: 1s)
				}
				what += fmt.Sprintf(" (%s mode reads %s instead", to, alt)
				if v, set := all[alt]; set && !zeroJSON(v) {
					what += fmt.Sprintf(", set to %s", v)
				} else {
					what += ", not set"
				}
				what += ")"
			}
		}
		stop = append(stop, what)
	}
	if len(stop) > 0 {
		note := fmt.Sprintf("config.conf sets %s, which kube-proxy 1.%d reads in %s mode only: it stops applying in %s mode", strings.Join(stop, "; "), minor, from, to)
		if v := all["ipvs.strictARP"]; v == "true" && from == ModeIPVS {
			note += " (strictARP was needed for MetalLB's L2 mode because IPVS binds every Service IP to kube-ipvs0; " + to + " mode binds none)"
		}
		notes = append(notes, note)
	}
	// nodePortAddresses unset: from 1.31 nftables mode takes the node's
	// primary IPs (cmd/kube-proxy/app/server_linux.go), iptables and ipvs
	// mode every local address
	if npa, set := all["nodePortAddresses"]; minor >= 31 && (!set || zeroJSON(npa)) && (from == ModeNFTables) != (to == ModeNFTables) {
		if to == ModeNFTables {
			notes = append(notes, fmt.Sprintf("nodePortAddresses is not set: in nftables mode kube-proxy 1.%d then accepts NodePort connections on the node's primary IPs only, where %s mode accepted them on every local address; set nodePortAddresses if clients reach NodePorts on other addresses of the nodes", minor, from))
		} else {
			notes = append(notes, fmt.Sprintf("nodePortAddresses is not set: in %s mode kube-proxy 1.%d then accepts NodePort connections on every local address of the node, where nftables mode accepted them on its primary IPs only; set nodePortAddresses (e.g. [primary]) to keep that", to, minor))
		}
	}
	// localhost NodePorts (127.0.0.1:NODEPORT): iptables mode only, on by default
	if from == ModeIPTables && to != ModeIPTables && all["iptables.localhostNodePorts"] != "false" {
		notes = append(notes, fmt.Sprintf("iptables.localhostNodePorts is %s: NodePorts answer on 127.0.0.1 in iptables mode, never in %s mode; clients on the nodes that connect to localhost:NODEPORT must use the node's address", map[bool]string{true: "true", false: "not set (true by default)"}[all["iptables.localhostNodePorts"] == "true"], to))
	}
	return notes, nil
}

// sameDefault is the JSON value kube-proxy defaults each mode's field of
// this name to, the same in iptables, ipvs and nftables mode.
var sameDefault = map[string]string{"syncPeriod": `"30s"`, "minSyncPeriod": `"1s"`, "masqueradeBit": "14"}

// zeroJSON: a leaf's JSON value is its type's zero value, which kube-proxy
// treats as unset (kubeadm writes every field, most of them zero).
func zeroJSON(v string) bool {
	switch v {
	case "", "null", `""`, "0", "false", `"0s"`, "[]", "{}":
		return true
	}
	return false
}
