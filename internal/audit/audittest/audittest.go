// Package audittest helps tests make an audit log's writes fail.
package audittest

import (
	"syscall"
	"testing"
)

// LimitFileSize sets the process's file size limit (RLIMIT_FSIZE) to n
// bytes until the test ends: a write that would grow a file past it fails
// with EFBIG (the Go runtime ignores SIGXFSZ), as on a full disk, but for
// a regular file the run may open. It limits every file the process
// writes, so the test must not run in parallel with others.
func LimitFileSize(t testing.TB, n uint64) {
	t.Helper()
	var old syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_FSIZE, &old); err != nil {
		t.Fatalf("get RLIMIT_FSIZE: %v", err)
	}
	if err := syscall.Setrlimit(syscall.RLIMIT_FSIZE, &syscall.Rlimit{Cur: n, Max: old.Max}); err != nil {
		t.Fatalf("set RLIMIT_FSIZE: %v", err)
	}
	t.Cleanup(func() {
		if err := syscall.Setrlimit(syscall.RLIMIT_FSIZE, &old); err != nil {
			t.Errorf("restore RLIMIT_FSIZE: %v", err)
		}
	})
}
