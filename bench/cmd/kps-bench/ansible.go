package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// The Ansible phase times the task that runs the binary module, module copy
// included: Ansible copies a binary module to the host on every task run
// (binary modules are never pipelined), so its size is paid each time. It
// runs a no-change task on localhost over the local connection, as the
// molecule default scenario does, once per build and repetition, alternating
// the order of the builds.

type ansibleRun struct {
	Build string  `json:"build"`
	Rep   int     `json:"rep"`
	Order int     `json:"order_in_rep"`
	Task  float64 `json:"task_seconds"`
	// Playbook is ansible-playbook's whole wall time (Python start, inventory, the task).
	Playbook float64 `json:"playbook_seconds"`
	Load1    float64 `json:"load1"`
}

type ansibleBuild struct {
	Build    string `json:"build"`
	Bytes    int64  `json:"bytes"`
	Task     stats  `json:"task_seconds"`
	Playbook stats  `json:"playbook_seconds"`
}

type ansibleResult struct {
	Kind    string         `json:"kind"`
	Nodes   int32          `json:"nodes"`
	Ansible string         `json:"ansible_core"`
	Builds  []ansibleBuild `json:"builds"`
	Runs    []ansibleRun   `json:"runs"`
}

// ansiblePlaybook is a no-change run of the module, timed from the
// controller: the task's own start and end, taken by the tasks around it.
const ansiblePlaybook = `- name: Time one kube-proxy-sync task
  hosts: all
  gather_facts: false
  tasks:
    - name: Start
      ansible.builtin.set_fact:
        kps_t0: "{{ now(utc=true).timestamp() }}"
    - name: No-change run of the binary module
      kube_proxy_sync:
        kubeconfig: %[1]q
        namespace: %[2]q
        configmap: %[3]q
        daemonset: %[3]q
        server: %[4]q
        probe_path: none
      register: kps_result
      failed_when: kps_result.failed or kps_result.changed
    - name: End
      ansible.builtin.set_fact:
        kps_t1: "{{ now(utc=true).timestamp() }}"
    - name: Report
      ansible.builtin.debug:
        msg: "KPS_TASK_SECONDS={{ (kps_t1 | float) - (kps_t0 | float) }} KPS_API_REQUESTS={{ kps_result.api_requests | default('n/a') }}"
`

var taskSeconds = regexp.MustCompile(`KPS_TASK_SECONDS=([0-9.]+) KPS_API_REQUESTS=(\S+)`)

// ansibleTask: --reps repetitions of the task with each build of --builds
// (label=path,...), alternating their order.
func (b *bench) ansibleTask(ctx context.Context) error {
	if b.AnsiblePlaybook == "" || len(b.Builds) == 0 {
		return fmt.Errorf("ansible: --ansible-playbook and --builds are required")
	}
	nodes, err := b.nodeCount(ctx)
	if err != nil {
		return err
	}
	if _, err := b.prime(ctx); err != nil {
		return err
	}
	server, err := b.currentServer(ctx)
	if err != nil {
		return err
	}
	root := filepath.Join(b.Dir, "ansible")
	var labels []string
	res := ansibleResult{Kind: "ansible", Nodes: nodes}
	for _, spec := range b.Builds {
		label, path, ok := strings.Cut(spec, "=")
		if !ok {
			return fmt.Errorf("ansible: --builds wants label=path, got %q", spec)
		}
		// each build is a module library of its own, holding only kube_proxy_sync
		lib := filepath.Join(root, label, "library")
		if err := os.MkdirAll(lib, 0o755); err != nil {
			return err
		}
		raw, err := os.ReadFile(path)
		if err != nil {
			return fmt.Errorf("ansible: build %s: %w", label, err)
		}
		if err := os.WriteFile(filepath.Join(lib, "kube_proxy_sync"), raw, 0o755); err != nil {
			return err
		}
		res.Builds = append(res.Builds, ansibleBuild{Build: label, Bytes: int64(len(raw))})
		labels = append(labels, label)
	}
	playbook := filepath.Join(root, "task.yml")
	kubeconfig, err := filepath.Abs(b.Kubeconfig) // the module runs in a directory of its own
	if err != nil {
		return err
	}
	if err := os.WriteFile(playbook, fmt.Appendf(nil, ansiblePlaybook, kubeconfig, b.Namespace, b.Name, server), 0o644); err != nil {
		return err
	}
	if raw, err := exec.CommandContext(ctx, filepath.Join(filepath.Dir(b.AnsiblePlaybook), "ansible"), "--version").Output(); err == nil {
		res.Ansible = strings.TrimSpace(strings.SplitN(string(raw), "\n", 2)[0])
	}
	run := func(label string) (ansibleRun, error) {
		dir := filepath.Join(root, label)
		cmd := exec.CommandContext(ctx, b.AnsiblePlaybook, "-i", "localhost,", "-c", "local", playbook)
		cmd.Env = append(os.Environ(),
			"ANSIBLE_LIBRARY="+filepath.Join(dir, "library"),
			"ANSIBLE_HOME="+filepath.Join(dir, "home"),
			"ANSIBLE_LOCAL_TEMP="+filepath.Join(dir, "tmp"),
			// the module is copied here: the remote temp directory of the local connection
			"ANSIBLE_REMOTE_TEMP="+filepath.Join(dir, "remote-tmp"),
			"ANSIBLE_PYTHON_INTERPRETER=auto_silent",
			"ANSIBLE_NOCOLOR=1",
			"ANSIBLE_RETRY_FILES_ENABLED=0",
			"ANSIBLE_STDOUT_CALLBACK=ansible.builtin.default",
		)
		load := loadAvg()
		start := time.Now()
		out, err := cmd.CombinedOutput()
		wall := time.Since(start).Seconds()
		if err != nil {
			return ansibleRun{}, fmt.Errorf("ansible-playbook with build %s: %w\n%s", label, err, tail(string(out), 3000))
		}
		m := taskSeconds.FindStringSubmatch(string(out))
		if m == nil {
			return ansibleRun{}, fmt.Errorf("ansible-playbook with build %s printed no task time:\n%s", label, tail(string(out), 3000))
		}
		sec, _ := strconv.ParseFloat(m[1], 64)
		return ansibleRun{Build: label, Task: sec, Playbook: wall, Load1: load}, nil
	}
	// one unmeasured run each: Ansible's own caches, the page cache
	for _, l := range labels {
		if _, err := run(l); err != nil {
			return err
		}
	}
	tasks, plays := map[string][]float64{}, map[string][]float64{}
	for rep := 1; rep <= b.Reps; rep++ {
		order := make([]string, len(labels)) // rotated: each build goes first in turn
		for i := range labels {
			order[i] = labels[(i+rep-1)%len(labels)]
		}
		for i, l := range order {
			r, err := run(l)
			if err != nil {
				return err
			}
			r.Rep, r.Order = rep, i+1
			res.Runs = append(res.Runs, r)
			tasks[l], plays[l] = append(tasks[l], r.Task), append(plays[l], r.Playbook)
			b.log.Infof("nodes=%d rep %d %s: task %.3fs, ansible-playbook %.2fs (load %.1f)", nodes, rep, l, r.Task, r.Playbook, r.Load1)
		}
	}
	for i := range res.Builds {
		l := res.Builds[i].Build
		res.Builds[i].Task, res.Builds[i].Playbook = statsOf(tasks[l]), statsOf(plays[l])
	}
	return b.write(nodes, res)
}

func tail(s string, n int) string {
	if len(s) > n {
		return "..." + s[len(s)-n:]
	}
	return s
}

// loadAvg is the 1-minute load average now: next to every figure, since the
// machine is shared.
func loadAvg() float64 {
	raw, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	f, _ := strconv.ParseFloat(strings.Fields(string(raw))[0], 64)
	return f
}
