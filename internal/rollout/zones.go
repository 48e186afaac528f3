package rollout

import (
	"slices"
	"sort"
	"time"
)

// DefaultZoneLabel is the well-known label the zonal strategy groups nodes by.
const DefaultZoneLabel = "topology.kubernetes.io/zone"

// NoZone names the group of nodes without the zone label. A label value
// cannot contain parentheses, so it never collides with a real zone.
const NoZone = "(none)"

// Zone is one group of nodes of a zonal rollout, as reported in the facts
// (rollout.zones), in the order the zones were restarted.
type Zone struct {
	Name string `json:"name"`
	// Nodes are the live nodes of the zone the rollout had to restart.
	Nodes []string `json:"nodes"`
	// Canary nodes of the zone were restarted alone, before the rest of it.
	Canary []string `json:"canary_nodes"`
	// Duration is from the zone's first pod deletion to its last node done
	// (so far, for a zone the rollout stopped in).
	Duration float64 `json:"duration_seconds"`
	// Done is true once every node of the zone ran a Ready pod of the new
	// template (and passed the connectivity checks, if any).
	Done bool `json:"done"`
}

// Zonal schedules a rollout zone by zone: within the current zone its
// canary nodes alone, then the rest in batches; the next zone starts only
// once every node of the current one is done. So at most one zone, and at
// most batch nodes, are ever in flight. It only decides: the caller deletes
// the pods it names and tells it which nodes are done. The canary strategy
// without zones is its one-zone case (OneZone).
type Zonal struct {
	Zones []Zone
	batch int
	// current zone, and where it stands
	cur      int
	canaryOK bool
	queue    []string
	inflight map[string]bool
	started  time.Time
	// passed: the run's canary (the first zone's) is done
	passed bool
}

// NewZonal groups the nodes to restart by their zone (zoneOf: node ->
// label value, missing or empty for unlabelled nodes). Zones are ordered by
// name, the unlabelled group last, except that the zone of the first
// canary-eligible node (not in unready) goes first: the run's canary comes
// from it. Each zone's canary is its first min(canaries, batch) eligible nodes.
func NewZonal(todo []string, zoneOf map[string]string, unready map[string]bool, canaries, batch int) *Zonal {
	batch = max(batch, 1)
	groups := map[string][]string{}
	for _, n := range todo {
		z := zoneOf[n]
		if z == "" {
			z = NoZone
		}
		groups[z] = append(groups[z], n)
	}
	names := make([]string, 0, len(groups))
	for z := range groups {
		names = append(names, z)
	}
	sort.Slice(names, func(i, j int) bool {
		if (names[i] == NoZone) != (names[j] == NoZone) {
			return names[j] == NoZone
		}
		return names[i] < names[j]
	})
	z := &Zonal{batch: batch, inflight: map[string]bool{}}
	for _, name := range names {
		nodes := groups[name]
		sort.Strings(nodes)
		zone := Zone{Name: name, Nodes: nodes, Canary: []string{}}
		for _, n := range nodes {
			if len(zone.Canary) < min(canaries, batch) && !unready[n] {
				zone.Canary = append(zone.Canary, n)
			}
		}
		z.Zones = append(z.Zones, zone)
	}
	// the canary zone first: the first zone that has a canary node
	for i, zone := range z.Zones {
		if len(zone.Canary) > 0 {
			z.Zones = append(append([]Zone{zone}, z.Zones[:i]...), z.Zones[i+1:]...)
			break
		}
	}
	return z
}

// OneZone schedules a canary rollout without zones: the nodes to restart
// as one zone, in their order, whose canary is the first canaries of them
// not in unready. More canary nodes than batch are deleted batch at a time:
// a larger canary takes longer, it never takes more nodes down at once.
func OneZone(todo []string, unready map[string]bool, canaries, batch int) *Zonal {
	z := &Zonal{batch: max(batch, 1), inflight: map[string]bool{}}
	if len(todo) == 0 {
		return z
	}
	zone := Zone{Nodes: todo, Canary: []string{}}
	for _, n := range todo {
		if len(zone.Canary) < canaries && !unready[n] {
			zone.Canary = append(zone.Canary, n)
		}
	}
	z.Zones = []Zone{zone}
	return z
}

// CanaryNodes are the first zone's canary nodes: the run's canary.
func (z *Zonal) CanaryNodes() []string {
	if len(z.Zones) == 0 {
		return nil
	}
	return z.Zones[0].Canary
}

// CanaryPassed reports whether the run's canary (the first zone's canary
// nodes, maybe none) is done. The call of Next that finds it so returns
// right then, before it names any other node: the caller may look at the
// fleet as the canary left it, then calls Next again.
func (z *Zonal) CanaryPassed() bool { return z.passed }

// Current is the zone in flight, nil once all are done.
func (z *Zonal) Current() *Zone {
	if z.cur >= len(z.Zones) {
		return nil
	}
	return &z.Zones[z.cur]
}

// Next returns the nodes whose old pod is to be deleted now (each node
// once), given which nodes are done and which to leave out (gone, or
// otherwise not to wait for), and whether the whole rollout is finished.
// It returns early once, when the run's canary is done (see CanaryPassed).
func (z *Zonal) Next(now time.Time, done, skip func(node string) bool) (replace []string, finished bool) {
	for z.cur < len(z.Zones) {
		zone := &z.Zones[z.cur]
		if z.started.IsZero() {
			z.started = now
			z.canaryOK = false
			z.queue = nil
			for _, n := range zone.Nodes {
				if !slices.Contains(zone.Canary, n) {
					z.queue = append(z.queue, n)
				}
			}
		}
		for n := range z.inflight {
			if done(n) || skip(n) {
				delete(z.inflight, n)
			}
		}
		if !z.canaryOK {
			pending := false
			for _, n := range zone.Canary {
				if done(n) || skip(n) {
					continue
				}
				pending = true
				// more canary nodes than the batch go a batch at a time
				if !z.inflight[n] && len(z.inflight) < z.batch {
					z.inflight[n] = true
					replace = append(replace, n)
				}
			}
			if pending {
				zone.Duration = now.Sub(z.started).Seconds() // so far
				return replace, false
			}
			z.canaryOK = true
			if z.cur == 0 {
				// the run's canary is done: nothing else in this call
				z.passed = true
				zone.Duration = now.Sub(z.started).Seconds() // so far
				return replace, false
			}
		}
		for len(z.inflight) < z.batch && len(z.queue) > 0 {
			n := z.queue[0]
			z.queue = z.queue[1:]
			if done(n) || skip(n) {
				continue
			}
			z.inflight[n] = true
			replace = append(replace, n)
		}
		if len(z.inflight) > 0 || len(z.queue) > 0 {
			zone.Duration = now.Sub(z.started).Seconds() // so far
			return replace, false
		}
		// every node of the zone is done: the next zone may start
		zone.Done = true
		zone.Duration = now.Sub(z.started).Seconds()
		z.cur++
		z.started = time.Time{}
	}
	return replace, true
}

// InFlight counts the nodes deleted and not done yet.
func (z *Zonal) InFlight() int { return len(z.inflight) }
