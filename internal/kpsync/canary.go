package kpsync

import (
	"context"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/kube-proxy-sync/kube-proxy-sync/internal/nodes"
	"github.com/kube-proxy-sync/kube-proxy-sync/internal/rollout"
)

// StrategyZonal is how a canary rollout grouped by zone is reported: the
// same mechanics as canary (OnDelete, pods deleted by the tool, the same
// failure handling), with the batches shaped by the nodes' zone label.
const StrategyZonal = "zonal"

// canary deletes the old pods itself (the DaemonSet is on OnDelete), in
// the order one schedule decides: rollout.Zonal, whose one-zone case is
// the plain canary.
type canary struct {
	e *env
	// r is the rollout's part of the result: its canary nodes and zones
	r     *rollout.Status
	fleet *rollout.Fleet
	zones *rollout.Zonal
	// zonal: the schedule has the nodes' zones, reported in the facts
	zonal   bool
	batch   int
	deleted map[string]bool
	// conn checks each node after its restart (nil: no checks); a
	// node's restart is the delete of its old pod
	conn *connectivity
}

// newCanary schedules the nodes still to restart: the canary nodes first
// (healthy ones, so that a failure there is the new config's), then the
// rest, at most batch nodes in flight; with --zone-label, zone by zone
// (one LIST of nodes per 500). Nodes already on the new template (a
// resumed canary) need nothing; nodes unready before take no slot: the
// controller replaces their pods once the strategy is restored. Nodes
// with no pod take none either.
func (rl *rolling) newCanary(ctx context.Context, ds *appsv1.DaemonSet) (*canary, error) {
	e, fleet := rl.e, rl.fleet
	live := fleet.Live()
	batch, err := batchSize(e.o.BatchSize, ds, len(live))
	if err != nil {
		return nil, err
	}
	unready := map[string]bool{}
	for _, n := range fleet.UnreadyLive() {
		unready[n] = true
	}
	var todo []string
	for _, n := range live {
		// a node without a pod (a resumed canary's, see observe) has none
		// to delete: it takes no slot, the controller creates its pod
		if !fleet.Done(n) && !fleet.Exempted(n) && fleet.HasPod(n) {
			todo = append(todo, n)
		}
	}
	r := &rl.out.rollout
	c := &canary{e: e, r: r, fleet: fleet, batch: batch, deleted: map[string]bool{}, conn: rl.conn}
	if e.o.ZoneLabel == "" {
		c.zones = rollout.OneZone(todo, unready, rl.canaryNodes, batch)
		r.CanaryNodes = c.zones.CanaryNodes()
		e.d.Log.Infof("canary rollout: %d canary node(s) %v, then batches of at most %d over %d live node(s)", len(r.CanaryNodes), r.CanaryNodes, batch, len(live))
		return c, nil
	}
	zoneOf, err := nodes.Labels(ctx, e.nodes, e.o.ZoneLabel)
	if err != nil {
		return nil, err
	}
	c.zones, c.zonal = rollout.NewZonal(todo, zoneOf, unready, rl.canaryNodes, batch), true
	r.Strategy, r.Zones, r.CanaryNodes = StrategyZonal, c.zones.Zones, c.zones.CanaryNodes()
	for _, z := range c.zones.Zones {
		e.d.Log.Infof("zonal rollout: zone %s: %d node(s), canary %v", z.Name, len(z.Nodes), z.Canary)
	}
	return c, nil
}

// batchSize resolves --batch-size (N or P% of the live nodes), defaulting
// to the DaemonSet's maxUnavailable.
func batchSize(flag string, ds *appsv1.DaemonSet, live int) (int, error) {
	v := intstr.FromInt32(1)
	if ru := ds.Spec.UpdateStrategy.RollingUpdate; ru != nil && ru.MaxUnavailable != nil {
		v = *ru.MaxUnavailable
	}
	if flag != "" {
		v = intstr.Parse(flag)
	}
	n, err := intstr.GetScaledValueFromIntOrPercent(&v, live, true)
	if err != nil {
		return 0, fmt.Errorf("batch size %q: %w", v.String(), err)
	}
	return max(n, 1), nil
}

// step deletes the old pods the schedule asks for now. Once the canary
// nodes run a Ready kube-proxy of the new template, and before any other
// node's pod is deleted, it passes StepCanaryDone.
func (c *canary) step(ctx context.Context) (bool, error) {
	skip := func(n string) bool {
		_, skipped := c.fleet.Skipped[n]
		return skipped
	}
	for {
		passed := c.zones.CanaryPassed()
		replace, finished := c.zones.Next(c.e.d.Clock.Now(), c.fleet.Done, skip)
		if c.zonal {
			c.r.Zones = c.zones.Zones
		}
		for _, n := range replace {
			if err := c.replace(ctx, n); err != nil {
				return false, err
			}
		}
		if zone := c.zones.Current(); c.zonal && zone != nil && len(replace) > 0 {
			c.e.d.Log.Debugf("zonal rollout: zone %s: replacing %v", zone.Name, replace)
		}
		if passed || !c.zones.CanaryPassed() {
			return finished && c.fleet.PendingCount() == 0, nil
		}
		c.e.d.Log.Infof("canary nodes %v run a Ready kube-proxy of the new template; continuing in batches of %d", c.zones.CanaryNodes(), c.batch)
		c.e.step(ctx, StepCanaryDone)
	}
}

// replace deletes the old pod on a node, once; the DaemonSet controller
// creates its successor from the new template.
func (c *canary) replace(ctx context.Context, node string) error {
	if c.deleted[node] {
		return nil
	}
	uid, pod, ok := c.fleet.OldPod(node)
	if !ok {
		return nil
	}
	c.deleted[node] = true
	at := c.e.d.Clock.Now()
	err := c.e.d.Kube.Pods(c.e.o.Namespace).Delete(ctx, pod, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: ptr.To(uid)}})
	switch {
	case err == nil:
		// the node's restart: a sync of its new kube-proxy comes after it
		c.conn.markNode(node, at)
	case !isGone(err):
		return fmt.Errorf("delete kube-proxy pod %s on node %s: %w", pod, node, err)
	}
	return nil
}
