package kpsync

import (
	"context"
	"fmt"
	"sort"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/version"

	"github.com/kube-proxy-sync/kube-proxy-sync/internal/nodes"
)

// kube-proxy in nftables mode needs kernel 5.13 or later: from 1.31 it
// refuses to start on an older one (getNFTablesInterface in
// pkg/proxy/nftables, with NFTablesKubeProxyKernelVersion from
// pkg/util/kernel), because an older kernel implies an nft binary on the
// host that kube-proxy's rules can break (kubernetes#122743). Before 1.31
// it starts, with that risk. The check is skipped when its container sets
// KUBE_PROXY_NFTABLES_SKIP_KERNEL_VERSION_CHECK.
const (
	nftablesKernel        = "5.13"
	skipKernelCheckEnvVar = "KUBE_PROXY_NFTABLES_SKIP_KERNEL_VERSION_CHECK"
	// namedNodes is how many nodes an error names before "and N more"
	namedNodes = 10
)

// preflightNFTables refuses a move to nftables mode, before any write,
// while a node the DaemonSet runs on has a kernel older than kube-proxy
// runs that mode on (from the Node objects: status.nodeInfo.kernelVersion).
// A kernel version that does not parse is reported and not judged.
func preflightNFTables(ctx context.Context, e *env, p plan, from string) error {
	o := e.o
	if c, err := findContainer(p.ds, o.Container); err == nil {
		for _, v := range c.Env {
			if v.Name == skipKernelCheckEnvVar && v.Value != "" {
				e.warn(fmt.Sprintf("proxy mode %s -> nftables: container %s sets %s, so neither kube-proxy nor kube-proxy-sync checks the nodes' kernels (nftables mode needs %s or later)", from, o.Container, skipKernelCheckEnvVar, nftablesKernel))
				return nil
			}
		}
	}
	kernels, err := nodes.Kernels(ctx, e.d.Kube.Nodes(), &p.ds.Spec.Template.Spec)
	if err != nil {
		return fmt.Errorf("proxy mode %s -> nftables, checking every node can run it: %w; nothing was written", from, err)
	}
	least := version.MustParseGeneric(nftablesKernel)
	var old, unknown []string
	for name, k := range kernels {
		v, err := version.ParseGeneric(k)
		switch {
		case err != nil:
			unknown = append(unknown, fmt.Sprintf("%s (%q)", name, k))
		case v.LessThan(least):
			old = append(old, fmt.Sprintf("%s (kernel %s)", name, k))
		}
	}
	sort.Strings(old)
	sort.Strings(unknown)
	if len(unknown) > 0 {
		e.warn(fmt.Sprintf("proxy mode %s -> nftables: the kernel version of %d node(s) is not understood, so whether they can run nftables mode (kernel %s or later) is not checked: %s",
			from, len(unknown), nftablesKernel, someOf(unknown)))
	}
	if len(old) == 0 {
		return nil
	}
	return fmt.Errorf("proxy mode %s -> nftables refused: kube-proxy in nftables mode needs kernel %s or later (from 1.31 it does not start on an older one), and %d node(s) daemonset %s/%s runs on have an older kernel: %s; nothing was written. The DaemonSet gives every node the same config, so these nodes cannot stay in %s mode while the others move: upgrade their kernels, or keep them out of daemonset %s/%s (a node affinity) and give them a DaemonSet of their own on the %s config, then run again",
		from, nftablesKernel, len(old), o.Namespace, o.DaemonSet, someOf(old), from, o.Namespace, o.DaemonSet, from)
}

// someOf joins the first namedNodes items, and says how many more there are.
func someOf(items []string) string {
	if len(items) <= namedNodes {
		return strings.Join(items, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(items[:namedNodes], ", "), len(items)-namedNodes)
}

// manyServices is the Service count from which a full sync in nftables
// mode is measured in minutes: 13 minutes at 5,006 Services and 250,000
// endpoints (kubernetes#135639), 16 at 44,125 Services
// (kubernetes#139513, 1.36.1); the first sync of every migrated node is a
// full one.
const manyServices = 5000

// countServices warns, before a move to nftables, when the cluster holds
// enough Services that each node's first sync takes minutes: one LIST of
// one item, whose remaining count is the rest. It only warns: a count it
// cannot get (no list on services cluster-wide) is said and not judged.
func countServices(ctx context.Context, e *env, from string) {
	list, err := e.d.Kube.Services("").List(ctx, metav1.ListOptions{Limit: 1})
	if err != nil {
		e.warn(fmt.Sprintf("proxy mode %s -> nftables: the cluster's Services could not be counted (%v): each node's first full sync in nftables mode takes minutes from about %d Services (list on services cluster-wide, see roles/kpsync/files/rbac.yaml)", from, err, manyServices))
		return
	}
	n := int64(len(list.Items))
	if r := list.RemainingItemCount; r != nil {
		n += *r
	}
	e.d.Log.Infof("proxy mode %s -> nftables: the cluster holds %d Service(s)", from, n)
	if n >= manyServices {
		e.warn(fmt.Sprintf("proxy mode %s -> nftables: the cluster holds %d Services; at that scale kube-proxy's first full sync in nftables mode has been measured in minutes (13 min at 5,006 Services and 250,000 endpoints, kubernetes#135639; 16 min at 44,125 Services, kubernetes#139513), during which the node's new Services and endpoints wait: the canary's first sync (connectivity.first_sync) paces the nodes after it, and --verify-health-timeout must allow for it", from, n))
	}
}
