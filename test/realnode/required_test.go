//go:build e2e

package realnode

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// These run without a cluster: they pin how the tier ends a test that
// cannot do its work here, a skip on a developer's machine and a failure
// where the tier is required (CI=true, or E2E_REQUIRED=1, which make test
// sets), so that a required run never passes on skipped tests.

// recorder stands in for a test's testing.TB and records how it ended;
// any other method panics (the embedded TB is nil).
type recorder struct {
	testing.TB
	failed, skipped string
	logged          []string
}

func (r *recorder) Helper()                   {}
func (r *recorder) Fatalf(f string, a ...any) { r.failed = fmt.Sprintf(f, a...) }
func (r *recorder) Errorf(f string, a ...any) { r.failed = fmt.Sprintf(f, a...) }
func (r *recorder) FailNow()                  {}
func (r *recorder) Skip(a ...any)             { r.skipped = fmt.Sprint(a...) }
func (r *recorder) Logf(f string, a ...any)   { r.logged = append(r.logged, fmt.Sprintf(f, a...)) }

// required sets CI and E2E_REQUIRED for the test as a case names them.
func required(t *testing.T, ci, e2eRequired string) {
	t.Setenv("CI", ci)
	t.Setenv("E2E_REQUIRED", e2eRequired)
}

var requiredCases = []struct {
	name            string
	ci, e2eRequired string
	required        bool
}{
	{name: "a developer's machine"},
	{name: "CI", ci: "true", required: true},
	{name: "make test", e2eRequired: "1", required: true},
}

func TestUnavailableFailsWhereRequired(t *testing.T) {
	for _, c := range requiredCases {
		t.Run(c.name, func(t *testing.T) {
			required(t, c.ci, c.e2eRequired)
			r := &recorder{}
			unavailable(r, "the nodes are not docker containers here")
			if c.required {
				assert.Contains(t, r.failed, "the nodes are not docker containers here")
				assert.Empty(t, r.skipped)
			} else {
				assert.Equal(t, "the nodes are not docker containers here", r.skipped)
				assert.Empty(t, r.failed)
			}
		})
	}
}

// fakeTier lays out a checkout whose hack/kind/egress.sh answers check
// with checkRC and count with 7, and whose .cache/kind/kubeconfig exists
// when kindUp.
func fakeTier(t *testing.T, kindUp bool, checkRC int) *env {
	t.Helper()
	root := t.TempDir()
	script := filepath.Join(root, "hack", "kind", "egress.sh")
	require.NoError(t, os.MkdirAll(filepath.Dir(script), 0o755))
	require.NoError(t, os.WriteFile(script, fmt.Appendf(nil,
		"#!/bin/sh\ncase \"$1\" in check) echo no counting rule >&2; exit %d ;; count) echo 7 ;; esac\n", checkRC), 0o755))
	own := filepath.Join(root, ".cache", "kind", "kubeconfig")
	if kindUp {
		require.NoError(t, os.MkdirAll(filepath.Dir(own), 0o755))
		require.NoError(t, os.WriteFile(own, []byte("apiVersion: v1\n"), 0o600))
	}
	return &env{root: root, kubeconfig: own}
}

func TestEgressCheckSaysWhenOff(t *testing.T) {
	t.Run("the tier's own cluster counts", func(t *testing.T) {
		for _, c := range requiredCases {
			required(t, c.ci, c.e2eRequired)
			r := &recorder{}
			n, ok := fakeTier(t, true, 0).egress(r)
			assert.True(t, ok, c.name)
			assert.Equal(t, 7, n, c.name)
			assert.Empty(t, r.failed, c.name)
		}
	})
	t.Run("the tier's own cluster without its counting rule", func(t *testing.T) {
		for _, c := range requiredCases {
			required(t, c.ci, c.e2eRequired)
			r := &recorder{}
			_, ok := fakeTier(t, true, 1).egress(r)
			assert.False(t, ok, c.name)
			if c.required {
				assert.Contains(t, r.failed, "egress check cannot run on the kind tier's own cluster", c.name)
				assert.Contains(t, r.failed, "no counting rule", c.name)
			} else {
				assert.Empty(t, r.failed, c.name)
				require.Len(t, r.logged, 1, c.name)
				assert.Contains(t, r.logged[0], "egress check off", c.name)
			}
		}
	})
	// a user's own cluster: the rule of make kind-up does not watch it, so
	// the check is off there even where the tier is required, and says so
	t.Run("a user's cluster", func(t *testing.T) {
		for _, c := range requiredCases {
			required(t, c.ci, c.e2eRequired)
			for _, kindUp := range []bool{true, false} {
				e := fakeTier(t, kindUp, 0)
				e.kubeconfig = filepath.Join(t.TempDir(), "user-kubeconfig")
				require.NoError(t, os.WriteFile(e.kubeconfig, []byte("apiVersion: v1\n"), 0o600))
				r := &recorder{}
				_, ok := e.egress(r)
				assert.False(t, ok, "%s, kind up: %v", c.name, kindUp)
				assert.Empty(t, r.failed, "%s, kind up: %v", c.name, kindUp)
				require.Len(t, r.logged, 1, "%s, kind up: %v", c.name, kindUp)
				assert.Contains(t, r.logged[0], "egress check off", "%s, kind up: %v", c.name, kindUp)
				assert.Contains(t, r.logged[0], e.kubeconfig, "%s, kind up: %v", c.name, kindUp)
			}
		}
	})
}
