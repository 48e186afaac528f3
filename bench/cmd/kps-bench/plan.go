package main

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// largeNodes is the node count above which the restart phase runs
// --large-rounds instead of --rounds: each rollout there takes minutes.
const largeNodes = 1000

// step is one phase of the plan, with the flags it runs with.
type step struct {
	Phase          string // nochange, needless, kubespray, ansible, restart, pools
	Reps           int    // nochange, ansible
	Reruns         int    // needless
	Rounds         int    // restart, pools
	MaxUnavailable string // restart, pools
	Pools          int    // pools
	// OneDaemonSet: the pools phase runs the one-DaemonSet rounds itself;
	// false when the restart phase at this count has just run them.
	OneDaemonSet bool
}

// stage is one node count: the cluster brought there (unless external), then
// its phases in order.
type stage struct {
	Nodes  int
	Scale  bool
	Phases []step
}

// plan is which phases run at which node count. external: the cluster is
// used as it is, at its node count, and gets every phase. Pure: no cluster,
// no files.
func (o *runOptions) plan(external bool, externalNodes int) []stage {
	counts := []int(o.Nodes)
	if external {
		counts = []int{externalNodes}
	}
	var stages []stage
	for _, n := range counts {
		s := stage{Nodes: n, Scale: !external}
		s.Phases = append(s.Phases, step{Phase: "nochange", Reps: o.Reps}, step{Phase: "needless", Reruns: o.Reruns})
		if external || slices.Contains(o.KubesprayNodes, n) {
			s.Phases = append(s.Phases, step{Phase: "kubespray"})
		}
		if o.Ansible {
			s.Phases = append(s.Phases, step{Phase: "ansible", Reps: o.Reps})
		}
		rounds := o.Rounds
		if n > largeNodes {
			rounds = o.LargeRounds
		}
		restart := external || slices.Contains(o.RestartNodes, n)
		if restart {
			s.Phases = append(s.Phases, step{Phase: "restart", Rounds: rounds, MaxUnavailable: o.MaxUnavailable})
		}
		if external || slices.Contains(o.PoolsNodes, n) {
			s.Phases = append(s.Phases, step{Phase: "pools", Rounds: rounds, MaxUnavailable: o.MaxUnavailable, Pools: o.Pools, OneDaemonSet: !restart})
		}
		stages = append(stages, s)
	}
	return stages
}

// nodeList is a pflag value: node counts separated by commas or spaces
// ("10 1000", "10,1000"), as BENCH_NODES has always been written.
type nodeList []int

func (l *nodeList) String() string {
	parts := make([]string, len(*l))
	for i, n := range *l {
		parts[i] = strconv.Itoa(n)
	}
	return strings.Join(parts, " ")
}

func (l *nodeList) Set(s string) error {
	var out nodeList
	for _, f := range strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == ' ' || r == '\t' }) {
		n, err := strconv.Atoi(f)
		if err != nil || n < 1 {
			return fmt.Errorf("node count %q: want a whole number from 1", f)
		}
		out = append(out, n)
	}
	*l = out
	return nil
}

func (l *nodeList) Type() string { return "counts" }
