package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"time"
)

// timed is one timed command.
type timed struct {
	Command  string  `json:"command"`
	Wall     float64 `json:"wall_seconds"`
	MaxRSSKB int64   `json:"max_rss_kb"`
	ExitCode int     `json:"exit_code"`
	// Load1 is the machine's 1-minute load average when the command started.
	Load1      float64 `json:"load1"`
	stdout     []byte
	stderrTail string
}

// exec runs argv to completion and measures its wall time and its peak
// resident set: the kernel's high-water mark VmHWM in /proc/PID/status,
// read every 10ms while it runs (VmHWM only grows, so the last reading is
// the peak up to 10ms before the exit; for a restart that is the wait).
//
// Not getrusage's ru_maxrss of the child: Go starts children with
// CLONE_VM|CLONE_VFORK, and Linux carries the high-water mark of the memory
// the child shared before exec (this process's, with its pod informer) into
// the child's ru_maxrss, so it would report kps-bench's size, not the child's.
func (b *bench) exec(ctx context.Context, argv ...string) (timed, error) {
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	// an interrupted bench interrupts the command as a user would, so that
	// kube-proxy-sync releases its Lease (a killed run's holds it for 30s,
	// which the next run would wait out inside its measurement); killed
	// only if it has not exited 30s later
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	cmd.WaitDelay = 30 * time.Second
	load := loadAvg()
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return timed{Command: shortCommand(argv)}, fmt.Errorf("start %s: %w", shortCommand(argv), err)
	}
	stopSampling := make(chan struct{})
	peak := make(chan int64, 1)
	go func() {
		var hwm int64
		t := time.NewTicker(10 * time.Millisecond)
		defer t.Stop()
		for {
			hwm = max(hwm, vmHWM(cmd.Process.Pid))
			select {
			case <-stopSampling:
				peak <- hwm
				return
			case <-t.C:
			}
		}
	}()
	err := cmd.Wait()
	close(stopSampling)
	r := timed{Command: shortCommand(argv), Wall: time.Since(start).Seconds(), stdout: stdout.Bytes(), MaxRSSKB: <-peak, Load1: load}
	if cmd.ProcessState != nil {
		r.ExitCode = cmd.ProcessState.ExitCode()
	}
	tail := stderr.String()
	if len(tail) > 4000 {
		tail = "..." + tail[len(tail)-4000:]
	}
	r.stderrTail = tail
	var exitErr *exec.ExitError
	if err != nil && !errors.As(err, &exitErr) {
		return r, fmt.Errorf("run %s: %w", r.Command, err)
	}
	return r, nil
}

// vmHWM is a process's peak resident set in kB, 0 once it has exited.
func vmHWM(pid int) int64 {
	raw, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb
		}
	}
	return 0
}

// mustSucceed turns a non-zero exit into an error carrying the output.
func (r timed) mustSucceed() error {
	if r.ExitCode != 0 {
		return fmt.Errorf("%s exited %d:\nstdout: %s\nstderr: %s", r.Command, r.ExitCode, strings.TrimSpace(string(r.stdout)), r.stderrTail)
	}
	return nil
}

// shortCommand is argv without the kubeconfig and cache paths, for reports.
func shortCommand(argv []string) string {
	var out []string
	skip := false
	for i, a := range argv {
		if skip {
			skip = false
			continue
		}
		if a == "--kubeconfig" || a == "--cache-dir" {
			skip = true
			continue
		}
		if i == 0 {
			a = a[strings.LastIndex(a, "/")+1:]
		}
		out = append(out, a)
	}
	return strings.Join(out, " ")
}

// syncResult is the part of kube-proxy-sync's --output json the bench reads.
type syncResult struct {
	Changed bool   `json:"changed"`
	Failed  bool   `json:"failed"`
	Msg     string `json:"msg"`
	// Pools is each DaemonSet of a run with --pool: --daemonset first.
	Pools []syncPool `json:"pools"`
	Facts struct {
		KPS struct {
			ConfigMapChanged bool   `json:"configmap_changed"`
			Restarted        bool   `json:"restarted"`
			RestartReason    string `json:"restart_reason"`
			APIRequests      int64  `json:"api_requests"`
			Rollout          struct {
				Desired   int32   `json:"desired"`
				Updated   int32   `json:"updated"`
				Available int32   `json:"available"`
				Duration  float64 `json:"duration_seconds"`
			} `json:"rollout"`
		}
	} `json:"-"` // the module's return values, top-level in the same object (parseSync)
}

// syncPool is one DaemonSet's entry in the result's pools.
type syncPool struct {
	DaemonSet string `json:"daemonset"`
	Restarted bool   `json:"restarted"`
	Failed    bool   `json:"failed"`
	Msg       string `json:"msg"`
}

// restartedAll fails unless the run restarted each of daemonSets: base's
// is the top-level restarted, a pool's its entry in pools. Pure.
func (s syncResult) restartedAll(daemonSets []string, base string) error {
	var missed []string
	for _, ds := range daemonSets {
		restarted := ds == base && s.Facts.KPS.Restarted
		for _, p := range s.Pools {
			if p.DaemonSet == ds && ds != base {
				restarted = p.Restarted
			}
		}
		if !restarted {
			missed = append(missed, ds)
		}
	}
	if len(missed) > 0 {
		return fmt.Errorf("did not restart daemonset %s: %s", strings.Join(missed, ", "), s.Msg)
	}
	return nil
}

func parseSync(r timed) (syncResult, error) {
	var s syncResult
	if err := json.Unmarshal(r.stdout, &s); err != nil {
		return s, fmt.Errorf("%s printed no JSON result (%v): stdout %q, stderr %s", r.Command, err, r.stdout, r.stderrTail)
	}
	if err := json.Unmarshal(r.stdout, &s.Facts.KPS); err != nil {
		return s, fmt.Errorf("%s printed no JSON result (%v): stdout %q, stderr %s", r.Command, err, r.stdout, r.stderrTail)
	}
	if s.Failed || r.ExitCode != 0 {
		return s, fmt.Errorf("%s failed (exit %d): %s\nstderr: %s", r.Command, r.ExitCode, s.Msg, r.stderrTail)
	}
	return s, nil
}

// stats of a sample.
type stats struct {
	N      int     `json:"n"`
	Median float64 `json:"median"`
	Min    float64 `json:"min"`
	Max    float64 `json:"max"`
}

func statsOf(xs []float64) stats {
	if len(xs) == 0 {
		return stats{}
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	m := s[len(s)/2]
	if len(s)%2 == 0 {
		m = (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return stats{N: len(s), Median: m, Min: s[0], Max: s[len(s)-1]}
}
