package audit

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kube-proxy-sync/kube-proxy-sync/internal/audit/audittest"
)

func TestAppendWritesPrivateLines(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sub", "audit.jsonl")
	l := Log{Path: path}
	require.NoError(t, l.Append(Record{AuditID: "a", Phase: PhasePlan}))
	require.NoError(t, l.Append(Record{AuditID: "a", Phase: PhaseOutcome, Outcome: "succeeded"}))
	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	lines := strings.Split(strings.TrimSpace(string(raw)), "\n")
	require.Len(t, lines, 2)
	var r Record
	require.NoError(t, json.Unmarshal([]byte(lines[0]), &r))
	assert.Equal(t, PhasePlan, r.Phase)
	st, err := os.Stat(path)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), st.Mode().Perm())
}

// The audit log must be a private regular file named by the path itself:
// a symlink could send the records (and the run's appends) anywhere, a
// FIFO with no reader blocks the open past any signal, and a file others
// can read is not the 0600 the README promises. Each is refused, and the
// file behind it is left as it was.
func TestAppendRefusesWhatIsNotAPrivateRegularFile(t *testing.T) {
	for _, tc := range []struct {
		name string
		// setup makes the path and returns a check of what is behind it
		setup func(t *testing.T, path string) (string, func(t *testing.T))
		want  string
	}{
		{"symlink to a file", func(t *testing.T, path string) (string, func(t *testing.T)) {
			target := filepath.Join(t.TempDir(), "elsewhere")
			require.NoError(t, os.WriteFile(target, []byte("keep\n"), 0o600))
			require.NoError(t, os.Symlink(target, path))
			return path, func(t *testing.T) {
				raw, err := os.ReadFile(target)
				require.NoError(t, err)
				assert.Equal(t, "keep\n", string(raw), "nothing appended through the link")
			}
		}, "is a symbolic link"},
		{"dangling symlink", func(t *testing.T, path string) (string, func(t *testing.T)) {
			target := filepath.Join(t.TempDir(), "created-through-the-link")
			require.NoError(t, os.Symlink(target, path))
			return path, func(t *testing.T) {
				_, err := os.Lstat(target)
				assert.True(t, os.IsNotExist(err), "no file created through the link")
			}
		}, "is a symbolic link"},
		{"fifo without a reader", func(t *testing.T, path string) (string, func(t *testing.T)) {
			require.NoError(t, syscall.Mkfifo(path, 0o600))
			return path, func(*testing.T) {}
		}, "not a regular file"},
		{"character device", func(*testing.T, string) (string, func(t *testing.T)) {
			return "/dev/full", func(*testing.T) {}
		}, "not a regular file"},
		{"directory", func(t *testing.T, path string) (string, func(t *testing.T)) {
			require.NoError(t, os.Mkdir(path, 0o700))
			return path, func(*testing.T) {}
		}, "audit log"},
		{"file readable by others", func(t *testing.T, path string) (string, func(t *testing.T)) {
			require.NoError(t, os.WriteFile(path, []byte("old\n"), 0o600))
			require.NoError(t, os.Chmod(path, 0o644))
			return path, func(t *testing.T) {
				st, err := os.Stat(path)
				require.NoError(t, err)
				assert.Equal(t, os.FileMode(0o644), st.Mode().Perm(), "its mode is the user's to change")
				raw, err := os.ReadFile(path)
				require.NoError(t, err)
				assert.Equal(t, "old\n", string(raw), "nothing appended")
			}
		}, "mode 0644"},
		{"another user's file", func(t *testing.T, path string) (string, func(t *testing.T)) {
			require.NoError(t, os.WriteFile(path, []byte("theirs\n"), 0o600))
			other := os.Geteuid() + 1
			if err := os.Chown(path, other, -1); err != nil {
				// CI runs the unit tests as root: there the case must run
				if os.Getenv("CI") == "true" {
					t.Fatalf("cannot give the file to uid %d: %v; under CI=true this case must run: run the unit tests as root, as CI does", other, err)
				}
				t.Skipf("cannot give the file to uid %d (not root): %v", other, err)
			}
			return path, func(t *testing.T) {
				raw, err := os.ReadFile(path)
				require.NoError(t, err)
				assert.Equal(t, "theirs\n", string(raw), "nothing appended")
			}
		}, "belongs to another user"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path, check := tc.setup(t, filepath.Join(t.TempDir(), "audit.jsonl"))
			l := Log{Path: path}
			// an open that blocks (a FIFO) would hang the test: bound it
			done := make(chan error, 1)
			go func() { done <- l.Append(Record{AuditID: "a", Phase: PhasePlan}) }()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			select {
			case err := <-done:
				require.Error(t, err)
				assert.Contains(t, err.Error(), tc.want)
				assert.Contains(t, err.Error(), path, "the error names the path")
				assert.Contains(t, err.Error(), "--audit-log", "and says what to change")
			case <-ctx.Done():
				t.Fatal("the audit log's open blocked")
			}
			check(t)
		})
	}
}

// A log whose writes fail (a full disk, here the file size limit) fails
// the append, which the run turns into a failure before its first write.
func TestAppendFailsWhenTheWriteFails(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	audittest.FillToLimit(t, path)
	err := Log{Path: path}.Append(Record{AuditID: "a", Phase: PhasePlan})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "write audit log "+path)
}
