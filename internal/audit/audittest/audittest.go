// Package audittest helps tests make an audit log's writes fail.
package audittest

import (
	"bytes"
	"flag"
	"os"
	"syscall"
	"testing"
)

// FillToLimit writes a regular file at path as large as the process's file
// size limit (RLIMIT_FSIZE), which it sets until the test ends: a write
// that would grow the file fails with EFBIG (the Go runtime ignores
// SIGXFSZ), as on a full disk. The limit holds for every file the process
// writes, so the test must not run in parallel with others; it is set
// above go test's own log of what the tests read (-test.testlogfile, kept
// for its cache), which grows while the test runs.
func FillToLimit(t testing.TB, path string) {
	t.Helper()
	limit := int64(4096)
	if f := flag.Lookup("test.testlogfile"); f != nil && f.Value.String() != "" {
		if st, err := os.Stat(f.Value.String()); err == nil {
			limit = max(limit, st.Size()+1<<20)
		}
	}
	content := append([]byte("{}\n"), bytes.Repeat([]byte("\n"), int(limit)-3)...)
	if err := os.WriteFile(path, content, 0o600); err != nil {
		t.Fatalf("fill %s: %v", path, err)
	}
	var old syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_FSIZE, &old); err != nil {
		t.Fatalf("get RLIMIT_FSIZE: %v", err)
	}
	if err := syscall.Setrlimit(syscall.RLIMIT_FSIZE, &syscall.Rlimit{Cur: uint64(limit), Max: old.Max}); err != nil {
		t.Fatalf("set RLIMIT_FSIZE: %v", err)
	}
	t.Cleanup(func() {
		if err := syscall.Setrlimit(syscall.RLIMIT_FSIZE, &old); err != nil {
			t.Errorf("restore RLIMIT_FSIZE: %v", err)
		}
	})
}
