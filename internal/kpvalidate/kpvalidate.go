// Package kpvalidate is kube-proxy's own check of its config file, without
// importing kube-proxy: its loading (strict decoding with the lenient
// fallback, whose warnings it returns), its Linux defaulting and every rule
// of its validation, for each supported minor. A config.conf this package
// accepts is one kube-proxy of that version accepts at start-up, with the
// same warnings, and the other way round: hack/difftest runs the real code
// of every supported minor next to this package on the same inputs.
package kpvalidate

import (
	"fmt"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/util/version"
)

// Oldest and Newest are the supported kube-proxy minors (1.Oldest to 1.Newest).
const (
	Oldest = 27
	Newest = 37
)

// Rules says which minor's rules a kube-proxy version gets.
// An unknown version gets the newest rules, an out-of-range one the nearest
// supported minor; note then says so.
func Rules(kubeProxyVersion string) (minor int, note string) {
	if kubeProxyVersion == "" {
		return Newest, fmt.Sprintf("kube-proxy version unknown: validating config.conf with kube-proxy 1.%d's rules (pass --kube-proxy-version to use another's)", Newest)
	}
	v, err := version.ParseGeneric(kubeProxyVersion)
	if err != nil || v.Major() != 1 {
		return Newest, fmt.Sprintf("kube-proxy version %q not understood: validating config.conf with kube-proxy 1.%d's rules", kubeProxyVersion, Newest)
	}
	switch m := int(v.Minor()); {
	case m < Oldest:
		return Oldest, fmt.Sprintf("kube-proxy 1.%d is older than the oldest supported (1.%d): validating config.conf with 1.%d's rules", m, Oldest, Oldest)
	case m > Newest:
		return Newest, fmt.Sprintf("kube-proxy 1.%d is newer than the newest supported (1.%d): validating config.conf with 1.%d's rules", m, Newest, Newest)
	default:
		return m, ""
	}
}

// Error is a config.conf kube-proxy would refuse to start with.
type Error struct {
	Minor int
	// Decode is set when kube-proxy could not even decode the file.
	Decode     error
	Violations []Violation
}

func (e *Error) Error() string {
	if e.Decode != nil {
		return fmt.Sprintf("config.conf would not load in kube-proxy 1.%d: %v", e.Minor, e.Decode)
	}
	msgs := make([]string, len(e.Violations))
	for i, v := range e.Violations {
		msgs[i] = v.String()
	}
	return fmt.Sprintf("config.conf is rejected by kube-proxy 1.%d's validation: %s", e.Minor, strings.Join(msgs, "; "))
}

// Validate checks config.conf as kube-proxy 1.minor does before it starts.
// It returns what kube-proxy would log while loading the file (fields it
// ignores, keys given twice: see Warning) and nil or an *Error.
func Validate(text string, minor int) (Warnings, error) {
	c, warns, err := decode(text, minor)
	if err != nil {
		return nil, &Error{Minor: minor, Decode: err}
	}
	setDefaults(c, minor)
	if vs := validate(c, minor); len(vs) > 0 {
		sort.SliceStable(vs, func(i, j int) bool { return vs[i].Field < vs[j].Field })
		return warns, &Error{Minor: minor, Violations: vs}
	}
	return warns, nil
}

// HealthzBindAddress is config.conf's healthzBindAddress as written (empty
// when unset), decoded as Validate does with the newest minor's field set.
func HealthzBindAddress(text string) (string, error) {
	c, _, err := decode(text, Newest)
	if err != nil {
		return "", err
	}
	return c.HealthzBindAddress, nil
}

// Kubeconfig is config.conf's clientConnection.kubeconfig as written: the
// file kube-proxy loads its API client from (empty: its in-cluster config).
func Kubeconfig(text string) (string, error) {
	c, _, err := decode(text, Newest)
	if err != nil {
		return "", err
	}
	return c.ClientConnection.Kubeconfig, nil
}

// Decode checks that config.conf decodes (apiVersion, kind, the fields the
// newest minor has of the right types) and returns what the newest
// kube-proxy would log while loading it: the Warnings whose Unknown is true
// name fields no supported kube-proxy has.
func Decode(text string) (Warnings, error) {
	_, warns, err := decode(text, Newest)
	return warns, err
}
