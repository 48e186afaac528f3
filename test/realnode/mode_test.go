//go:build e2e

package realnode

import (
	"context"
	"fmt"
	"os/exec"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/version"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/kube-proxy-sync/kube-proxy-sync/internal/kpsync"
)

// kubeletChains are the KUBE-* iptables chains the kubelet keeps, whatever
// kube-proxy's mode (pkg/kubelet/kubelet_network_linux.go).
var kubeletChains = map[string]bool{"KUBE-IPTABLES-HINT": true, "KUBE-KUBELET-CANARY": true, "KUBE-FIREWALL": true}

// A proxy-mode change on real kube-proxies, iptables -> nftables -> iptables,
// asked with the default rolling strategy: the run goes canary first and
// checks every migrated node's kube-proxy before the rollout goes on, with
// no check asked either way: its /healthz, and TCP connections through the
// run's own Service from the node, from a pod on it and to its NodePort. Inside each node, after each switch: kube-proxy
// runs the new mode (its /configz), the old mode's rules are gone
// (iptables-save, ip6tables-save, nft list tables) and a ClusterIP answers
// from the node.
func TestProxyModeMigrationIPTablesToNFTablesAndBack(t *testing.T) {
	e := connect(t)
	d := e.dockerOrSkip(t)
	cp, workers := e.nodeNames(t)
	all := append([]string{cp}, workers...)
	for _, n := range all {
		r := d.proxyRules(t, n)
		t.Logf("node %s before, in iptables mode: KUBE-* iptables chains %v, nftables tables %v", n, r.kubeChains, r.nftTables)
		require.Contains(t, r.kubeProxyChains(), "KUBE-SERVICES", "node %s: this test starts from kube-proxy in iptables mode", n)
		require.False(t, r.hasNFTable(), "node %s: this test starts with no nftables table of kube-proxy: %v", n, r.nftTables)
	}
	d.endsInIPTablesMode(t, cp)
	service, err := e.client.CoreV1().Services("default").Get(ctxFor(t, 30*time.Second), "kubernetes", metav1.GetOptions{})
	require.NoError(t, err)
	clusterIP := service.Spec.ClusterIP

	// there and back with no check asked: the migration turns them on
	for _, step := range []struct{ from, to string }{
		{"iptables", "nftables"},
		{"nftables", "iptables"},
	} {
		before := e.podUIDs(t)
		tl := e.watchTimeline(t, before)
		r := e.sync(t, "--set", "mode="+step.to, "--set", "metricsBindAddress=0.0.0.0:10249", "--timeout", "8m")
		require.Equal(t, 0, r.code, "%s -> %s: %s", step.from, step.to, r)
		assert.Equal(t, step.from, r.field("migration.from"), "%s", r)
		assert.Equal(t, step.to, r.field("migration.to"), "%s", r)
		assert.Equal(t, "rolling", r.field("migration.strategy_asked"), "%s", r)
		assert.Equal(t, "canary", r.field("migration.strategy"), "%s", r)
		assert.Equal(t, "canary", r.field("rollout.strategy"), "the migration goes canary first: %s", r)
		canary, _ := r.field("rollout.canary_nodes").([]any)
		require.Len(t, canary, 1, "%s", r)
		// in the watch's order: the canary node ran a Ready kube-proxy in
		// the new mode before any other node's old pod went
		events := tl.stop()
		first := fmt.Sprint(canary[0])
		readyAt, ok := events.readyAt[first]
		require.True(t, ok, "canary node %s never ran a Ready new pod", first)
		for n := range before {
			if n != first {
				assert.Greater(t, events.goneAt[n], readyAt, "node %s lost its old pod before the canary %s was Ready in %s mode", n, first, step.to)
			}
		}
		assert.LessOrEqual(t, events.maxDown, 1, "at most the batch size (maxUnavailable 1) without a Ready kube-proxy at once")
		assert.EqualValues(t, len(all), r.field("connectivity.checked"), "every migrated node checked: %s", r)
		assert.EqualValues(t, len(all), r.field("connectivity.passed"), "%s", r)
		// the defaults: every node's health required, and traffic
		// through the run's own Service along the three paths (the
		// pod path from kube-proxy's own image, which has a shell in
		// this tier), the Service gone once the run ended
		assert.Equal(t, "required", r.field("migration.verify_health"), "%s", r)
		assert.Equal(t, "required", r.field("connectivity.mode"), "%s", r)
		assert.Equal(t, namespace+"/"+kpsync.ProbeServiceName, r.field("connectivity.traffic"), "%s", r)
		assert.Equal(t, []any{"node", "pod", "nodeport"}, r.field("connectivity.traffic_paths"), "%s", r)
		assert.Equal(t, []any{"node", "pod", "nodeport"}, r.field("migration.verify_traffic_paths"), "%s", r)
		// the canary's first sync, from kube-proxy's own /healthz
		assert.Equal(t, canary[0], r.field("connectivity.first_sync.node"), "%s", r)
		firstSync, _ := r.field("connectivity.first_sync.seconds").(float64)
		assert.Greater(t, firstSync, 0.0, "%s", r)
		t.Logf("%s -> %s: the canary's kube-proxy synced %.2fs after the restart (%v)", step.from, step.to, firstSync, r.field("connectivity.first_sync.source"))
		_, err := e.client.CoreV1().Services(namespace).Get(ctxFor(t, 30*time.Second), kpsync.ProbeServiceName, metav1.GetOptions{})
		assert.True(t, apierrors.IsNotFound(err), "the run's own Service is gone: %v", err)
		e.noProbePods(t)
		after := e.podUIDs(t)
		for n, uid := range before {
			assert.NotEqual(t, uid, after[n], "node %s: its kube-proxy restarted in the new mode", n)
		}
		seconds, _ := r.field("rollout.duration_seconds").(float64)
		checks, _ := r.field("connectivity.seconds").(float64)
		requests, _ := r.field("connectivity.api_requests").(float64)
		t.Logf("%s -> %s: %d nodes in %.1fs (%.1fs per node; the checks %.1fs of it, %.0f API requests, %.1f per node)",
			step.from, step.to, len(all), seconds, seconds/float64(len(all)), checks, requests, requests/float64(len(all)))

		for _, n := range all {
			mode, _ := runningValue(e.configz(t, n), "mode")
			assert.Equal(t, step.to, mode, "node %s: kube-proxy's own /configz", n)
			minor := e.kubeProxyMinor(t)
			left := func(r rules) []string {
				left := r.kubeProxyChains()
				if minor >= 29 && minor <= 33 {
					// its iptables cleanup deletes KUBE-PROXY-CANARY from 1.34 on only
					left = slices.DeleteFunc(left, func(c string) bool { return c == "KUBE-PROXY-CANARY" })
				}
				return left
			}
			rules := d.settledRules(t, n, func(r rules) bool {
				if step.to == "nftables" {
					return len(left(r)) == 0 && slices.Contains(r.nftTables, "ip kube-proxy")
				}
				return !r.hasNFTable() && slices.Contains(r.kubeProxyChains(), "KUBE-SERVICES")
			})
			t.Logf("node %s in %s mode: KUBE-* iptables chains %v, nftables tables %v", n, step.to, rules.kubeChains, rules.nftTables)
			if step.to == "nftables" {
				assert.Empty(t, left(rules), "node %s: kube-proxy's iptables chains are gone", n)
				assert.Contains(t, rules.nftTables, "ip kube-proxy", "node %s: kube-proxy's nftables table", n)
			} else {
				assert.False(t, rules.hasNFTable(), "node %s: kube-proxy's nftables tables are gone: %v", n, rules.nftTables)
				assert.Contains(t, rules.kubeProxyChains(), "KUBE-SERVICES", "node %s", n)
			}
			d.connect(t, n, clusterIP, 443)
		}
	}
}

// A migration whose canary cannot pass stops there and goes back: the
// traffic check connects, from the canary node, to a Service whose only
// endpoint is a closed port, a failure made for real on that node. The
// run rolls the canary back to iptables mode (kube-proxy in iptables mode
// removes its nftables table at start-up), and every other node kept its
// pod (UIDs) and its iptables rules throughout.
func TestProxyModeMigrationFailedCanaryRollsBack(t *testing.T) {
	e := connect(t)
	d := e.dockerOrSkip(t)
	svc := e.closedService(t, e.controlPlaneAddressServer(t), 6444)
	before := e.podUIDs(t)
	r := e.sync(t, "--set", "mode=nftables", "--verify-health", "auto", "--verify-traffic", namespace+"/"+svc,
		"--verify-traffic-timeout", "15s", "--timeout", "8m")
	require.Equal(t, 1, r.code, "the canary fails the traffic check: %s", r)
	assert.Equal(t, true, r.field("rolled_back"), "%s", r)
	failed, _ := r.field("connectivity.failed").([]any)
	require.Len(t, failed, 1, "the canary node failed the check: %s", r)
	canary := fmt.Sprint(failed[0].(map[string]any)["node"])
	assert.EqualValues(t, 1, r.field("connectivity.checked"), "only the canary was checked: %s", r)
	assert.Equal(t, "nftables", r.field("migration.to"), "%s", r)
	assert.Equal(t, []any{canary}, r.field("rollout.canary_nodes"), "the failed node is the canary: %s", r)
	e.waitRolledOut(t, ctxFor(t, rolloutTimeout))
	after := e.podUIDs(t)
	for n, uid := range before {
		if n == canary {
			assert.NotEqual(t, uid, after[n], "canary %s: replaced, then rolled back", n)
		} else {
			assert.Equal(t, uid, after[n], "node %s: never reached", n)
		}
		rules := d.settledRules(t, n, func(r rules) bool {
			return !r.hasNFTable() && slices.Contains(r.kubeProxyChains(), "KUBE-SERVICES")
		})
		t.Logf("node %s after the rollback: KUBE-* iptables chains %v, nftables tables %v", n, rules.kubeChains, rules.nftTables)
		assert.Contains(t, rules.kubeProxyChains(), "KUBE-SERVICES", "node %s: in iptables mode", n)
		assert.False(t, rules.hasNFTable(), "node %s: no nftables table of kube-proxy left: %v", n, rules.nftTables)
	}
}

// kubeProxyMinor is the minor of the kube-proxy image the tier found (0:
// its tag is not a version).
func (e *env) kubeProxyMinor(t *testing.T) int {
	t.Helper()
	for _, c := range e.origDS.Spec.Template.Spec.Containers {
		if c.Name != name {
			continue
		}
		if i := strings.LastIndex(c.Image, ":"); i > strings.LastIndex(c.Image, "/") {
			if v, err := version.ParseGeneric(c.Image[i+1:]); err == nil {
				return int(v.Minor())
			}
		}
	}
	return 0
}

// rules are a node's firewall state as kube-proxy's modes leave it.
type rules struct {
	// kubeChains are the KUBE-* chains of iptables-save and
	// ip6tables-save, as "table/chain" (IPv6: "ip6:table/chain").
	kubeChains []string
	// nftTables are `nft list tables`, as "family name".
	nftTables []string
}

// kubeProxyChains are the KUBE-* chain names that are not the kubelet's.
func (r rules) kubeProxyChains() []string {
	seen := map[string]bool{}
	var out []string
	for _, c := range r.kubeChains {
		_, chain, _ := strings.Cut(c, "/")
		if !kubeletChains[chain] && !seen[chain] {
			seen[chain] = true
			out = append(out, chain)
		}
	}
	sort.Strings(out)
	return out
}

func (r rules) hasNFTable() bool {
	for _, t := range r.nftTables {
		if strings.HasSuffix(t, " kube-proxy") {
			return true
		}
	}
	return false
}

// proxyRules reads the node's iptables (both families) and nftables tables.
func (d docker) proxyRules(t *testing.T, node string) rules {
	t.Helper()
	var r rules
	for _, fam := range []struct{ cmd, prefix string }{{"iptables-save", ""}, {"ip6tables-save", "ip6:"}} {
		out, err := exec.Command("docker", "exec", node, fam.cmd).CombinedOutput()
		require.NoError(t, err, "%s on %s: %s", fam.cmd, node, out)
		table := ""
		for _, line := range strings.Split(string(out), "\n") {
			switch {
			case strings.HasPrefix(line, "*"):
				table = strings.TrimPrefix(line, "*")
			case strings.HasPrefix(line, ":KUBE-"):
				chain, _, _ := strings.Cut(strings.TrimPrefix(line, ":"), " ")
				r.kubeChains = append(r.kubeChains, fam.prefix+table+"/"+chain)
			}
		}
	}
	out, err := exec.Command("docker", "exec", node, "nft", "list", "tables").CombinedOutput()
	require.NoError(t, err, "nft list tables on %s: %s", node, out)
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if t, ok := strings.CutPrefix(line, "table "); ok {
			r.nftTables = append(r.nftTables, t)
		}
	}
	sort.Strings(r.kubeChains)
	return r
}

// settledRules reads the node's rules until settled says kube-proxy
// programmed them, or a minute passed, and returns the last read for the
// caller's assertions. A kube-proxy can be Ready before its first sync
// (its health answers OK while no update is queued), so a rolled-back
// canary's iptables rules may come a moment after the run ended.
func (d docker) settledRules(t *testing.T, node string, settled func(rules) bool) rules {
	t.Helper()
	var last rules
	_ = wait.PollUntilContextTimeout(context.Background(), time.Second, time.Minute, true, func(context.Context) (bool, error) {
		last = d.proxyRules(t, node)
		return settled(last), nil
	})
	return last
}

// connect opens a TCP connection (and TLS) from the node's own network
// namespace to ip:port, through the rules kube-proxy programmed, within
// a deadline: curl's HTTP code 000 is no connection.
func (d docker) connect(t *testing.T, node, ip string, port int) {
	t.Helper()
	var last string
	err := wait.PollUntilContextTimeout(context.Background(), time.Second, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		out, _ := exec.CommandContext(ctx, "docker", "exec", node, "curl", "-sk", "-o", "/dev/null", "-w", "%{http_code}",
			"--max-time", "5", fmt.Sprintf("https://%s:%d/livez", ip, port)).CombinedOutput()
		last = strings.TrimSpace(string(out))
		return last != "" && last != "000", nil
	})
	assert.NoError(t, err, "node %s: a connection to the Service %s:%d from the node (curl's last answer: %q)", node, ip, port, last)
}

// endsInIPTablesMode requires the control plane's kube-proxy in iptables
// mode (no nftables table of it) and, whatever happens, leaves the cluster
// there: a test that stopped in nftables mode is migrated back, then
// connect's restore puts the objects back.
func (d docker) endsInIPTablesMode(t *testing.T, cp string) {
	t.Helper()
	require.False(t, d.proxyRules(t, cp).hasNFTable(), "this test starts from kube-proxy in iptables mode")
	t.Cleanup(func() {
		if d.proxyRules(t, cp).hasNFTable() {
			r := d.e.sync(t, "--set", "mode=iptables", "--timeout", "8m")
			assert.Equal(t, 0, r.code, "cleanup: back to iptables mode: %s", r)
		}
	})
}
