package sync

import (
	"context"

	"github.com/kube-proxy-sync/kube-proxy-sync/internal/nodes"
	"github.com/kube-proxy-sync/kube-proxy-sync/internal/rollout"
)

// StrategyZonal is how a canary rollout grouped by zone is reported: the
// same mechanics as canary (OnDelete, pods deleted by the tool, the same
// failure handling), with the batches shaped by the nodes' zone label.
const StrategyZonal = "zonal"

// zonal turns the canary into a zone-by-zone rollout: the nodes still to
// restart are grouped by their ZoneLabel value (one LIST of nodes per 500).
func (c *canary) zonal(ctx context.Context, unready map[string]bool) error {
	zoneOf, err := nodes.Labels(ctx, c.s.d.Kube.Nodes(), c.s.o.ZoneLabel)
	if err != nil {
		return err
	}
	todo := append(append([]string{}, c.canary...), c.queue...)
	c.zones = rollout.NewZonal(todo, zoneOf, unready, c.s.o.CanaryNodes, c.batch)
	c.canary, c.queue = c.zones.CanaryNodes(), nil
	r := &c.s.res.Facts.Rollout
	r.Strategy, r.Zones = StrategyZonal, c.zones.Zones
	for _, z := range c.zones.Zones {
		c.s.d.Log.Infof("zonal rollout: zone %s: %d node(s), canary %v", z.Name, len(z.Nodes), z.Canary)
	}
	return nil
}

// stepZonal deletes the old pods the zone schedule asks for.
func (c *canary) stepZonal(ctx context.Context) (bool, error) {
	skip := func(n string) bool {
		_, skipped := c.fleet.Skipped[n]
		return skipped
	}
	replace, finished := c.zones.Next(c.s.d.Clock.Now(), c.fleet.Done, skip)
	c.s.res.Facts.Rollout.Zones = c.zones.Zones
	for _, n := range replace {
		if err := c.replace(ctx, n); err != nil {
			return false, err
		}
	}
	if zone := c.zones.Current(); zone != nil && len(replace) > 0 {
		c.s.d.Log.Debugf("zonal rollout: zone %s: replacing %v", zone.Name, replace)
	}
	return finished && c.fleet.PendingCount() == 0, nil
}
