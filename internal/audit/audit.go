// Package audit appends one JSON line per event to an audit log, fsynced, so
// that the intent of a restart is on disk before the restart is sent.
package audit

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// Record is one line of the audit log. Data values are never recorded, only
// which keys changed, so no credential can end up here.
type Record struct {
	Time                  time.Time `json:"time"`
	AuditID               string    `json:"audit_id"`
	Phase                 string    `json:"phase"` // plan | intent | outcome
	Server                string    `json:"server"`
	Object                string    `json:"object"`
	DaemonSet             string    `json:"daemonset"`
	ResourceVersionBefore string    `json:"resource_version_before"`
	ResourceVersionAfter  string    `json:"resource_version_after"`
	ChangedKeys           []string  `json:"changed_keys"`
	// ChangedKeysEffect: "restart" or "no-effect" per changed key
	ChangedKeysEffect map[string]string `json:"changed_keys_effect,omitempty"`
	Restart           bool              `json:"restart"`
	RestartReason     string            `json:"restart_reason,omitempty"`
	ProbePath         string            `json:"probe_path,omitempty"`
	CheckMode         bool              `json:"check_mode"`
	Outcome           string            `json:"outcome,omitempty"` // succeeded | failed
	Error             string            `json:"error,omitempty"`
	// Migration is the proxy-mode migration's plan, when the mode changes
	Migration      any    `json:"migration,omitempty"`
	Rollout        any    `json:"rollout,omitempty"`
	RolledBack     bool   `json:"rolled_back,omitempty"`
	RollbackReason string `json:"rollback_reason,omitempty"`
	// Kind is what the run does, its parts joined by "+": undo, migration
	// (a proxy-mode change), image, template (kubeadm's pod template),
	// access (kubeadm's ServiceAccount and RBAC for kube-proxy), change
	// (the config), restart (owed, forced or for the probe), none
	Kind string `json:"kind,omitempty"`
	// ImageBefore and ImageAfter: kube-proxy's image before the run and
	// after it (would be, in the plan and the intent)
	ImageBefore string `json:"image_before,omitempty"`
	ImageAfter  string `json:"image_after,omitempty"`
	// ConfigMapBefore and ConfigMapAfter: the ConfigMap the pod template
	// mounts before the run and after it
	ConfigMapBefore string `json:"configmap_before,omitempty"`
	ConfigMapAfter  string `json:"configmap_after,omitempty"`
}

// Phases of a run's records, in the order a run writes them.
const (
	// PhasePlan: what the run means to write, before its first write to
	// the cluster; a run that cannot write it writes nothing.
	PhasePlan = "plan"
	// PhaseIntent: the restart about to be sent.
	PhaseIntent = "intent"
	// PhaseOutcome: how the run ended.
	PhaseOutcome = "outcome"
)

// NewID returns a random id that ties a run's records, facts and Events together.
func NewID() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// Log appends records to a file; the zero value (no path) discards them.
type Log struct {
	Path string
}

// open opens the log for appending, creating it 0600. It refuses a path
// that is a symbolic link (the records, and the run's appends, would go
// wherever it points: give the link's target instead), anything but a
// regular file (a FIFO without a reader would block the run past any
// signal; O_NONBLOCK makes that open fail instead), and a file that others
// than its owner may read or write (the log is 0600: the user chmods it,
// the run does not change a mode it did not set). Directories above the
// file are followed as usual.
func (l Log) open() (*os.File, error) {
	if dir := filepath.Dir(l.Path); dir != "" {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, fmt.Errorf("audit log %s: %w (change --audit-log to a writable path)", l.Path, err)
		}
	}
	f, err := os.OpenFile(l.Path, os.O_APPEND|os.O_CREATE|os.O_WRONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0o600)
	switch {
	case errors.Is(err, syscall.ELOOP):
		return nil, fmt.Errorf("audit log %s is a symbolic link: refused, so that the records cannot be sent elsewhere (give --audit-log the file itself)", l.Path)
	case errors.Is(err, syscall.ENXIO):
		return nil, fmt.Errorf("audit log %s is not a regular file (a FIFO or socket): give --audit-log a regular file", l.Path)
	case err != nil:
		return nil, fmt.Errorf("open audit log %s: %w (check the directory exists and is writable, or change --audit-log)", l.Path, err)
	}
	st, err := f.Stat()
	switch {
	case err != nil:
		err = fmt.Errorf("stat audit log %s: %w (change --audit-log)", l.Path, err)
	case !st.Mode().IsRegular():
		err = fmt.Errorf("audit log %s is not a regular file (%s): give --audit-log a regular file", l.Path, st.Mode().Type())
	case st.Mode().Perm()&0o077 != 0:
		err = fmt.Errorf("audit log %s has mode %04o, more open than 0600: run chmod 600 %s, or give --audit-log another file", l.Path, st.Mode().Perm(), l.Path)
	case !ownedByUs(st):
		// another user's file (made ahead in a shared directory) would
		// get this user's records, and be theirs to rewrite
		err = fmt.Errorf("audit log %s belongs to another user (uid %d, this run's is %d): give --audit-log a file of this user's", l.Path, st.Sys().(*syscall.Stat_t).Uid, os.Geteuid())
	}
	if err != nil {
		_ = f.Close()
		return nil, err
	}
	return f, nil
}

// Append writes one record and fsyncs it. The file is created 0600.
func (l Log) Append(r Record) error {
	if l.Path == "" {
		return nil
	}
	f, err := l.open()
	if err != nil {
		return err
	}
	line, err := json.Marshal(r)
	if err != nil {
		_ = f.Close()
		return fmt.Errorf("encode audit record: %w", err)
	}
	if _, err := f.Write(append(line, '\n')); err != nil {
		_ = f.Close()
		return fmt.Errorf("write audit log %s: %w", l.Path, err)
	}
	if err := f.Sync(); err != nil {
		_ = f.Close()
		return fmt.Errorf("sync audit log %s: %w", l.Path, err)
	}
	return f.Close()
}

// ownedByUs reports whether the file belongs to the user the run acts as.
func ownedByUs(st os.FileInfo) bool {
	sys, ok := st.Sys().(*syscall.Stat_t)
	return !ok || int(sys.Uid) == os.Geteuid()
}
